// SPDX-License-Identifier: Apache-2.0
//! Types shared with v6node's BPF programs, generated from `abi.h` by bindgen.
//! Map names are the ones the C side declares and pins.

mod generated {
    #![allow(non_camel_case_types, non_upper_case_globals, dead_code, clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/abi.rs"));
}

pub use generated::{
    v6n_affinity_key as AffinityKey, v6n_affinity_value as AffinityValue, v6n_l4_addr as L4Addr, v6n_service_key as ServiceKey,
    v6n_service_stats as ServiceStats, v6n_service_value as ServiceValue, v6n_sock_revnat_key as SockRevnatKey,
    v6n_sock_revnat_value as SockRevnatValue, V6N_BACKENDS_MAX as BACKENDS_MAX,
    V6N_BACKENDS_PER_SERVICE_MAX as BACKENDS_PER_SERVICE_MAX, V6N_FRONTENDS_MAX as FRONTENDS_MAX,
    V6N_SERVICE_AFFINITY as SERVICE_AFFINITY, V6N_SERVICE_SLOTS_MAX as SERVICE_SLOTS_MAX,
};
pub use generated::{v6n_bandwidth_value as BandwidthValue, v6n_pacer as Pacer, V6N_BANDWIDTH_MAX as BANDWIDTH_MAX};
pub use generated::{
    v6n_counter_key as CounterKey, v6n_counter_value as CounterValue, v6n_ct_key as CtKey, v6n_ct_lifetimes as CtLifetimes,
    v6n_ct_value as CtValue, v6n_deny_value as DenyValue, v6n_direction as Direction, v6n_eam_value as EamValue,
    v6n_endpoint_key as EndpointKey, v6n_endpoint_value as EndpointValue, v6n_lb_config as LbConfig, v6n_lpm4_key as Lpm4Key,
    v6n_lpm6_key as Lpm6Key, v6n_maglev_table as MaglevTable, v6n_nat64_config as Nat64Config, v6n_reason as Reason,
    V6N_COUNTERS_MAX as COUNTERS_MAX, V6N_CT_REPLY as CT_REPLY, V6N_DENY_SRC_MAX as DENY_SRC_MAX,
    V6N_DSR_OPT_TYPE as DSR_OPT_TYPE, V6N_EAM_MAX as EAM_MAX, V6N_EAM_ROUTED_NATIVELY as EAM_ROUTED_NATIVELY,
    V6N_ENDPOINTS_MAX as ENDPOINTS_MAX, V6N_ENDPOINT_NETKIT as ENDPOINT_NETKIT, V6N_LB_DSR as LB_DSR,
    V6N_LB_DSR_IP6IP6 as LB_DSR_IP6IP6, V6N_MAGLEV_SIZE as MAGLEV_SIZE, V6N_SERVICE_EXTERNAL as SERVICE_EXTERNAL,
    V6N_XLAT4_MAX as XLAT4_MAX,
};
pub use generated::{
    v6n_event_config as EventConfig, v6n_event_kind as EventKind, v6n_event_stats as EventStats, v6n_flow_event as FlowEvent,
    V6N_EVENTS_READ_MS as EVENTS_READ_MS, V6N_EVENT_NAT46 as EVENT_NAT46, V6N_EVENT_SERVICE as EVENT_SERVICE,
    V6N_EVENT_XLAT as EVENT_XLAT, V6N_KERNEL_DROP_REASONS_MAX as KERNEL_DROP_REASONS_MAX,
};
pub use generated::{
    v6n_nat46_frontend as Nat46Frontend, v6n_nat46_frontend_key as Nat46FrontendKey,
    V6N_NAT46_BACKENDS_MAX as NAT46_BACKENDS_MAX, V6N_NAT46_FRONTENDS_MAX as NAT46_FRONTENDS_MAX,
    V6N_NAT46_STATE_MAX as NAT46_STATE_MAX, V6N_NAT46_VIPS_MAX as NAT46_VIPS_MAX,
};
pub use generated::{
    v6n_nat64_pool_value as Nat64PoolValue, V6N_CT_CLOSING as CT_CLOSING, V6N_CT_ESTABLISHED as CT_ESTABLISHED,
    V6N_CT_FIN_IN as CT_FIN_IN, V6N_CT_FIN_OUT as CT_FIN_OUT, V6N_CT_RESET as CT_RESET,
    V6N_NAT64_FILTER_ADDRESS_DEPENDENT as NAT64_FILTER_ADDRESS_DEPENDENT,
    V6N_NAT64_FILTER_ENDPOINT_INDEPENDENT as NAT64_FILTER_ENDPOINT_INDEPENDENT, V6N_NAT64_POOL_MAX as NAT64_POOL_MAX,
    V6N_NAT64_SOURCES_MAX as NAT64_SOURCES_MAX, V6N_NAT64_STATE_MAX as NAT64_STATE_MAX,
};
pub use generated::{
    v6n_policy_classes as PolicyClasses, v6n_policy_ct_key as PolicyCtKey, v6n_policy_ct_value as PolicyCtValue,
    v6n_policy_direction as PolicyDirection, v6n_policy_peer as PolicyPeer, v6n_policy_peer_key as PolicyPeerKey,
    v6n_policy_pod as PolicyPod, v6n_policy_port as PolicyPort, v6n_policy_port_key as PolicyPortKey,
    v6n_policy_rules as PolicyRules, V6N_POLICY_AUDIT as POLICY_AUDIT, V6N_POLICY_CLASSES_MAX as POLICY_CLASSES_MAX,
    V6N_POLICY_CT_MAX as POLICY_CT_MAX, V6N_POLICY_PEERS_MAX as POLICY_PEERS_MAX, V6N_POLICY_PODS_MAX as POLICY_PODS_MAX,
    V6N_POLICY_PORTS_MAX as POLICY_PORTS_MAX,
};

