// SPDX-License-Identifier: Apache-2.0
//! The whole configuration and the order its sections are checked in.
//!
//! Values of the configuration's types only come out of the validator or
//! `Default`, so the agent can use them without checks. Sections are
//! checked in schema order, so the first error reported does not depend on
//! the order keys appear in files.

use serde::Serialize;

use crate::merge::Merged;
use crate::sections::attach::{self, Attach};
use crate::sections::bandwidth::{self, Bandwidth};
use crate::sections::bigtcp::{self, BigTcp};
use crate::sections::filter::{self, Filter};
use crate::sections::flows::{self, Flows};
use crate::sections::kubernetes::{self, Kubernetes};
use crate::sections::log::{self, Log};
use crate::sections::metrics::{self, Metrics};
use crate::sections::nat46::{self, Nat46};
use crate::sections::nat64::{self, Nat64};
use crate::sections::pods::{self, Pods};
use crate::sections::policy::{self, Policy};
use crate::sections::routing::{self, Routing};
use crate::sections::services::{self, Services};
use crate::validator::{Result, Validator};

#[derive(Clone, Debug, PartialEq, Serialize, Default)]
pub struct Config {
    pub attach: Attach,
    pub bigtcp: BigTcp,
    pub filter: Filter,
    pub nat64: Nat64,
    /// `[nat46]`; `None`: no gateway.
    pub nat46: Option<Nat46>,
    pub pods: Pods,
    pub kubernetes: Kubernetes,
    pub routing: Routing,
    pub services: Services,
    pub policy: Policy,
    pub flows: Flows,
    pub bandwidth: Bandwidth,
    pub metrics: Metrics,
    pub log: Log,
}

