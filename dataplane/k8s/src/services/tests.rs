// SPDX-License-Identifier: Apache-2.0
//! Services and EndpointSlices as the API server returns them (JSON), and
//! the frontends and backends this node should have.

use serde_json::json;

use super::*;

const NODE: &str = "node-a";

fn service(name: &str, spec: serde_json::Value) -> Service {
    serde_json::from_value(json!({ "metadata": { "name": name, "namespace": "default" }, "spec": spec })).unwrap()
}

/// One slice of `service`: endpoints as (address, node, ready, serving, terminating).
fn slice(service: &str, name: &str, ports: serde_json::Value, endpoints: &[(&str, &str, bool, bool, bool)]) -> EndpointSlice {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, node, ready, serving, terminating)| {
            json!({ "addresses": [ip], "nodeName": node,
                    "conditions": { "ready": ready, "serving": serving, "terminating": terminating } })
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "default", "labels": { "kubernetes.io/service-name": service } },
        "addressType": "IPv6", "ports": ports, "endpoints": endpoints,
    }))
    .unwrap()
}

fn ip(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn at<'a>(view: &'a ServicesView, addr: &str, port: u16, protocol: Protocol) -> &'a Frontend {
    view.frontends
        .iter()
        .find(|f| f.address == Address { ip: ip(addr), port, protocol })
        .unwrap_or_else(|| panic!("no frontend [{addr}]:{port}/{protocol:?} in {:#?}", view.frontends))
}

fn backends(frontend: &Frontend) -> Vec<(String, u16)> {
    frontend.backends.iter().map(|b| (b.ip.to_string(), b.port)).collect()
}

#[test]
fn multiport_service_with_the_same_port_on_tcp_and_udp_maps_each_to_its_target() {
    let svc = service(
        "dns",
        json!({ "clusterIP": "fd00:96::a", "clusterIPs": ["fd00:96::a"], "ports": [
            { "name": "dns", "port": 53, "protocol": "UDP" },
            { "name": "dns-tcp", "port": 53, "protocol": "TCP" },
            { "name": "metrics", "port": 9153, "protocol": "TCP" } ] }),
    );
    let eps = slice(
        "dns",
        "dns-1",
        json!([{ "name": "dns", "port": 5353, "protocol": "UDP" }, { "name": "dns-tcp", "port": 5353, "protocol": "TCP" },
               { "name": "metrics", "port": 9153, "protocol": "TCP" }]),
        &[("fd00:10:244:a::5", NODE, true, true, false), ("fd00:10:244:b::6", "node-b", true, true, false)],
    );
    let view = ServicesView::build(NODE, &[], &[], [&svc], [&eps]);
    assert_eq!(view.frontends.len(), 3, "{view:#?}");
    let want = vec![("fd00:10:244:a::5".to_string(), 5353), ("fd00:10:244:b::6".to_string(), 5353)];
    assert_eq!(backends(at(&view, "fd00:96::a", 53, Protocol::Udp)), want);
    assert_eq!(backends(at(&view, "fd00:96::a", 53, Protocol::Tcp)), want);
    assert_eq!(at(&view, "fd00:96::a", 9153, Protocol::Tcp).backends.len(), 2);
    assert!(view.problems.is_empty(), "{:?}", view.problems);
}

#[test]
fn only_ready_endpoints_and_serving_terminating_ones_only_while_none_is_ready() {
    let svc = service("web", json!({ "clusterIPs": ["fd00:96::b"], "ports": [{ "port": 80, "targetPort": 8080 }] }));
    let ports = json!([{ "port": 8080 }]);
    let mixed = slice(
        "web",
        "web-1",
        ports.clone(),
        &[
            ("fd00::1", NODE, true, true, false),
            ("fd00::2", NODE, false, true, true),   // terminating, still serving
            ("fd00::3", NODE, false, false, false), // not ready
        ],
    );
    let view = ServicesView::build(NODE, &[], &[], [&svc], [&mixed]);
    let frontend = at(&view, "fd00:96::b", 80, Protocol::Tcp);
    assert_eq!(backends(frontend), vec![("fd00::1".into(), 8080)]);
    // Listed, whatever their conditions: the two that are not backends keep
    // their connections (the agent ends only those of unlisted ones).
    let listed: Vec<_> = frontend.listed.iter().map(|(ip, port)| (ip.to_string(), *port)).collect();
    assert_eq!(listed, [("fd00::1".to_string(), 8080), ("fd00::2".into(), 8080), ("fd00::3".into(), 8080)]);

    let draining = slice("web", "web-1", ports, &[("fd00::2", NODE, false, true, true), ("fd00::3", NODE, false, false, true)]);
    let view = ServicesView::build(NODE, &[], &[], [&svc], [&draining]);
    let frontend = at(&view, "fd00:96::b", 80, Protocol::Tcp);
    assert_eq!(backends(frontend), vec![("fd00::2".into(), 8080)]);
    assert!(frontend.backends[0].terminating);
}