// SAFETY: plain C structs of integers with explicit padding fields; any bit
// pattern is valid and the kernel copies them byte for byte.
#[cfg(feature = "aya")]
mod pod {
    use super::*;

    unsafe impl aya::Pod for CounterKey {}
    unsafe impl aya::Pod for CounterValue {}
    unsafe impl aya::Pod for Lpm6Key {}
    unsafe impl aya::Pod for DenyValue {}
    unsafe impl aya::Pod for Nat64Config {}
    unsafe impl aya::Pod for Lpm4Key {}
    unsafe impl aya::Pod for EamValue {}
    unsafe impl aya::Pod for EndpointKey {}
    unsafe impl aya::Pod for EndpointValue {}
    unsafe impl aya::Pod for ServiceKey {}
    unsafe impl aya::Pod for ServiceValue {}
    unsafe impl aya::Pod for L4Addr {}
    unsafe impl aya::Pod for ServiceStats {}
    unsafe impl aya::Pod for AffinityKey {}
    unsafe impl aya::Pod for AffinityValue {}
    unsafe impl aya::Pod for SockRevnatKey {}
    unsafe impl aya::Pod for SockRevnatValue {}
    unsafe impl aya::Pod for CtKey {}
    unsafe impl aya::Pod for CtValue {}
    unsafe impl aya::Pod for Nat64PoolValue {}
    unsafe impl aya::Pod for LbConfig {}
    unsafe impl aya::Pod for MaglevTable {}
    unsafe impl aya::Pod for Nat46FrontendKey {}
    unsafe impl aya::Pod for Nat46Frontend {}
    unsafe impl aya::Pod for PolicyPod {}
    unsafe impl aya::Pod for PolicyPeerKey {}
    unsafe impl aya::Pod for PolicyPeer {}
    unsafe impl aya::Pod for PolicyPort {}
    unsafe impl aya::Pod for PolicyPortKey {}
    unsafe impl aya::Pod for PolicyClasses {}
    unsafe impl aya::Pod for PolicyCtKey {}
    unsafe impl aya::Pod for PolicyCtValue {}
    unsafe impl aya::Pod for EventConfig {}
    unsafe impl aya::Pod for EventStats {}
    unsafe impl aya::Pod for BandwidthValue {}
}

