// SPDX-License-Identifier: Apache-2.0
//! `reload`: the command that asks a running agent to reload. The agent
//! records the outcome in its state file, which is how this learns it.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::{paths::Paths, state};

/// `reload`: SIGHUP to the agent, then wait until it has recorded the outcome.
pub fn request_reload(paths: &Paths, pid: Option<i32>) -> Result<ExitCode> {
    let before = state::read(paths)?.map_or(0, |s| s.reloads);
    let pid = match pid {
        Some(pid) => pid,
        None => state::running_agent(paths).context("no running agent found (is v6node-dataplane.service active?)")? as i32,
    };
    // SAFETY: plain kill(2).
    if unsafe { libc::kill(pid, libc::SIGHUP) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("signalling pid {pid}"));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if let Some(state) = state::read(paths)? {
            if state.reloads > before {
                let reload = state.last_reload.unwrap_or_default();
                return Ok(if reload.ok {
                    println!("reloaded: generation {} applied in {:.1} ms", state.generation, reload.duration_ms);
                    ExitCode::SUCCESS
                } else {
                    eprintln!(
                        "reload refused, generation {} stays in force: {}",
                        state.generation,
                        reload.error.unwrap_or_default()
                    );
                    ExitCode::FAILURE
                });
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("the agent did not answer the reload within 120 s")
}