#[test]
fn a_service_without_endpoints_is_a_frontend_with_no_backend_so_it_refuses() {
    let svc = service("empty", json!({ "clusterIPs": ["fd00:96::c"], "ports": [{ "port": 80 }] }));
    let view = ServicesView::build(NODE, &[], &[], [&svc], []);
    assert!(at(&view, "fd00:96::c", 80, Protocol::Tcp).backends.is_empty());
}

#[test]
fn internal_traffic_policy_local_keeps_to_this_nodes_endpoints_for_cluster_ips_only() {
    let svc = service(
        "local",
        json!({ "type": "NodePort", "clusterIPs": ["fd00:96::d"], "internalTrafficPolicy": "Local",
                "ports": [{ "port": 80, "nodePort": 30080 }] }),
    );
    let eps = slice(
        "local",
        "l-1",
        json!([{ "port": 80 }]),
        &[("fd00::a", NODE, true, true, false), ("fd00::b", "node-b", true, true, false)],
    );
    let view = ServicesView::build(NODE, &[ip("fd00:9::a")], &[ip("fd00:9::a")], [&svc], [&eps]);
    assert_eq!(backends(at(&view, "fd00:96::d", 80, Protocol::Tcp)), vec![("fd00::a".into(), 80)]);
    assert_eq!(at(&view, "fd00:9::a", 30080, Protocol::Tcp).backends.len(), 2);
    assert_eq!(at(&view, "fd00:9::a", 30080, Protocol::Tcp).kind, FrontendKind::NodePort);
}

#[test]
fn node_ports_external_and_load_balancer_ips_are_frontends_too() {
    let mut svc = service(
        "lb",
        json!({ "type": "LoadBalancer", "clusterIPs": ["fd00:96::e"], "externalIPs": ["2001:db8::e", "192.0.2.1"],
                "ports": [{ "port": 443, "nodePort": 31443 }] }),
    );
    svc.status = serde_json::from_value(json!({ "loadBalancer": { "ingress": [{ "ip": "2001:db8:1b::1" }] } })).unwrap();
    let eps = slice("lb", "lb-1", json!([{ "port": 8443 }]), &[("fd00::e", "node-b", true, true, false)]);
    let view = ServicesView::build(NODE, &[ip("fd00:9::a")], &[ip("fd00:9::a")], [&svc], [&eps]);
    for (addr, port, kind) in [
        ("fd00:96::e", 443, FrontendKind::ClusterIp),
        ("2001:db8::e", 443, FrontendKind::ExternalIp),
        ("2001:db8:1b::1", 443, FrontendKind::LoadBalancer),
        ("fd00:9::a", 31443, FrontendKind::NodePort),
    ] {
        let frontend = at(&view, addr, port, Protocol::Tcp);
        assert_eq!(frontend.kind, kind);
        assert_eq!(backends(frontend), vec![("fd00::e".into(), 8443)]);
    }
    assert_eq!(view.problems.len(), 1, "{:?}", view.problems);
    assert!(view.problems[0].reason.contains("192.0.2.1 is not IPv6"), "{:?}", view.problems);
}

