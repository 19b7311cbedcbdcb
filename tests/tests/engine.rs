//! The engine end to end on loopback: a real server (pinned glommio
//! shards, io_uring TCP) driven by real sockets. These tests check
//! contracts — every request answered exactly once, bad input answered or
//! closed without harming other clients — never timings (the machine is
//! shared and noisy; timings are measured by `baton demo` and perf runs).
//! Nor do they sleep for something to happen: they wait for the event
//! (an answer, the engine's `Progress`), with `PATIENCE` as a safety net
//! that fails the test with a message instead of hanging it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use baton_core::runtime::auth::ClusterKey;
use baton_core::runtime::{start, Engine, EngineConfig};
use baton_net::framing::{FrameBuf, Outbox};
use baton_perf::SERVE_SCENARIO;
use baton_sched::{PolicyKind, Scenario};
use baton_tools::load::{self, LoadConfig};
use baton_wire::frame::{FrameHeader, Kind};
use baton_wire::{encode, fb, Message};

const FLOATS: usize = 16;

/// The longest any test waits for an event; only a hung engine takes it.
const PATIENCE: Duration = Duration::from_secs(120);

/// Waits until `done()` holds, checking every few milliseconds.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "waited {PATIENCE:?} for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn scenario() -> Scenario {
    Scenario::parse(SERVE_SCENARIO).expect("built-in scenario parses")
}

fn engine_at(s: &Scenario, plan_rate_rps: f64) -> Engine {
    let listen = "127.0.0.1:0".parse().unwrap();
    let cfg = EngineConfig { listen, input_floats: FLOATS, plan_rate_rps, ..Default::default() };
    start(s, s.policy, &cfg).expect("engine starts")
}

fn engine(s: &Scenario) -> Engine {
    engine_at(s, 0.0)
}

fn request(id: u64, model: &str, slo_ms: u64, floats: usize) -> fb::InferRequest {
    fb::InferRequest {
        id,
        model: Some(model.into()),
        slo_ns: slo_ms * 1_000_000,
        app: 0,
        inputs: Some(vec![fb::Tensor {
            name: None,
            dtype: fb::DType::F32,
            shape: Some(vec![floats as i64]),
            data: Some(vec![0; floats * 4]),
        }]),
        app_name: None,
        query: None,
        path_ns: 0,
    }
}

/// A blocking test client.
struct Client {
    s: TcpStream,
    buf: FrameBuf,
}

impl Client {
    fn connect(e: &Engine) -> Self {
        Self::at(e.addr)
    }

    fn at(addr: std::net::SocketAddr) -> Self {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        Self { s, buf: FrameBuf::default() }
    }

    /// The next message of any kind; None when the server closed.
    fn message(&mut self) -> Option<Message> {
        loop {
            if let Some(f) = self.buf.next_frame().expect("the server sends valid frames") {
                return Some(f.expect("the server's frames decode"));
            }
            match self.s.read(self.buf.spare()) {
                Ok(0) => return None,
                Ok(n) => self.buf.filled(n),
                Err(e) => panic!("nothing read: {e}"),
            }
        }
    }

    fn send(&mut self, m: &Message) {
        self.s.write_all(&encode(m).unwrap()).unwrap();
    }

