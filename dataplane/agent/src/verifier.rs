// SPDX-License-Identifier: Apache-2.0
//! Putting a program through the verifier. The BPF tests include this file
//! by path (`tests/common/mod.rs`): the agent is a binary, with no library
//! for them to link.

use aya::programs::{CgroupSockAddr, ProgramError, SchedClassifier, Xdp};

/// The programs the agent loads, all loaded the same way.
pub trait Loadable {
    fn load_once(&mut self) -> Result<(), ProgramError>;
}

impl Loadable for SchedClassifier {
    fn load_once(&mut self) -> Result<(), ProgramError> {
        self.load()
    }
}

impl Loadable for CgroupSockAddr {
    fn load_once(&mut self) -> Result<(), ProgramError> {
        self.load()
    }
}

impl Loadable for Xdp {
    fn load_once(&mut self) -> Result<(), ProgramError> {
        self.load()
    }
}

/// The verifier gives up with EAGAIN when a signal arrives while it works
/// (a SIGHUP reload, a child exiting: in the tests, another test's `ip`);
/// like libbpf, try again, a little later each time: under a busy test
/// suite five quick tries were once not enough.
pub fn load_retrying(program: &mut impl Loadable) -> Result<(), ProgramError> {
    let mut attempts = 0;
    loop {
        match program.load_once() {
            Err(ProgramError::LoadError { io_error, .. }) if io_error.raw_os_error() == Some(libc::EAGAIN) && attempts < 20 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(5 * attempts));
            }
            result => return result,
        }
    }
}
