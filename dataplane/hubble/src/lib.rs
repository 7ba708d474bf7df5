// SPDX-License-Identifier: Apache-2.0
//! Hubble's API as the stock `hubble` CLI and Hubble Relay speak it:
//! observer.proto (GetFlows, ServerStatus, GetNodes, ...), flow.proto (the
//! flow and its filters), relay.proto and peer.proto (how Relay finds the
//! nodes), from the Cilium repository at the release in proto/README.md.

#![allow(clippy::all, clippy::pedantic)]

pub mod flow {
    tonic::include_proto!("flow");
}

pub mod relay {
    tonic::include_proto!("relay");
}

pub mod observer {
    tonic::include_proto!("observer");
}

pub mod peer {
    tonic::include_proto!("peer");
}