    fn raw(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// The next answer; None when the server closed the connection.
    fn answer(&mut self) -> Option<fb::InferResponse> {
        match self.message()? {
            Message::InferResponse(r) => Some(r),
            other => panic!("server sent {:?}", other.kind()),
        }
    }

    fn error(&mut self) -> fb::ErrorCode {
        let a = self.answer().expect("an answer before the close");
        assert_eq!(a.status, fb::Status::Error, "{a:?}");
        a.error_code
    }

    fn closed(&mut self) -> bool {
        self.answer().is_none()
    }
}

/// The server still serves a well-behaved client.
fn still_serves(e: &Engine) {
    let mut c = Client::connect(e);
    c.send(&Message::InferRequest(request(42, "BERT-base", 200, FLOATS)));
    let a = c.answer().expect("answered");
    assert_eq!((a.id, a.status), (42, fb::Status::Ok), "{a:?}");
    assert_eq!(a.outputs.as_ref().map(|o| o.len()), Some(1));
}

#[test]
fn garbage_bytes_get_a_malformed_answer_and_a_close() {
    let _alone = alone();
    let e = engine(&scenario());
    let mut c = Client::connect(&e);
    c.raw(b"GET / HTTP/1.1\r\nHost: baton\r\n\r\n");
    assert_eq!(c.error(), fb::ErrorCode::Malformed);
    assert!(c.closed());
    still_serves(&e);
    let r = e.shutdown();
    assert_eq!(r.bad_frames, 1);
}

#[test]
fn a_truncated_frame_then_a_disconnect_closes_only_that_connection() {
    let _alone = alone();
    let e = engine(&scenario());
    let mut c = Client::connect(&e);
    let bytes = encode(&Message::InferRequest(request(1, "ResNet50", 100, FLOATS))).unwrap();
    c.raw(&bytes[..bytes.len() / 2]);
    c.s.shutdown(Shutdown::Write).unwrap();
    assert!(c.closed(), "half a frame and EOF: the server closes without an answer");
    still_serves(&e);
    let r = e.shutdown();
    assert_eq!((r.frontend.received, r.frontend.ok), (1, 1));
}

#[test]
fn an_oversize_frame_is_refused_before_it_is_buffered() {
    let _alone = alone();
    let e = engine(&scenario());
    let mut c = Client::connect(&e);
    let mut head = FrameHeader::new(Kind::InferRequest, 0).unwrap().to_bytes();
    head[..4].copy_from_slice(&(64u32 << 20).to_le_bytes());
    c.raw(&head);
    assert_eq!(c.error(), fb::ErrorCode::Malformed);
    assert!(c.closed());
    still_serves(&e);
    e.shutdown();
}

#[test]
fn unknown_and_unexpected_kinds_are_refused() {
    let _alone = alone();
    let e = engine(&scenario());
    // A kind byte no schema names: the stream cannot be trusted; close.
    let mut c = Client::connect(&e);
    let mut head = FrameHeader::new(Kind::Stats, 0).unwrap().to_bytes();
    head[4] = 250;
    c.raw(&head);
    assert_eq!(c.error(), fb::ErrorCode::Malformed);
    assert!(c.closed());
    // A valid frame of a kind clients do not send: refused, connection kept.
    let mut c = Client::connect(&e);
    c.send(&Message::Stats(fb::Stats::default()));
    assert_eq!(c.error(), fb::ErrorCode::UnexpectedKind);
    c.send(&Message::InferRequest(request(5, "ResNet50", 100, FLOATS)));
    assert_eq!(c.answer().unwrap().status, fb::Status::Ok);
    e.shutdown();
}

#[test]
fn unknown_models_past_deadlines_and_bad_tensors_get_typed_errors() {
    let _alone = alone();
    let e = engine(&scenario());
    let mut c = Client::connect(&e);
    c.send(&Message::InferRequest(request(1, "NoSuchNet", 100, FLOATS)));
    assert_eq!(c.error(), fb::ErrorCode::UnknownModel);
    c.send(&Message::InferRequest(request(2, "ResNet50", 0, FLOATS)));
    assert_eq!(c.error(), fb::ErrorCode::DeadlineInPast);
    c.send(&Message::InferRequest(request(3, "ResNet50", 100, FLOATS + 1)));
    assert_eq!(c.error(), fb::ErrorCode::BadTensor);
    // Bytes that disagree with the shape: the decoder refuses the payload;
    // the stream is still in sync, so the connection goes on.
    let mut lying = request(4, "ResNet50", 100, FLOATS);
    lying.inputs.as_mut().unwrap()[0].shape = Some(vec![FLOATS as i64 + 3]);
    let mut out = Outbox::default();
    out.push(&Message::InferRequest(lying)).unwrap();
    c.raw(&out.take());
    assert_eq!(c.error(), fb::ErrorCode::Malformed);
    c.send(&Message::InferRequest(request(5, "ResNet50", 100, FLOATS)));
    let a = c.answer().unwrap();
    assert_eq!((a.id, a.status), (5, fb::Status::Ok));
    let r = e.shutdown();
    assert_eq!((r.frontend.errors, r.frontend.ok, r.bad_frames), (3, 1, 1));
}

#[test]
fn a_client_that_leaves_mid_request_harms_no_one() {
    let _alone = alone();
    let e = engine(&scenario());
    let mut c = Client::connect(&e);
    for id in 0..50 {
        c.send(&Message::InferRequest(request(id, "InceptionV3", 50, FLOATS)));
    }
    drop(c);
    still_serves(&e);
    // Wait for the abandoned requests to finish, each answered (to no one)
    // once: the server has closed both connections (so it read all it will
    // read of the first; it was accepted before the second, which was
    // answered) and holds no request.
    wait_for("the abandoned requests to finish", || e.progress().drained());
    let r = e.shutdown();
    let f = r.frontend;
    // Requests read before the close (a reset can discard unread ones) are
    // each answered once; the ones whose client left, to no one.
    assert!(f.received <= 51, "{f:?}");
    assert_eq!(f.answered(), f.received, "{f:?}");
    assert_eq!((f.duplicates, r.held_at_stop), (0, 0));
    assert_eq!(f.orphaned + 1, f.received, "{f:?}");
}

/// Load at `rate` through the load generator, a warm-up first; the
/// engine's and the generator's accounts must agree, every request
/// answered once (warm-up included), the warm-up's left out of the counts.
fn exactly_once(policy: PolicyKind, rate: f64) {
    exactly_once_sharded(policy, rate, 0);
}

fn exactly_once_sharded(policy: PolicyKind, rate: f64, model_shards: usize) {
    exactly_once_on(policy, rate, model_shards, None);
}

/// The same, every shard pinned to `cores` when given.
fn exactly_once_on(policy: PolicyKind, rate: f64, model_shards: usize, cores: Option<Vec<usize>>) {
    exactly_once_with(policy, rate, EngineConfig { model_shards, cores, ..Default::default() });
}

/// The same, served as `cfg` says.
fn exactly_once_with(policy: PolicyKind, rate: f64, cfg: EngineConfig) {
    let mut s = scenario();
    s.policy = policy;
    let listen = "127.0.0.1:0".parse().unwrap();
    let cfg = EngineConfig { listen, input_floats: FLOATS, plan_rate_rps: rate, ..cfg };
    let shedding = cfg.shed_when_behind;
    let e = start(&s, s.policy, &cfg).expect("engine starts");
    let cfg = LoadConfig {
        connections: 8,
        input_floats: vec![FLOATS],
        // A safety net: the run ends as soon as every request is answered.
        drain: PATIENCE,
        warmup: Duration::from_millis(500),
        ..LoadConfig::new(e.addr, rate, Duration::from_millis(1_500))
    };
    let l = load::run(&s, &cfg).expect("load runs");
    let r = e.shutdown();
    assert!(l.sent > 0 && l.warmup_sent > 0, "{l:?}");
    // More than a window of answers: the generator measured its path.
    assert!(l.path_p99_us > 0.0, "{l:?}");
    assert_eq!(l.ok + l.late + l.dropped + l.errors, l.sent);
    assert_eq!((l.unanswered, l.duplicates), (0, 0), "{l:?}");
    let f = r.frontend;
    // Errors only where the frontend turned arrivals away (`Overloaded`,
    // counted apart), and only when asked to.
    match shedding {
        false => assert_eq!((l.errors, f.turned_away), (0, 0), "{l:?}"),
        true => {
            assert!(l.error_codes.iter().all(|(code, _)| code == "Overloaded"), "{l:?}");
            assert_eq!(f.errors, f.turned_away, "{f:?}");
        }
    }
    let all = l.sent + l.warmup_sent;
    assert_eq!((f.received, f.answered(), f.duplicates, f.orphaned), (all, all, 0, 0), "{f:?}");
    assert!(f.dropped >= l.dropped);
    assert!(l.ok > 0, "{l:?}");
    // Every backend reports, whichever shard's loop drove it.
    assert_eq!(r.backends.len(), s.cluster.backends as usize);
    assert_eq!(r.backends.iter().map(|b| b.requests).sum::<u64>(), f.ok, "{:?}", r.backends);
}

#[test]
fn every_request_is_answered_exactly_once_at_twice_goodput() {
    let _alone = alone();
    // `baton sim --find-goodput` on the built-in scenario: about 1,235 r/s.
    exactly_once(PolicyKind::Symphony, 2_500.0);
    exactly_once(PolicyKind::Clockwork, 2_500.0);
    // With the frontend ready to turn arrivals away while behind: each one
    // turned away is read no further than its head, answered `Overloaded`
    // and counted apart; every request is still answered once.
    exactly_once_with(PolicyKind::Symphony, 2_500.0, EngineConfig { shed_when_behind: true, ..Default::default() });
}

#[test]
fn symphony_split_over_model_shards_answers_exactly_once() {
    let _alone = alone();
    // Three models on two model shards plus the rank shard: requests,
    // grants and batches cross shards.
    exactly_once_sharded(PolicyKind::Symphony, 800.0, 2);
    exactly_once_sharded(PolicyKind::Symphony, 2_500.0, 2);
}

/// `baton serve` on one core: the frontend shard's event loop drives the
/// scheduler's shards (Symphony whole, and split over two model shards)
/// beside its connections.
#[test]
fn every_shard_on_one_core_runs_in_one_event_loop() {
    let _alone = alone();
    exactly_once_on(PolicyKind::Symphony, 2_500.0, 0, Some(vec![0]));
    exactly_once_on(PolicyKind::Symphony, 2_500.0, 2, Some(vec![0]));
}

/// Two frontend shards, Symphony split over two model shards: requests
/// enter through either frontend, and each answer goes back through the
/// one its request came in by.
#[test]
fn several_frontend_shards_answer_exactly_once() {
    let _alone = alone();
    let cfg = EngineConfig { frontend_shards: 2, ..Default::default() };
    exactly_once_with(PolicyKind::Symphony, 2_500.0, EngineConfig { model_shards: 2, ..cfg.clone() });
    exactly_once_with(PolicyKind::Clockwork, 2_500.0, EngineConfig { cores: Some(vec![0]), ..cfg });
}

#[test]
fn nexus_runs_its_plan_in_the_engine() {
    let _alone = alone();
    exactly_once(PolicyKind::Nexus, 800.0);
}

/// glet re-planning every epoch behind the engine: on a mix that shifts,
/// GPUs are re-partitioned while requests flow (the scheduler announces
/// new layouts, the backends' executors follow them), and every request
/// is answered exactly once.
#[test]
fn glet_re_partitions_gpus_while_serving_and_loses_nothing() {
    let _alone = alone();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../perf/scenarios/glet-shift-epochs.toml");
    let mut s = baton_perf::load_scenario(&path).expect("shipped scenario parses");
    let secs = Duration::from_secs(8);
    (s.warmup, s.duration, s.policy_epoch) = (0, secs.as_nanos() as u64, Some(1_000_000_000));
    let rate = 6_500.0;
    let listen = "127.0.0.1:0".parse().unwrap();
    let e = start(&s, s.policy, &EngineConfig { listen, plan_rate_rps: rate, ..Default::default() }).expect("starts");
    let cfg =
        LoadConfig { connections: 3, drain: PATIENCE, warmup: Duration::ZERO, ..LoadConfig::new(e.addr, rate, secs) };
    let l = load::run(&s, &cfg).expect("load runs");
    let r = e.shutdown();
    assert!(r.scheduler.relayouts >= 1, "no GPU re-partitioned: {:?}", r.scheduler);
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    let f = r.frontend;
    assert_eq!((f.received, f.answered(), f.duplicates, r.held_at_stop), (l.sent, l.sent, 0, 0), "{f:?}");
    assert!(l.ok > l.sent / 2, "{l:?}");
}

/// `baton load` on `s` at `target`, `rate_rps` for `secs`, on a thread of its own.
fn load_behind(
    s: &Scenario,
    target: std::net::SocketAddr,
    rate_rps: f64,
    secs: u64,
) -> std::thread::JoinHandle<load::LoadReport> {
    let s = s.clone();
    std::thread::spawn(move || {
        let cfg = LoadConfig {
            connections: 2,
            input_floats: vec![FLOATS],
            drain: PATIENCE,
            ..LoadConfig::new(target, rate_rps, Duration::from_secs(secs))
        };
        load::run(&s, &cfg).expect("load runs")
    })
}

/// Each test here runs an engine, most with a load, on the real clock:
/// one at a time, so that two never share the cores. Side by side on a
/// slow 2-core machine with a noisy host, deadline-bound tests failed
/// (a backend process leaving dropped 5 of 964 requests with ingress at
/// 0.9 ms p50, ~0.1 ms alone).
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The configuration of role processes: the cluster secret they share.
fn role_config() -> EngineConfig {
    let key = ClusterKey::new(b"the tests' cluster secret").unwrap();
    EngineConfig { input_floats: FLOATS, cluster_key: Some(key), ..Default::default() }
}

/// Roles prove they hold the cluster secret before they are trusted. A
/// client that greets a frontend as a backend stays a client (before, it
/// became a peer whose results and drops the frontend took); a connection
/// to a role listener without the secret is closed with nothing it sent
/// taken; a backend process with another secret cannot join, and a role
/// process without one does not start. The cluster serves on throughout.
#[test]
fn only_roles_holding_the_cluster_secret_are_peers() {
    let _alone = alone();
    use baton_core::runtime::{start_role, RoleSpec};
    let s = scenario();
    let any = "127.0.0.1:0".parse().unwrap();
    let cfg = role_config();
    let role = |cfg: &EngineConfig, spec| start_role(&s, s.policy, cfg, spec);
    let sched = role(&cfg, RoleSpec::Scheduler { listen: any }).unwrap();
    let fe =
        role(&cfg, RoleSpec::Frontend { index: 0, listen: any, peers: any, schedulers: vec![sched.addr.unwrap()] })
            .unwrap();
    let all = || RoleSpec::Backends {
        first: 0,
        count: s.cluster.backends,
        scheduler: sched.addr.unwrap(),
        frontends: vec![fe.peer_addr.unwrap()],
    };
    let backends = role(&cfg, all()).unwrap();
    // A connection to a role listener that never greets (checked below).
    let mut silent = Client::at(sched.addr.unwrap());
    let opened = Instant::now();
    let forged = Message::Results(fb::Results { batch_id: 1, requests: Some(vec![1]), ..Default::default() });
    let posing = fb::Hello { role: fb::Role::Backend, index: 0, ..Default::default() };

    // The client port: a greeting is a kind clients do not send.
    let mut c = Client::at(fe.addr.unwrap());
    c.send(&Message::Hello(posing.clone()));
    assert_eq!(c.error(), fb::ErrorCode::UnexpectedKind);
    c.send(&forged);
    assert_eq!(c.error(), fb::ErrorCode::UnexpectedKind);
    c.send(&Message::InferRequest(request(7, "BERT-base", 200, FLOATS)));
    assert_eq!(c.answer().unwrap().status, fb::Status::Ok, "still served as a client");

    // The role listeners: challenged; a made-up proof, or none, closes.
    for (addr, proof) in [(fe.peer_addr, Some(vec![0; 32])), (sched.addr, None)] {
        let mut p = Client::at(addr.unwrap());
        let Some(Message::Hello(challenge)) = p.message() else { panic!("a role listener speaks first") };
        assert_eq!(challenge.nonce.as_ref().map(Vec::len), Some(32));
        p.send(&Message::Hello(fb::Hello { nonce: Some(vec![1; 32]), proof, ..posing.clone() }));
        p.send(&forged);
        assert!(p.message().is_none(), "closed without an answer");
    }

    // Another secret, or none.
    let other = EngineConfig { cluster_key: Some(ClusterKey::new(b"some other secret").unwrap()), ..cfg.clone() };
    let err = role(&other, all()).err().expect("refused").to_string();
    assert!(err.contains("cluster secret"), "{err}");
    let none = EngineConfig { cluster_key: None, ..cfg.clone() };
    let err = role(&none, RoleSpec::Scheduler { listen: any }).err().expect("refused").to_string();
    assert!(err.contains("cluster secret"), "{err}");

    let l = load_behind(&s, fe.addr.unwrap(), 300.0, 1).join().unwrap();
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    assert!(l.ok > 0);
    // The silent connection is challenged, then closed once its time to
    // greet (5 s) is over, not before.
    let Some(Message::Hello(_)) = silent.message() else { panic!("a role listener speaks first") };
    assert!(silent.message().is_none(), "closed without an answer");
    assert!(opened.elapsed() >= Duration::from_secs(4), "closed after {:?}", opened.elapsed());
    let (b, f, sc) = (backends.shutdown(), fe.shutdown(), sched.shutdown());
    assert!(b.backends.iter().map(|x| x.batches).sum::<u64>() > 0);
    assert_eq!((f.frontend.duplicates, f.frontend.received), (0, l.sent + 1), "no forged result was taken: {f:?}");
    assert_eq!(f.refused_peers, 1, "the made-up proof");
    // The greeting without a proof, the silent connection, and the backend
    // with another secret (which tries again for its patience).
    assert!(sc.refused_peers >= 3, "{sc:?}");
}

/// A scheduler and a frontend as role processes of `s` under `policy`
/// (the scheduler configured by `sched_cfg`), for backend processes to
/// join.
struct Roles<'a> {
    s: &'a Scenario,
    policy: PolicyKind,
    sched: baton_core::runtime::RoleProcess,
    fe: baton_core::runtime::RoleProcess,
}

