// SPDX-License-Identifier: Apache-2.0
//! The typed, validated configuration. Values of these types only come out
//! of the validator or `Default`, so the agent can use them without checks.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::path::PathBuf;
use std::str::FromStr;

use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Serialize, Serializer};

/// `ALL`, `as_str`, Display and FromStr for a setting spelled as one of a
/// few keywords; the error lists them.
macro_rules! keywords {
    ($ty:ident, $what:literal, { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $word),+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            /// A human-readable reason.
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| {
                    format!(
                        concat!("unknown ", $what, " `{}`; expected one of {}"),
                        s,
                        [$($word),+].join(", ")
                    )
                })
            }
        }
    };
}

/// Smallest BIG TCP GSO/GRO size: anything lower is plain TCP, not BIG TCP.
pub const BIGTCP_MIN: u32 = 65536;
/// Largest size the kernel accepts for `gso_max_size`/`gro_max_size` (512 KiB - 8).
pub const BIGTCP_MAX: u32 = 524280;
pub const BIGTCP_DEFAULT: u32 = 196608;
/// RFC 6052 section 2.2: the prefix lengths an IPv4 address can be embedded under.
pub const NAT64_PREFIX_LENGTHS: [u8; 6] = [32, 40, 48, 56, 64, 96];

/// Interface names are at most IFNAMSIZ - 1 bytes.
pub(crate) const IFNAME_MAX: usize = 15;
/// `sun_path` is 108 bytes and std needs room for the terminating NUL.
pub(crate) const UNIX_PATH_MAX: usize = 107;