#[test]
fn session_affinity_carries_its_timeout_or_kube_proxys_default() {
    let timed = service(
        "sticky",
        json!({ "clusterIPs": ["fd00:96::f"], "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": { "clientIP": { "timeoutSeconds": 30 } }, "ports": [{ "port": 80 }] }),
    );
    let default =
        service("sticky2", json!({ "clusterIPs": ["fd00:96::10"], "sessionAffinity": "ClientIP", "ports": [{ "port": 80 }] }));
    let plain = service("plain", json!({ "clusterIPs": ["fd00:96::11"], "ports": [{ "port": 80 }] }));
    let view = ServicesView::build(NODE, &[], &[], [&timed, &default, &plain], []);
    assert_eq!(at(&view, "fd00:96::f", 80, Protocol::Tcp).affinity_seconds, Some(30));
    assert_eq!(at(&view, "fd00:96::10", 80, Protocol::Tcp).affinity_seconds, Some(DEFAULT_AFFINITY_SECONDS));
    assert_eq!(at(&view, "fd00:96::11", 80, Protocol::Tcp).affinity_seconds, None);
}

#[test]
fn other_proxies_services_headless_and_external_names_are_left_alone() {
    let mut other = service("other", json!({ "clusterIPs": ["fd00:96::20"], "ports": [{ "port": 80 }] }));
    other.metadata.labels = Some([("service.kubernetes.io/service-proxy-name".to_string(), "other".to_string())].into());
    let headless = service("headless", json!({ "clusterIP": "None", "clusterIPs": ["None"], "ports": [{ "port": 80 }] }));
    let external = service("ext", json!({ "type": "ExternalName", "externalName": "example.org" }));
    let view = ServicesView::build(NODE, &[], &[], [&other, &headless, &external], []);
    assert!(view.frontends.is_empty(), "{view:#?}");
    assert!(view.problems.is_empty(), "{:?}", view.problems);
}

#[test]
fn services_labelled_headless_are_left_alone_like_kube_proxy_does() {
    // kube-proxy skips `service.kubernetes.io/headless` whatever its value,
    // even on a Service with a ClusterIP.
    let labelled = |name: &str, ip: &str, value: &str| {
        let mut s = service(name, json!({ "clusterIPs": [ip], "ports": [{ "port": 80 }] }));
        s.metadata.labels = Some([("service.kubernetes.io/headless".to_string(), value.to_string())].into());
        s
    };
    let empty = labelled("empty", "fd00:96::21", "");
    let valued = labelled("valued", "fd00:96::22", "true");
    let plain = service("plain", json!({ "clusterIPs": ["fd00:96::23"], "ports": [{ "port": 80 }] }));
    let eps = slice("empty", "empty-1", json!([{ "port": 80 }]), &[("fd00:1::1", NODE, true, true, false)]);
    let view = ServicesView::build(NODE, &[], &[], [&empty, &valued, &plain], [&eps]);
    let services: Vec<&str> = view.frontends.iter().map(|f| f.service.as_str()).collect();
    assert_eq!(services, ["default/plain"], "{view:#?}");
    assert!(view.problems.is_empty(), "{:?}", view.problems);
}

#[test]
fn endpoint_slices_labelled_headless_or_for_another_proxy_serve_nothing() {
    // kube-proxy's label selector drops these slices as it drops Services:
    // the e2e spec "should implement service.kubernetes.io/headless" labels
    // the slice of a Service that has no selector.
    let svc = service("custom", json!({ "clusterIPs": ["fd00:96::24"], "ports": [{ "name": "port80", "port": 80 }] }));
    let endpoints = [("fd00:1::1", NODE, true, true, false)];
    let plain = slice("custom", "custom-1", json!([{ "name": "port80", "port": 8090 }]), &endpoints);
    let backends = |slice: &EndpointSlice| {
        let view = ServicesView::build(NODE, &[], &[], [&svc], [slice]);
        view.frontends.iter().map(|f| f.backends.len()).sum::<usize>()
    };
    assert!(backends(&plain) > 0, "an unlabelled slice serves");
    for label in ["service.kubernetes.io/headless", "service.kubernetes.io/service-proxy-name"] {
        let mut labelled = plain.clone();
        labelled.metadata.labels.get_or_insert_default().insert(label.to_string(), String::new());
        assert_eq!(backends(&labelled), 0, "{label}");
    }
}