impl<'a> Roles<'a> {
    fn start(s: &'a Scenario, policy: PolicyKind, sched_cfg: &EngineConfig) -> Self {
        use baton_core::runtime::{start_role, RoleSpec};
        let any = "127.0.0.1:0".parse().unwrap();
        let sched = start_role(s, policy, sched_cfg, RoleSpec::Scheduler { listen: any }).expect("scheduler starts");
        let spec = RoleSpec::Frontend { index: 0, listen: any, peers: any, schedulers: vec![sched.addr.unwrap()] };
        let fe = start_role(s, policy, &role_config(), spec).expect("frontend starts");
        Self { s, policy, sched, fe }
    }

    /// A process of backends `first .. first + count`, joined.
    fn backends(&self, first: u32, count: u32) -> baton_core::runtime::RoleProcess {
        let spec = baton_core::runtime::RoleSpec::Backends {
            first,
            count,
            scheduler: self.sched.addr.unwrap(),
            frontends: vec![self.fe.peer_addr.unwrap()],
        };
        baton_core::runtime::start_role(self.s, self.policy, &role_config(), spec).expect("backends start")
    }

    fn client_addr(&self) -> std::net::SocketAddr {
        self.fe.addr.unwrap()
    }
}

/// Serves `s` with its backends in two processes, the first holding
/// backends `0..half` — and kills it once it has run a batch, with `rate`
/// r/s of load still running for `secs`. Checks that every request is
/// answered exactly once and the other process carried on; returns the
/// load's report.
fn serve_and_kill_half(s: &Scenario, rate_rps: f64, secs: u64) -> load::LoadReport {
    let roles = Roles::start(s, s.policy, &role_config());
    let (n, half) = (s.cluster.backends, s.cluster.backends / 2);
    let (a, b) = (roles.backends(0, half), roles.backends(half, n - half));
    let load = load_behind(s, roles.client_addr(), rate_rps, secs);
    // The first process dies once it has run a batch, with the load still
    // running (it runs the first backends, so it gets work early on).
    wait_for("the first backend process to run a batch", || {
        let ran = a.progress().batches() > 0;
        assert!(ran || !load.is_finished(), "the load ended before the first backend process ran a batch");
        ran
    });
    let killed = a.kill();
    let l = load.join().unwrap();
    let (f, s, b) = (roles.fe.shutdown(), roles.sched.shutdown(), b.shutdown());
    assert!(killed.backends.iter().map(|x| x.batches).sum::<u64>() > 0, "the first process served before dying");
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    assert_eq!(l.ok + l.late + l.dropped, l.sent);
    assert_eq!((f.frontend.received, f.frontend.answered(), f.held_at_stop), (l.sent, l.sent, 0), "{f:?}");
    // The other backends carried on.
    assert!(b.backends.iter().map(|x| x.batches).sum::<u64>() > 0);
    assert!(s.scheduler.batches > 0);
    l
}

