// SPDX-License-Identifier: Apache-2.0
//! BGP for nodes on different links: from `[routing]` and the node's
//! prefixes the agent writes bird2's configuration; `v6node-bgp.path` starts
//! `v6node-bgp.service` (bird) once the file exists and reloads it whenever
//! it changes, as the DNS64 file is handled. Announce only: the node learns
//! nothing (its default route leads to the routers), so direct routes to
//! on-link peers stay exactly as `routes.rs` keeps them. `status` asks bird
//! over its control socket how each session is.

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    net::{Ipv4Addr, Ipv6Addr},
    os::unix::net::UnixStream,
    path::Path,
    time::Duration,
};

use anyhow::{bail, Context, Result};
use ipnet::Ipv6Net;
use serde::{Deserialize, Serialize};
use v6node_config::{Announce, Bgp, Config};

use super::ClusterState;
use crate::{files, paths::Paths};

/// bird's configuration from routing.* and the node's prefixes: its
/// Node's pod CIDRs and address once known, else pods.prefix; recorded for
/// `status`: returned, with an error of writing it in it (logged when it
/// differs from `previous`).
pub fn sync(paths: &Paths, cluster: Option<&ClusterState>, previous: Option<&BgpState>, config: &Config) -> Option<BgpState> {
    let file = paths.bird_config();
    let (address, mut prefixes) = cluster.map(|c| (c.address, c.pod_prefixes.clone())).unwrap_or_default();
    if prefixes.is_empty() {
        prefixes.extend(config.pods.prefix);
    }
    let (text, mut next) = match &config.routing.bgp {
        // Nothing was ever configured: bird never started.
        None if !file.exists() => (None, None),
        None => (Some(render_off()), None),
        Some(wanted) => {
            let next = desired(wanted, address, &prefixes);
            (next.router_id.map(|id| render(&next, id)), Some(next))
        }
    };
    if let Some(text) = text {
        match write(&file, &text) {
            Ok(true) => match &next {
                Some(n) => log::info!(
                    "BGP: AS {} announces {} to {} peer(s); {} written",
                    n.asn,
                    if n.announced.is_empty() {
                        "nothing yet".into()
                    } else {
                        n.announced.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    },
                    n.peers.len(),
                    file.display()
                ),
                None => log::info!("BGP off: {} written without sessions", file.display()),
            },
            Ok(false) => {}
            Err(e) => {
                if let Some(n) = next.as_mut() {
                    n.error = Some(format!("{e:#}"));
                }
            }
        }
    }
    if let Some(error) = next.as_ref().and_then(|n| n.error.as_ref()).filter(|_| next.as_ref() != previous) {
        log::warn!("BGP: {error}");
    }
    next
}

/// What the agent asked bird for, as `status` shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BgpState {
    pub asn: u32,
    pub router_id: Option<Ipv4Addr>,
    pub announced: Vec<Ipv6Net>,
    pub peers: Vec<PeerConfig>,
    /// Why no configuration could be written (bird keeps its last one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerConfig {
    /// bird's protocol name for the session.
    pub name: String,
    pub address: Ipv6Addr,
    pub asn: u32,
}

/// One session as bird reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Session {
    pub name: String,
    /// bird's BGP state: Established, Active, Connect, Idle, ...
    pub state: String,
    /// e.g. "0 imported, 1 exported, 0 preferred"
    pub routes: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub last_error: String,
}

fn protocol_name(index: usize) -> String {
    format!("v6node_peer{index}")
}

/// The router ID: configured, or the low 32 bits of the Node's InternalIP
/// (unique among a site's nodes when their addresses differ there).
pub fn router_id(bgp: &Bgp, node_address: Option<Ipv6Addr>) -> Result<Ipv4Addr, String> {
    if let Some(id) = bgp.router_id {
        return Ok(id);
    }
    let Some(address) = node_address else {
        return Err("no router ID yet: routing.router_id is unset and the Node has no IPv6 InternalIP".into());
    };
    let id = Ipv4Addr::from(address.to_bits() as u32);
    if id.is_unspecified() {
        return Err(format!("the InternalIP {address} ends in 32 zero bits; set routing.router_id"));
    }
    Ok(id)
}

