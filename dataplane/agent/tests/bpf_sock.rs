// SPDX-License-Identifier: Apache-2.0
//! Services at the cgroup socket hooks (bpf/sock.bpf.c over bpf/lib/lb.h),
//! with real sockets: socket hooks have no BPF_PROG_TEST_RUN, so each test
//! puts this process in a cgroup of its own with the hooks attached, and
//! connects, sends and receives in a network namespace of its thread's own,
//! backends listening on loopback addresses. The tests share the process's
//! cgroup, so they take turns.

mod common;

use std::{
    io::ErrorKind,
    net::{Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream, UdpSocket},
    sync::Mutex,
    thread::sleep,
    time::Duration,
};

use aya::Ebpf;
use common::{
    counted, enter_netns, ip,
    lb::{add_service, addr, service_stats, set_count, TestCgroup, TCP, UDP},
    load_object, PinDir,
};
use v6node_abi::{Direction, Reason};

static SOCK_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sock.bpf.o"));
const PROGRAMS: [&str; 4] = ["v6n_sock_connect", "v6n_sock_sendmsg", "v6n_sock_recvmsg", "v6n_sock_peername"];
static TURN: Mutex<()> = Mutex::new(());

const VIP: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x96, 0, 0, 0, 0, 0, 1);

fn backend_ip(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x5, 0, 0, 0, 0, 0, i + 1)
}

/// The hooks attached for this process, in the thread's own namespace with
/// `backends` addresses on loopback. Fields drop in order: the process
/// leaves the cgroup before the programs go.
struct Sockets {
    _cgroup: TestCgroup,
    ebpf: Ebpf,
    _pins: PinDir,
}

fn setup(test: &str, backends: u16) -> Sockets {
    enter_netns();
    for i in 0..backends {
        ip(&format!("addr add {}/128 dev lo nodad", backend_ip(i)));
    }
    let (mut ebpf, pins) = load_object(SOCK_OBJECT, &PROGRAMS, test);
    let cgroup = TestCgroup::enter(&mut ebpf, &PROGRAMS, test);
    Sockets { _cgroup: cgroup, ebpf, _pins: pins }
}

fn tcp_listeners(count: u16, port: u16) -> Vec<TcpListener> {
    (0..count)
        .map(|i| {
            let listener = TcpListener::bind(addr(backend_ip(i), port)).unwrap();
            listener.set_nonblocking(true).unwrap();
            listener
        })
        .collect()
}

/// Which listener took the connection just made (the handshake is done by
/// the time connect returns).
fn accepted_by(listeners: &[TcpListener]) -> usize {
    for _ in 0..100 {
        for (i, listener) in listeners.iter().enumerate() {
            match listener.accept() {
                Ok(_) => return i,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("accept: {e}"),
            }
        }
        sleep(Duration::from_millis(5));
    }
    panic!("no backend accepted the connection");
}

#[test]
fn tcp_to_a_cluster_ip_reaches_a_backend_and_the_application_sees_the_service() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = setup("tcp", 1);
    let listeners = tcp_listeners(1, 8080);
    add_service(&mut s.ebpf, 1, addr(VIP, 80), TCP, &[addr(backend_ip(0), 8080)], None);

    let stream = TcpStream::connect(addr(VIP, 80)).expect("connect to the ClusterIP");
    assert_eq!(accepted_by(&listeners), 0);
    assert_eq!(stream.peer_addr().unwrap(), SocketAddr::V6(addr(VIP, 80)), "getpeername shows the Service");
    assert_eq!(counted(&s.ebpf, Direction::V6N_DIRECTION_SOCKET, Reason::V6N_REASON_LB_TRANSLATED), 1);
    assert_eq!(service_stats(&s.ebpf, 1), (1, 0));

    // The backend's own address, and a port the Service does not have, are
    // not Services: untouched and uncounted.
    TcpStream::connect(addr(backend_ip(0), 8080)).expect("connect to the backend directly");
    assert_eq!(accepted_by(&listeners), 0);
    let err = TcpStream::connect(addr(VIP, 81)).expect_err("no such Service port: nothing answers");
    assert_ne!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    assert_eq!(counted(&s.ebpf, Direction::V6N_DIRECTION_SOCKET, Reason::V6N_REASON_LB_TRANSLATED), 1);
}

#[test]
fn a_pod_reaches_a_service_whose_only_backend_is_itself() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = setup("hairpin", 1);
    let listeners = tcp_listeners(1, 8080);
    add_service(&mut s.ebpf, 1, addr(VIP, 80), TCP, &[addr(backend_ip(0), 8080)], None);
    // The client is the backend pod: it sends from the backend's address.
    let socket = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::V6(addr(backend_ip(0), 0)).into()).unwrap();
    socket.connect(&SocketAddr::V6(addr(VIP, 80)).into()).expect("hairpin connect");
    assert_eq!(accepted_by(&listeners), 0);
}

#[test]
fn udp_unconnected_and_connected_get_replies_from_the_service_address() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = setup("udp", 1);
    let server = UdpSocket::bind(addr(backend_ip(0), 5353)).unwrap();
    add_service(&mut s.ebpf, 2, addr(VIP, 53), UDP, &[addr(backend_ip(0), 5353)], None);
    let echo = |server: &UdpSocket| {
        let mut buf = [0u8; 64];
        let (n, from) = server.recv_from(&mut buf).unwrap();
        server.send_to(&buf[..n], from).unwrap();
    };

    let client = UdpSocket::bind(addr(Ipv6Addr::UNSPECIFIED, 0)).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    client.send_to(b"query", addr(VIP, 53)).expect("sendto the ClusterIP");
    echo(&server);
    let mut buf = [0u8; 64];
    let (n, from) = client.recv_from(&mut buf).expect("reply");
    assert_eq!(&buf[..n], b"query");
    assert_eq!(from, SocketAddr::V6(addr(VIP, 53)), "the reply comes from the Service, as the resolver expects");

    let connected = UdpSocket::bind(addr(Ipv6Addr::UNSPECIFIED, 0)).unwrap();
    connected.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    connected.connect(addr(VIP, 53)).unwrap();
    connected.send(b"again").unwrap();
    echo(&server);
    let n = connected.recv(&mut buf).expect("reply on the connected socket");
    assert_eq!(&buf[..n], b"again");
    assert_eq!(connected.peer_addr().unwrap(), SocketAddr::V6(addr(VIP, 53)));
    assert_eq!(service_stats(&s.ebpf, 2), (2, 0), "one sendto, one connect");
}

