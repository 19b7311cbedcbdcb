//! One-sided input fetch in the engine, on the loopback fabric (no NIC
//! here): the backends READ the inputs out of the frontend's registered
//! memory and answer exactly what TCP fetch answers; what does not fit the
//! region, or cannot be read, goes over TCP, and nothing is lost.

use std::collections::HashMap;

use baton_core::runtime::clients::{client_request, Target};
use baton_core::runtime::{start, EngineConfig, EngineReport};
use baton_net::client::{connect, Received};
use baton_net::rdma::Fabric;
use baton_perf::SERVE_SCENARIO;
use baton_sched::Scenario;
use baton_wire::fb;

const FLOATS: usize = 16;
const REQUESTS: u64 = 400;

fn request(id: u64) -> fb::InferRequest {
    // Inputs differ per request (their first float): an answer carrying
    // another's output shows.
    let model = Target::Model(["ResNet50", "BERT-base", "InceptionV3"][id as usize % 3]);
    client_request(id, model, 2_000_000_000, 0, FLOATS, Some(id as f32))
}

/// Serves `REQUESTS` requests (in flight together) with `fabric`; each
/// answer's output by request id, and the engine's report.
fn serve(fabric: Option<Fabric>, region: usize) -> (HashMap<u64, Vec<u8>>, EngineReport) {
    let s = Scenario::parse(SERVE_SCENARIO).expect("built-in scenario parses");
    let listen = "127.0.0.1:0".parse().unwrap();
    let cfg = EngineConfig { listen, input_floats: FLOATS, fabric, rdma_region_bytes: region, ..Default::default() };
    let e = start(&s, s.policy, &cfg).expect("engine starts");
    let outputs = ask(e.addr);
    let r = e.shutdown();
    assert_eq!((r.frontend.received, r.frontend.answered(), r.frontend.duplicates), (REQUESTS, REQUESTS, 0));
    assert_eq!(r.held_at_stop, 0);
    (outputs, r)
}

/// Sends `REQUESTS` requests to `addr`, all in flight together; each
/// answer's output by request id (every one ok, once).
fn ask(addr: std::net::SocketAddr) -> HashMap<u64, Vec<u8>> {
    let (mut tx, mut rx) = connect(addr).expect("connects");
    for id in 0..REQUESTS {
        tx.queue(request(id)).expect("a valid request");
    }
    tx.flush().expect("sent");
    let mut outputs = HashMap::new();
    while outputs.len() < REQUESTS as usize {
        let open = rx
            .read(|r| {
                let Received::Answer(a) = r else { panic!("only answers come back") };
                let a = fb::InferResponse::try_from(a).expect("a verified answer reads");
                assert_eq!(a.status, fb::Status::Ok, "{a:?}");
                let out = a.outputs.unwrap_or_default().into_iter().next().and_then(|t| t.data).unwrap_or_default();
                assert!(outputs.insert(a.id, out).is_none(), "request {} answered twice", a.id);
            })
            .expect("read");
        assert!(open, "the server closed the connection");
    }
    tx.close();
    outputs
}

fn reads(r: &EngineReport) -> (u64, u64) {
    r.backends.iter().fold((0, 0), |(n, f), b| (n + b.fetch.reads, f + b.fetch.fallbacks))
}

fn loopback() -> Option<Fabric> {
    Some(Fabric::open(Some("loopback")).expect("the loopback fabric opens anywhere"))
}

#[test]
fn reads_from_registered_memory_answer_what_tcp_fetch_answers() {
    let (tcp, r) = serve(None, 0);
    assert_eq!(reads(&r), (0, 0));
    let (rdma, r) = serve(loopback(), 64 << 20);
    assert_eq!(rdma, tcp, "the same output for every request");
    let (read, fell_back) = reads(&r);
    assert_eq!(fell_back, 0);
    // Plans before a backend's queue pair to the frontend is connected
    // fetch over TCP; after that every input is READ.
    assert!(read >= REQUESTS * 9 / 10, "{read} of {REQUESTS} inputs READ");
    assert_eq!(r.frontend.unregistered, 0);
}

#[test]
fn inputs_beyond_the_registered_region_go_over_tcp() {
    let (tcp, _) = serve(None, 0);
    // 1 KiB: eight 128-byte slots, so most inputs are not registered.
    let (rdma, r) = serve(loopback(), 1 << 10);
    assert_eq!(rdma, tcp);
    assert!(r.frontend.unregistered > 0, "{:?}", r.frontend);
    assert!(reads(&r).0 > 0, "the registered ones are READ");
}

/// Roles talking over TCP connect their queue pairs with `RdmaConnect`
/// on their connections (the loopback fabric shared, as the roles run in
/// this one process), and the backend READs over them. The burst makes
/// batches of over 100 requests, whose `Results` (one tensor each) roles
/// once refused from each other (a client's limit of 64 tensors): their
/// requests were lost.
#[test]
fn roles_over_tcp_connect_queue_pairs_and_read() {
    use baton_core::runtime::auth::ClusterKey;
    use baton_core::runtime::{start_role, RoleSpec};
    let s = Scenario::parse(SERVE_SCENARIO).expect("built-in scenario parses");
    let any = "127.0.0.1:0".parse().unwrap();
    let key = ClusterKey::new(b"the tests' cluster secret").unwrap();
    let cfg = EngineConfig {
        input_floats: FLOATS,
        cluster_key: Some(key),
        fabric: loopback(),
        rdma_region_bytes: 64 << 20,
        ..Default::default()
    };
    let role = |spec| start_role(&s, s.policy, &cfg, spec).expect("role starts");
    let sched = role(RoleSpec::Scheduler { listen: any });
    let fe = role(RoleSpec::Frontend { index: 0, listen: any, peers: any, schedulers: vec![sched.addr.unwrap()] });
    let spec = RoleSpec::Backends {
        first: 0,
        count: s.cluster.backends,
        scheduler: sched.addr.unwrap(),
        frontends: vec![fe.peer_addr.unwrap()],
    };
    let backends = role(spec);
    let outputs = ask(fe.addr.unwrap());
    let (b, f) = (backends.shutdown(), fe.shutdown());
    sched.shutdown();
    let (tcp, _) = serve(None, 0);
    assert_eq!(outputs, tcp, "the same output for every request");
    assert_eq!((f.frontend.received, f.frontend.answered(), f.held_at_stop), (REQUESTS, REQUESTS, 0));
    let connected: u64 = b.backends.iter().map(|x| x.fetch.connected).sum();
    assert_eq!(connected, u64::from(s.cluster.backends), "every backend connected a queue pair");
    assert!(reads(&b).0 > 0, "{:?}", b.backends);
}