#[test]
fn ipv4_cluster_ips_and_endpoints_are_refused_with_the_reason_and_sctp_is_served() {
    let v4 = service("v4", json!({ "clusterIPs": ["10.96.0.10"], "ports": [{ "port": 80 }] }));
    let sctp = service("sctp", json!({ "clusterIPs": ["fd00:96::30"], "ports": [{ "port": 9, "protocol": "SCTP" }] }));
    let v4_slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": { "name": "v4-1", "namespace": "default", "labels": { "kubernetes.io/service-name": "v4" } },
        "addressType": "IPv4", "ports": [{ "port": 80 }], "endpoints": [{ "addresses": ["10.0.0.1"] }],
    }))
    .unwrap();
    let view = ServicesView::build(NODE, &[], &[], [&v4, &sctp], [&v4_slice]);
    let served: Vec<String> = view.frontends.iter().map(|f| format!("{} {}", f.service, f.address)).collect();
    assert_eq!(served.len(), 1, "{view:#?}");
    assert_eq!(view.frontends[0].address.protocol, Protocol::Sctp);
    let reasons: Vec<String> = view.problems.iter().map(|p| format!("{}: {}", p.service, p.reason)).collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(reasons.iter().any(|r| r.starts_with("default/v4: ClusterIP 10.96.0.10 is not IPv6")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.starts_with("default/v4: EndpointSlice v4-1: IPv4 endpoints")), "{reasons:?}");
}

#[test]
fn a_protocol_kubernetes_does_not_have_is_refused_with_its_name() {
    let odd = service("odd", json!({ "clusterIPs": ["fd00:96::31"], "ports": [{ "port": 9, "protocol": "DCCP" }] }));
    let view = ServicesView::build(NODE, &[], &[], [&odd], []);
    assert!(view.frontends.is_empty(), "{view:#?}");
    let reasons: Vec<String> = view.problems.iter().map(|p| format!("{}: {}", p.service, p.reason)).collect();
    assert!(reasons.iter().any(|r| r.starts_with("default/odd: port 9: protocol DCCP is not supported")), "{reasons:?}");
}

#[test]
fn more_endpoints_than_a_frontend_holds_are_clamped_with_a_reason() {
    let svc = service("big", json!({ "clusterIPs": ["fd00:96::40"], "ports": [{ "port": 80 }] }));
    let addresses: Vec<String> = (0..BACKENDS_PER_FRONTEND_MAX + 10).map(|i| format!("fd00:1::{:x}", i + 1)).collect();
    let endpoints: Vec<(&str, &str, bool, bool, bool)> =
        addresses.iter().map(|a| (a.as_str(), NODE, true, true, false)).collect();
    let eps = slice("big", "big-1", json!([{ "port": 80 }]), &endpoints);
    let view = ServicesView::build(NODE, &[], &[], [&svc], [&eps]);
    assert_eq!(at(&view, "fd00:96::40", 80, Protocol::Tcp).backends.len(), BACKENDS_PER_FRONTEND_MAX);
    assert!(view.problems.iter().any(|p| p.reason.contains("more than 4096 endpoints")), "{:?}", view.problems);
}

#[test]
fn the_same_address_claimed_by_two_services_goes_to_the_first_by_name() {
    let a = service("a", json!({ "clusterIPs": ["fd00:96::50"], "externalIPs": ["2001:db8::50"], "ports": [{ "port": 80 }] }));
    let b = service("b", json!({ "clusterIPs": ["fd00:96::51"], "externalIPs": ["2001:db8::50"], "ports": [{ "port": 80 }] }));
    let view = ServicesView::build(NODE, &[], &[], [&a, &b], []);
    assert_eq!(at(&view, "2001:db8::50", 80, Protocol::Tcp).service, "default/a");
    assert!(
        view.problems.iter().any(|p| p.service == "default/b" && p.reason.contains("default/a's already")),
        "{:?}",
        view.problems
    );
}

