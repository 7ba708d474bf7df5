// SPDX-License-Identifier: Apache-2.0
//! The flows the agent keeps and hands on: a bounded ring of recent ones for
//! requests that look back, and a broadcast for clients that follow. A
//! follower that falls behind the broadcast loses what it missed, is told
//! how much (Hubble's LostEvent), and the agent counts it: neither the
//! datapath nor the agent's memory waits for a slow client.

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, RwLock,
    },
    time::Instant,
};

use tokio::sync::broadcast;
use v6node_hubble::flow::Flow;

use super::names::Names;

/// How many flows a follower may be behind before it loses some.
pub const FOLLOW_BACKLOG: usize = 4096;

pub struct Hub {
    pub node: String,
    started: Instant,
    keep: usize,
    ring: Mutex<VecDeque<Arc<Flow>>>,
    followers: broadcast::Sender<Arc<Flow>>,
    names: RwLock<Arc<Names>>,
    seen: AtomicU64,
}

impl Hub {
    pub fn new(node: String, keep: usize) -> Hub {
        Hub {
            node,
            started: Instant::now(),
            keep,
            ring: Mutex::new(VecDeque::with_capacity(keep)),
            followers: broadcast::channel(FOLLOW_BACKLOG).0,
            names: RwLock::new(Arc::default()),
            seen: AtomicU64::new(0),
        }
    }

    pub fn names(&self) -> Arc<Names> {
        self.names.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_names(&self, names: Names) {
        *self.names.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(names);
    }

    pub fn push(&self, flow: Flow) {
        let flow = Arc::new(flow);
        self.seen.fetch_add(1, Ordering::Relaxed);
        {
            let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
            if ring.len() == self.keep {
                ring.pop_front();
            }
            ring.push_back(flow.clone());
        }
        // No follower is no error.
        let _ = self.followers.send(flow);
    }

    pub fn follow(&self) -> broadcast::Receiver<Arc<Flow>> {
        self.followers.subscribe()
    }

    /// The kept flows `pick` takes, oldest first.
    pub fn recent(&self, pick: impl Fn(&Flow) -> bool) -> Vec<Arc<Flow>> {
        self.ring.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|f| pick(f)).cloned().collect()
    }

    pub fn kept(&self) -> usize {
        self.ring.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn capacity(&self) -> usize {
        self.keep
    }

    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Relaxed)
    }

    pub fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(n: u32) -> Flow {
        Flow { node_name: format!("{n}"), ..Default::default() }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_counts_all() {
        let hub = Hub::new("n".into(), 3);
        for n in 0..5 {
            hub.push(flow(n));
        }
        let kept: Vec<String> = hub.recent(|_| true).iter().map(|f| f.node_name.clone()).collect();
        assert_eq!(kept, ["2", "3", "4"]);
        assert_eq!((hub.kept(), hub.seen()), (3, 5));
    }

    #[test]
    fn a_slow_follower_loses_the_oldest_and_learns_how_many() {
        let hub = Hub::new("n".into(), 8);
        let mut slow = hub.follow();
        for n in 0..(FOLLOW_BACKLOG as u32 + 10) {
            hub.push(flow(n));
        }
        assert!(matches!(slow.try_recv(), Err(broadcast::error::TryRecvError::Lagged(10))));
        assert_eq!(slow.try_recv().unwrap().node_name, "10");
    }
}
