// SPDX-License-Identifier: Apache-2.0
//! The Service socket hooks (bpf/sock.bpf.c) on `services.cgroup`: one
//! pinned cgroup link per hook, `<pin_dir>/cgroup/<program>`, with its
//! program pinned beside it (`<program>-prog`; bpffs refuses dots in names)
//! so a later agent can tell
//! whether the same build runs. A later agent adopts links running its own
//! programs and swaps the program of the others in place (BPF_LINK_UPDATE),
//! so a restart or an upgrade never leaves sockets untranslated.

use std::{
    fs,
    io::ErrorKind,
    os::{
        fd::{AsFd, AsRawFd},
        unix::fs::MetadataExt,
    },
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use aya::programs::{links::FdLink, CgroupAttachMode, ProgramInfo};
use serde::{Deserialize, Serialize};

use crate::{attach::AttachAction, bpf, files, linkinfo, paths::Paths};

/// One hook as `status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SocketHook {
    pub program: String,
    pub cgroup: PathBuf,
    pub action: AttachAction,
    pub link_id: Option<u32>,
    pub program_id: Option<u32>,
    pub error: Option<String>,
}

const PROGRAM_SUFFIX: &str = "-prog";
const STAGING_SUFFIX: &str = "-new";

fn link_pin(paths: &Paths, program: &str) -> PathBuf {
    paths.cgroup_links_dir().join(program)
}

fn program_pin(paths: &Paths, program: &str) -> PathBuf {
    paths.cgroup_links_dir().join(format!("{program}{PROGRAM_SUFFIX}"))
}

/// Attaches every socket hook to `cgroup` (adopting or updating what is
/// there), or, with `None`, removes them.
pub fn reconcile(paths: &Paths, cgroup: Option<&Path>) -> Vec<SocketHook> {
    let Some(cgroup) = cgroup else {
        remove_all(paths);
        return Vec::new();
    };
    let mut ebpf = None;
    let mut hooks = Vec::new();
    for program in bpf::SOCK_PROGRAMS {
        let (action, link_id, program_id, error) = match attach(paths, cgroup, program, &mut ebpf) {
            Ok((action, link_id, program_id)) => (action, Some(link_id), Some(program_id), None),
            Err(e) => {
                log::error!("socket hook {program} on {}: {e:#}", cgroup.display());
                (AttachAction::Failed, None, None, Some(format!("{e:#}")))
            }
        };
        if !matches!(action, AttachAction::Unchanged | AttachAction::Adopted | AttachAction::Failed) {
            log::info!("socket hook {program} on {}: {action}", cgroup.display());
        }
        hooks.push(SocketHook { program: program.into(), cgroup: cgroup.into(), action, link_id, program_id, error });
    }
    hooks
}

/// The cgroup's id, which a cgroup link reports: its directory's inode.
/// Socket hooks need cgroup v2 (a v1 or hybrid /sys/fs/cgroup is a tmpfs).
fn cgroup_id(cgroup: &Path) -> Result<u64> {
    const CGROUP2_SUPER_MAGIC: i64 = 0x63677270;
    let meta = fs::metadata(cgroup).with_context(|| format!("services.cgroup {}", cgroup.display()))?;
    let c_path = std::ffi::CString::new(cgroup.as_os_str().as_encoded_bytes())?;
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid NUL-terminated path and out pointer.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut fs) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("statfs {}", cgroup.display()));
    }
    if fs.f_type as i64 != CGROUP2_SUPER_MAGIC {
        anyhow::bail!("services.cgroup {} is not a cgroup v2 directory", cgroup.display());
    }
    Ok(meta.ino())
}

