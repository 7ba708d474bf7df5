// SPDX-License-Identifier: Apache-2.0
//! Warning Events on the Services this node does not serve as written (an
//! IPv4 ClusterIP or endpoints, a protocol it does not know, an address
//! another Service has, endpoints clamped) and on the NetworkPolicies it
//! refuses or clamps part of, so `kubectl describe` and `kubectl get
//! events` say what `status` and the journal say. Each
//! problem is published once while it lasts, by one node's agent for the
//! cluster (the reporting instance is that node; `ClusterWatch::report` says
//! which); one that goes and comes back is published again.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store},
    },
    Resource,
};

use crate::Settings;

const CONTROLLER: &str = "v6node-dataplane";

/// A problem with one object: "namespace/name" (a cluster-wide object's
/// "name") and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    pub object: String,
    pub message: String,
}

/// The Warning Events of one kind of object: every Event carries `reason`
/// and `action`, the note says what and why.
pub struct ProblemEvents {
    reason: &'static str,
    action: &'static str,
    published: Arc<Mutex<BTreeSet<Problem>>>,
}

impl ProblemEvents {
    pub fn new(reason: &'static str, action: &'static str) -> Self {
        ProblemEvents { reason, action, published: Arc::default() }
    }

    /// Publishes, in the background, the problems not published before;
    /// forgets the ones that are gone. A problem whose object is not in
    /// `objects` (yet) is left for a later call.
    pub fn report<K>(&self, settings: &Settings, objects: &Store<K>, problems: &[Problem])
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let new: Vec<(Problem, ObjectReference)> = {
            let mut published = self.published.lock().expect("events lock");
            published.retain(|p| problems.contains(p));
            let mut new = Vec::new();
            for problem in problems {
                if published.contains(problem) {
                    continue;
                }
                // "namespace/name", or a cluster-wide object's "name".
                let reference = match problem.object.split_once('/') {
                    Some((namespace, name)) => ObjectRef::new(name).within(namespace),
                    None => ObjectRef::new(&problem.object),
                };
                let Some(object) = objects.get(&reference) else { continue };
                published.insert(problem.clone());
                new.push((problem.clone(), object.object_ref(&())));
            }
            new
        };
        if new.is_empty() {
            return;
        }
        let (settings, published, reason, action) = (settings.clone(), self.published.clone(), self.reason, self.action);
        tokio::spawn(async move {
            let failed = |problem: &Problem, why: String| {
                log::warn!("Kubernetes API: no Event for {} ({}): {why}", problem.object, problem.message);
                published.lock().expect("events lock").remove(problem);
            };
            let client = match crate::watch::client(&settings.kubeconfig).await {
                Ok((client, _)) => client,
                Err(e) => return new.iter().for_each(|(p, _)| failed(p, e.to_string())),
            };
            let reporter = Reporter { controller: CONTROLLER.into(), instance: Some(settings.node_name.clone()) };
            // A recorder per batch: its cache never holds an earlier Event, so
            // it only creates (a problem is published once while it lasts)
            // and the ClusterRole needs no patch.
            let recorder = Recorder::new(client, reporter);
            for (problem, reference) in new {
                let event = Event {
                    type_: EventType::Warning,
                    reason: reason.into(),
                    note: Some(format!("node {}: {}", settings.node_name, problem.message)),
                    action: action.into(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&event, &reference).await {
                    failed(&problem, e.to_string());
                }
            }
        });
    }
}
