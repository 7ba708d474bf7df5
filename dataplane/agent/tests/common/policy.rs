// SPDX-License-Identifier: Apache-2.0
//! Fixtures for the policy tests: a pod's rules compiled by the agent's own
//! compiler (v6node-k8s) and written as the agent lays them out (abi.h,
//! "Network policy"), and the counters policy keeps.

use std::net::Ipv6Addr;

use aya::{
    maps::{lpm_trie::Key, HashMap, LpmTrie, MapData, PerCpuHashMap},
    Ebpf,
};
use v6node_abi::{
    maps, CounterValue, EndpointKey, PolicyClasses, PolicyDirection, PolicyPeer, PolicyPod, PolicyPort, POLICY_AUDIT,
};
use v6node_k8s::policy::{classes, DirectionRules};

/// Compiles `rules` and writes them under `id` for one direction of `pod`
/// (the other direction as it was), audited or enforced.
pub fn set_rules(ebpf: &mut Ebpf, pod: Ipv6Addr, direction: PolicyDirection, id: u32, rules: &DirectionRules, audit: bool) {
    let compiled = classes::compile(rules).expect("rules within the classes");
    {
        let mut peers: LpmTrie<&mut MapData, PolicyPeer, PolicyClasses> =
            LpmTrie::try_from(ebpf.map_mut(maps::POLICY_PEERS).unwrap()).unwrap();
        for (net, mask) in &compiled.peers {
            let key = PolicyPeer { id: id.to_be(), addr: net.addr().octets() };
            peers.insert(&Key::new(32 + u32::from(net.prefix_len()), key), PolicyClasses { classes: *mask }, 0).unwrap();
        }
    }
    {
        let mut ports: LpmTrie<&mut MapData, PolicyPort, PolicyClasses> =
            LpmTrie::try_from(ebpf.map_mut(maps::POLICY_PORTS).unwrap()).unwrap();
        for p in &compiled.ports {
            let key = PolicyPort { id: id.to_be(), protocol: p.protocol, pad: 0, port: p.port.to_be() };
            ports.insert(&Key::new(48 + u32::from(p.len), key), PolicyClasses { classes: p.classes }, 0).unwrap();
        }
    }
    let mut pods: HashMap<&mut MapData, EndpointKey, PolicyPod> =
        HashMap::try_from(ebpf.map_mut(maps::POLICY_PODS).unwrap()).unwrap();
    let key = EndpointKey { addr: pod.octets() };
    let mut value = pods.get(&key, 0).unwrap_or_default();
    value.direction[direction as usize] = compiled.pod_entry(id, if audit { POLICY_AUDIT } else { 0 });
    pods.insert(key, value, 0).unwrap();
}

/// Packets the rules `id` denied (or, audited, would have).
pub fn denied(ebpf: &Ebpf, id: u32) -> u64 {
    let map: PerCpuHashMap<&MapData, u32, CounterValue> =
        PerCpuHashMap::try_from(ebpf.map(maps::POLICY_DENIED).unwrap()).unwrap();
    map.get(&id, 0).map(|per_cpu| per_cpu.iter().map(|v| v.packets).sum()).unwrap_or(0)
}