#[test]
fn a_backend_process_that_dies_loses_no_request() {
    let _alone = alone();
    serve_and_kill_half(&scenario(), 600.0, 2);
}

/// Every backend's process dies under load, and a new one starts in its
/// place: the scheduler takes the backends back when they connect (their
/// connection is their word that they are healthy) and serves on them;
/// every request is answered exactly once throughout.
#[test]
fn a_backend_process_restarted_after_dying_serves_again() {
    let _alone = alone();
    let s = scenario();
    let roles = Roles::start(&s, PolicyKind::Clockwork, &role_config());
    let first = roles.backends(0, s.cluster.backends);
    let load = load_behind(&s, roles.client_addr(), 400.0, 3);
    wait_for("the first backend process to run a batch", || first.progress().batches() > 0);
    let died = first.kill();
    std::thread::sleep(Duration::from_millis(300));
    let second = roles.backends(0, s.cluster.backends);
    wait_for("the restarted backend process to run a batch", || {
        assert!(!load.is_finished(), "the load ended before the restarted backends served");
        second.progress().batches() > 0
    });
    let l = load.join().unwrap();
    let (f, _, again) = (roles.fe.shutdown(), roles.sched.shutdown(), second.shutdown());
    assert!(died.backends.iter().map(|x| x.batches).sum::<u64>() > 0);
    assert!(again.backends.iter().map(|x| x.batches).sum::<u64>() > 0, "the scheduler uses the backends again");
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    assert_eq!(l.ok + l.late + l.dropped, l.sent);
    assert_eq!((f.frontend.received, f.frontend.answered(), f.held_at_stop), (l.sent, l.sent, 0), "{f:?}");
    assert!(l.dropped > 0, "requests while no backend was up are dropped: {l:?}");
}

