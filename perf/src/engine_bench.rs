//! The engine measured end to end on loopback (perf/README.md, "The engine
//! end to end"):
//!
//! 1. Table 4 ResNet50 served by `baton serve`'s runtime under the load
//!    generator, against `baton sim` on the same file and seed: the
//!    engine's goodput as the papers define it — the highest rate at which
//!    at most 1% of requests are bad as the client sees them, found by
//!    search with a fresh engine per probe — beside the simulator's; and
//!    one run at the simulator's goodput rate with the time the engine
//!    adds beyond its plan in four parts (`overhead.rs`).
//! 2. Throughput: the highest offered rate of tiny requests with a cheap
//!    profile (`engine-tiny.toml`) the engine sustains — every request
//!    answered, at most 1% bad, the generator keeping to its schedule —
//!    found by doubling then bisecting; then the four overhead parts at
//!    half that rate.
//!
//! Load generator and server share the machine: a ratio from one run is
//! what carries to another machine.

use std::net::SocketAddr;
use std::time::Duration;

use baton_core::runtime::auth::ClusterKey;
use baton_core::runtime::{start, start_role, EngineConfig, EngineError, EngineReport, RoleSpec};
use baton_sched::sim::{find_goodput, run as simulate};
use baton_sched::Scenario;
pub use baton_tools::goodput::{engine_goodput, passes, search_rate, GOODPUT_TOLERANCE};
use serde::Serialize;

use crate::gap::{self, Gap};
use crate::load::{self, LoadConfig, LoadReport};
use crate::report::load_scenario;