/// The prefixes to announce, in config order, each once.
pub fn announced(bgp: &Bgp, pod_prefixes: &[Ipv6Net]) -> Vec<Ipv6Net> {
    let mut out: Vec<Ipv6Net> = Vec::new();
    for item in &bgp.announce {
        let prefixes = match item {
            Announce::PodPrefixes => pod_prefixes.to_vec(),
            Announce::Prefix(p) => vec![*p],
        };
        for p in prefixes {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

pub fn desired(bgp: &Bgp, node_address: Option<Ipv6Addr>, pod_prefixes: &[Ipv6Net]) -> BgpState {
    let (router_id, error) = match router_id(bgp, node_address) {
        Ok(id) => (Some(id), None),
        Err(e) => (None, Some(e)),
    };
    BgpState {
        asn: bgp.asn,
        router_id,
        announced: announced(bgp, pod_prefixes),
        peers: bgp
            .peers
            .iter()
            .enumerate()
            .map(|(i, p)| PeerConfig { name: protocol_name(i), address: p.address, asn: p.asn })
            .collect(),
        error,
    }
}

const HEADER: &str = "# Written by v6node-dataplane from [routing] and the node's prefixes; do not\n\
                      # edit (v6node-bgp.service is reloaded when it changes).\n";

/// bird2's configuration for `state`: the announced prefixes as blackhole
/// routes of a static protocol (a packet for an unused pod address ends
/// here, not in a loop to the router) exported to every peer, nothing
/// imported.
pub fn render(state: &BgpState, router_id: Ipv4Addr) -> String {
    let mut text =
        format!("{HEADER}router id {router_id};\n\nprotocol device {{}}\n\nprotocol static v6node_announced {{\n    ipv6;\n");
    for prefix in &state.announced {
        text.push_str(&format!("    route {prefix} blackhole;\n"));
    }
    text.push_str("}\n");
    for peer in &state.peers {
        text.push_str(&format!(
            "\nprotocol bgp {} {{\n    description \"{}\";\n    local as {};\n    neighbor {} as {};\n    ipv6 {{\n        import none;\n        export where proto = \"v6node_announced\";\n        next hop self;\n    }};\n}}\n",
            peer.name, peer.address, state.asn, peer.address, peer.asn
        ));
    }
    text
}

/// With `[routing]` gone: no sessions, so bird withdraws what it announced
/// (it keeps running until the unit is stopped; there is nothing to stop it
/// for on a node that may be configured again).
pub fn render_off() -> String {
    format!("{HEADER}# BGP is off (no routing.asn).\nrouter id 0.0.0.1;\n\nprotocol device {{}}\n")
}

/// Writes `text` when it differs from the file; `Ok(true)` if it did.
pub fn write(file: &Path, text: &str) -> Result<bool> {
    if fs::read_to_string(file).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    files::write_atomic(file, text.as_bytes(), Some(0o644))?;
    Ok(true)
}

/// Asks bird (its control socket) how every protocol is; only BGP sessions
/// come back.
pub fn sessions(socket: &Path) -> Result<Vec<Session>> {
    let reply = ask(socket, "show protocols all")?;
    Ok(parse_protocols(&reply))
}

/// One command over bird's control socket: the text of the reply's lines,
/// or bird's error.
fn ask(socket: &Path, command: &str) -> Result<Vec<String>> {
    let stream = UnixStream::connect(socket).with_context(|| format!("connecting to bird at {}", socket.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(3)))?;
    stream.set_write_timeout(Some(Duration::from_secs(3)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut lines = Vec::new();
    let mut greeted = false;
    let mut sent = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            bail!("bird closed its control socket mid-reply");
        }
        let line = line.trim_end_matches('\n');
        // "NNNN-text": more follows; "NNNN text": the reply's last line;
        // " text": more of the previous line's kind.
        let (code, last, text) = match line.as_bytes() {
            [a, b, c, d, sep, ..] if [a, b, c, d].iter().all(|x| x.is_ascii_digit()) && (*sep == b'-' || *sep == b' ') => {
                (Some(&line[..4]), *sep == b' ', &line[5..])
            }
            _ => (None, false, line.strip_prefix(' ').unwrap_or(line)),
        };
        if !greeted {
            greeted = true;
            (&stream).write_all(format!("{command}\n").as_bytes())?;
            sent = true;
            continue;
        }
        if let Some(code) = code.filter(|c| c.starts_with('8') || c.starts_with('9')) {
            bail!("bird refused `{command}`: {code} {text}");
        }
        if code != Some("0000") {
            lines.push(format!("{}{text}", code.map(|c| format!("{c}:")).unwrap_or_default()));
        }
        if last && sent {
            return Ok(lines);
        }
    }
}

/// `show protocols all`: a block per protocol, its first line coded 1002
/// ("name proto table state since info"), then details.
fn parse_protocols(lines: &[String]) -> Vec<Session> {
    let mut sessions: Vec<Session> = Vec::new();
    let mut in_bgp = false;
    for line in lines {
        if let Some(summary) = line.strip_prefix("1002:") {
            let columns: Vec<&str> = summary.split_whitespace().collect();
            in_bgp = columns.get(1) == Some(&"BGP");
            if in_bgp {
                sessions.push(Session { name: columns[0].to_string(), ..Session::default() });
            }
            continue;
        }
        let Some(session) = sessions.last_mut().filter(|_| in_bgp) else { continue };
        let text = match line.split_once(':') {
            Some((code, rest)) if code.len() == 4 && code.bytes().all(|b| b.is_ascii_digit()) => rest,
            _ => line.as_str(),
        };
        if let Some((key, value)) = text.split_once(':') {
            let value = value.trim().to_string();
            match key.trim() {
                "BGP state" => session.state = value,
                "Routes" => session.routes = value,
                "Last error" => session.last_error = value,
                _ => {}
            }
        }
    }
    sessions
}

#[cfg(test)]
mod tests {
    use v6node_config::BgpPeer;

    use super::*;

    fn bgp() -> Bgp {
        Bgp {
            asn: 64601,
            router_id: None,
            peers: vec![BgpPeer { address: "fd00:a1::1".parse().unwrap(), asn: 64512 }],
            announce: vec![Announce::PodPrefixes, Announce::Prefix("2001:db8:ff::/64".parse().unwrap())],
        }
    }

    #[test]
    fn the_router_id_is_configured_or_the_low_bits_of_the_node_address() {
        let mut b = bgp();
        assert_eq!(router_id(&b, Some("fd00:9::a".parse().unwrap())), Ok(Ipv4Addr::new(0, 0, 0, 10)));
        assert_eq!(router_id(&b, Some("2001:db8::c000:201".parse().unwrap())), Ok(Ipv4Addr::new(192, 0, 2, 1)));
        assert!(router_id(&b, None).unwrap_err().contains("routing.router_id is unset"));
        assert!(router_id(&b, Some("fd00:9:0:0:1::".parse().unwrap())).unwrap_err().contains("32 zero bits"));
        b.router_id = Some(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(router_id(&b, None), Ok(Ipv4Addr::new(10, 0, 0, 1)));
    }

    #[test]
    fn bird_gets_the_pod_prefixes_and_extra_prefixes_for_every_peer() {
        let pods: Vec<Ipv6Net> = vec!["fd00:10:244:a::/64".parse().unwrap(), "2001:db8:ff::/64".parse().unwrap()];
        let state = desired(&bgp(), Some("fd00:9::a".parse().unwrap()), &pods);
        assert_eq!(state.announced, pods, "each prefix once, in config order");
        let text = render(&state, state.router_id.unwrap());
        for want in [
            "router id 0.0.0.10;",
            "route fd00:10:244:a::/64 blackhole;",
            "route 2001:db8:ff::/64 blackhole;",
            "protocol bgp v6node_peer0 {",
            "local as 64601;",
            "neighbor fd00:a1::1 as 64512;",
            "import none;",
            "export where proto = \"v6node_announced\";",
        ] {
            assert!(text.contains(want), "{want:?} missing from\n{text}");
        }
        assert_eq!(text.matches("blackhole").count(), 2);
    }

    #[test]
    fn sessions_are_read_from_show_protocols_all() {
        let reply: Vec<String> = [
            "2002:Name       Proto      Table      State  Since         Info",
            "1002:device1    Device     ---        up     10:00:00.000  ",
            "1002:v6node_peer0 BGP        ---        up     10:00:01.000  Established   ",
            "1006:  Description:    fd00:a1::1",
            "  BGP state:          Established",
            "    Neighbor address: fd00:a1::1",
            "      Routes:         0 imported, 1 exported, 0 preferred",
            "1002:v6node_peer1 BGP        ---        start  10:00:01.000  Active        Socket: Connection refused",
            "1006:  BGP state:          Active",
            "    Last error:       Socket: Connection refused",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            parse_protocols(&reply),
            [
                Session {
                    name: "v6node_peer0".into(),
                    state: "Established".into(),
                    routes: "0 imported, 1 exported, 0 preferred".into(),
                    last_error: String::new()
                },
                Session {
                    name: "v6node_peer1".into(),
                    state: "Active".into(),
                    routes: String::new(),
                    last_error: "Socket: Connection refused".into()
                },
            ]
        );
    }
}