/// Names of the maps userspace opens, as the BPF headers declare them (each
/// beside its feature, the shared ones in `bpf/lib/maps.h`) and pin them.
/// Not a list of every pinned map: `detach` reads that from the objects.
pub mod maps {
    pub const COUNTERS: &str = "v6n_counters";
    pub const DENY_SRC: &str = "v6n_deny_src";
    /// Declared in `bpf/lib/nat64.h`, used by the translator only.
    pub const NAT64_CONFIG: &str = "v6n_nat64_cfg";
    pub const EAM6: &str = "v6n_eam6";
    pub const EAM4: &str = "v6n_eam4";
    /// nat64.translatable: IPv4 destinations embedded in the prefix.
    pub const XLAT4: &str = "v6n_xlat4";
    /// nat64.devices by ifindex: where the uplinks' XDP program translates too.
    pub const XLAT_DEVICES: &str = "v6n_xlat_devices";
    /// Declared in `bpf/lib/xdp_send.h`: the uplinks running native XDP, by
    /// ifindex, which XDP sends frames out of (a devmap).
    pub const XDP_PORTS: &str = "v6n_xdp_ports";
    /// Declared in `bpf/lib/nat64_state.h`: stateful NAT64.
    pub const NAT64_STATE: &str = "v6n_nat64_state";
    pub const NAT64_SOURCES: &str = "v6n_nat64_src";
    pub const NAT64_POOL: &str = "v6n_nat64_pool";
    pub const NAT64_POOL_ADDRS: &str = "v6n_nat64_pool_addrs";
    /// Declared in `bpf/lib/maps.h`: the node's pods, for BPF host routing.
    pub const ENDPOINTS: &str = "v6n_endpoints";
    /// Declared in `bpf/lib/maps.h`: rate-limited pods (the bandwidth manager).
    pub const BANDWIDTH: &str = "v6n_bandwidth";
    /// Declared in `bpf/lib/lb.h`: Services, their backends and frontends.
    pub const SERVICES: &str = "v6n_services";
    pub const BACKENDS: &str = "v6n_backends";
    pub const FRONTENDS: &str = "v6n_frontends";
    pub const SERVICE_STATS: &str = "v6n_service_stats";
    pub const AFFINITY: &str = "v6n_affinity";
    /// Declared in `bpf/lib/maps.h`: the Service each socket was sent to a backend of.
    pub const SOCK_REVNAT: &str = "v6n_sock_revnat";
    /// Declared in `bpf/lib/nodeport_state.h`: Services' external and load-balancer IPs.
    pub const LB_VIPS: &str = "v6n_lb_vips";
    /// Declared in `bpf/lib/ct.h`: connection tracking.
    pub const CT: &str = "v6n_ct";
    /// Declared in `bpf/lib/nodeport.h`: Services reached from outside.
    pub const MAGLEV: &str = "v6n_maglev";
    pub const LB_CONFIG: &str = "v6n_lb_cfg";
    /// Declared in `bpf/lib/nat46_gw.h`: the stateful NAT46 gateway.
    pub const NAT46_FRONTENDS: &str = "v6n_nat46_frontends";
    pub const NAT46_VIPS: &str = "v6n_nat46_vips";
    pub const NAT46_BACKENDS: &str = "v6n_nat46_backends";
    pub const NAT46_MAGLEV: &str = "v6n_nat46_maglev";
    pub const NAT46_STATE: &str = "v6n_nat46_state";
    /// Declared in `bpf/lib/policy.h`: network policy.
    pub const POLICY_PODS: &str = "v6n_policy_pods";
    pub const POLICY_PEERS: &str = "v6n_policy_peers";
    pub const POLICY_PORTS: &str = "v6n_policy_ports";
    pub const POLICY_CT: &str = "v6n_policy_ct";
    pub const POLICY_DENIED: &str = "v6n_policy_denied";
    /// Declared in `bpf/lib/events.h`: flow events.
    pub const EVENTS: &str = "v6n_events";
    pub const EVENT_CONFIG: &str = "v6n_event_config";
    pub const EVENT_STATS: &str = "v6n_event_stats";
    /// Declared in `bpf/trace.bpf.c`: the kernel's drop reasons reported.
    pub const KERNEL_DROP_REASONS: &str = "v6n_kernel_drop_reasons";
}