fn scenario(name: &str) -> Scenario {
    let path = crate::shipped_scenarios().into_iter().find(|p| p.ends_with(name)).expect("a shipped scenario");
    load_scenario(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Where the engine and the generator run: cores of their own where the
/// machine has two or more (`load::split_cores`: the engine's first), else
/// anywhere.
pub fn placement() -> (Option<Vec<usize>>, Vec<usize>) {
    load::split_cores(&load::allowed_cores())
        .map_or((None, Vec::new()), |(server, generator)| (Some(server), generator))
}

/// One load run against `target`: one connection (fewer generator threads
/// on a small machine) on the generator's cores, the scenario's warm-up
/// first (not counted, as the simulator skips it), a 2 s drain, at nice 0
/// where its cores are its own (`load::nice_for`); `spin`: the generator
/// busy-polls (`LoadConfig::spin`).
fn drive(s: &Scenario, target: SocketAddr, rate: f64, secs: f64, input_floats: usize, spin: bool) -> LoadReport {
    load::run(s, &load_config(s, target, rate, secs, input_floats, spin)).unwrap_or_else(|e| panic!("{e}"))
}

/// `drive`'s load.
fn load_config(s: &Scenario, target: SocketAddr, rate: f64, secs: f64, input_floats: usize, spin: bool) -> LoadConfig {
    let (server, generator) = placement();
    LoadConfig {
        input_floats: vec![input_floats],
        warmup: Duration::from_nanos(s.warmup),
        nice: load::nice_for(server.as_deref(), &[], &generator),
        cores: generator,
        spin,
        ..LoadConfig::new(target, rate, Duration::from_secs_f64(secs))
    }
}

/// `serve_and_load` set beside the simulator's run of `s` (its duration
/// `secs`) at `rate` request by request (`baton_tools::gap`).
pub fn serve_and_load_gap(s: &Scenario, rate: f64, secs: f64) -> (LoadReport, EngineReport, Gap) {
    let cfg = local(rate);
    let load = |addr| load::run_with_fates(s, &load_config(s, addr, rate, secs, cfg.input_floats, false));
    let (run, report) = serve_with(s, &cfg, load).unwrap_or_else(|e| panic!("{e}"));
    let (r, engine_fates) = run.unwrap_or_else(|e| panic!("{e}"));
    let (_, sim_fates) = baton_sched::sim::run_fates(s, s.policy, rate);
    (r, report, gap::compare(&sim_fates, &engine_fates, s.warmup))
}

/// One engine, one load run at `rate` for `secs`: what the generator saw
/// and what the engine counted.
pub fn serve_and_load(s: &Scenario, rate: f64, secs: f64) -> (LoadReport, EngineReport) {
    serve_sharded_and_load(s, rate, secs, 0)
}

/// The same, with Symphony's model shards on `model_shards` shards of their own.
pub fn serve_sharded_and_load(s: &Scenario, rate: f64, secs: f64, model_shards: usize) -> (LoadReport, EngineReport) {
    serve_config_and_load(s, &EngineConfig { model_shards, ..local(rate) }, secs, false)
}

/// An engine on loopback, any port, planning for `rate`, on the engine's cores.
fn local(rate: f64) -> EngineConfig {
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
    EngineConfig { listen, plan_rate_rps: rate, cores: placement().0, ..Default::default() }
}

/// One engine configured as `cfg` (its `plan_rate_rps` the offered rate),
/// one load run.
fn serve_config_and_load(s: &Scenario, cfg: &EngineConfig, secs: f64, spin: bool) -> (LoadReport, EngineReport) {
    try_serve_config_and_load(s, cfg, secs, spin).unwrap_or_else(|e| panic!("{e}"))
}

fn try_serve_config_and_load(
    s: &Scenario,
    cfg: &EngineConfig,
    secs: f64,
    spin: bool,
) -> Result<(LoadReport, EngineReport), EngineError> {
    serve_with(s, cfg, |addr| drive(s, addr, cfg.plan_rate_rps, secs, cfg.input_floats, spin))
}

/// One engine configured as `cfg` serving `s` while `run` loads it at its
/// address; what `run` returns and what the engine counted.
fn serve_with<T>(
    s: &Scenario,
    cfg: &EngineConfig,
    run: impl FnOnce(SocketAddr) -> T,
) -> Result<(T, EngineReport), EngineError> {
    let engine = start(s, s.policy, cfg)?;
    let r = run(engine.addr);
    Ok((r, engine.shutdown()))
}

/// A goodput search's probe at `rate`: what the generator saw, or — where
/// the engine refuses to serve the file at that rate (a partition plan
/// that fits nothing there) — a probe that fails, the reason on stderr.
pub fn probe(s: &Scenario, rate: f64, secs: f64) -> LoadReport {
    match try_serve_config_and_load(s, &local(rate), secs, false) {
        Ok((r, _)) => r,
        Err(e) => {
            eprintln!("  probe at {rate:.1} r/s: {e}");
            LoadReport { bad_rate: 1.0, ..Default::default() }
        }
    }
}

/// The busy-poll budget of the run at half the sustained rate that trades
/// cores for latency (`--poll-us`).
pub const LATENCY_POLL: Duration = Duration::from_micros(200);

/// The three roles on their own executors, joined by loopback TCP (the
/// code `baton frontend | scheduler | backend` runs), one load run.
pub fn roles_and_load(s: &Scenario, rate: f64, secs: f64) -> LoadReport {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
    // A fresh secret each run: the roles are this process's own.
    let key = ClusterKey::new(format!("bench {:?}", std::time::SystemTime::now()).as_bytes()).expect("long enough");
    let cfg = EngineConfig { plan_rate_rps: rate, cluster_key: Some(key), cores: placement().0, ..Default::default() };
    let start = |spec| start_role(s, s.policy, &cfg, spec).unwrap_or_else(|e| panic!("{e}"));
    let sched = start(RoleSpec::Scheduler { listen: any });
    let sched_addr = sched.addr.expect("listens");
    let fe = start(RoleSpec::Frontend { index: 0, listen: any, peers: any, schedulers: vec![sched_addr] });
    let fe_addr = fe.addr.expect("listens");
    let be = start(RoleSpec::Backends {
        first: 0,
        count: s.cluster.backends,
        scheduler: sched_addr,
        frontends: vec![fe.peer_addr.expect("listens for backends")],
    });
    let r = drive(s, fe_addr, rate, secs, cfg.input_floats, false);
    for p in [fe, be, sched] {
        p.shutdown();
    }
    r
}

/// The simulator's goodput on `s`, searched as the engine's is.
pub fn sim_goodput(s: &Scenario) -> f64 {
    find_goodput(s, s.policy, GOODPUT_TOLERANCE).goodput_rps
}

#[derive(Debug, Serialize)]
pub struct EndToEnd {
    /// The simulator's goodput on the same file and seed.
    pub sim_goodput_rps: f64,
    /// The engine's, found the same way as the client sees it.
    pub engine_goodput_rps: f64,
    pub goodput_probes: Vec<(f64, bool)>,
    /// Engine goodput over the simulator's.
    pub goodput_ratio: f64,
    /// The run at the simulator's goodput rate.
    pub rate_rps: f64,
    pub engine: LoadReport,
    /// Of the requests the engine answered ok, those it answered after
    /// their deadline by its own clock (the rest of the generator's `late`
    /// were late on the way back or in the generator).
    pub server_late: u64,
    /// In-SLO throughput of the engine over the simulator's at that rate.
    pub in_slo_ratio: f64,
    /// The same load on the roles as separate executors over TCP.
    pub roles_over_tcp: LoadReport,
    /// The roles' goodput, searched as the engine's is, and its probes.
    pub roles_goodput_rps: f64,
    pub roles_goodput_probes: Vec<(f64, bool)>,
    /// The same load with Symphony's model shard on a shard of its own
    /// (three shards on the machine's cores).
    pub split_symphony: LoadReport,
}

/// Table 4 with measured runs of `secs` each; the engine's goodput search
/// runs at most `probes` of them.
pub fn table4(secs: f64, probes: usize) -> EndToEnd {
    let mut s = scenario("table4-resnet50.toml");
    s.duration = (secs * 1e9) as u64;
    let rate = sim_goodput(&s);
    let sim = simulate(&s, s.policy, rate);
    let (engine_goodput_rps, goodput_probes) = engine_goodput(rate, probes, &|r| probe(&s, r, secs));
    let (engine, report) = serve_and_load(&s, rate, secs);
    eprintln!("the roles as separate executors over TCP:");
    let (roles_goodput_rps, roles_goodput_probes) = engine_goodput(rate, probes, &|r| roles_and_load(&s, r, secs));
    EndToEnd {
        sim_goodput_rps: rate,
        engine_goodput_rps,
        goodput_probes,
        goodput_ratio: engine_goodput_rps / rate,
        rate_rps: rate,
        in_slo_ratio: engine.goodput_rps / sim.goodput_rps,
        server_late: report.frontend.late,
        engine,
        roles_over_tcp: roles_and_load(&s, rate, secs),
        roles_goodput_rps,
        roles_goodput_probes,
        split_symphony: serve_sharded_and_load(&s, rate, secs, 1).0,
    }
}

#[derive(Debug, Serialize)]
pub struct Throughput {
    /// Every rate tried, and whether the engine sustained it.
    pub probes: Vec<(f64, bool, LoadReport)>,
    pub sustained_rps: f64,
    /// The run at half the sustained rate.
    pub half: LoadReport,
    /// The same with cores traded for latency, where each side has cores
    /// of its own: the engine busy-polls (`LATENCY_POLL`) and the
    /// generator spins, so neither side's wake-up is counted.
    pub half_polled: Option<LoadReport>,
}

fn sustained(r: &LoadReport) -> bool {
    r.meets_slos() && r.max_send_lag_ms < 50.0
}

pub fn throughput(start_rps: f64, secs: f64, bisect_steps: usize) -> Throughput {
    let s = scenario("engine-tiny.toml");
    let mut probes = Vec::new();
    let (mut lo, mut hi) = (0.0, f64::INFINITY);
    let mut rate = start_rps;
    // Double until a rate fails, then bisect `bisect_steps` times.
    let mut steps = 0;
    loop {
        let (r, _) = serve_and_load(&s, rate, secs);
        let ok = sustained(&r);
        eprintln!(
            "  {rate:>9.0} r/s: {} (bad {:.4}, lag {:.1} ms)",
            if ok { "ok" } else { "no" },
            r.bad_rate,
            r.max_send_lag_ms
        );
        probes.push((rate, ok, r));
        if ok {
            lo = rate;
        } else {
            hi = rate;
        }
        if hi.is_infinite() {
            rate *= 2.0;
        } else if lo == 0.0 {
            rate = hi / 2.0;
            if rate < 1.0 {
                break;
            }
        } else if steps == bisect_steps {
            break;
        } else {
            steps += 1;
            rate = (lo + hi) / 2.0;
        }
    }
    let half_rate = (lo / 2.0).max(1.0);
    let (half, _) = serve_and_load(&s, half_rate, secs);
    // Only where each side has cores of its own: a spinning generator
    // would otherwise take the engine's.
    let half_polled = placement()
        .0
        .is_some()
        .then(|| serve_config_and_load(&s, &EngineConfig { poll: LATENCY_POLL, ..local(half_rate) }, secs, true).0);
    Throughput { probes, sustained_rps: lo, half, half_polled }
}