/// Scaling in and out under load: a backend process leaves (stopped:
/// it runs what it was sent, then goes) and a new one joins in its place
/// while the other serves on. Nothing is lost to the leave — no request
/// is dropped for its backend, at a load the backends left hold — and the
/// newcomer is used.
#[test]
fn a_backend_process_leaving_and_one_joining_lose_nothing() {
    let _alone = alone();
    let s = scenario();
    let roles = Roles::start(&s, PolicyKind::Symphony, &role_config());
    let (n, half) = (s.cluster.backends, s.cluster.backends / 2);
    let (a, b) = (roles.backends(0, half), roles.backends(half, n - half));
    let load = load_behind(&s, roles.client_addr(), 300.0, 3);
    wait_for("the first backend process to run a batch", || a.progress().batches() > 0);
    let left = a.shutdown();
    let joined = roles.backends(0, half);
    wait_for("the new backend process to run a batch", || {
        assert!(!load.is_finished(), "the load ended before the new backends served");
        joined.progress().batches() > 0
    });
    let l = load.join().unwrap();
    let (f, _, b, joined) = (roles.fe.shutdown(), roles.sched.shutdown(), b.shutdown(), joined.shutdown());
    let batches = |r: &baton_core::runtime::EngineReport| r.backends.iter().map(|x| x.batches).sum::<u64>();
    assert!(batches(&left) > 0 && batches(&b) > 0 && batches(&joined) > 0);
    assert_eq!(left.backends.iter().map(|x| x.failed_batches).sum::<u64>(), 0, "the leaving process lost nothing");
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    // A leave loses a request as `BackendFailed` (or `Lost`, `NoBackend`):
    // none may be. A request the scheduler cannot finish in time is a
    // stalled host's, not the leave's (one, after a 13.7 ms stall of the
    // load generator, failed CI): at most the goodput bar's 1% of them.
    let unmeetable = l.drop_reasons.iter().filter(|(r, _)| r == "CannotMeetDeadline").map(|(_, n)| n).sum::<u64>();
    assert_eq!(l.dropped, unmeetable, "dropped for another reason than a deadline: {l:?}");
    assert!(unmeetable * 100 <= l.sent, "{l:?}");
    assert_eq!((f.frontend.received, f.frontend.answered(), f.held_at_stop), (l.sent, l.sent, 0), "{f:?}");
}

/// Symphony's autoscaler in the engine (`scenarios/autoscale-step.toml`:
/// 1,500 r/s for 6 s, more than one GPU holds, then 100 r/s), followed by
/// a supervisor that starts a one-GPU backend process when the scheduler
/// advises more GPUs and stops the newest when it advises fewer: the
/// cluster grows from one, shrinks again, every request is answered
/// exactly once (none lost to a process leaving), and the scaling saves the
/// client most of what it saves in the simulator on the same file, rate
/// and seed: the bad rate stays within a third of the way from the
/// simulator's autoscaled run to its run held at one GPU (0.085 and 0.66).
/// A bound on the distance alone failed on a slower 2-core machine with
/// another test beside it (0.159 against 0.085; 0.098-0.172 alone).
#[test]
fn backend_processes_follow_the_autoscalers_advice() {
    let _alone = alone();
    use baton_sched::autoscale::AutoscaleConfig;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../perf/scenarios/autoscale-step.toml");
    let s = baton_perf::report::load_scenario(&path).expect("shipped");
    let rate = s.rate_rps.unwrap();
    let scaling = AutoscaleConfig {
        period: 500_000_000,
        threshold: 0.01,
        headroom: 0.1,
        min_gpus: 1,
        max_gpus: s.cluster.backends as usize,
        initial: 1,
        sizing: None,
    };
    let load = LoadConfig {
        connections: 2,
        input_floats: vec![FLOATS],
        ..LoadConfig::new(role_config().listen, rate, Duration::from_nanos(s.duration))
    };
    let e = baton_tools::supervise::run_autoscaled(&s, &role_config(), scaling, load).unwrap();
    let (sim, _) = baton_sched::sim::run_autoscaled(&s, PolicyKind::Symphony, rate, scaling).unwrap();
    let l = &e.load;
    let advised: Vec<usize> = e.advice.iter().map(|a| a.gpus).collect();
    println!("advice per period: {advised:?}; bad rate {:.4} (simulator {:.4})", l.bad_rate, sim.bad_rate);
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    assert_eq!(l.ok + l.late + l.dropped, l.sent);
    let f = e.frontend.frontend;
    assert_eq!((f.received, f.answered(), f.duplicates, e.frontend.held_at_stop), (l.sent, l.sent, 0, 0));
    // Grew, and shrank: processes left, each after running what it was
    // sent. (Not the size at the end: a burst in the last period can
    // grow it again just before the run stops.)
    assert!(e.most > 1, "grew to {}: {advised:?}", e.most);
    assert!(!e.left.is_empty(), "no process left: {advised:?}");
    assert!(e.left.iter().flat_map(|r| &r.backends).all(|b| b.failed_batches == 0));
    let mut one_gpu = s.clone();
    one_gpu.cluster.backends = 1;
    let unscaled = baton_sched::sim::run(&one_gpu, PolicyKind::Symphony, rate).bad_rate;
    assert!(
        l.bad_rate < sim.bad_rate + (unscaled - sim.bad_rate) / 3.0,
        "engine {} vs simulator {} autoscaled, {unscaled} on one GPU",
        l.bad_rate,
        sim.bad_rate
    );
}

#[test]
fn slackfit_keeps_serving_at_lower_accuracy_when_half_the_gpus_die() {
    let _alone = alone();
    // SuperServe's fault experiment run for real: 8 emulated GPUs, 4 of
    // them in a process killed early in the run. Without the fault the
    // simulator serves this rate at its most accurate subnets' mean.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../perf/scenarios/superserve-bursty.toml");
    let s = Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    // 5 s: a steady state after the fault long enough that one stall of
    // a noisy host's (14 ms start lags in a 3 s run that failed CI at 5.1%
    // bad, 0.3-1.6% alone) does not decide it.
    let rate = 3_000.0;
    let l = serve_and_kill_half(&s, rate, 5);
    let unharmed = baton_sched::sim::run(&s, s.policy, rate).mean_accuracy.unwrap();
    let served = l.mean_accuracy.expect("in-SLO answers name their subnet");
    println!(
        "attainment {:.4}, accuracy {served:.2}% (the simulator without the fault: {unharmed:.2}%)",
        1.0 - l.bad_rate
    );
    assert!(l.bad_rate < 0.05, "SlackFit keeps serving on the GPUs left: {l:?}");
    assert!(served < unharmed - 0.3, "on half the GPUs it serves less accurate subnets: {served} vs {unharmed}");
}

