// SPDX-License-Identifier: Apache-2.0
//! The files the agent writes for others: the CNI network configuration
//! (container runtimes), the DNS64 prefix (unbound), and, through
//! `write_atomic`, its state file and endpoint records (`status`, the next
//! agent). Each is read by someone at any moment, so each is replaced whole
//! or not at all.

use std::{
    ffi::OsString,
    fs, io,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use ipnet::Ipv6Net;
use v6node_config::Config;

use crate::paths::Paths;

/// Replaces `path` with `bytes`: readers see the old file or the new one,
/// never part of one. The bytes go to `.<name>.tmp` beside it first (rename
/// is atomic only within a file system; hidden and ending in `.tmp`, so a
/// directory watcher does not take it for a real file). `mode`: permissions
/// regardless of the umask, for files other users read; `None` leaves what
/// the umask gives.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: Option<u32>) -> Result<()> {
    let name = path.file_name().with_context(|| format!("{} names no file", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    if !dir.as_os_str().is_empty() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut tmp_name = OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    if let Some(mode) = mode {
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).with_context(|| format!("chmod {}", tmp.display()))?;
    }
    fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Removes a file. One that is not there is what the caller wanted too:
/// `Ok(false)`.
pub fn remove(path: &Path) -> io::Result<bool> {
    gone_is_fine(fs::remove_file(path))
}

/// Removes an empty directory; `Ok(false)` if it was not there.
pub fn remove_dir(path: &Path) -> io::Result<bool> {
    gone_is_fine(fs::remove_dir(path))
}

fn gone_is_fine(result: io::Result<()>) -> io::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes the CNI network configuration once the pod prefix is known and
/// removes it when the prefix goes: the runtime reports the pod network
/// ready exactly while it exists.
pub fn write_cni_conflist(paths: &Paths, config: &Config) -> Result<Option<PathBuf>> {
    let path = paths.cni_conflist();
    let Some(prefix) = config.pods.prefix else {
        if remove(&path).with_context(|| format!("removing {}", path.display()))? {
            log::info!("pods.prefix unset: {} removed", path.display());
        }
        return Ok(None);
    };
    // cniVersions (CNI 1.1) lets a 1.1 runtime use STATUS and GC;
    // cniVersion is what older runtimes read: containerd 1.7, the node's,
    // knows results up to 1.0.0 only and refuses a 1.1.0 one.
    let conflist = serde_json::json!({
        "cniVersion": "1.0.0",
        "cniVersions": ["1.0.0", "1.1.0"],
        "name": "v6node",
        "plugins": [{
            "type": "v6node-cni",
            "podCIDR": prefix.to_string(),
            "device": config.pods.device.as_str(),
            "agentSocket": paths.endpoints_socket(),
            // hostPorts come as runtimeConfig.portMappings; the service
            // tables serve them.
            "capabilities": { "portMappings": true },
        }],
    });
    let mut text = serde_json::to_vec_pretty(&conflist)?;
    text.push(b'\n');
    if fs::read(&path).ok().as_deref() == Some(&text[..]) {
        return Ok(Some(path));
    }
    // Runtimes watch this directory: they must never read half a file.
    write_atomic(&path, &text, None)?;
    log::info!("CNI network configuration for pods in {prefix} written to {}", path.display());
    Ok(Some(path))
}

/// Writes the DNS64 resolver's prefix (an unbound `server:` clause) when it
/// differs from what is there, so the resolver synthesizes addresses under
/// the prefix the translator serves and a path unit reloads it only on change.
pub fn write_dns64(file: &Path, prefix: &Ipv6Net) -> Result<bool> {
    let text = format!(
        "# Written by v6node-dataplane from nat64.prefix; included by v6node-dns64.service.\nserver:\n    dns64-prefix: {prefix}\n"
    );
    if fs::read_to_string(file).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    // unbound runs as its own (dynamic) user; the unit's umask is 0077.
    write_atomic(file, text.as_bytes(), Some(0o644))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("v6node-files-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn write_atomic_replaces_the_file_and_leaves_no_temporary_behind() {
        let dir = scratch("replace");
        let file = dir.join("sub/state.json");
        write_atomic(&file, b"one", None).unwrap();
        write_atomic(&file, b"two", Some(0o644)).unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"two");
        assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o644);
        let names: Vec<_> = fs::read_dir(dir.join("sub")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["state.json"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn removing_what_is_not_there_is_not_an_error() {
        let dir = scratch("remove");
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("pin");
        fs::write(&file, "").unwrap();
        assert!(remove(&file).unwrap());
        assert!(!remove(&file).unwrap());
        assert!(remove_dir(&dir).unwrap());
        assert!(!remove_dir(&dir).unwrap());
    }
}