#[derive(Clone, Debug, PartialEq, Serialize, Default)]
pub struct Config {
    pub attach: Attach,
    pub bigtcp: BigTcp,
    pub filter: Filter,
    pub nat64: Nat64,
    /// `[nat46]`; `None`: no gateway.
    pub nat46: Option<Nat46>,
    pub pods: Pods,
    pub kubernetes: Kubernetes,
    pub routing: Routing,
    pub services: Services,
    pub metrics: Metrics,
    pub log: Log,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Attach {
    /// Interfaces the base programs attach to, ingress and egress.
    pub devices: Vec<DevicePattern>,
    pub mode: AttachMode,
}

impl Default for Attach {
    fn default() -> Self {
        Attach { devices: default_devices(), mode: AttachMode::Auto }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AttachMode {
    /// tcx where the kernel has it, clsact otherwise.
    #[default]
    Auto,
    Tcx,
    Clsact,
}

keywords!(AttachMode, "attach mode", { Auto => "auto", Tcx => "tcx", Clsact => "clsact" });

/// A shell glob over interface names, e.g. `en*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DevicePattern(glob::Pattern);

impl DevicePattern {
    /// Checks the pattern can match a Linux interface name at all, so typos
    /// like `eth0 ` or `eth0:1` fail loudly instead of silently matching nothing.
    pub fn new(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("empty pattern".into());
        }
        if s.contains('/') {
            return Err(format!("pattern `{s}` contains `/`, which interface names cannot"));
        }
        if s.contains(':') {
            return Err(format!("pattern `{s}` contains `:`, which interface names cannot"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("pattern `{s}` contains whitespace or a control character, which interface names cannot"));
        }
        if !s.contains(['*', '?', '[']) && s.len() > IFNAME_MAX {
            return Err(format!("interface name `{s}` is {} bytes; at most {IFNAME_MAX} are possible", s.len()));
        }
        glob::Pattern::new(s).map(DevicePattern).map_err(|e| format!("invalid glob `{s}`: {e}"))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    pub fn matches(&self, ifname: &str) -> bool {
        self.0.matches(ifname)
    }
}

impl FromStr for DevicePattern {
    /// A human-readable reason.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::new(s)
    }
}

impl fmt::Display for DevicePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DevicePattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

fn default_devices() -> Vec<DevicePattern> {
    ["en*", "eth*"].into_iter().map(|p| DevicePattern::new(p).expect("built-in pattern is valid")).collect()
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BigTcp {
    /// Interfaces whose GSO/GRO max sizes the agent raises.
    pub devices: Vec<DevicePattern>,
    /// Bytes, within `BIGTCP_MIN..=BIGTCP_MAX`.
    pub size: u32,
}

impl Default for BigTcp {
    fn default() -> Self {
        BigTcp { devices: default_devices(), size: BIGTCP_DEFAULT }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Filter {
    /// Source prefixes dropped at ingress, in config order, normalised and
    /// free of duplicates.
    #[serde(serialize_with = "serialize_displayed")]
    pub deny_sources: Vec<Ipv6Net>,
}

fn serialize_displayed<T: fmt::Display, S: Serializer>(nets: &[T], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(nets.iter().map(|n| n.to_string()))
}

/// The stateless NAT46/64 translator (SIIT, RFC 7915).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Nat64 {
    /// Interfaces the translator attaches to (tc ingress); none: off.
    pub devices: Vec<DevicePattern>,
    /// RFC 6052 prefix IPv4 addresses are embedded in.
    #[serde(serialize_with = "serialize_one_displayed")]
    pub prefix: Ipv6Net,
    /// RFC 7757 explicit address mappings, in config order.
    pub eam: Vec<Eam>,
    /// IPv4 destinations translated into `prefix` (IPv4-translatable IPv6
    /// addresses, RFC 6052): stateless NAT46 to IPv6 services numbered so.
    #[serde(serialize_with = "serialize_displayed")]
    pub translatable: Vec<Ipv4Net>,
    /// `[nat64.stateful]`; `None`: every IPv6 source needs a mapping.
    pub stateful: Option<Nat64Stateful>,
}

impl Default for Nat64 {
    fn default() -> Self {
        Nat64 { devices: Vec::new(), prefix: well_known_prefix(), eam: Vec::new(), translatable: Vec::new(), stateful: None }
    }
}

/// Stateful NAT64 (RFC 6146): IPv6 clients in `sources` without a mapping
/// of their own share the IPv4 addresses of `pool`, one transport address
/// per client transport address (endpoint-independent mapping).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Nat64Stateful {
    #[serde(serialize_with = "serialize_displayed")]
    pub pool: Vec<Ipv4Addr>,
    #[serde(serialize_with = "serialize_displayed")]
    pub sources: Vec<Ipv6Net>,
    #[serde(serialize_with = "serialize_one_displayed")]
    pub tcp_ports: PortRange,
    #[serde(serialize_with = "serialize_one_displayed")]
    pub udp_ports: PortRange,
    /// ICMP echo identifiers, which stand in for ports.
    #[serde(serialize_with = "serialize_one_displayed")]
    pub icmp_ids: PortRange,
    pub filtering: Nat64Filtering,
    pub udp_seconds: u32,
    pub tcp_established_seconds: u32,
    /// Before the server answers, and after a FIN or RST.
    pub tcp_transitory_seconds: u32,
    pub icmp_seconds: u32,
}

/// RFC 6146 4's default lifetimes.
pub const NAT64_UDP_SECONDS: u32 = 300;
pub const NAT64_TCP_ESTABLISHED_SECONDS: u32 = 7440;
pub const NAT64_TCP_TRANSITORY_SECONDS: u32 = 240;
pub const NAT64_ICMP_SECONDS: u32 = 60;
/// Ports below stay the node's own, as RFC 6056 leaves them to services.
pub const NAT64_PORTS_DEFAULT: PortRange = PortRange { first: 1024, last: 65535 };

/// `first-last`, both included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// How many ports: never none, as first <= last.
    pub fn count(self) -> usize {
        usize::from(self.last) - usize::from(self.first) + 1
    }

    pub fn iter(self) -> impl Iterator<Item = u16> {
        self.first..=self.last
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// RFC 4787 filtering: which IPv4 hosts may reach a binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Nat64Filtering {
    /// Any host, once the client has a binding (what RFC 6146 recommends
    /// for applications to work).
    #[default]
    EndpointIndependent,
    /// Only hosts the client has sent to.
    AddressDependent,
}

keywords!(Nat64Filtering, "filtering", {
    EndpointIndependent => "endpoint-independent",
    AddressDependent => "address-dependent",
});

/// The stateful NAT46 gateway: IPv4 clients reach IPv6 backends through
/// the frontends (VIP, port, protocol) of `gateways`, on the translator's
/// devices. Each flow is given a backend by the frontend's weighted Maglev
/// table and keeps it while the backend stays configured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Nat46 {
    /// The /96 IPv4 clients are embedded in (RFC 6052) as the backends see
    /// them; routed to this gateway alone, so replies come back through it.
    #[serde(serialize_with = "serialize_one_displayed")]
    pub source_prefix: Ipv6Net,
    #[serde(rename = "gateway")]
    pub gateways: Vec<Nat46Gateway>,
    pub udp_seconds: u32,
    pub tcp_established_seconds: u32,
    /// Before the backend answers, and after a FIN or RST.
    pub tcp_transitory_seconds: u32,
}

/// One `[[nat46.gateway]]`: a frontend and its backends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Nat46Gateway {
    #[serde(serialize_with = "serialize_one_displayed")]
    pub frontend: SocketAddrV4,
    pub protocol: Nat46Protocol,
    pub backends: Vec<Nat46Backend>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Nat46Backend {
    #[serde(serialize_with = "serialize_one_displayed")]
    pub address: SocketAddrV6,
    /// Its share of new flows, relative to the others'; 0 drains it: no new
    /// flows, its flows kept.
    pub weight: u32,
}

/// A backend's weight when the config gives none, and the most it may be.
pub const NAT46_WEIGHT_DEFAULT: u32 = 1;
pub const NAT46_WEIGHT_MAX: u32 = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Nat46Protocol {
    Tcp,
    Udp,
}

keywords!(Nat46Protocol, "protocol", {
    Tcp => "tcp",
    Udp => "udp",
});

impl Nat46Protocol {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Nat46Protocol::Tcp => 6,
            Nat46Protocol::Udp => 17,
        }
    }
}

/// RFC 6052's well-known prefix, 64:ff9b::/96.
pub fn well_known_prefix() -> Ipv6Net {
    Ipv6Net::new(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96).expect("valid prefix")
}

/// One explicit address mapping: both prefixes leave the same number of
/// host bits, which carry over unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Eam {
    #[serde(serialize_with = "serialize_one_displayed")]
    pub ipv6: Ipv6Net,
    #[serde(serialize_with = "serialize_one_displayed")]
    pub ipv4: Ipv4Net,
}

