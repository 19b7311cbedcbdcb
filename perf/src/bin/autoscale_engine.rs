//! Symphony's autoscaler in the engine beside the simulator
//! (`scenarios/autoscale-step.toml`): `cargo run --release -p baton-perf
//! --bin autoscale_engine` runs `baton sim`'s autoscaler on the file, its
//! rate and seed, then serves the same with the roles as processes — the
//! scheduler advising every period, one-GPU backend processes started and
//! stopped to follow it (`baton_tools::supervise`), `baton load`'s
//! generator drawing the same arrivals — and prints both per period (GPUs
//! serving, bad rate: the simulator's, and the engine's by the
//! scheduler's clock) and the totals (bad rate as the client sees it,
//! GPU-seconds, requests unanswered, batches lost by leaving processes).

use std::path::PathBuf;
use std::time::Duration;

use baton_core::runtime::auth::ClusterKey;
use baton_core::runtime::EngineConfig;
use baton_perf::load_scenario;
use baton_sched::autoscale::AutoscaleConfig;
use baton_sched::sim::run_autoscaled;
use baton_sched::time::NANOS_PER_S;
use baton_sched::PolicyKind;
use baton_tools::load::LoadConfig;
use baton_tools::supervise;

fn main() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/autoscale-step.toml");
    let s = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
    let rate = s.rate_rps.expect("the scenario has a rate");
    let pool = s.cluster.backends as usize;
    let scaling = AutoscaleConfig {
        period: NANOS_PER_S / 2,
        threshold: 0.01,
        headroom: 0.1,
        min_gpus: 1,
        max_gpus: pool,
        initial: 1,
        sizing: None,
    };
    let (sim, periods) = run_autoscaled(&s, PolicyKind::Symphony, rate, scaling).unwrap_or_else(|e| panic!("{e}"));
    let key = ClusterKey::new(b"autoscale_engine's own cluster secret").expect("long enough");
    let cfg = EngineConfig { cluster_key: Some(key), ..EngineConfig::default() };
    let duration = Duration::from_nanos(s.warmup + s.duration);
    let load = LoadConfig { connections: 2, ..LoadConfig::new(cfg.listen, rate, duration) };
    let engine = supervise::run_autoscaled(&s, &cfg, scaling, load).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "# {}: seed {}, mean {rate} r/s, pool {pool} GPUs from 1, Symphony's flat-top rule every {} s (threshold {}, headroom {})",
        s.name,
        s.seed,
        scaling.period as f64 / NANOS_PER_S as f64,
        scaling.threshold,
        scaling.headroom
    );
    println!("{:>6} {:>9} {:>9} {:>11} {:>11}", "end_s", "sim_gpus", "eng_gpus", "sim_bad", "eng_bad");
    for (i, p) in periods.iter().enumerate() {
        let e = engine.advice.get(i).map(|a| a.signals);
        println!(
            "{:>6.1} {:>9} {:>9} {:>11.4} {:>11}",
            p.start_s + scaling.period as f64 / NANOS_PER_S as f64,
            p.signals.gpus,
            e.map_or("-".into(), |e| e.gpus.to_string()),
            p.signals.bad_rate(),
            e.map_or("-".into(), |e| format!("{:.4}", e.bad_rate()))
        );
    }
    let span = scaling.period as f64 / NANOS_PER_S as f64;
    let sim_gpu_s: f64 = periods.iter().map(|p| p.signals.gpus as f64 * span).sum();
    let eng_gpu_s: f64 = engine.advice.iter().take(periods.len()).map(|a| a.signals.gpus as f64 * span).sum();
    let lost: u64 = engine.left.iter().flat_map(|r| &r.backends).map(|b| b.failed_batches).sum();
    let l = &engine.load;
    println!(
        "simulator: bad rate {:.4} ({} sent), GPU-seconds {sim_gpu_s:.1}, most GPUs {}, unanswered {}",
        sim.bad_rate,
        sim.sent,
        periods.iter().map(|p| p.signals.gpus).max().unwrap_or(0),
        sim.checks.unanswered
    );
    println!(
        "engine: bad rate as the client sees it {:.4} ({} sent: {} ok, {} late, {} dropped), GPU-seconds {eng_gpu_s:.1}, \
         most GPUs {}, {} processes left losing {lost} batches; unanswered {}, duplicates {}",
        l.bad_rate,
        l.sent,
        l.ok,
        l.late,
        l.dropped,
        engine.most,
        engine.left.len(),
        l.unanswered,
        l.duplicates
    );
}