/// abi.h's v6n_pacer: ps_per_byte_q16 is picoseconds per byte, times 2^16.
const PS_PER_BYTE_Q16_AT_ONE_BIT_PER_SECOND: u128 = 8 * 1_000_000_000_000 * 65_536;

impl Pacer {
    /// A pacer for `bits_per_second`; `None` (or 0): no limit that way.
    pub fn limiting(bits_per_second: Option<u64>) -> Pacer {
        let ps_per_byte_q16 = bits_per_second
            .filter(|b| *b > 0)
            .map_or(0, |bits| (PS_PER_BYTE_Q16_AT_ONE_BIT_PER_SECOND / u128::from(bits)).clamp(1, u128::from(u64::MAX)) as u64);
        Pacer { ps_per_byte_q16, ..Pacer::default() }
    }

    /// The rate the pacer stands for, in bits per second.
    pub fn bits_per_second(&self) -> Option<u64> {
        (self.ps_per_byte_q16 > 0).then(|| (PS_PER_BYTE_Q16_AT_ONE_BIT_PER_SECOND / u128::from(self.ps_per_byte_q16)) as u64)
    }

    /// What a packet of `bytes` costs, in picoseconds, as
    /// bpf/lib/bandwidth.h reckons it.
    pub fn cost_ps(&self, bytes: u64) -> u64 {
        bytes * (self.ps_per_byte_q16 >> 16) + ((bytes * (self.ps_per_byte_q16 & 0xffff)) >> 16)
    }
}

impl Reason {
    pub const ALL: [Reason; Reason::V6N_REASON_COUNT as usize] = [
        Reason::V6N_REASON_PASS,
        Reason::V6N_REASON_DROP_MALFORMED,
        Reason::V6N_REASON_DROP_DENIED_SOURCE,
        Reason::V6N_REASON_XLAT_FORWARDED,
        Reason::V6N_REASON_XLAT_TO_STACK,
        Reason::V6N_REASON_DROP_HOP_LIMIT,
        Reason::V6N_REASON_DROP_TOO_BIG,
        Reason::V6N_REASON_DROP_UNMAPPED,
        Reason::V6N_REASON_DROP_UNTRANSLATABLE,
        Reason::V6N_REASON_ROUTED,
        Reason::V6N_REASON_DROP_SPOOFED,
        Reason::V6N_REASON_DROP_NOT_IPV6,
        Reason::V6N_REASON_LB_TRANSLATED,
        Reason::V6N_REASON_DROP_NO_BACKEND,
        Reason::V6N_REASON_LB_TRACKED,
        Reason::V6N_REASON_DROP_NAT_PORTS,
        Reason::V6N_REASON_DROP_DSR_REFUSED,
        Reason::V6N_REASON_DROP_POOL_EXHAUSTED,
        Reason::V6N_REASON_DROP_NO_BINDING,
        Reason::V6N_REASON_DROP_FILTERED,
        Reason::V6N_REASON_DROP_STATE_FULL,
        Reason::V6N_REASON_DROP_NAT46_CLASH,
        Reason::V6N_REASON_DROP_NAT46_NO_FLOW,
        Reason::V6N_REASON_DROP_NAT46_STATE_FULL,
        Reason::V6N_REASON_XLAT_TO_FRAGMENT,
        Reason::V6N_REASON_DROP_POLICY_INGRESS,
        Reason::V6N_REASON_DROP_POLICY_EGRESS,
        Reason::V6N_REASON_POLICY_AUDIT,
        Reason::V6N_REASON_DROP_KERNEL,
        Reason::V6N_REASON_DROP_BANDWIDTH,
        Reason::V6N_REASON_DROP_NO_FRONTEND,
    ];

