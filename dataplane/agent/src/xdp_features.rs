// SPDX-License-Identifier: Apache-2.0
//! What a device's driver can do with XDP, as the kernel reports it
//! (generic netlink, the `netdev` family, Linux 6.3+): whether frames may
//! be redirected into it (`ndo_xdp_xmit`). A veth takes them only while its
//! peer runs XDP or GRO, a NIC only while it has XDP transmit queues: the
//! kernel's answer follows both, where guessing from the driver's name
//! could not.

use anyhow::{bail, Context, Result};
use netlink_packet_core::{NlaBuffer, NlasIterator, NLMSG_ERROR, NLM_F_REQUEST};
use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};

// linux/genetlink.h
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
// linux/netdev.h
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NETDEV_XDP_ACT_NDO_XMIT: u64 = 4;

/// The kernel's `netdev` netlink family, found once for the devices asked
/// about.
pub struct Netdev {
    socket: Socket,
    family: u16,
}

impl Netdev {
    /// An error when the kernel has no such family (before 6.3).
    pub fn open() -> Result<Netdev> {
        let socket = Socket::new(NETLINK_GENERIC).context("opening a generic netlink socket")?;
        socket.connect(&SocketAddr::new(0, 0)).context("connecting to generic netlink")?;
        let family = request(&socket, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME, b"netdev\0")
            .context("looking up the netdev netlink family")?;
        let family = attribute(&family, CTRL_ATTR_FAMILY_ID)
            .and_then(|v| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?)))
            .context("the netdev family has no id")?;
        Ok(Netdev { socket, family })
    }

    /// Whether the device `ifindex` takes frames other devices' XDP
    /// programs redirect to it.
    pub fn takes_redirected_frames(&self, ifindex: u32) -> Result<bool> {
        let device = request(&self.socket, self.family, NETDEV_CMD_DEV_GET, NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes())
            .with_context(|| format!("asking netdev about ifindex {ifindex}"))?;
        let features = attribute(&device, NETDEV_A_DEV_XDP_FEATURES)
            .and_then(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
            .context("no xdp-features in netdev's answer")?;
        Ok(features & NETDEV_XDP_ACT_NDO_XMIT != 0)
    }
}

/// One request with one attribute; returns the answer's attributes (after
/// the netlink and generic netlink headers).
fn request(socket: &Socket, family: u16, command: u8, attr: u16, value: &[u8]) -> Result<Vec<u8>> {
    let attr_len = 4 + value.len();
    let len = 16 + 4 + attr_len.next_multiple_of(4);
    let mut message = Vec::with_capacity(len);
    message.extend_from_slice(&(len as u32).to_ne_bytes());
    message.extend_from_slice(&family.to_ne_bytes());
    message.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    message.extend_from_slice(&[0; 8]); // sequence, port
    message.extend_from_slice(&[command, 1, 0, 0]); // genlmsghdr: command, version
    message.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    message.extend_from_slice(&attr.to_ne_bytes());
    message.extend_from_slice(value);
    message.resize(len, 0);
    socket.send(&message, 0).context("sending")?;

    let mut answer = vec![0u8; 8192];
    let size = socket.recv(&mut &mut answer[..], 0).context("receiving")?;
    answer.truncate(size);
    if answer.len() < 20 {
        bail!("an answer of {size} bytes");
    }
    if u16::from_ne_bytes([answer[4], answer[5]]) == NLMSG_ERROR {
        let errno = i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]);
        return Err(std::io::Error::from_raw_os_error(-errno)).context("the kernel refused");
    }
    Ok(answer[20..].to_vec())
}

/// The value of attribute `kind` among `attributes`, if there.
fn attribute(attributes: &[u8], kind: u16) -> Option<Vec<u8>> {
    NlasIterator::new(attributes)
        .filter_map(|nla: Result<NlaBuffer<&[u8]>, _>| nla.ok())
        .find(|nla| nla.kind() == kind)
        .map(|nla| nla.value().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_answers_for_the_loopback_device_which_takes_no_redirected_frames() {
        // The netdev family is Linux 6.3's; the image's kernel is 6.12. A
        // veth that does take them: tests/netns/xdp.sh.
        let netdev = Netdev::open().expect("the netdev family");
        assert!(!netdev.takes_redirected_frames(1).expect("the kernel's answer about lo"));
        assert!(netdev.takes_redirected_frames(u32::MAX).is_err(), "no such device");
    }
}
