//! The KServe v2 gateway end to end: the stock `tritonclient` package over
//! HTTP and gRPC, bad input on both transports, `/metrics` checked by
//! `promtool` and against what the load generator sent, and models
//! unloaded and loaded under load. Contracts only, never timings; waits
//! are for events, with `PATIENCE` as a safety net.
//!
//! The Python client runs in a virtual environment this test makes under
//! `target/` the first time (`pip install` from PyPI); `promtool` is
//! Debian's, unpacked under `target/` by `tests/kserve/promtool.sh`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use baton_core::runtime::{start, Engine, EngineConfig};
use baton_net::kserve::GatewayConfig;
use baton_perf::SERVE_SCENARIO;
use baton_sched::Scenario;
use baton_tools::load::{self, LoadConfig};

const FLOATS: usize = 16;
const PATIENCE: Duration = Duration::from_secs(120);
/// The Python packages the client check runs on.
const PYTHON_PACKAGES: &[&str] = &["tritonclient[http,grpc]==2.73.0", "numpy"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

fn scenario() -> Scenario {
    Scenario::parse(SERVE_SCENARIO).expect("built-in scenario parses")
}

/// An engine serving the built-in scenario with both gateway transports.
fn engine(max_body: usize) -> Engine {
    engine_with(GatewayConfig { max_body, ..GatewayConfig::default() })
}

/// The same, with the gateway's limits from `limits`.
fn engine_with(limits: GatewayConfig) -> Engine {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let gateway = GatewayConfig { http: Some(any), grpc: Some(any), ..limits };
    let cfg = EngineConfig { listen: any, input_floats: FLOATS, gateway, ..Default::default() };
    let s = scenario();
    start(&s, s.policy, &cfg).expect("engine starts")
}

/// One HTTP/1.1 exchange on a fresh connection: (status, body).
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("the gateway listens");
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: baton\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    // A server may answer (413) before reading all of a large body.
    let _ = s.write_all(body);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    let text = String::from_utf8_lossy(&reply);
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status: {text}"));
    let at = reply.windows(4).position(|w| w == b"\r\n\r\n").expect("a header ends") + 4;
    (status, reply[at..].to_vec())
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

/// A Python with `PYTHON_PACKAGES`, made once per machine under `target/`.
fn python() -> PathBuf {
    static MADE: Mutex<()> = Mutex::new(());
    let _one = MADE.lock().unwrap_or_else(|e| e.into_inner());
    let venv = root().join("target/kserve-venv");
    let py = venv.join("bin/python");
    let ready = || Command::new(&py).args(["-c", "import tritonclient.http, tritonclient.grpc, numpy"]).status();
    if ready().is_ok_and(|s| s.success()) {
        return py;
    }
    let made = Command::new("python3").args(["-m", "venv"]).arg(&venv).status();
    assert!(made.is_ok_and(|s| s.success()), "python3 -m venv {venv:?} failed (Debian: apt-get install python3-venv)");
    let pip = Command::new(&py).args(["-m", "pip", "install", "-q"]).args(PYTHON_PACKAGES).status();
    assert!(pip.is_ok_and(|s| s.success()), "pip install {PYTHON_PACKAGES:?} failed");
    py
}

fn infer_body(floats: usize) -> Vec<u8> {
    let data: Vec<f32> = (0..floats).map(|i| i as f32).collect();
    serde_json::to_vec(&serde_json::json!({
        "inputs": [{ "name": "input", "shape": [floats], "datatype": "FP32", "data": data }]
    }))
    .unwrap()
}

#[test]
fn tritonclient_runs_health_metadata_infer_and_repository_calls_over_http_and_grpc() {
    let max_body = 1 << 16;
    let e = engine(max_body);
    let (http_addr, grpc_addr) = (e.http.expect("http"), e.grpc.expect("grpc"));
    let out = Command::new(python())
        .arg(root().join("tests/kserve/tritonclient_check.py"))
        .args(["--http", &http_addr.to_string(), "--grpc", &grpc_addr.to_string(), "--model", "ResNet50"])
        .args(["--floats", &FLOATS.to_string(), "--outputs", "4", "--max-body", &max_body.to_string()])
        .output()
        .expect("python runs");
    let r = e.shutdown();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let f = r.frontend;
    // Two inferences over HTTP and one over gRPC, and one after reloading on each.
    assert!(f.ok >= 5, "{f:?}");
    assert_eq!((f.received, f.duplicates, f.orphaned), (f.answered(), 0, 0), "{f:?}");
}

#[test]
fn bad_input_over_http_gets_typed_errors_and_the_server_keeps_serving() {
    let e = engine(4096);
    let addr = e.http.expect("http");
    let infer = "/v2/models/ResNet50/infer";
    // (what, path, headers, body, the status wanted)
    type Case<'a> = (&'a str, &'a str, Vec<(&'a str, String)>, Vec<u8>, u16);
    let cases: Vec<Case> = vec![
        ("malformed JSON", infer, vec![], b"{\"inputs\": [".to_vec(), 400),
        ("not an object", infer, vec![], b"[1, 2]".to_vec(), 400),
        ("strings for floats", infer, vec![], br#"{"inputs":[{"name":"input","shape":[1],"datatype":"FP32","data":["x"]}]}"#.to_vec(), 400),
        ("shape and data disagree", infer, vec![], br#"{"inputs":[{"name":"input","shape":[3],"datatype":"FP32","data":[1]}]}"#.to_vec(), 400),
        ("wrong size for the model", infer, vec![], infer_body(FLOATS + 1), 400),
        ("two inputs", infer, vec![], br#"{"inputs":[{"name":"input","shape":[0],"datatype":"FP32","data":[]},{"name":"input","shape":[0],"datatype":"FP32","data":[]}]}"#.to_vec(), 400),
        ("header length past the body", infer, vec![("Inference-Header-Content-Length", "99999".into())], infer_body(FLOATS), 400),
        ("header length not a number", infer, vec![("Inference-Header-Content-Length", "x".into())], infer_body(FLOATS), 400),
        ("binary size past the body", infer, vec![("Inference-Header-Content-Length", "86".into())], {
            let mut b = br#"{"inputs":[{"name":"input","shape":[16],"datatype":"FP32","parameters":{"binary_data_size":64}}]}"#.to_vec();
            b.truncate(86);
            b
        }, 400),
        ("unknown model", "/v2/models/nope/infer", vec![], infer_body(FLOATS), 404),
        ("unknown endpoint", "/v3/whatever", vec![], vec![], 404),
        ("over the body limit", infer, vec![], vec![b' '; 8192], 413),
    ];
    for (what, path, headers, body, want) in cases {
        let (status, reply) = http(addr, "POST", path, &headers, &body);
        assert_eq!(status, want, "{what}: {}", String::from_utf8_lossy(&reply));
        assert!(json(&reply)["error"].is_string(), "{what}: an error message");
    }
    let (status, reply) = http(addr, "POST", infer, &[], &infer_body(FLOATS));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    assert_eq!(json(&reply)["outputs"][0]["name"], "output");
    let f = e.shutdown().frontend;
    assert_eq!((f.received, f.duplicates), (f.answered(), 0), "{f:?}");
}

/// The metrics page, and the sum of its `baton_requests_total` samples
/// whose labels contain `having`.
fn requests_total(addr: SocketAddr, having: &str) -> (String, u64) {
    let (status, body) = http(addr, "GET", "/metrics", &[], &[]);
    assert_eq!(status, 200);
    let text = String::from_utf8(body).expect("utf-8");
    let n = text
        .lines()
        .filter(|l| l.starts_with("baton_requests_total{") && l.contains(having))
        .map(|l| l.rsplit_once(' ').expect("a value").1.parse::<u64>().expect("a count"))
        .sum();
    (text, n)
}

fn load_config(e: &Engine, rate_rps: f64, secs: u64) -> LoadConfig {
    LoadConfig {
        connections: 2,
        input_floats: vec![FLOATS],
        drain: PATIENCE,
        ..LoadConfig::new(e.addr, rate_rps, Duration::from_secs(secs))
    }
}

#[test]
fn metrics_pass_promtool_and_add_up_to_what_load_sent() {
    let e = engine(1 << 20);
    let addr = e.http.expect("http");
    let s = scenario();
    let l = load::run(&s, &load_config(&e, 400.0, 1)).expect("load runs");
    assert_eq!((l.unanswered, l.duplicates), (0, 0), "{l:?}");
    let (text, answered) = requests_total(addr, "");
    assert_eq!(answered, l.sent, "{text}");
    let (_, ok) = requests_total(addr, "outcome=\"ok\"");
    let (_, late) = requests_total(addr, "outcome=\"late\"");
    assert_eq!(ok + late, l.ok + l.late, "{text}");
    for family in ["baton_request_latency_seconds_count", "baton_batch_size_count", "baton_backend_busy_seconds_total"]
    {
        assert!(text.contains(family), "{family} in {text}");
    }
    let promtool = Command::new(root().join("tests/kserve/promtool.sh")).output().expect("promtool.sh runs");
    assert!(promtool.status.success(), "{}", String::from_utf8_lossy(&promtool.stderr));
    let promtool = String::from_utf8(promtool.stdout).unwrap();
    let mut check = Command::new(promtool.trim())
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool runs");
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool: {said}\n{text}");
    e.shutdown();
}

/// Two frontend shards on one port: the kernel spreads connections over
/// both, every request is answered once, and `/metrics` (the first shard's
/// gateway) adds up both shards' answers.
#[test]
fn several_frontend_shards_share_the_port_and_the_metrics() {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let gateway = GatewayConfig { http: Some(any), ..GatewayConfig::default() };
    let cfg = EngineConfig { listen: any, input_floats: FLOATS, gateway, frontend_shards: 2, ..Default::default() };
    let s = scenario();
    let e = start(&s, s.policy, &cfg).expect("engine starts");
    let addr = e.http.expect("http");
    // Sixteen connections open at once: all on one shard would be a
    // 1-in-32,768 draw of the kernel's hash.
    let clients: Vec<TcpStream> = (0..16).map(|_| TcpStream::connect(e.addr).expect("it listens")).collect();
    let deadline = Instant::now() + PATIENCE;
    while e.progress().connections_open() < 16 {
        assert!(Instant::now() < deadline, "16 connections accepted");
        std::thread::sleep(Duration::from_millis(2));
    }
    let by_shard = e.progress().connections_by_shard();
    assert!(by_shard.len() == 2 && by_shard.iter().all(|&n| n > 0), "connections by shard {by_shard:?}");
    drop(clients);
    let l = load::run(&s, &LoadConfig { connections: 8, ..load_config(&e, 1_000.0, 1) }).expect("load runs");
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    // Each shard copies its answers for the scrape within 10 ms of them.
    while requests_total(addr, "").1 < l.sent {
        assert!(Instant::now() < deadline, "the metrics count every answer: {}", requests_total(addr, "").0);
        std::thread::sleep(Duration::from_millis(5));
    }
    let (text, answered) = requests_total(addr, "");
    assert_eq!(answered, l.sent, "{text}");
    let r = e.shutdown();
    let f = r.frontend;
    assert_eq!((f.received, f.answered(), f.duplicates, r.held_at_stop), (l.sent, l.sent, 0, 0), "{f:?}");
    assert_eq!(r.connections, 16 + 8);
}

/// Waits until the metrics count a request of `model` answered `Unloaded`.
fn wait_for_unloaded(addr: SocketAddr, model: &str) {
    let deadline = Instant::now() + PATIENCE;
    let having = format!("model=\"{model}\",outcome=\"error\",reason=\"Unloaded\"");
    while requests_total(addr, &having).1 == 0 {
        assert!(Instant::now() < deadline, "no request of {model} was refused as unloaded");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn models_unloaded_and_loaded_under_load_lose_no_request() {
    let e = engine(1 << 20);
    let addr = e.http.expect("http");
    let s = scenario();
    let cfg = load_config(&e, 600.0, 4);
    let l = std::thread::scope(|scope| {
        let running = scope.spawn(|| load::run(&s, &cfg).expect("load runs"));
        let repo = |model: &str, verb: &str| {
            let (status, body) = http(addr, "POST", &format!("/v2/repository/models/{model}/{verb}"), &[], &[]);
            assert_eq!(status, 200, "{verb} {model}: {}", String::from_utf8_lossy(&body));
        };
        repo("ResNet50", "unload");
        wait_for_unloaded(addr, "ResNet50");
        // One loaded while another is unloaded.
        repo("ResNet50", "load");
        repo("InceptionV3", "unload");
        wait_for_unloaded(addr, "InceptionV3");
        repo("InceptionV3", "load");
        running.join().expect("the load generator does not panic")
    });
    let f = e.shutdown().frontend;
    assert_eq!(l.ok + l.late + l.dropped + l.errors, l.sent, "{l:?}");
    assert_eq!((l.unanswered, l.duplicates), (0, 0), "{l:?}");
    assert!(l.errors >= 2, "requests were refused while unloaded: {l:?}");
    assert_eq!((f.received, f.answered(), f.duplicates, f.orphaned), (l.sent, l.sent, 0, 0), "{f:?}");
}

#[test]
fn http_connections_beyond_the_limit_are_refused_and_the_rest_served() {
    let e = engine_with(GatewayConfig { max_connections: 2, ..GatewayConfig::default() });
    let addr = e.http.expect("http");
    // Two idle connections hold the limit, once the gateway has taken them.
    let held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).expect("connects")).collect();
    let deadline = Instant::now() + PATIENCE;
    let refused = loop {
        let (status, body) = http(addr, "GET", "/v2/health/live", &[], &[]);
        if status == 503 {
            break json(&body);
        }
        assert!(Instant::now() < deadline, "a third connection was never refused");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(refused["error"].as_str().is_some_and(|m| m.contains("2 connections")), "{refused}");
    // Once they close, new connections are served again.
    drop(held);
    let deadline = Instant::now() + PATIENCE;
    while http(addr, "GET", "/v2/health/live", &[], &[]).0 != 200 {
        assert!(Instant::now() < deadline, "never served again after the idle connections closed");
        std::thread::sleep(Duration::from_millis(5));
    }
    e.shutdown();
}

#[test]
fn grpc_connections_beyond_the_limit_are_closed_and_the_rest_served() {
    use baton_net::kserve::pb::grpc_inference_service_client::GrpcInferenceServiceClient;
    use baton_net::kserve::pb::ServerLiveRequest;
    let e = engine_with(GatewayConfig { max_connections: 2, ..GatewayConfig::default() });
    let addr = e.grpc.expect("grpc");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // One call on a connection of its own.
    let live = || {
        rt.block_on(async {
            let mut c =
                GrpcInferenceServiceClient::connect(format!("http://{addr}")).await.map_err(|e| e.to_string())?;
            c.server_live(ServerLiveRequest {}).await.map(|r| r.into_inner().live).map_err(|s| s.to_string())
        })
    };
    assert_eq!(live(), Ok(true));
    // Two idle connections hold the limit, once the gateway has taken them.
    let held: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).expect("connects")).collect();
    let deadline = Instant::now() + PATIENCE;
    while live().is_ok() {
        assert!(Instant::now() < deadline, "a third connection was never refused");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Once they close, new connections are served again.
    drop(held);
    let deadline = Instant::now() + PATIENCE;
    while live() != Ok(true) {
        assert!(Instant::now() < deadline, "never served again after the idle connections closed");
        std::thread::sleep(Duration::from_millis(5));
    }
    e.shutdown();
}