    /// Stable name used in `status` output and as a Prometheus label.
    pub fn name(self) -> &'static str {
        match self {
            Reason::V6N_REASON_PASS => "pass",
            Reason::V6N_REASON_DROP_MALFORMED => "malformed",
            Reason::V6N_REASON_DROP_DENIED_SOURCE => "denied_source",
            Reason::V6N_REASON_XLAT_FORWARDED => "translated",
            Reason::V6N_REASON_XLAT_TO_STACK => "translated_to_stack",
            Reason::V6N_REASON_DROP_HOP_LIMIT => "hop_limit_exceeded",
            Reason::V6N_REASON_DROP_TOO_BIG => "too_big",
            Reason::V6N_REASON_DROP_UNMAPPED => "unmapped_source",
            Reason::V6N_REASON_DROP_UNTRANSLATABLE => "untranslatable",
            Reason::V6N_REASON_ROUTED => "routed",
            Reason::V6N_REASON_DROP_SPOOFED => "spoofed_source",
            Reason::V6N_REASON_DROP_NOT_IPV6 => "not_ipv6",
            Reason::V6N_REASON_LB_TRANSLATED => "service_translated",
            Reason::V6N_REASON_DROP_NO_BACKEND => "service_without_backend",
            Reason::V6N_REASON_LB_TRACKED => "service_tracked",
            Reason::V6N_REASON_DROP_NAT_PORTS => "masquerade_ports_exhausted",
            Reason::V6N_REASON_DROP_DSR_REFUSED => "dsr_option_refused",
            Reason::V6N_REASON_DROP_POOL_EXHAUSTED => "nat64_pool_exhausted",
            Reason::V6N_REASON_DROP_NO_BINDING => "nat64_no_binding",
            Reason::V6N_REASON_DROP_FILTERED => "nat64_filtered",
            Reason::V6N_REASON_DROP_STATE_FULL => "nat64_state_full",
            Reason::V6N_REASON_DROP_NAT46_CLASH => "nat46_clash",
            Reason::V6N_REASON_DROP_NAT46_NO_FLOW => "nat46_no_flow",
            Reason::V6N_REASON_DROP_NAT46_STATE_FULL => "nat46_state_full",
            Reason::V6N_REASON_XLAT_TO_FRAGMENT => "translated_after_fragmenting",
            Reason::V6N_REASON_DROP_POLICY_INGRESS => "policy_denied_ingress",
            Reason::V6N_REASON_DROP_POLICY_EGRESS => "policy_denied_egress",
            Reason::V6N_REASON_POLICY_AUDIT => "policy_audit_would_deny",
            Reason::V6N_REASON_DROP_KERNEL => "kernel_drop",
            Reason::V6N_REASON_DROP_BANDWIDTH => "bandwidth_beyond_horizon",
            Reason::V6N_REASON_DROP_NO_FRONTEND => "service_port_unknown",
            Reason::V6N_REASON_COUNT => "invalid",
        }
    }

    pub fn from_u8(value: u8) -> Option<Reason> {
        Self::ALL.get(usize::from(value)).copied()
    }

    /// A drop, as the BPF side tells one (V6N_REASONS_FORWARDING).
    pub fn is_drop(self) -> bool {
        u64::from(generated::V6N_REASONS_FORWARDING) & (1u64 << self as u32) == 0
    }
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::V6N_DIRECTION_INGRESS => "ingress",
            Direction::V6N_DIRECTION_EGRESS => "egress",
            Direction::V6N_DIRECTION_XLAT_6TO4 => "6to4",
            Direction::V6N_DIRECTION_XLAT_4TO6 => "4to6",
            Direction::V6N_DIRECTION_FROM_POD => "from_pod",
            Direction::V6N_DIRECTION_TO_POD => "to_pod",
            Direction::V6N_DIRECTION_SOCKET => "socket",
            Direction::V6N_DIRECTION_XDP => "xdp",
        }
    }

    pub fn from_u8(value: u8) -> Option<Direction> {
        [
            Direction::V6N_DIRECTION_INGRESS,
            Direction::V6N_DIRECTION_EGRESS,
            Direction::V6N_DIRECTION_XLAT_6TO4,
            Direction::V6N_DIRECTION_XLAT_4TO6,
            Direction::V6N_DIRECTION_FROM_POD,
            Direction::V6N_DIRECTION_TO_POD,
            Direction::V6N_DIRECTION_SOCKET,
            Direction::V6N_DIRECTION_XDP,
        ]
        .into_iter()
        .find(|d| *d as u8 == value)
    }
}

