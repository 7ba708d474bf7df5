// SPDX-License-Identifier: Apache-2.0
//! Hubble's Peer service: how Hubble Relay finds every node of the cluster.
//! Notify answers with every node there is, then each node added, moved or
//! gone, as Cilium's agents do, so a stock Relay aggregates v6node nodes.

use std::{collections::BTreeMap, net::SocketAddr, pin::Pin};

use futures::Stream;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status};
use v6node_hubble::peer::{peer_server::Peer, ChangeNotification, ChangeNotificationType, NotifyRequest, Tls};

/// A node serving Hubble's API for Relay: its Node name and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubblePeer {
    pub name: String,
    pub address: SocketAddr,
}

/// The cluster name in the TLS server names Relay expects (Cilium's default:
/// v6node has no cluster mesh).
const CLUSTER: &str = "default";

/// The name Relay checks a node's certificate against, as Cilium forms it:
/// NODE.CLUSTER.hubble-grpc.cilium.io, dots in either replaced by dashes.
pub fn tls_server_name(node: &str) -> String {
    format!("{}.{CLUSTER}.hubble-grpc.cilium.io", node.replace('.', "-"))
}

pub struct PeerService {
    pub peers: watch::Receiver<Vec<HubblePeer>>,
    /// Whether Relay is to reach the peers over TLS.
    pub tls: bool,
}

/// The notifications that take a follower from `known` to `now`.
fn changes(known: &BTreeMap<String, SocketAddr>, now: &BTreeMap<String, SocketAddr>, tls: bool) -> Vec<ChangeNotification> {
    let note = |name: &str, address: Option<&SocketAddr>, kind: ChangeNotificationType| ChangeNotification {
        name: name.to_string(),
        address: address.map(ToString::to_string).unwrap_or_default(),
        r#type: kind as i32,
        tls: tls.then(|| Tls { server_name: tls_server_name(name) }),
    };
    let gone = known.iter().filter(|(name, _)| !now.contains_key(*name));
    let mut notes: Vec<_> = gone.map(|(name, address)| note(name, Some(address), ChangeNotificationType::PeerDeleted)).collect();
    for (name, address) in now {
        match known.get(name) {
            None => notes.push(note(name, Some(address), ChangeNotificationType::PeerAdded)),
            Some(before) if before != address => notes.push(note(name, Some(address), ChangeNotificationType::PeerUpdated)),
            Some(_) => {}
        }
    }
    notes
}

type Notifications = Pin<Box<dyn Stream<Item = Result<ChangeNotification, Status>> + Send>>;

#[tonic::async_trait]
impl Peer for PeerService {
    type NotifyStream = Notifications;

    async fn notify(&self, _: Request<NotifyRequest>) -> Result<Response<Self::NotifyStream>, Status> {
        let (mut peers, tls) = (self.peers.clone(), self.tls);
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            let mut known = BTreeMap::new();
            loop {
                let now: BTreeMap<String, SocketAddr> =
                    peers.borrow_and_update().iter().map(|p| (p.name.clone(), p.address)).collect();
                for note in changes(&known, &now, tls) {
                    if tx.send(Ok(note)).await.is_err() {
                        return;
                    }
                }
                known = now;
                if peers.changed().await.is_err() {
                    return;
                }
            }
        });
        let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
        Ok(Response::new(Box::pin(stream)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(list: &[(&str, &str)]) -> BTreeMap<String, SocketAddr> {
        list.iter().map(|(n, a)| (n.to_string(), a.parse().unwrap())).collect()
    }

    fn summary(notes: &[ChangeNotification]) -> Vec<(String, String, i32, Option<String>)> {
        notes
            .iter()
            .map(|n| (n.name.clone(), n.address.clone(), n.r#type, n.tls.as_ref().map(|t| t.server_name.clone())))
            .collect()
    }

    #[test]
    fn first_every_node_then_what_changed() {
        let two = peers(&[("v6node-1", "[fd00::11]:4244"), ("v6node-2", "[fd00::12]:4244")]);
        let first = changes(&BTreeMap::new(), &two, true);
        assert_eq!(
            summary(&first),
            vec![
                ("v6node-1".into(), "[fd00::11]:4244".into(), 1, Some("v6node-1.default.hubble-grpc.cilium.io".into())),
                ("v6node-2".into(), "[fd00::12]:4244".into(), 1, Some("v6node-2.default.hubble-grpc.cilium.io".into())),
            ]
        );
        let moved = peers(&[("v6node-2", "[fd00::22]:4244"), ("v6node-3", "[fd00::13]:4244")]);
        assert_eq!(
            summary(&changes(&two, &moved, false)),
            vec![
                ("v6node-1".into(), "[fd00::11]:4244".into(), ChangeNotificationType::PeerDeleted as i32, None),
                ("v6node-2".into(), "[fd00::22]:4244".into(), ChangeNotificationType::PeerUpdated as i32, None),
                ("v6node-3".into(), "[fd00::13]:4244".into(), ChangeNotificationType::PeerAdded as i32, None),
            ]
        );
        assert!(changes(&moved, &moved, true).is_empty());
    }

    #[test]
    fn dots_in_node_names_become_dashes() {
        assert_eq!(tls_server_name("node.example.org"), "node-example-org.default.hubble-grpc.cilium.io");
    }
}