/// A client sends queries of a fork-join DAG and leaves before they end:
/// their stages still run (spawning children from parents' outputs) and
/// every query ends, answered to no one; the engine holds nothing after.
#[test]
fn a_client_that_leaves_mid_query_leaks_nothing() {
    let _alone = alone();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../perf/scenarios/nexus-forkjoin.toml");
    let s = baton_perf::report::load_scenario(&path).expect("shipped");
    let e = engine_at(&s, 200.0);
    let mut c = Client::connect(&e);
    for id in 0..30u64 {
        let mut req = request(id, "", 300, FLOATS);
        (req.model, req.query) = (None, Some("traffic-ranked".into()));
        req.inputs.as_mut().unwrap()[0].data =
            Some((0..FLOATS).flat_map(|i| ((i as u64 + id) as f32).to_le_bytes()).collect());
        c.send(&Message::InferRequest(req));
    }
    // Leave once all are read: their first stage alone takes over 24 ms.
    wait_for("the queries to be read", || e.progress().held() >= 30);
    drop(c);
    wait_for("the abandoned queries to finish", || e.progress().drained());
    let r = e.shutdown();
    let f = r.frontend;
    assert_eq!((f.received, f.answered(), f.duplicates, r.held_at_stop), (30, 30, 0, 0), "{f:?}");
    assert_eq!((f.orphaned, f.errors), (30, 0), "{f:?}");
}

/// In-process clients (the stress harness's engine) account for every
/// request they send: each answered exactly once, none left over, and
/// the frontend role answered as many as it received. Symphony split over
/// a model shard too, so its messages cross the rings; backends on shards
/// of their own; and every shard on one core, where the clients' event
/// loop drives the scheduler's shards.
#[test]
fn in_process_clients_get_every_answer_once() {
    let _alone = alone();
    use baton_core::runtime::clients::{run, Load};
    let s = scenario();
    let runs =
        [(0, 0, None), (1, 0, None), (0, 0, Some(vec![0])), (1, 0, Some(vec![0])), (1, 2, None), (0, 1, Some(vec![0]))];
    for (model_shards, backend_shards, cores) in runs {
        let cfg = EngineConfig { input_floats: FLOATS, model_shards, backend_shards, cores, ..Default::default() };
        let load = Load {
            rate_rps: 400.0,
            warmup: Duration::from_millis(200),
            measure: Duration::from_millis(800),
            seed: s.seed,
        };
        let o = run(&s, PolicyKind::Symphony, &cfg, load).expect("engine starts");
        let t = o.tally;
        assert!(t.sent > 100, "{t:?}");
        assert_eq!((t.unanswered, t.duplicates), (0, 0), "{t:?}");
        assert_eq!(t.ok + t.late + t.dropped + t.errors, t.sent, "{t:?}");
        let fe = o.engine.frontend;
        assert_eq!((fe.answered(), fe.duplicates), (fe.received, 0), "{fe:?}");
        // Every backend reports, hosted or not, and ran the batches.
        assert_eq!(o.engine.backends.len(), s.cluster.backends as usize, "{:?}", o.cores);
        let requests: u64 = o.engine.backends.iter().map(|b| b.requests).sum();
        assert_eq!(requests, fe.ok, "{:?}", o.cores);
    }
    // Three clients' loops share the arrivals: together they send every
    // one the single loop sends, each answered once.
    let load = Load { rate_rps: 400.0, warmup: Duration::ZERO, measure: Duration::from_millis(800), seed: s.seed };
    let one = run(&s, PolicyKind::Symphony, &EngineConfig { input_floats: FLOATS, ..Default::default() }, load);
    let cfg = EngineConfig { input_floats: FLOATS, frontend_shards: 3, model_shards: 1, ..Default::default() };
    let three = run(&s, PolicyKind::Symphony, &cfg, load).expect("engine starts");
    let t = three.tally;
    assert_eq!(t.sent, one.expect("engine starts").tally.sent, "{t:?}");
    assert_eq!((t.unanswered, t.duplicates), (0, 0), "{t:?}");
    assert_eq!(t.ok + t.late + t.dropped + t.errors, t.sent, "{t:?}");
    let fe = three.engine.frontend;
    assert_eq!((fe.answered(), fe.duplicates, fe.received), (fe.received, 0, t.sent), "{fe:?}");
    // Each bad request is counted once by the second it arrived in, over
    // the three loops.
    assert_eq!(three.parts.bad_by_second.iter().sum::<u64>(), t.bad(), "{:?}", three.parts.bad_by_second);
    // Far past capacity (the scenario's GPUs pass a few thousand a second)
    // with the engine shedding while behind: those turned away are
    // answered `Overloaded` once, as errors, and counted.
    let cfg = EngineConfig { input_floats: FLOATS, shed_when_behind: true, ..Default::default() };
    let load = Load { rate_rps: 300_000.0, warmup: Duration::ZERO, measure: Duration::from_millis(800), seed: s.seed };
    let o = run(&s, PolicyKind::Symphony, &cfg, load).expect("engine starts");
    let (t, fe) = (o.tally, o.engine.frontend);
    assert_eq!((t.unanswered, t.duplicates), (0, 0), "{t:?}");
    assert_eq!(t.ok + t.late + t.dropped + t.errors, t.sent, "{t:?}");
    assert_eq!((fe.answered(), fe.duplicates), (fe.received, 0), "{fe:?}");
    assert!(fe.turned_away > 0 && fe.turned_away <= fe.errors && t.errors == fe.errors, "{t:?} {fe:?}");
    assert_eq!(o.parts.bad_by_second.iter().sum::<u64>(), t.bad(), "{:?}", o.parts.bad_by_second);
    assert_eq!(o.parts.bad_by_second.len(), 1, "0.8 s measured: one second");
    // Aged arrivals: with the share next to nothing, every request the
    // loop sent any time after it was due (all but those sent on the
    // nanosecond) is turned away at the door, answered once, as an error;
    // with it at 1, none is.
    for (share, aged) in [(1e-12, true), (1.0, false)] {
        let cfg = EngineConfig { input_floats: FLOATS, shed_aged_share: share, ..Default::default() };
        let load =
            Load { rate_rps: 2_000.0, warmup: Duration::ZERO, measure: Duration::from_millis(500), seed: s.seed };
        let o = run(&s, PolicyKind::Symphony, &cfg, load).expect("engine starts");
        let (t, fe) = (o.tally, o.engine.frontend);
        assert_eq!((t.unanswered, t.duplicates, fe.duplicates), (0, 0, 0), "{t:?}");
        assert_eq!((t.ok + t.late + t.dropped + t.errors, fe.answered()), (t.sent, fe.received), "{t:?} {fe:?}");
        match aged {
            true => assert!(fe.turned_away * 10 >= t.sent * 9 && t.errors == fe.turned_away, "{t:?} {fe:?}"),
            false => assert_eq!((fe.turned_away, t.errors), (0, 0), "{t:?} {fe:?}"),
        }
    }
}

