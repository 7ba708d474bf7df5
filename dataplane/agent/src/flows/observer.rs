// SPDX-License-Identifier: Apache-2.0
//! Hubble's Observer service over the agent's flows: GetFlows (recent,
//! following, since and until, allow and deny filters), ServerStatus,
//! GetNamespaces and GetNodes (this node; Relay answers for the cluster);
//! agent and debug events are Cilium's own and have no counterpart here.

use std::{collections::BTreeSet, pin::Pin, sync::Arc};

use futures::Stream;
use prost_types::Timestamp;
use tokio::sync::{broadcast::error::RecvError, mpsc};
use tonic::{Request, Response, Status};
use v6node_hubble::{
    flow::{Flow, LostEvent, LostEventSource},
    observer::{
        get_flows_response::ResponseTypes, observer_server::Observer, GetAgentEventsRequest, GetAgentEventsResponse,
        GetDebugEventsRequest, GetDebugEventsResponse, GetFlowsRequest, GetFlowsResponse, GetNamespacesRequest,
        GetNamespacesResponse, GetNodesRequest, GetNodesResponse, Namespace, Node, ServerStatusRequest, ServerStatusResponse,
    },
    relay::NodeState,
};

use super::{filter::Filters, hub::Hub};

type Answer<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Responses a client may have in flight before its stream waits for it.
const CLIENT_BACKLOG: usize = 16;

pub struct ObserverService {
    pub hub: Arc<Hub>,
}

fn before(a: &Timestamp, b: &Timestamp) -> bool {
    (a.seconds, a.nanos) < (b.seconds, b.nanos)
}

fn in_window(flow: &Flow, since: Option<&Timestamp>, until: Option<&Timestamp>) -> bool {
    let Some(time) = flow.time.as_ref() else { return since.is_none() && until.is_none() };
    since.is_none_or(|s| !before(time, s)) && until.is_none_or(|u| !before(u, time))
}

fn response(hub: &Hub, flow: Flow) -> GetFlowsResponse {
    GetFlowsResponse { time: flow.time, node_name: hub.node.clone(), response_types: Some(ResponseTypes::Flow(flow)) }
}

fn version() -> String {
    format!("v6node-dataplane {}", env!("CARGO_PKG_VERSION"))
}

fn receiver_stream<T: Send + 'static>(rx: mpsc::Receiver<Result<T, Status>>) -> Answer<T> {
    Box::pin(futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) }))
}

#[tonic::async_trait]
impl Observer for ObserverService {
    type GetFlowsStream = Answer<GetFlowsResponse>;
    type GetAgentEventsStream = Answer<GetAgentEventsResponse>;
    type GetDebugEventsStream = Answer<GetDebugEventsResponse>;

    async fn get_flows(&self, request: Request<GetFlowsRequest>) -> Result<Response<Self::GetFlowsStream>, Status> {
        let request = request.into_inner();
        let filters = Filters::new(&request.whitelist, &request.blacklist).map_err(Status::invalid_argument)?;
        if request.field_mask.as_ref().is_some_and(|m| !m.paths.is_empty()) {
            return Err(Status::invalid_argument("field_mask is not supported by v6node"));
        }
        let hub = self.hub.clone();
        // Following starts before the look back, so nothing falls between.
        let mut follow = request.follow.then(|| hub.follow());
        let (since, until) = (request.since, request.until);
        let mut recent = hub.recent(|f| in_window(f, since.as_ref(), until.as_ref()) && filters.pass(f));
        // `number` of them: the newest, or with `first` the oldest; none
        // asked while following is none; none asked otherwise is all.
        let number = usize::try_from(request.number).unwrap_or(usize::MAX);
        if number > 0 || request.follow && since.is_none() {
            if request.first {
                recent.truncate(number);
            } else {
                recent.drain(..recent.len().saturating_sub(number));
            }
        }
        let (tx, rx) = mpsc::channel(CLIENT_BACKLOG);
        tokio::spawn(async move {
            for flow in recent {
                if tx.send(Ok(response(&hub, (*flow).clone()))).await.is_err() {
                    return;
                }
            }
            let Some(follow) = follow.as_mut() else { return };
            loop {
                let next = match follow.recv().await {
                    Ok(flow) if in_window(&flow, since.as_ref(), None) && filters.pass(&flow) => {
                        if until.as_ref().is_some_and(|u| flow.time.as_ref().is_some_and(|t| before(u, t))) {
                            return;
                        }
                        response(&hub, (*flow).clone())
                    }
                    Ok(_) => continue,
                    Err(RecvError::Lagged(missed)) => {
                        super::counts::lost_to_followers(missed);
                        GetFlowsResponse {
                            node_name: hub.node.clone(),
                            response_types: Some(ResponseTypes::LostEvents(LostEvent {
                                source: LostEventSource::HubbleRingBuffer as i32,
                                num_events_lost: missed,
                                ..Default::default()
                            })),
                            ..Default::default()
                        }
                    }
                    Err(RecvError::Closed) => return,
                };
                if tx.send(Ok(next)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(receiver_stream(rx)))
    }

    async fn get_agent_events(&self, _: Request<GetAgentEventsRequest>) -> Result<Response<Self::GetAgentEventsStream>, Status> {
        Err(Status::unimplemented("v6node has no Cilium agent events"))
    }

    async fn get_debug_events(&self, _: Request<GetDebugEventsRequest>) -> Result<Response<Self::GetDebugEventsStream>, Status> {
        Err(Status::unimplemented("v6node has no Cilium debug events"))
    }

    /// This node, connected: a node knows itself only (Relay answers for
    /// the cluster).
    async fn get_nodes(&self, _: Request<GetNodesRequest>) -> Result<Response<GetNodesResponse>, Status> {
        let hub = &self.hub;
        Ok(Response::new(GetNodesResponse {
            nodes: vec![Node {
                name: hub.node.clone(),
                version: version(),
                state: NodeState::NodeConnected as i32,
                uptime_ns: hub.uptime().as_nanos() as u64,
                num_flows: hub.kept() as u64,
                max_flows: hub.capacity() as u64,
                seen_flows: hub.seen(),
                ..Default::default()
            }],
        }))
    }

    async fn get_namespaces(&self, _: Request<GetNamespacesRequest>) -> Result<Response<GetNamespacesResponse>, Status> {
        let names = self.hub.names();
        let namespaces: BTreeSet<&str> = names.pods.values().map(|p| p.namespace.as_str()).collect();
        Ok(Response::new(GetNamespacesResponse {
            namespaces: namespaces.into_iter().map(|n| Namespace { namespace: n.to_string(), ..Default::default() }).collect(),
        }))
    }

    async fn server_status(&self, _: Request<ServerStatusRequest>) -> Result<Response<ServerStatusResponse>, Status> {
        let hub = &self.hub;
        let uptime = hub.uptime();
        Ok(Response::new(ServerStatusResponse {
            num_flows: hub.kept() as u64,
            max_flows: hub.capacity() as u64,
            seen_flows: hub.seen(),
            uptime_ns: uptime.as_nanos() as u64,
            version: version(),
            flows_rate: hub.seen() as f64 / uptime.as_secs_f64().max(1.0),
            ..Default::default()
        }))
    }
}
