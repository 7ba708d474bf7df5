// SPDX-License-Identifier: Apache-2.0
//! `detach`: removes every link and filter v6node attached and every pin.
//! A command of its own, above `state` (it refuses while an agent runs), so
//! that attaching never depends on the state file.

use std::fs;

use anyhow::{bail, Context, Result};

use crate::{
    attach::{detach_clsact, pinned_links, program_pin, AttachPoint},
    bpf, files,
    nat::fragmenter,
    netdev,
    paths::Paths,
    services::sockets,
    state,
};

pub fn detach_all(paths: &Paths, force: bool) -> Result<()> {
    if let Some(pid) = state::running_agent(paths) {
        if !force {
            bail!("the agent is running (pid {pid}) and would attach again; stop it first (systemctl stop v6node-dataplane) or pass --force");
        }
    }
    let mut removed = 0;
    for (device, direction, pin) in pinned_links(paths) {
        let _ = fs::remove_file(program_pin(paths, &device, direction));
        fs::remove_file(&pin).with_context(|| format!("removing {}", pin.display()))?;
        println!("detached {device} {} (link {})", direction.name(), pin.display());
        removed += 1;
    }
    // clsact filters are found by their fixed priority and handle on every
    // device, since no pin records them.
    for device in netdev::devices()?.keys() {
        for direction in AttachPoint::ALL.into_iter().filter(|d| d.at_tc()) {
            if detach_clsact(device, direction).is_ok() {
                println!("detached {device} {} (clsact filter)", direction.name());
                removed += 1;
            }
        }
    }
    let fragmenting =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting tokio")?.block_on(async {
            let (connection, handle, _) = rtnetlink::new_connection().context("opening rtnetlink")?;
            tokio::spawn(connection);
            fragmenter::remove(&handle).await
        });
    match fragmenting {
        Ok(()) => println!("removed the fragmentation link {} (if any)", fragmenter::LINK),
        Err(e) => eprintln!("the fragmentation link: {e:#}"),
    }
    let hooks = sockets::remove_all(paths);
    if hooks > 0 {
        println!("detached {hooks} socket hook(s) ({})", paths.cgroup_links_dir().display());
        removed += hooks;
    }
    for map in bpf::pinned_maps()? {
        let pin = paths.pin_dir.join(map);
        if files::remove(&pin).with_context(|| format!("removing {}", pin.display()))? {
            println!("unpinned map {}", pin.display());
        }
    }
    // Program pins whose link pin is gone already (an interrupted detach).
    if let Ok(entries) = fs::read_dir(paths.programs_dir()) {
        for entry in entries.flatten() {
            let _ = fs::remove_file(entry.path());
        }
    }
    for dir in [paths.links_dir(), paths.programs_dir(), paths.pin_dir.clone()] {
        files::remove_dir(&dir).with_context(|| format!("removing {} (something else is pinned there?)", dir.display()))?;
    }
    let _ = fs::remove_file(paths.state_file());
    println!("{removed} attachment(s) removed; {} is gone", paths.pin_dir.display());
    Ok(())
}
