// SPDX-License-Identifier: Apache-2.0
//! Ends the connections a Service gave a backend that has since left it.
//!
//! The socket hooks (bpf/sock.bpf.c) connect a socket straight to the
//! backend, so once the tables drop a backend nothing else would end what is
//! already connected to it: the client keeps talking to a pod that is no
//! longer behind the Service, or waits out TCP's timeouts for one that is
//! gone. kube-proxy's answer is a conntrack flush, Cilium's a socket
//! iterator; v6node destroys the sockets through sock_diag (SOCK_DESTROY):
//! the application gets ECONNABORTED at once and the backend a reset.
//!
//! The sockets are in the pods' network namespaces, and opening a sock_diag
//! socket in one means entering it, which takes CAP_SYS_ADMIN. The agent
//! does not hold that; `v6node-dataplane end-connections` does, started by
//! v6node-end-connections.socket per request with nothing else. The agent
//! sends it the backends that left (frontend id and address) and its pods'
//! namespaces; it ends, in those and its own namespace, each socket whose
//! cookie and peer v6n_sock_revnat records as given that backend by that
//! frontend. A socket connected to the same pod directly is left alone.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs::File,
    io::{Read, Write},
    net::{IpAddr, Ipv6Addr},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData};
use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_sock_diag::{
    constants::{AF_INET6, IPPROTO_TCP, IPPROTO_UDP},
    inet::{ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags},
    SockDiagDestroy, SockDiagMessage,
};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use v6node_abi::{maps, SockRevnatKey, SockRevnatValue};
use v6node_k8s::services::Protocol;

use crate::bpf;

/// A backend that left a frontend: the connections the frontend gave it end.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LeftBackend {
    /// The frontend's id in the service tables (v6n_sock_revnat's value).
    pub frontend: u32,
    pub ip: Ipv6Addr,
    pub port: u16,
    pub protocol: Protocol,
}

/// What the agent asks of `end-connections`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub left: Vec<LeftBackend>,
    /// The pods' network namespaces; the helper's own is searched too.
    pub namespaces: Vec<PathBuf>,
}

/// What `end-connections` did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ended: u64,
    /// Namespaces searched, its own included.
    pub namespaces: usize,
    /// What could not be done, each naming the namespace or socket.
    pub errors: Vec<String>,
}

/// The agent's record of it, for `status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ended {
    /// Connections ended since the agent started.
    pub connections: u64,
    /// Requests made (one per sync that dropped a backend).
    pub requests: u64,
    /// Requests that failed, or ended connections only in part.
    #[serde(default)]
    pub failures: u64,
    /// The last request's failure or errors; None once one succeeds.
    pub error: Option<String>,
}

impl Ended {
    pub fn record(&mut self, outcome: &Result<Reply>) {
        self.requests += 1;
        match outcome {
            Ok(reply) => {
                self.connections += reply.ended;
                self.error = (!reply.errors.is_empty()).then(|| reply.errors.join("; "));
            }
            Err(e) => self.error = Some(format!("{e:#}")),
        }
        if self.error.is_some() {
            self.failures += 1;
        }
    }
}

/// How long the agent waits for the helper: it lists a few sockets per pod.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// A request is the left backends and the pods' namespaces: small.
const REQUEST_MAX: u64 = 16 << 20;

/// The agent's side: asks the helper listening on `socket`.
pub async fn request(socket: &Path, request: &Request) -> Result<Reply> {
    let exchange = async {
        let mut stream =
            tokio::net::UnixStream::connect(socket).await.with_context(|| format!("connecting to {}", socket.display()))?;
        stream.write_all(&serde_json::to_vec(request)?).await?;
        stream.shutdown().await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        serde_json::from_slice::<Reply>(&answer).with_context(|| format!("reading the answer from {}", socket.display()))
    };
    tokio::time::timeout(REPLY_TIMEOUT, exchange)
        .await
        .map_err(|_| anyhow!("{} did not answer within {} s", socket.display(), REPLY_TIMEOUT.as_secs()))?
}

