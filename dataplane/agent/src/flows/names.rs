// SPDX-License-Identifier: Apache-2.0
//! What the datapath's numbers and addresses stand for, as the flows name
//! them: pods by address, the policies behind a pod's rules id, Services by
//! frontend id. The daemon rebuilds it when the views it comes from change;
//! flows take the one in force when their event arrives.

use std::{collections::HashMap, net::Ipv6Addr};

use v6node_hubble::flow::{Endpoint, Policy, Service};

/// A pod as flows name it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodName {
    pub namespace: String,
    pub name: String,
    /// `key=value`, sorted.
    pub labels: Vec<String>,
    pub node: String,
}

#[derive(Clone, Debug, Default)]
pub struct Names {
    pub pods: HashMap<Ipv6Addr, PodName>,
    /// "namespace/name" or a ClusterNetworkPolicy's "Tier:name", by the
    /// rules id the policy tables gave a pod's direction.
    pub policies: HashMap<u32, Vec<String>>,
    /// "namespace/name" by frontend id.
    pub services: HashMap<u32, String>,
}

impl Names {
    /// The endpoint at `addr`: a pod's names, or just the address's
    /// (Hubble shows the IP beside it either way).
    pub fn endpoint(&self, addr: Ipv6Addr) -> Option<Endpoint> {
        let pod = self.pods.get(&addr)?;
        let mut labels: Vec<String> = pod.labels.iter().map(|l| format!("k8s:{l}")).collect();
        // Cilium's own label for the namespace, which Hubble's label filters know.
        labels.push(format!("k8s:io.kubernetes.pod.namespace={}", pod.namespace));
        labels.sort();
        Some(Endpoint { namespace: pod.namespace.clone(), pod_name: pod.name.clone(), labels, ..Default::default() })
    }

    /// The policies behind `id`, as Hubble lists them.
    pub fn policies(&self, id: u32) -> Vec<Policy> {
        self.policies
            .get(&id)
            .map(|names| {
                names
                    .iter()
                    .map(|name| match name.split_once('/') {
                        Some((namespace, name)) => Policy {
                            name: name.to_string(),
                            namespace: namespace.to_string(),
                            kind: "NetworkPolicy".into(),
                            ..Default::default()
                        },
                        None => Policy {
                            name: name.split_once(':').map_or(name.as_str(), |(_, n)| n).to_string(),
                            kind: "ClusterNetworkPolicy".into(),
                            ..Default::default()
                        },
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn service(&self, frontend: u32) -> Option<Service> {
        let (namespace, name) = self.services.get(&frontend)?.split_once('/')?;
        Some(Service { name: name.to_string(), namespace: namespace.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_carries_its_labels_and_namespace_as_cilium_writes_them() {
        let mut names = Names::default();
        let addr: Ipv6Addr = "fd00:10::a".parse().unwrap();
        names.pods.insert(
            addr,
            PodName { namespace: "team-a".into(), name: "server".into(), labels: vec!["app=server".into()], node: "n".into() },
        );
        let endpoint = names.endpoint(addr).unwrap();
        assert_eq!((endpoint.namespace.as_str(), endpoint.pod_name.as_str()), ("team-a", "server"));
        assert_eq!(endpoint.labels, ["k8s:app=server", "k8s:io.kubernetes.pod.namespace=team-a"]);
        assert!(names.endpoint("fd00:10::b".parse().unwrap()).is_none());
    }

    #[test]
    fn policies_by_kind() {
        let mut names = Names::default();
        names.policies.insert(7, vec!["team-a/deny-all".into(), "Admin:tenants".into()]);
        let policies = names.policies(7);
        assert_eq!(
            policies.iter().map(|p| (p.kind.as_str(), p.namespace.as_str(), p.name.as_str())).collect::<Vec<_>>(),
            [("NetworkPolicy", "team-a", "deny-all"), ("ClusterNetworkPolicy", "", "tenants")]
        );
        assert!(names.policies(8).is_empty());
    }
}