#[test]
fn node_ports_are_served_on_every_nodes_address() {
    let svc =
        service("np", json!({ "type": "NodePort", "clusterIPs": ["fd00:96::f"], "ports": [{ "port": 80, "nodePort": 30080 }] }));
    let eps = slice("np", "np-1", json!([{ "port": 8080 }]), &[("fd00::f", "node-b", true, true, false)]);
    let view = ServicesView::build(NODE, &[ip("fd00:9::a")], &[ip("fd00:9::a"), ip("fd00:9::b")], [&svc], [&eps]);
    for node in ["fd00:9::a", "fd00:9::b"] {
        assert_eq!(backends(at(&view, node, 30080, Protocol::Tcp)), vec![("fd00::f".into(), 8080)]);
    }
}

#[test]
fn host_ports_are_frontends_of_their_pod_unless_a_service_has_the_address() {
    let svc = service("web", json!({ "clusterIPs": ["fd00:96::a"], "ports": [{ "port": 80 }] }));
    let mut view = ServicesView::build(NODE, &[], &[], [&svc], []);
    let host_port = |pod: &str, addr: &str, port: u16| HostPort {
        pod: pod.into(),
        address: Address { ip: ip(addr), port, protocol: Protocol::Tcp },
        backend: Backend { ip: ip("fd00::99"), port: 8080, terminating: false },
    };
    view.add_host_ports([
        host_port("default/h", "::1", 54323),
        host_port("default/h", "fd00:96::a", 80),
        host_port("default/other", "::1", 54323),
    ]);
    let frontend = at(&view, "::1", 54323, Protocol::Tcp);
    assert_eq!((frontend.kind, frontend.service.as_str()), (FrontendKind::HostPort, "default/h"));
    assert_eq!(backends(frontend), vec![("fd00::99".into(), 8080)]);
    assert_eq!(at(&view, "fd00:96::a", 80, Protocol::Tcp).service, "default/web");
    let reasons: Vec<String> = view.problems.iter().map(|p| format!("{}: {}", p.service, p.reason)).collect();
    assert_eq!(
        reasons,
        vec![
            "default/h: hostPort [fd00:96::a]:80/tcp is default/web's already: ignored",
            "default/other: hostPort [::1]:54323/tcp is default/h's already: ignored",
        ]
    );
    assert!(view.frontends.windows(2).all(|w| w[0].address < w[1].address), "still sorted by address");
}

#[test]
fn only_frontends_reached_through_this_node_take_connections_from_outside() {
    let mut svc = service(
        "web",
        json!({ "type": "LoadBalancer", "clusterIPs": ["fd00:96::f"], "externalIPs": ["2001:db8::f"],
                "ports": [{ "port": 80, "nodePort": 30080 }] }),
    );
    svc.status = serde_json::from_value(json!({ "loadBalancer": { "ingress": [{ "ip": "2001:db8:1b::f" }] } })).unwrap();
    let eps = slice(
        "web",
        "w-1",
        json!([{ "port": 8080 }]),
        &[("fd00::a", NODE, true, true, false), ("fd00::b", "node-b", true, true, false)],
    );
    let view = ServicesView::build(NODE, &[ip("fd00:9::a")], &[ip("fd00:9::a"), ip("fd00:9::b")], [&svc], [&eps]);
    assert_eq!(at(&view, "fd00:96::f", 80, Protocol::Tcp).from_outside, None, "a ClusterIP is not");
    assert_eq!(at(&view, "fd00:9::b", 30080, Protocol::Tcp).from_outside, None, "another node's NodePort is not");
    for (addr, port) in [("fd00:9::a", 30080), ("2001:db8::f", 80), ("2001:db8:1b::f", 80)] {
        let outside = at(&view, addr, port, Protocol::Tcp).from_outside.as_ref().expect(addr);
        assert_eq!(outside.len(), 2, "{addr}: externalTrafficPolicy Cluster takes every endpoint");
    }
    assert!(view.health_checks.is_empty(), "no healthCheckNodePort with policy Cluster");
}

