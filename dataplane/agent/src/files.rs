// SPDX-License-Identifier: Apache-2.0
//! Writing and removing the agent's files. Whatever the agent writes is read
//! by others at any moment (`status`, container runtimes watching the CNI
//! directory, the path unit that reloads DNS64), so a file is replaced whole
//! or not at all.

use std::{ffi::OsString, fs, io, os::unix::fs::PermissionsExt, path::Path};

use anyhow::{Context, Result};

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