fn serialize_one_displayed<T: fmt::Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

/// Pod networking: what the agent writes into the CNI network configuration
/// that `v6node-cni` reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Pods {
    /// The node's pod prefix; `None` until known, and no CNI configuration
    /// is written until then (the runtime reports the network not ready).
    #[serde(serialize_with = "serialize_optional_displayed")]
    pub prefix: Option<Ipv6Net>,
    pub device: PodDeviceChoice,
}

fn serialize_optional_displayed<T: fmt::Display, S: Serializer>(value: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.collect_str(v),
        None => s.serialize_str(""),
    }
}

/// Which device pair the CNI plugin should connect pods by (`pods.device`).
/// What it did create, per pod, is `v6node_api::PodDevice`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PodDeviceChoice {
    /// netkit where the kernel has it, veth elsewhere.
    #[default]
    Auto,
    Netkit,
    Veth,
}

keywords!(PodDeviceChoice, "pod device", {
    Auto => "auto",
    Netkit => "netkit",
    Veth => "veth",
});

/// Pod prefixes must leave room for a node's pods and be plain unicast.
pub const POD_PREFIX_MAX_LEN: u8 = 120;

/// Following the Kubernetes API (Nodes: pod prefixes and routes to peers).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Kubernetes {
    /// The agent's own kubeconfig; `None`: the agent does not follow the API
    /// and `pods.prefix` comes from configuration alone.
    #[serde(serialize_with = "serialize_optional_displayed_path")]
    pub kubeconfig: Option<PathBuf>,
    /// This node's Node name; empty: the host name, as kubelet takes it.
    pub node_name: String,
}

fn serialize_optional_displayed_path<S: Serializer>(value: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    serialize_optional_displayed(&value.as_ref().map(|p| p.display().to_string()), s)
}

/// Kubernetes Services, translated by the socket hooks on `cgroup`: every
/// process in it and below (the root cgroup: all pods and the node itself)
/// reaches a Service's backends directly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Services {
    /// A cgroup v2 directory; `None`: no socket hooks.
    #[serde(serialize_with = "serialize_optional_displayed_path")]
    pub cgroup: Option<PathBuf>,
    /// How a connection from outside reaches a backend on another node.
    pub remote_backends: RemoteBackends,
}

impl Default for Services {
    fn default() -> Self {
        Services { cgroup: Some(PathBuf::from("/sys/fs/cgroup")), remote_backends: RemoteBackends::default() }
    }
}