#[test]
fn a_service_without_backends_refuses_at_once_tcp_and_udp() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = setup("refuse", 0);
    add_service(&mut s.ebpf, 3, addr(VIP, 80), TCP, &[], None);
    add_service(&mut s.ebpf, 4, addr(VIP, 53), UDP, &[], None);
    let err = TcpStream::connect(addr(VIP, 80)).expect_err("no backend");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    let client = UdpSocket::bind(addr(Ipv6Addr::UNSPECIFIED, 0)).unwrap();
    let err = client.send_to(b"x", addr(VIP, 53)).expect_err("no backend");
    assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
    assert_eq!(counted(&s.ebpf, Direction::V6N_DIRECTION_SOCKET, Reason::V6N_REASON_DROP_NO_BACKEND), 2);
    assert_eq!(service_stats(&s.ebpf, 3), (0, 1));
    assert_eq!(service_stats(&s.ebpf, 4), (0, 1));
}

#[test]
fn connections_spread_over_the_backends_and_a_removed_one_gets_no_new_ones() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = setup("spread", 3);
    let listeners = tcp_listeners(3, 8080);
    let backends: Vec<SocketAddrV6> = (0..3).map(|i| addr(backend_ip(i), 8080)).collect();
    add_service(&mut s.ebpf, 5, addr(VIP, 80), TCP, &backends, None);
    let mut hits = [0; 3];
    for _ in 0..150 {
        let _stream = TcpStream::connect(addr(VIP, 80)).unwrap();
        hits[accepted_by(&listeners)] += 1;
    }
    assert!(hits.iter().all(|&h| h >= 25), "150 connections over 3 backends: {hits:?}");

    set_count(&mut s.ebpf, addr(VIP, 80), TCP, 2);
    let mut after = [0; 3];
    for _ in 0..60 {
        let _stream = TcpStream::connect(addr(VIP, 80)).unwrap();
        after[accepted_by(&listeners)] += 1;
    }
    assert_eq!(after[2], 0, "the removed backend got new connections: {after:?}");
    assert!(after[0] > 0 && after[1] > 0, "{after:?}");
}

#[test]
fn client_ip_affinity_holds_within_its_timeout_and_lapses_after_it() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    const BACKENDS: u16 = 16;
    let mut s = setup("affinity", BACKENDS);
    let listeners = tcp_listeners(BACKENDS, 8080);
    let backends: Vec<SocketAddrV6> = (0..BACKENDS).map(|i| addr(backend_ip(i), 8080)).collect();
    add_service(&mut s.ebpf, 6, addr(VIP, 80), TCP, &backends, Some(1));

    let first = {
        let _stream = TcpStream::connect(addr(VIP, 80)).unwrap();
        accepted_by(&listeners)
    };
    for _ in 0..30 {
        let _stream = TcpStream::connect(addr(VIP, 80)).unwrap();
        assert_eq!(accepted_by(&listeners), first, "affinity broke within its timeout");
    }
    // Each round waits out the 1 s timeout, so each picks afresh: four
    // rounds over 16 backends all landing on the first is a 1 in 4096 chance.
    let mut seen = vec![first];
    for _ in 0..4 {
        sleep(Duration::from_millis(1100));
        let _stream = TcpStream::connect(addr(VIP, 80)).unwrap();
        seen.push(accepted_by(&listeners));
    }
    assert!(seen.iter().any(|&b| b != first), "affinity never lapsed: {seen:?}");
}

#[test]
fn affinity_moves_on_when_its_backend_leaves_the_service() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut s = setup("affinity-gone", 2);
    let listeners = tcp_listeners(2, 8080);
    let backends: Vec<SocketAddrV6> = (0..2).map(|i| addr(backend_ip(i), 8080)).collect();
    add_service(&mut s.ebpf, 7, addr(VIP, 80), TCP, &backends, Some(3600));
    // Connect until the client is stuck to the second backend (slot 2).
    let mut stuck = false;
    for _ in 0..64 {
        let _stream = TcpStream::connect(addr(VIP, 80)).unwrap();
        if accepted_by(&listeners) == 1 {
            stuck = true;
            break;
        }
        // Stuck to the first: forget it and draw again.
        let mut map: aya::maps::HashMap<&mut aya::maps::MapData, v6node_abi::AffinityKey, v6node_abi::AffinityValue> =
            aya::maps::HashMap::try_from(s.ebpf.map_mut(v6node_abi::maps::AFFINITY).unwrap()).unwrap();
        let keys: Vec<_> = map.keys().map(Result::unwrap).collect();
        for key in keys {
            map.remove(&key).unwrap();
        }
    }
    assert!(stuck, "64 draws never chose the second backend");
    set_count(&mut s.ebpf, addr(VIP, 80), TCP, 1);
    for _ in 0..10 {
        let _stream = TcpStream::connect(addr(VIP, 80)).unwrap();
        assert_eq!(accepted_by(&listeners), 0, "a client stuck to a removed backend must move on");
    }
}