/// `v6node-dataplane end-connections`: one request on stdin, the reply on
/// stdout (the socket, under systemd's Accept=yes).
pub fn serve(pin_dir: &Path) -> Result<()> {
    let mut input = Vec::new();
    std::io::stdin().take(REQUEST_MAX).read_to_end(&mut input).context("reading the request")?;
    let request: Request = serde_json::from_slice(&input).context("the request is not an end-connections request")?;
    let reply = end(pin_dir, &request)?;
    if reply.ended > 0 || !reply.errors.is_empty() {
        log::info!(
            "ended {} connection(s) to {} backend(s) that left their Service, in {} namespace(s){}",
            reply.ended,
            request.left.len(),
            reply.namespaces,
            if reply.errors.is_empty() { String::new() } else { format!("; {}", reply.errors.join("; ")) }
        );
    }
    let mut out = std::io::stdout().lock();
    out.write_all(&serde_json::to_vec(&reply)?)?;
    out.flush()?;
    Ok(())
}

/// The frontends each left backend (address, port, protocol number) left.
type Wanted = BTreeMap<(Ipv6Addr, u16, u8), BTreeSet<u32>>;

fn end(pin_dir: &Path, request: &Request) -> Result<Reply> {
    let mut wanted: Wanted = BTreeMap::new();
    for left in &request.left {
        wanted.entry((left.ip, left.port, left.protocol.number())).or_default().insert(left.frontend);
    }
    let revnat: BpfHashMap<MapData, SockRevnatKey, SockRevnatValue> = bpf::open_pinned_map(pin_dir, maps::SOCK_REVNAT)?;
    let mut reply = Reply::default();
    let mut sockets = vec![("its own namespace".to_string(), open_diag().context("opening sock_diag")?)];
    for netns in &request.namespaces {
        match open_diag_in(netns) {
            Ok(socket) => sockets.push((netns.display().to_string(), socket)),
            // The pod went while the request was made: nothing left to end.
            Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) => {}
            Err(e) => reply.errors.push(format!("{}: {e:#}", netns.display())),
        }
    }
    reply.namespaces = sockets.len();
    for (name, socket) in &sockets {
        for protocol in [IPPROTO_TCP, IPPROTO_UDP] {
            match end_in(socket, protocol, &wanted, &revnat) {
                Ok(ended) => reply.ended += ended,
                Err(e) => reply.errors.push(format!("{name}: {e:#}")),
            }
        }
    }
    Ok(reply)
}

fn open_diag() -> std::io::Result<Socket> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    Ok(socket)
}

/// A sock_diag socket in the namespace at `netns`: made on a thread that
/// enters it (setns changes the calling thread only) and ends; the socket
/// stays in the namespace it was made in.
fn open_diag_in(netns: &Path) -> Result<Socket> {
    let file = File::open(netns)?;
    let name = netns.display().to_string();
    std::thread::spawn(move || -> Result<Socket> {
        // SAFETY: setns on this thread alone, with a namespace file we hold open.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error()).with_context(|| format!("entering {name}"));
        }
        open_diag().with_context(|| format!("opening sock_diag in {name}"))
    })
    .join()
    .map_err(|_| anyhow!("the thread entering {} panicked", netns.display()))?
}

fn send<T: netlink_packet_core::NetlinkSerializable>(socket: &Socket, flags: u16, message: T) -> Result<()>
where
    NetlinkPayload<T>: From<T>,
{
    let mut header = NetlinkHeader::default();
    header.flags = flags;
    let mut packet = NetlinkMessage::new(header, message.into());
    packet.finalize();
    let mut buf = vec![0; packet.buffer_len()];
    packet.serialize(&mut buf);
    socket.send(&buf, 0)?;
    Ok(())
}

fn inet_request(protocol: u8, socket_id: SocketId) -> SockDiagMessage {
    SockDiagMessage::InetRequest(InetRequest {
        family: AF_INET6,
        protocol,
        extensions: ExtensionFlags::empty(),
        states: StateFlags::all(),
        socket_id,
    })
}