/// A scenario's stall (`[[stalls]]`) stops the scheduler's shard as the
/// simulator holds its clock: requests that arrive early in a stall longer
/// than their SLO cannot be served in time (about 40 at this rate, fewer
/// than 10 without the stall), and still every one is answered once. The
/// simulator, on the same file and rate, loses them too.
#[test]
fn a_stall_stops_the_scheduler_and_every_request_is_still_answered_once() {
    let _alone = alone();
    use baton_core::runtime::clients::{run, Load};
    let mut s = scenario();
    // Inside the 0.8 s of load unless the clients started 0.4 s after the shard.
    s.stalls = vec![baton_sched::scenario::Stall { from: 400_000_000, to: 550_000_000 }];
    let load = Load { rate_rps: 400.0, warmup: Duration::ZERO, measure: Duration::from_millis(800), seed: s.seed };
    let o = run(&s, PolicyKind::Symphony, &EngineConfig { input_floats: FLOATS, ..Default::default() }, load)
        .expect("engine starts");
    let (t, fe) = (o.tally, o.engine.frontend);
    assert_eq!((t.unanswered, t.duplicates, fe.duplicates), (0, 0, 0), "{t:?}");
    assert_eq!((t.ok + t.late + t.dropped + t.errors, fe.answered()), (t.sent, fe.received), "{t:?} {fe:?}");
    assert!(t.bad() >= 25, "the stall cost nothing: {t:?}");
    let mut sim = s.clone();
    (sim.warmup, sim.duration) = (0, 800_000_000);
    let r = baton_sched::sim::run(&sim, PolicyKind::Symphony, 400.0);
    assert!(r.late + r.dropped >= 25, "the simulator's stall cost nothing: {r:?}");
}

/// A frontend keeps at most `max_connections` open: one more is answered
/// `Overloaded` and closed, and those already open are served as before;
/// once one closes, a new one is taken again.
#[test]
fn connections_beyond_the_limit_are_refused_typed() {
    let _alone = alone();
    let listen = "127.0.0.1:0".parse().unwrap();
    let cfg = EngineConfig { listen, input_floats: FLOATS, max_connections: 2, ..Default::default() };
    let e = start(&scenario(), scenario().policy, &cfg).expect("engine starts");
    let (mut a, b) = (Client::connect(&e), Client::connect(&e));
    wait_for("two connections open", || e.progress().connections_open() == 2);
    let mut third = Client::connect(&e);
    assert_eq!(third.error(), fb::ErrorCode::Overloaded);
    assert!(third.closed());
    a.send(&Message::InferRequest(request(7, "BERT-base", 200, FLOATS)));
    assert_eq!(a.answer().map(|r| (r.id, r.status)), Some((7, fb::Status::Ok)));
    drop(b);
    wait_for("one connection open", || e.progress().connections_open() == 1);
    still_serves(&e);
    let r = e.shutdown();
    assert_eq!(r.refused_connections, 1);
}

/// A client that sends and never reads: the frontend buffers at most
/// `max_unread` bytes of its answers (beyond what the sockets hold), then
/// aborts its connection — the client's writes fail — while another
/// client is served; every request it sent is still accounted for (its
/// answers orphaned). Before the bound, the answers piled up in memory.
#[test]
fn a_client_that_never_reads_is_cut_off_and_others_are_served() {
    let _alone = alone();
    let listen = "127.0.0.1:0".parse().unwrap();
    let cfg = EngineConfig { listen, input_floats: FLOATS, max_unread: 64 << 10, ..Default::default() };
    let e = start(&scenario(), scenario().policy, &cfg).expect("engine starts");
    let mut hog = Client::connect(&e);
    let frame = encode(&Message::InferRequest(request(1, "ResNet50", 200, FLOATS))).unwrap();
    // Cut off: a write fails with a reset. Not cut off: every write goes
    // through, or one stalls (the server stopped reading) past the timeout.
    hog.s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    let sender = std::thread::spawn(move || {
        let many = frame.repeat(1_000);
        for sent in 0..2_000 {
            match hog.s.write_all(&many) {
                Ok(()) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return None
                }
                Err(_) => return Some(sent),
            }
        }
        None
    });
    // Meanwhile another client is answered (the flood may crowd its model).
    let mut other = Client::connect(&e);
    other.send(&Message::InferRequest(request(42, "BERT-base", 200, FLOATS)));
    assert_eq!(other.answer().map(|a| a.id), Some(42));
    let cut_after = sender.join().unwrap();
    assert!(cut_after.is_some(), "2 M requests written and never cut off");
    // Once the flood it had admitted is answered, the engine serves as before.
    wait_for("the cut-off client's requests to end", || e.progress().held() == 0);
    still_serves(&e);
    let r = e.shutdown();
    assert_eq!(r.unread_closed, 1, "{r:?}");
    // (Flooded past what it can schedule within the frontend's grace, the
    // frontend answers some requests Lost itself; the scheduler's later
    // drops for them are refused, counted in `duplicates`.)
    let f = r.frontend;
    assert_eq!(f.received, f.answered(), "{f:?}");
    assert!(f.orphaned > 0, "the cut-off client's answers are orphaned: {f:?}");
}

#[test]
fn the_client_library_gets_each_request_its_own_answer() {
    let _alone = alone();
    let s = scenario();
    let e = engine(&s);
    let mut c = baton_net::client::Client::connect(e.addr).expect("connects");
    let ok = c.infer(request(7, "ResNet50", 1_000, FLOATS)).expect("answered");
    assert_eq!((ok.id, ok.status), (7, fb::Status::Ok), "{ok:?}");
    let err = c.infer(request(8, "nope", 1_000, FLOATS)).expect("answered");
    assert_eq!((err.id, err.status, err.error_code), (8, fb::Status::Error, fb::ErrorCode::UnknownModel));
    drop(c);
    let f = e.shutdown().frontend;
    assert_eq!((f.received, f.answered(), f.duplicates), (2, 2, 0), "{f:?}");
}