#[test]
fn external_traffic_policy_local_keeps_outside_connections_here_and_answers_health_checks() {
    let local = |name: &str, port: u16, health: u16| {
        service(
            name,
            json!({ "type": "LoadBalancer", "clusterIPs": ["fd00:96::1"], "externalTrafficPolicy": "Local",
                    "healthCheckNodePort": health, "ports": [{ "port": 80, "nodePort": port }] }),
        )
    };
    let (here, elsewhere, clash) = (local("here", 30081, 32001), local("elsewhere", 30082, 32002), local("clash", 30083, 32001));
    let eps_here = slice(
        "here",
        "h-1",
        json!([{ "port": 8080 }]),
        &[("fd00::a", NODE, true, true, false), ("fd00::c", NODE, true, true, false), ("fd00::b", "node-b", true, true, false)],
    );
    let eps_elsewhere = slice("elsewhere", "e-1", json!([{ "port": 8080 }]), &[("fd00::d", "node-b", true, true, false)]);
    let view = ServicesView::build(
        NODE,
        &[ip("fd00:9::a")],
        &[ip("fd00:9::a")],
        [&here, &elsewhere, &clash],
        [&eps_here, &eps_elsewhere],
    );

    let node_port = at(&view, "fd00:9::a", 30081, Protocol::Tcp);
    assert_eq!(node_port.backends.len(), 3, "pods and the node still reach every endpoint");
    let outside: Vec<_> = node_port.from_outside.iter().flatten().map(|b| b.ip.to_string()).collect();
    assert_eq!(outside, ["fd00::a", "fd00::c"]);
    assert_eq!(at(&view, "fd00:9::a", 30082, Protocol::Tcp).from_outside, Some(vec![]), "none here: refused from outside");

    let checks: Vec<_> = view.health_checks.iter().map(|h| (h.port, h.name.as_str(), h.local_endpoints)).collect();
    assert_eq!(checks, [(32001, "here", 2), (32002, "elsewhere", 0)]);
    assert!(
        view.problems
            .iter()
            .any(|p| p.service == "default/clash" && p.reason.contains("healthCheckNodePort 32001 is default/here's")),
        "{:?}",
        view.problems
    );
}

#[test]
fn a_node_whose_local_endpoints_all_terminate_fails_its_health_check_but_still_serves() {
    let svc = service(
        "draining",
        json!({ "type": "LoadBalancer", "clusterIPs": ["fd00:96::1"], "externalTrafficPolicy": "Local",
                "healthCheckNodePort": 32003, "ports": [{ "port": 80, "nodePort": 30084 }] }),
    );
    let eps = slice(
        "draining",
        "d-1",
        json!([{ "port": 8080 }]),
        &[("fd00::a", NODE, false, true, true), ("fd00::b", "node-b", true, true, false)],
    );
    let view = ServicesView::build(NODE, &[ip("fd00:9::a")], &[ip("fd00:9::a")], [&svc], [&eps]);
    let outside: Vec<_> =
        at(&view, "fd00:9::a", 30084, Protocol::Tcp).from_outside.iter().flatten().map(|b| b.ip.to_string()).collect();
    assert_eq!(outside, ["fd00::a"], "a terminating pod finishes what reaches it");
    let checks: Vec<_> = view.health_checks.iter().map(|h| (h.port, h.local_endpoints)).collect();
    assert_eq!(checks, [(32003, 0)], "as kube-proxy's: 503, so the load balancer drains this node");
}

#[test]
fn another_nodes_nodeport_of_a_local_policy_service_is_left_to_that_node() {
    let svc = service(
        "local",
        json!({ "type": "NodePort", "clusterIPs": ["fd00:96::1"], "externalTrafficPolicy": "Local",
                "ports": [{ "port": 80, "nodePort": 30085 }] }),
    );
    let eps = slice("local", "l-1", json!([{ "port": 8080 }]), &[("fd00::a", NODE, true, true, false)]);
    let view = ServicesView::build(NODE, &[ip("fd00:9::a")], &[ip("fd00:9::a"), ip("fd00:9::b")], [&svc], [&eps]);
    let served: Vec<_> = view.frontends.iter().filter(|f| f.address.port == 30085).map(|f| f.address.ip.to_string()).collect();
    assert_eq!(served, ["fd00:9::a"], "node-b judges its own NodePort as external: it has no endpoint, so it refuses");
}
