// SPDX-License-Identifier: Apache-2.0
//! The agent's Kubernetes side, kept out of the CNI plugin, the config crate
//! and the BPF tests: a watch keeps a store of the cluster's objects
//! ([`watch`]), and pure functions turn the store into what this node should
//! have ([`cluster`]). The agent stays the one writer of routes and maps.

pub mod bandwidth;
pub mod cluster;
pub mod events;
pub mod policy;
pub mod services;
pub mod watch;

pub use cluster::{ClusterView, NodeProblem, Peer};
pub use policy::{PodAddresses, PolicyProblem, PolicyView};
pub use services::{ServiceProblem, ServicesView};
pub use watch::{ApiState, Changes, ClusterWatch};

/// Where the agent's credential is, and who it is: what the watches and
/// the Events they publish both need, so neither module needs the other's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub kubeconfig: std::path::PathBuf,
    pub node_name: String,
}