impl Lpm6Key {
    pub fn new(net: std::net::Ipv6Addr, prefix_len: u8) -> Self {
        Lpm6Key { prefixlen: u32::from(prefix_len), addr: net.octets() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_a_distinct_name() {
        let names: std::collections::BTreeSet<_> = Reason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
        assert!(!names.contains("invalid"));
    }

    #[test]
    fn the_drops_are_the_reasons_named_drop() {
        for reason in Reason::ALL {
            assert_eq!(reason.is_drop(), format!("{reason:?}").contains("_DROP_"), "{reason:?}");
        }
    }

    #[test]
    fn a_flow_event_has_no_implicit_padding() {
        assert_eq!(std::mem::size_of::<FlowEvent>(), 120);
    }

    #[test]
    fn reason_round_trips_through_its_counter_byte() {
        for reason in Reason::ALL {
            assert_eq!(Reason::from_u8(reason as u8), Some(reason));
        }
        assert_eq!(Reason::from_u8(Reason::V6N_REASON_COUNT as u8), None);
    }

    #[test]
    fn a_pacer_costs_what_its_rate_says_from_one_kbit_to_one_pbit() {
        for bits in [1_000u64, 10_000_000, 1_000_000_000, 100_000_000_000, 1_000_000_000_000_000] {
            let p = Pacer::limiting(Some(bits));
            let exact = 1514.0 * 8.0 * 1e12 / bits as f64;
            let cost = p.cost_ps(1514) as f64;
            // At 1 Pbit/s a frame takes 12 ps: whole picoseconds are 1% coarse.
            let tolerance = if bits > 100_000_000_000 { 1e-2 } else { 1e-4 };
            assert!((cost - exact).abs() / exact < tolerance, "{bits}: {cost} ps against {exact}");
            let back = p.bits_per_second().unwrap();
            assert!((back as f64 - bits as f64).abs() / (bits as f64) < 1e-3, "{bits} read back as {back}");
        }
        assert_eq!(Pacer::limiting(None).ps_per_byte_q16, 0);
        assert_eq!(Pacer::limiting(Some(0)).bits_per_second(), None);
    }

    #[test]
    fn key_sizes_match_what_the_kernel_copies() {
        // The C side relies on these sizes having no implicit padding.
        assert_eq!(std::mem::size_of::<CounterKey>(), 8);
        assert_eq!(std::mem::size_of::<Lpm6Key>(), 20);
        assert_eq!(std::mem::size_of::<Lpm4Key>(), 8);
        assert_eq!(std::mem::size_of::<EamValue>(), 28);
        assert_eq!(std::mem::size_of::<Nat64Config>(), 76);
        assert_eq!(std::mem::size_of::<CtLifetimes>(), 20);
        assert_eq!(std::mem::size_of::<EndpointKey>(), 16);
        assert_eq!(std::mem::size_of::<EndpointValue>(), 20);
        assert_eq!(std::mem::size_of::<ServiceKey>(), 24);
        assert_eq!(std::mem::size_of::<ServiceValue>(), 16);
        assert_eq!(std::mem::size_of::<L4Addr>(), 20);
        assert_eq!(std::mem::size_of::<AffinityKey>(), 16);
        assert_eq!(std::mem::size_of::<AffinityValue>(), 16);
        assert_eq!(std::mem::size_of::<SockRevnatKey>(), 32);
        assert_eq!(std::mem::size_of::<CtKey>(), 40);
        assert_eq!(std::mem::size_of::<CtValue>(), 56);
        assert_eq!(std::mem::size_of::<Nat46FrontendKey>(), 8);
        assert_eq!(std::mem::size_of::<Nat46Frontend>(), 8);
    }
}
