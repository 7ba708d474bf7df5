// SPDX-License-Identifier: Apache-2.0
//! Address allocation for one network's pods: a directory with one file per
//! address in use, named by the address and holding its container id and
//! interface. An allocation appears whole or not at all (written aside, then
//! hard-linked into place, which fails if the name is taken), so a plugin
//! killed midway never leaves half of one; concurrent plugins take an flock
//! around the search, so two never pick the same address.

use std::{
    fs::{self, File},
    io::{ErrorKind, Write},
    net::Ipv6Addr,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context, Result};
use ipnet::Ipv6Net;

/// Candidates tried before giving up on a nearly full prefix.
const MAX_PROBES: u128 = 1 << 20;

pub struct Ipam {
    dir: PathBuf,
    net: Ipv6Net,
}

/// One address in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub address: Ipv6Addr,
    pub container_id: String,
    pub ifname: String,
}

/// Held while allocating or releasing; the kernel drops it if we die.
struct Lock(File);

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

impl Ipam {
    /// `data_dir/<network>`; `net` bounds what is handed out (release and
    /// listing work on whatever the directory holds).
    pub fn new(data_dir: &Path, network: &str, net: Ipv6Net) -> Ipam {
        Ipam { dir: data_dir.join(network), net }
    }

    fn lock(&self) -> Result<Lock> {
        fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        let path = self.dir.join("lock");
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor we own; blocks until the holder is done.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("locking {}", path.display()));
        }
        Ok(Lock(file))
    }

    /// Every allocation, in address order.
    pub fn allocations(&self) -> Result<Vec<Allocation>> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", self.dir.display())),
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let Some(address) = entry.file_name().to_str().and_then(|n| n.parse::<Ipv6Addr>().ok()) else { continue };
            let text = fs::read_to_string(entry.path()).unwrap_or_default();
            let mut lines = text.lines();
            let container_id = lines.next().unwrap_or_default().to_owned();
            let ifname = lines.next().unwrap_or_default().to_owned();
            found.push(Allocation { address, container_id, ifname });
        }
        found.sort_by_key(|a| a.address);
        Ok(found)
    }

    pub fn find(&self, container_id: &str, ifname: &str) -> Result<Option<Allocation>> {
        Ok(self.allocations()?.into_iter().find(|a| a.container_id == container_id && a.ifname == ifname))
    }

    /// An address for the attachment: the one it has already (a retried
    /// ADD), or the next free one after the last handed out, so addresses
    /// of deleted pods are not reused at once.
    pub fn allocate(&self, container_id: &str, ifname: &str) -> Result<Ipv6Addr> {
        let _lock = self.lock()?;
        if let Some(existing) = self.find(container_id, ifname)? {
            return Ok(existing.address);
        }
        let base = u128::from(self.net.network());
        let size = 1u128.checked_shl(128 - u32::from(self.net.prefix_len())).unwrap_or(u128::MAX);
        let masquerade = v6node_api::masquerade_address(self.net.network(), self.net.prefix_len());
        let last_file = self.dir.join("last_reserved");
        let last = fs::read_to_string(&last_file)
            .ok()
            .and_then(|s| s.trim().parse::<Ipv6Addr>().ok())
            .filter(|a| self.net.contains(a))
            .map_or(0, |a| u128::from(a) - base);
        let tmp = self.dir.join(format!(".new-{}", std::process::id()));
        fs::write(&tmp, format!("{container_id}\n{ifname}\n")).with_context(|| format!("writing {}", tmp.display()))?;
        let result = (|| {
            for step in 1..=size.min(MAX_PROBES) {
                // Offset 0 is the subnet-router anycast address (RFC 4291 2.6.1);
                // the node masquerades as the last.
                let offset = (last + step) % size;
                let address = Ipv6Addr::from(base + offset);
                if offset == 0 || Some(address) == masquerade {
                    continue;
                }
                match fs::hard_link(&tmp, self.dir.join(address.to_string())) {
                    Ok(()) => {
                        write_atomically(&last_file, address.to_string().as_bytes())?;
                        return Ok(address);
                    }
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(e).with_context(|| format!("recording {address} in {}", self.dir.display())),
                }
            }
            bail!("no free address left in {}", self.net)
        })();
        let _ = fs::remove_file(&tmp);
        result
    }

    /// Frees the attachment's address; nothing to free is not an error.
    pub fn release(&self, container_id: &str, ifname: &str) -> Result<Option<Ipv6Addr>> {
        let _lock = self.lock()?;
        let Some(found) = self.find(container_id, ifname)? else { return Ok(None) };
        let path = self.dir.join(found.address.to_string());
        match fs::remove_file(&path) {
            Ok(()) => Ok(Some(found.address)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
    file.write_all(bytes)?;
    fs::rename(&tmp, path).with_context(|| format!("renaming {}", tmp.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("v6node-ipam-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn addresses_are_distinct_persist_and_come_back_on_release() {
        let dir = scratch("basic");
        let net: Ipv6Net = "fd00:10:244:1::/120".parse().unwrap();
        let ipam = Ipam::new(&dir, "v6node", net);
        let a = ipam.allocate("c1", "eth0").unwrap();
        let b = ipam.allocate("c2", "eth0").unwrap();
        assert_eq!(a, "fd00:10:244:1::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(b, "fd00:10:244:1::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ipam.allocate("c1", "eth0").unwrap(), a, "a retried ADD keeps its address");
        // A new process (a fresh Ipam) sees what the last one wrote.
        let again = Ipam::new(&dir, "v6node", net);
        assert_eq!(again.find("c2", "eth0").unwrap().unwrap().address, b);
        assert_eq!(again.release("c1", "eth0").unwrap(), Some(a));
        assert_eq!(again.release("c1", "eth0").unwrap(), None);
        assert_eq!(again.allocate("c3", "eth0").unwrap(), "fd00:10:244:1::3".parse::<Ipv6Addr>().unwrap());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_full_prefix_says_so_and_wraps_around_to_freed_addresses() {
        let dir = scratch("full");
        let ipam = Ipam::new(&dir, "v6node", "fd00::/126".parse().unwrap());
        // ::0 is the subnet-router anycast address, ::3 the node's masquerade address.
        let given: Vec<Ipv6Addr> = ["c1", "c2"].iter().map(|c| ipam.allocate(c, "eth0").unwrap()).collect();
        assert_eq!(given, ["fd00::1".parse::<Ipv6Addr>().unwrap(), "fd00::2".parse().unwrap()]);
        let e = ipam.allocate("c4", "eth0").unwrap_err();
        assert_eq!(e.to_string(), "no free address left in fd00::/126");
        ipam.release("c2", "eth0").unwrap();
        assert_eq!(ipam.allocate("c4", "eth0").unwrap(), "fd00::2".parse::<Ipv6Addr>().unwrap());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn concurrent_allocations_never_share_an_address() {
        let dir = scratch("concurrent");
        let net: Ipv6Net = "fd00::/64".parse().unwrap();
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let dir = dir.clone();
                std::thread::spawn(move || Ipam::new(&dir, "v6node", net).allocate(&format!("c{i}"), "eth0").unwrap())
            })
            .collect();
        let mut got: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 16);
        fs::remove_dir_all(dir).unwrap();
    }
}
