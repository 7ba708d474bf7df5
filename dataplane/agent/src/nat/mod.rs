// SPDX-License-Identifier: Apache-2.0
//! NAT46/64: the stateless translator's tables, stateful NAT64's pool and
//! bindings, the NAT46 gateway's frontends and flows, and the link the
//! kernel fragments on for the translator.

pub mod fragmenter;
pub mod gateway;
pub mod stateful;
pub mod translator;
