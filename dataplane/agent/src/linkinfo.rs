// SPDX-License-Identifier: Apache-2.0
//! Raw bpf(2) link calls aya 0.14 lacks: where a pinned tcx or netkit link
//! is attached (read from the link itself), and creating, pinning and
//! updating netkit links.
//!
//! aya answers "which programs are attached here" through
//! BPF_PROG_GET_FD_BY_ID, which needs CAP_SYS_ADMIN. The link's own info
//! (BPF_OBJ_GET_INFO_BY_FD on the pinned link) says the same with no
//! capability beyond access to the pin: its ifindex turns 0 once the device
//! is gone. aya does not expose that part of `bpf_link_info`, hence these two
//! plain syscalls.

use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
};

const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_LINK_UPDATE: libc::c_long = 29;
/// enum bpf_attach_type: netkit links (Linux 6.7+).
pub const BPF_NETKIT_PRIMARY: u32 = 54;
pub const BPF_NETKIT_PEER: u32 = 55;

/// The head of `struct bpf_link_info` and its tcx arm (uapi linux/bpf.h):
/// type, id, prog_id, then the 8-aligned union, whose tcx member is
/// { ifindex, attach_type }. The kernel fills at most `info_len` bytes.
#[repr(C, align(8))]
#[derive(Default)]
struct RawLinkInfo {
    link_type: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    ifindex: u32,
    attach_type: u32,
    _rest: [u64; 6],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcxLinkInfo {
    pub id: u32,
    pub prog_id: u32,
    /// 0 once the device went away (the link is then defunct).
    pub ifindex: u32,
    pub attach_type: u32,
}

fn bpf(cmd: libc::c_long, attr: &mut [u64]) -> io::Result<libc::c_long> {
    // SAFETY: attr is a zero-initialised, 8-aligned buffer at least as large
    // as the union members these commands read; its size is passed along.
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), std::mem::size_of_val(attr)) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn open_pin(pin: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(pin.as_os_str().as_encoded_bytes())?;
    // union bpf_attr, obj_get arm: { u64 pathname; u32 bpf_fd; u32 file_flags }
    let mut attr = [0u64; 16];
    attr[0] = path.as_ptr() as u64;
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    // SAFETY: BPF_OBJ_GET returned a new descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attaches a program to a netkit device (named by its primary) at
/// `attach_type`, after the programs already there. aya 0.14 creates tcx
/// links only.
pub fn create_netkit(prog_fd: i32, ifindex: u32, attach_type: u32) -> io::Result<OwnedFd> {
    // link_create arm: { u32 prog_fd; u32 target_ifindex; u32 attach_type;
    // u32 flags; netkit: { u32 relative_fd; u64 expected_revision } }
    let mut attr = [0u64; 16];
    attr[0] = u64::from(prog_fd as u32) | u64::from(ifindex) << 32;
    attr[1] = u64::from(attach_type);
    let fd = bpf(BPF_LINK_CREATE, &mut attr)?;
    // SAFETY: BPF_LINK_CREATE returned a new descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Pins a link (or any BPF object) at `path` on a bpffs.
pub fn pin(fd: &OwnedFd, path: &Path) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_encoded_bytes())?;
    let mut attr = [0u64; 16];
    attr[0] = path.as_ptr() as u64;
    attr[1] = u64::from(fd.as_raw_fd() as u32);
    bpf(BPF_OBJ_PIN, &mut attr).map(drop)
}

/// Swaps the program of the pinned link for `prog_fd`, atomically per packet.
pub fn update(pin: &Path, prog_fd: i32) -> io::Result<()> {
    let link = open_pin(pin)?;
    // link_update arm: { u32 link_fd; u32 new_prog_fd; u32 flags; u32 old_prog_fd }
    let mut attr = [0u64; 16];
    attr[0] = u64::from(link.as_raw_fd() as u32) | u64::from(prog_fd as u32) << 32;
    bpf(BPF_LINK_UPDATE, &mut attr).map(drop)
}

impl TcxLinkInfo {
    /// A cgroup link's arm is { u64 cgroup_id; u32 attach_type }: its id
    /// spans the two words a tcx link has ifindex and attach type in.
    pub fn cgroup_id(&self) -> u64 {
        u64::from(self.ifindex) | u64::from(self.attach_type) << 32
    }
}

/// Reads a pinned tcx or netkit link (their info arms are laid out alike).
pub fn read(pin: &Path) -> io::Result<TcxLinkInfo> {
    let fd = open_pin(pin)?;

    let mut info = RawLinkInfo::default();
    // info arm: { u32 bpf_fd; u32 info_len; u64 info }
    let mut attr = [0u64; 16];
    attr[0] = u64::from(fd.as_raw_fd() as u32) | (std::mem::size_of::<RawLinkInfo>() as u64) << 32;
    attr[1] = &mut info as *mut RawLinkInfo as u64;
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(TcxLinkInfo { id: info.id, prog_id: info.prog_id, ifindex: info.ifindex, attach_type: info.attach_type })
}
