//! One-sided input fetch in the engine, on the loopback fabric (no NIC
//! here): the backends READ the inputs out of the frontend's registered
//! memory and answer exactly what TCP fetch answers; what does not fit the
//! region, or cannot be read, goes over TCP, and nothing is lost.

use std::collections::HashMap;

use baton_core::runtime::{start, EngineConfig, EngineReport};
use baton_net::client::{connect, Received};
use baton_net::rdma::Fabric;
use baton_perf::SERVE_SCENARIO;
use baton_sched::Scenario;
use baton_wire::fb;

const FLOATS: usize = 16;
const REQUESTS: u64 = 400;

fn request(id: u64) -> fb::InferRequest {
    // Inputs differ per request: an answer carrying another's output shows.
    let data = (0..FLOATS).flat_map(|i| ((id * 31 + i as u64) as f32).to_le_bytes()).collect();
    fb::InferRequest {
        id,
        model: Some(["ResNet50", "BERT-base", "InceptionV3"][id as usize % 3].into()),
        slo_ns: 2_000_000_000,
        app: 0,
        inputs: Some(vec![fb::Tensor {
            name: None,
            dtype: fb::DType::F32,
            shape: Some(vec![FLOATS as i64]),
            data: Some(data),
        }]),
        app_name: None,
        query: None,
    }
}

/// Serves `REQUESTS` requests (in flight together) with `fabric`; each
/// answer's output by request id, and the engine's report.
fn serve(fabric: Option<Fabric>, region: usize) -> (HashMap<u64, Vec<u8>>, EngineReport) {
    let s = Scenario::parse(SERVE_SCENARIO).expect("built-in scenario parses");
    let listen = "127.0.0.1:0".parse().unwrap();
    let cfg = EngineConfig { listen, input_floats: FLOATS, fabric, rdma_region_bytes: region, ..Default::default() };
    let e = start(&s, s.policy, &cfg).expect("engine starts");
    let (mut tx, mut rx) = connect(e.addr).expect("connects");
    for id in 0..REQUESTS {
        tx.queue(request(id)).expect("a valid request");
    }
    tx.flush().expect("sent");
    let mut outputs = HashMap::new();
    while outputs.len() < REQUESTS as usize {
        let open = rx
            .read(|r| {
                let Received::Answer(a) = r else { panic!("only answers come back") };
                assert_eq!(a.status, fb::Status::Ok, "{a:?}");
                let out = a.outputs.unwrap_or_default().into_iter().next().and_then(|t| t.data).unwrap_or_default();
                assert!(outputs.insert(a.id, out).is_none(), "request {} answered twice", a.id);
            })
            .expect("read");
        assert!(open, "the server closed the connection");
    }
    tx.close();
    let r = e.shutdown();
    assert_eq!((r.frontend.received, r.frontend.answered(), r.frontend.duplicates), (REQUESTS, REQUESTS, 0));
    assert_eq!(r.held_at_stop, 0);
    (outputs, r)
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