/// Merged TOML table -> typed `Config`. `nat46` is read after `nat64`, as
/// it is checked against the translator's mappings.
pub(crate) fn build(m: &Merged) -> Result<Config> {
    let v = Validator::new(m);
    let root = &m.table;
    v.known_keys(
        root,
        "",
        &[
            "attach",
            "bigtcp",
            "filter",
            "nat64",
            "nat46",
            "pods",
            "kubernetes",
            "routing",
            "services",
            "policy",
            "flows",
            "bandwidth",
            "metrics",
            "log",
        ],
    )?;
    let mut cfg = Config::default();
    attach::read(&v, root, &mut cfg.attach)?;
    bigtcp::read(&v, root, &mut cfg.bigtcp)?;
    filter::read(&v, root, &mut cfg.filter)?;
    nat64::read(&v, root, &mut cfg.nat64)?;
    cfg.nat46 = nat46::read(&v, root, &cfg.nat64)?;
    pods::read(&v, root, &mut cfg.pods)?;
    kubernetes::read(&v, root, &mut cfg.kubernetes)?;
    services::read(&v, root, &mut cfg.services)?;
    routing::read(&v, root, &mut cfg.routing)?;
    policy::read(&v, root, &mut cfg.policy)?;
    flows::read(&v, root, &mut cfg.flows)?;
    bandwidth::read(&v, root, &mut cfg.bandwidth)?;
    metrics::read(&v, root, &mut cfg.metrics)?;
    log::read(&v, root, &mut cfg.log)?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::Config;
    use crate::testutil::{assert_err, bad, ok, strs, Tree};
    use crate::{AttachMode, LogLevel, MetricsListen, BIGTCP_DEFAULT, BIGTCP_MAX, BIGTCP_MIN};

    #[test]
    fn defaults_without_files() {
        let t = Tree::new();
        let l = t.load();
        assert!(l.files.is_empty());
        assert!(l.origins.is_empty());
        let c = l.config;
        assert_eq!(c, Config::default());
        assert_eq!(strs(&c.attach.devices), ["en*", "eth*"]);
        assert_eq!(c.attach.mode, AttachMode::Auto);
        assert_eq!(strs(&c.bigtcp.devices), ["en*", "eth*"]);
        assert_eq!(c.bigtcp.size, 196608);
        assert_eq!(c.bigtcp.size, BIGTCP_DEFAULT);
        assert!(c.filter.deny_sources.is_empty());
        assert_eq!(c.metrics.listen, None);
        assert_eq!(c.log.level, LogLevel::Info);
    }

    #[test]
    fn accepted_values() {
        let c = ok(r#"
        [attach]
        devices = ["enp[0-9]s*", "averyveryverylongname*", "lo"]
        mode = "tcx"
        [bigtcp]
        devices = []
        size = 524280
        [filter]
        deny_sources = ["2001:DB8:bad::/48", "2001:db8::1/128", "fe80::/10"]
        [metrics]
        listen = "unix:/run/v6node/metrics.sock"
        [log]
        level = "trace"
    "#);
        assert_eq!(strs(&c.attach.devices), ["enp[0-9]s*", "averyveryverylongname*", "lo"]);
        assert_eq!(c.attach.mode, AttachMode::Tcx);
        assert!(c.bigtcp.devices.is_empty());
        assert_eq!(c.bigtcp.size, BIGTCP_MAX);
        let nets: Vec<String> = c.filter.deny_sources.iter().map(|n| n.to_string()).collect();
        assert_eq!(nets, ["2001:db8:bad::/48", "2001:db8::1/128", "fe80::/10"]);
        assert_eq!(c.metrics.listen, Some(MetricsListen::Unix("/run/v6node/metrics.sock".into())));
        assert_eq!(c.log.level, LogLevel::Trace);
        assert_eq!(ok("bigtcp.size = 65536").bigtcp.size, BIGTCP_MIN);
    }

    #[test]
    fn serialize_round_trip() {
        let c = ok(r#"
        attach = { devices = ["eth[0-1]"], mode = "clsact" }
        bigtcp = { devices = [], size = 65536 }
        filter.deny_sources = ["2001:DB8::/32", "2001:db8:1::1/128"]
        metrics.listen = "[2001:db8::1]:9462"
        log.level = "error"
    "#);
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("\"2001:db8::/32\""), "{text}");
        assert!(text.contains("listen = \"[2001:db8::1]:9462\""), "{text}");
        assert_eq!(ok(&text), c);

        let d = Config::default();
        let text = toml::to_string(&d).unwrap();
        assert!(text.contains("listen = \"\""), "{text}");
        assert_eq!(ok(&text), d);

        let u = ok("metrics.listen = \"unix:/run/m.sock\"");
        assert_eq!(ok(&toml::to_string(&u).unwrap()), u);
    }

    #[test]
    fn unknown_keys() {
        bad(
            "foo = 1",
            "foo",
            "unknown key `foo`; expected one of attach, bigtcp, filter, nat64, nat46, pods, kubernetes, routing, services, policy, flows, bandwidth, metrics, log",
        );
        bad("[foo]", "foo", "unknown key `foo`");
        bad("[bigtcp]\nsise = 1", "bigtcp.sise", "unknown key `sise`; expected one of devices, size");
        bad("attach.device = []", "attach.device", "expected one of devices, mode");
        bad("filter.deny = []", "filter.deny", "expected one of deny_sources");
        bad("metrics.port = 1", "metrics.port", "expected one of listen");
        bad("log.levle = \"info\"", "log.levle", "expected one of level");
    }

    #[test]
    fn value_errors_come_in_schema_order() {
        // `log` before `attach` in the text; `attach` first in the schema.
        bad("[log]\nlevel = \"x\"\n[attach]\nmode = \"x\"\n", "attach.mode", "attach mode");
        bad("[metrics]\nlisten = \"x\"\n[log]\nlevel = \"x\"\n", "metrics.listen", "cannot parse");
        let t = Tree::new();
        t.vendor("[log]\nlevel = \"x\"\n");
        let d = t.dropin("10-a.toml", "[bigtcp]\nsize = 1\n");
        assert_err(&t.load_err(), &d, Some("bigtcp.size"), "out of range");
    }
}