#[test]
fn a_binary_client_unloads_and_loads_a_model() {
    let _alone = alone();
    let e = engine(&scenario());
    let mut c = Client::connect(&e);
    let unload = |id, name: &str| fb::ModelUnload { model: 0, backend: 0, name: Some(name.into()), id };
    c.send(&Message::ModelUnload(unload(1, "ResNet50")));
    let a = c.answer().unwrap();
    assert_eq!((a.id, a.status), (1, fb::Status::Ok), "{a:?}");
    c.send(&Message::InferRequest(request(2, "ResNet50", 100, FLOATS)));
    let a = c.answer().unwrap();
    assert_eq!((a.id, a.status, a.error_code), (2, fb::Status::Error, fb::ErrorCode::Unloaded), "{a:?}");
    c.send(&Message::ModelUnload(unload(3, "nope")));
    let a = c.answer().unwrap();
    assert_eq!((a.id, a.status, a.error_code), (3, fb::Status::Error, fb::ErrorCode::UnknownModel), "{a:?}");
    let load = fb::ModelLoad { model: 0, name: Some("ResNet50".into()), backend: 0, max_batch: 0, id: 4 };
    c.send(&Message::ModelLoad(load));
    assert_eq!(c.answer().unwrap().status, fb::Status::Ok);
    c.send(&Message::InferRequest(request(5, "ResNet50", 100, FLOATS)));
    assert_eq!(c.answer().unwrap().status, fb::Status::Ok);
    let f = e.shutdown().frontend;
    assert_eq!((f.received, f.answered(), f.duplicates), (2, 2, 0), "{f:?}");
}

/// A scheduler that greets one frontend as the real one does, then never
/// reads from it; its thread returns the connection (kept open) when asked.
fn deaf_scheduler(key: &ClusterKey) -> (std::net::SocketAddr, std::thread::JoinHandle<Client>) {
    use baton_core::runtime::auth::Challenge;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let key = key.clone();
    let t = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut c = Client { s, buf: FrameBuf::default() };
        let origin = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let me = fb::Hello { role: fb::Role::Scheduler, origin_unix_ns: origin, ..Default::default() };
        let mut challenge = Challenge::new(&key, me);
        c.send(&Message::Hello(challenge.greeting()));
        let Some(Message::Hello(h)) = c.message() else { panic!("the frontend greets") };
        let reply = challenge.check(&h).expect("the frontend holds the secret").expect("its first greeting");
        c.send(&Message::Hello(reply));
        c
    });
    (addr, t)
}

/// What a flood of requests to a frontend behind a deaf scheduler got:
/// requests sent, and the first answer that was not `Ok`.
fn flood_behind_deaf_scheduler(cfg: &EngineConfig) -> (u64, fb::InferResponse, baton_core::runtime::EngineReport) {
    use baton_core::runtime::{start_role, RoleSpec};
    // The client is never cut off for reading slowly here: on two cores the
    // flooding writer and the frontend can starve the reader long enough
    // for 64 MiB of refusals to wait for it (a CI run saw its connection
    // aborted before it read the first answer). The bound on what the
    // frontend buffers for the scheduler is what these tests are about.
    let cfg = &EngineConfig { max_unread: 1 << 30, ..cfg.clone() };
    let s = scenario();
    let any = "127.0.0.1:0".parse().unwrap();
    let (sched, deaf) = deaf_scheduler(cfg.cluster_key.as_ref().unwrap());
    let fe = start_role(
        &s,
        s.policy,
        cfg,
        RoleSpec::Frontend { index: 0, listen: any, peers: any, schedulers: vec![sched] },
    )
    .expect("the frontend starts");
    let _deaf = deaf.join().unwrap();
    let mut c = Client::at(fe.addr.unwrap());
    let mut writer = c.s.try_clone().unwrap();
    // Long SLOs: what the frontend holds stays held while the flood runs.
    let frame = encode(&Message::InferRequest(request(1, "ResNet50", 60_000, FLOATS))).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = std::sync::Arc::clone(&stop);
    let sender = std::thread::spawn(move || {
        let many = frame.repeat(1_000);
        let mut sent = 0;
        // 2 M requests at most: a frontend without the bound holds them all.
        while sent < 2_000_000 && !stopped.load(std::sync::atomic::Ordering::Acquire) {
            writer.write_all(&many).unwrap();
            sent += 1_000;
        }
        sent
    });
    // Answers are read as they come (a client that stops reading is cut
    // off); the first one stops the flood.
    let half = c.s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let first = c.answer().expect("an answer comes while the scheduler does not read");
        stop.store(true, std::sync::atomic::Ordering::Release);
        let mut answered = 1;
        while c.answer().is_some() {
            answered += 1;
        }
        (first, answered)
    });
    let sent = sender.join().unwrap();
    // The client is done sending: the frontend reads the rest, answers
    // what it can and closes. Every request it read is answered once, to
    // the client or, held still (it has left), orphaned.
    half.shutdown(Shutdown::Write).unwrap();
    let (first, answered) = reader.join().unwrap();
    let r = fe.shutdown();
    let f = r.frontend;
    assert_eq!(r.unread_closed, 0, "the client read its answers: {r:?}");
    assert_eq!((answered + f.orphaned, f.answered()), (f.received, f.received), "{r:?}");
    (sent, first, r)
}

/// A scheduler that does not keep up (here: does not read at all) makes
/// the frontend shed new requests `Overloaded` at once, with the reason,
/// once `max_waiting` messages wait for it; before, they queued without
/// bound in the connection's outbox (2 M requests, no answer).
#[test]
fn a_frontend_whose_scheduler_does_not_read_sheds_new_requests() {
    let _alone = alone();
    let cfg = EngineConfig { max_waiting: 1_000, ..role_config() };
    let (sent, first, r) = flood_behind_deaf_scheduler(&cfg);
    assert_eq!(first.error_code, fb::ErrorCode::Overloaded, "{first:?}");
    assert!(first.message.as_deref().unwrap().contains("wait to reach the scheduler"), "{first:?}");
    assert!(sent < 2_000_000 && r.cut_peers == 0, "{r:?}");
}

/// With no bound on what waits, a scheduler that leaves `max_peer_unread`
/// bytes unread is cut off as gone: the frontend answers what it held and
/// refuses new requests `Unavailable`, instead of buffering for it
/// without bound.
#[test]
fn a_frontend_cuts_off_a_scheduler_that_does_not_read() {
    let _alone = alone();
    let cfg = EngineConfig { max_waiting: usize::MAX, max_peer_unread: 1 << 20, ..role_config() };
    let (sent, first, r) = flood_behind_deaf_scheduler(&cfg);
    assert!(sent < 2_000_000 && r.cut_peers == 1, "{r:?}");
    let lost = (first.status, first.drop_reason) == (fb::Status::Dropped, fb::DropReason::Lost);
    let refused = (first.status, first.error_code) == (fb::Status::Error, fb::ErrorCode::Unavailable);
    assert!(lost || refused, "{first:?}");
}