fn attach(paths: &Paths, cgroup: &Path, program: &'static str, ebpf: &mut Option<aya::Ebpf>) -> Result<(AttachAction, u32, u32)> {
    let wanted_cgroup = cgroup_id(cgroup)?;
    let link = link_pin(paths, program);
    let prog = program_pin(paths, program);
    if ebpf.is_none() {
        fs::create_dir_all(paths.cgroup_links_dir())
            .with_context(|| format!("creating {}", paths.cgroup_links_dir().display()))?;
        *ebpf = Some(bpf::SOCK_OBJECT.load(&paths.pin_dir)?);
    }
    let loaded = bpf::sock_addr(ebpf.as_mut().expect("loaded above"), program)?;
    let info = loaded.info()?;
    match linkinfo::read(&link) {
        Ok(current) if current.cgroup_id() == wanted_cgroup => {
            let running = ProgramInfo::from_pin(&prog).ok().filter(|p| p.id() == current.prog_id);
            if running.is_some_and(|p| p.tag() == info.tag()) {
                return Ok((AttachAction::Adopted, current.id, current.prog_id));
            }
            linkinfo::update(&link, loaded.fd()?.as_fd().as_raw_fd()).with_context(|| format!("updating {}", link.display()))?;
            files::remove(&prog).with_context(|| format!("removing {}", prog.display()))?;
            loaded.pin(&prog).with_context(|| format!("pinning {}", prog.display()))?;
            Ok((AttachAction::Replaced, current.id, info.id()))
        }
        Ok(_) => {
            // Another cgroup: services.cgroup changed. Attach there first.
            let (link_id, program_id) = attach_new(paths, cgroup, program, ebpf)?;
            Ok((AttachAction::Replaced, link_id, program_id))
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let (link_id, program_id) = attach_new(paths, cgroup, program, ebpf)?;
            Ok((AttachAction::Attached, link_id, program_id))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", link.display())),
    }
}

fn attach_new(paths: &Paths, cgroup: &Path, program: &'static str, ebpf: &mut Option<aya::Ebpf>) -> Result<(u32, u32)> {
    let link_path = link_pin(paths, program);
    let prog_path = program_pin(paths, program);
    let loaded = bpf::sock_addr(ebpf.as_mut().expect("loaded by attach"), program)?;
    let dir = fs::File::open(cgroup).with_context(|| format!("opening services.cgroup {}", cgroup.display()))?;
    // A bpf_link shares the hook with other links whatever the mode; the
    // kernel refuses BPF_F_ALLOW_MULTI on link_create (EINVAL).
    let id = loaded.attach(&dir, CgroupAttachMode::Single).with_context(|| format!("attaching to {}", cgroup.display()))?;
    let link: FdLink = loaded.take_link(id)?.try_into().context("the kernel gave no bpf_link (Linux 5.7+ needed)")?;
    let link_id = link.info()?.id();
    // The new link replaces the old pin; the old link (another cgroup) ends
    // when its pin goes, after the new one is in force.
    let staged = paths.cgroup_links_dir().join(format!("{program}{STAGING_SUFFIX}"));
    files::remove(&staged).ok();
    link.pin(&staged).with_context(|| format!("pinning {}", staged.display()))?;
    fs::rename(&staged, &link_path).with_context(|| format!("renaming {} into place", staged.display()))?;
    files::remove(&prog_path).with_context(|| format!("removing {}", prog_path.display()))?;
    loaded.pin(&prog_path).with_context(|| format!("pinning {}", prog_path.display()))?;
    Ok((link_id, loaded.info()?.id()))
}

/// Removes every socket hook's pins, which detaches them.
pub fn remove_all(paths: &Paths) -> usize {
    let Ok(entries) = fs::read_dir(paths.cgroup_links_dir()) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_link = !name.ends_with(PROGRAM_SUFFIX) && !name.ends_with(STAGING_SUFFIX);
        match fs::remove_file(&path) {
            Ok(()) if is_link => {
                log::info!("socket hook {}: detached", path.display());
                removed += 1;
            }
            Ok(()) => {}
            Err(e) => log::error!("cannot remove {}: {e}", path.display()),
        }
    }
    let _ = files::remove_dir(&paths.cgroup_links_dir());
    removed
}