/// The namespace's IPv6 sockets of `protocol`, as sock_diag lists them.
fn dump(socket: &Socket, protocol: u8) -> Result<Vec<InetResponseHeader>> {
    send(socket, NLM_F_REQUEST | NLM_F_DUMP, inet_request(protocol, SocketId::new_v6()))?;
    let mut listed = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let size = socket.recv(&mut &mut buf[..], 0)?;
        let mut offset = 0;
        while offset < size {
            let message = NetlinkMessage::<SockDiagMessage>::deserialize(&buf[offset..size]).context("reading sock_diag")?;
            let length = message.header.length as usize;
            match message.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => listed.push(response.header),
                NetlinkPayload::Done(_) => return Ok(listed),
                NetlinkPayload::Error(e) => bail!("listing sockets: {e}"),
                _ => {}
            }
            if length == 0 {
                break;
            }
            offset += length;
        }
    }
}

/// The kernel's socket cookie, which sock_diag gives as two host-order words.
fn cookie(id: &SocketId) -> u64 {
    let low = u32::from_ne_bytes(id.cookie[..4].try_into().expect("4 bytes"));
    let high = u32::from_ne_bytes(id.cookie[4..].try_into().expect("4 bytes"));
    u64::from(high) << 32 | u64::from(low)
}

const TCP_ESTABLISHED: u8 = 1;
const TCP_TIME_WAIT: u8 = 6;
const TCP_LISTEN: u8 = 10;

/// Ends the sockets of one protocol in one namespace that a left backend's
/// frontend connected; returns how many.
fn end_in(
    socket: &Socket,
    protocol: u8,
    wanted: &Wanted,
    revnat: &BpfHashMap<MapData, SockRevnatKey, SockRevnatValue>,
) -> Result<u64> {
    let mut ended = 0;
    for listed in dump(socket, protocol)? {
        let id = &listed.socket_id;
        let IpAddr::V6(peer) = id.destination_address else { continue };
        // A UDP socket is "established" once connect()ed; an unconnected
        // one gets a backend per datagram and has nothing to end.
        let live = match protocol {
            IPPROTO_UDP => listed.state == TCP_ESTABLISHED,
            _ => listed.state != TCP_LISTEN && listed.state != TCP_TIME_WAIT,
        };
        let Some(frontends) = wanted.get(&(peer, id.destination_port, protocol)).filter(|_| live) else { continue };
        let key =
            SockRevnatKey { cookie: cookie(id), addr: peer.octets(), port: id.destination_port.to_be(), ..Default::default() };
        let Ok(given) = revnat.get(&key, 0) else { continue };
        if !frontends.contains(&given.frontend) {
            continue;
        }
        send(socket, NLM_F_REQUEST | NLM_F_ACK, SockDiagDestroy::new(inet_request(protocol, id.clone())))?;
        let mut buf = vec![0u8; 4096];
        let size = socket.recv(&mut &mut buf[..], 0)?;
        let answer = NetlinkMessage::<SockDiagMessage>::deserialize(&buf[..size]).context("reading sock_diag's answer")?;
        match answer.payload {
            NetlinkPayload::Error(e) if e.code.is_none() => ended += 1,
            // Closed between the listing and now.
            NetlinkPayload::Error(e) if e.code.map(|c| -c.get()) == Some(libc::ENOENT) => {}
            NetlinkPayload::Error(e) => bail!("ending [{peer}]:{} (cookie {}): {e}", id.destination_port, key.cookie),
            other => bail!("ending [{peer}]:{}: unexpected answer {other:?}", id.destination_port),
        }
    }
    Ok(ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_two_host_order_words_low_first() {
        let mut id = SocketId::new_v6();
        id.cookie[..4].copy_from_slice(&0x0000_2a01u32.to_ne_bytes());
        id.cookie[4..].copy_from_slice(&0x0000_0003u32.to_ne_bytes());
        assert_eq!(cookie(&id), 0x0000_0003_0000_2a01);
    }
}