/// A connection from outside the cluster (NodePort, external or
/// load-balancer IP) whose backend is on another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RemoteBackends {
    /// From this node's masquerade address: replies come back through this
    /// node. Works on any network, but a flow that lands on another node
    /// (an ECMP change) reaches its backend from another address and resets.
    #[default]
    Masquerade,
    /// Direct server return: with the client's own address and a header
    /// naming the frontend, and the backend's node answers the client
    /// itself. A moved flow keeps its connection. Needs every such backend
    /// on a v6node node, and a node network that carries packets with the
    /// clients' source addresses between nodes.
    Dsr,
}

keywords!(RemoteBackends, "remote backends mode", { Masquerade => "masquerade", Dsr => "dsr" });

/// Reaching peers that are not on-link: BGP announcements of this node's
/// prefixes to the site's routers (bird2, configured by the agent). Direct
/// routes to on-link peers stay as they are; `bgp` is `None` unless an
/// `asn` is configured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Routing {
    pub bgp: Option<Bgp>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bgp {
    /// This node's autonomous system number.
    pub asn: u32,
    /// `None`: the low 32 bits of the Node's InternalIP.
    pub router_id: Option<Ipv4Addr>,
    /// At least one, each address once.
    pub peers: Vec<BgpPeer>,
    pub announce: Vec<Announce>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct BgpPeer {
    /// A global or unique-local IPv6 address on a link of the node's.
    pub address: Ipv6Addr,
    pub asn: u32,
}

/// What a node announces; written as in the config: `"pod-prefixes"` or a prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Announce {
    /// The node's pod prefixes: its Node's `spec.podCIDRs`, or `pods.prefix`.
    PodPrefixes,
    /// A prefix of the operator's, e.g. for addresses the node serves.
    Prefix(Ipv6Net),
}

impl Serialize for Announce {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Announce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Announce::PodPrefixes => f.write_str(ANNOUNCE_POD_PREFIXES),
            Announce::Prefix(p) => write!(f, "{p}"),
        }
    }
}

pub const ANNOUNCE_POD_PREFIXES: &str = "pod-prefixes";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Metrics {
    /// `None`: no metrics endpoint.
    #[serde(serialize_with = "serialize_listen")]
    pub listen: Option<MetricsListen>,
}

fn serialize_listen<S: Serializer>(l: &Option<MetricsListen>, s: S) -> Result<S::Ok, S::Error> {
    match l {
        Some(l) => s.collect_str(l),
        None => s.serialize_str(""),
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MetricsListen {
    /// An absolute path, at most 107 bytes.
    Unix(PathBuf),
    /// Port is never 0.
    Tcp(SocketAddr),
}

/// The config form, except `""` (endpoint off), which is `Option::None`.
impl FromStr for MetricsListen {
    /// A human-readable reason.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("`unix:` needs an absolute socket path, e.g. unix:/run/v6node/metrics.sock".into());
            }
            if !path.starts_with('/') {
                return Err(format!("unix socket path `{path}` is not absolute"));
            }
            if path.contains('\0') {
                return Err("unix socket path contains a NUL byte".into());
            }
            if path.len() > UNIX_PATH_MAX {
                return Err(format!("unix socket path is {} bytes; at most {UNIX_PATH_MAX} fit in sockaddr_un", path.len()));
            }
            return Ok(MetricsListen::Unix(path.into()));
        }
        match s.parse::<SocketAddr>() {
            Ok(a) if a.port() == 0 => Err(format!("port 0 in `{s}`; choose a fixed port such as 9462")),
            Ok(a) => Ok(MetricsListen::Tcp(a)),
            Err(_) => Err(format!(
                "cannot parse `{s}`; expected \"\" (off), \"unix:/absolute/path.sock\", \
                 or an address with a port such as \"[::1]:9462\" or \"127.0.0.1:9462\""
            )),
        }
    }
}

impl fmt::Display for MetricsListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsListen::Unix(p) => write!(f, "unix:{}", p.display()),
            MetricsListen::Tcp(a) => write!(f, "{a}"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Default)]
pub struct Log {
    pub level: LogLevel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

keywords!(LogLevel, "log level", {
    Error => "error",
    Warn => "warn",
    Info => "info",
    Debug => "debug",
    Trace => "trace",
});
