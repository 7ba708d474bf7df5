// SPDX-License-Identifier: Apache-2.0
//! Warning Events on the Services this node does not serve as written (an
//! IPv4 ClusterIP or endpoints, a protocol it does not know, an address
//! another Service has, endpoints clamped), so `kubectl describe service`
//! and `kubectl get events` say what `status` and the journal say. Each
//! problem is published once while it lasts, by one node's agent for the
//! cluster (the reporting instance is that node; `ClusterWatch::report` says
//! which); one that goes and comes back is published again.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::{
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        reflector::{ObjectRef, Store},
    },
    Resource,
};

use crate::{services::ServiceProblem, Settings};

/// The reason every such Event carries; the note says what and why.
const REASON: &str = "NotServed";
const CONTROLLER: &str = "v6node-dataplane";

#[derive(Default)]
pub struct ServiceEvents {
    published: Arc<Mutex<BTreeSet<ServiceProblem>>>,
}

impl ServiceEvents {
    /// Publishes, in the background, the problems not published before;
    /// forgets the ones that are gone. A problem whose Service is not in
    /// `services` (yet) is left for a later call.
    pub fn report(&self, settings: &Settings, services: &Store<Service>, problems: &[ServiceProblem]) {
        let new: Vec<(ServiceProblem, ObjectReference)> = {
            let mut published = self.published.lock().expect("events lock");
            published.retain(|p| problems.contains(p));
            let mut new = Vec::new();
            for problem in problems {
                if published.contains(problem) {
                    continue;
                }
                let Some((namespace, name)) = problem.service.split_once('/') else { continue };
                let Some(service) = services.get(&ObjectRef::new(name).within(namespace)) else { continue };
                published.insert(problem.clone());
                new.push((problem.clone(), service.object_ref(&())));
            }
            new
        };
        if new.is_empty() {
            return;
        }
        let (settings, published) = (settings.clone(), self.published.clone());
        tokio::spawn(async move {
            let failed = |problem: &ServiceProblem, why: String| {
                log::warn!("Kubernetes API: no Event for {} ({}): {why}", problem.service, problem.reason);
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
                    reason: REASON.into(),
                    note: Some(format!("node {}: {}", settings.node_name, problem.reason)),
                    action: "Translate".into(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&event, &reference).await {
                    failed(&problem, e.to_string());
                }
            }
        });
    }
}
