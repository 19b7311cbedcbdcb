//! Symphony's sub-clusters served by the engine's role processes
//! (`baton_tools::partitioned`): `cargo run --release -p baton-perf --bin
//! subclusters_engine > perf/results/subclusters_engine.txt`.
//!
//! 1. Scheduling throughput with K scheduler processes: Symphony's
//!    dispatcher workload (`stress-16.toml`: 16 models, 1,000 emulated
//!    GPUs, the dispatcher not the GPUs the limit) split by the
//!    partitioner (`baton_sched::partition::plan`) into K = 1, 2, 4
//!    sub-clusters, each with a scheduler process, one frontend routing by
//!    the table, one backend process per sub-cluster, under `baton load`
//!    over TCP. Per K: the highest rate with at most 1% bad as the client
//!    sees it (search, a fresh cluster per probe) and, from the passing
//!    probe at that rate (its bad rate, so at most 1%), the scheduling
//!    decisions (batches) per second summed over the
//!    schedulers. Every process shares this machine's cores with the
//!    generator: where the frontend or the generator is the limit, more
//!    schedulers cannot raise it, and the table says so. Beside it, the
//!    simulator on the same file (its warm-up and length set to the
//!    probes'), seed and plan: its goodput found the same way, and its bad
//!    rate at the engine's goodput rate.
//! 2. A model and a GPU moved between two sub-clusters at half-time under
//!    load: every request answered exactly once, each scheduler's share.

use std::time::Duration;

use baton_core::routes::Routes;
use baton_core::runtime::auth::ClusterKey;
use baton_core::runtime::EngineConfig;
use baton_perf::engine_bench::{passes, search_rate, GOODPUT_TOLERANCE};
use baton_perf::load_scenario;
use baton_perf::subclusters::simulated;
use baton_sched::partition::plan;
use baton_sched::sim::{find_goodput_with, run_with};
use baton_sched::time::NANOS_PER_S;
use baton_sched::Scenario;
use baton_tools::load::LoadConfig;
use baton_tools::partitioned::{self, Control, Move, PartitionedRun};

/// Seconds of warm-up and of counted sending per probe.
const WARMUP_S: f64 = 1.0;
const SECS: f64 = 3.0;

fn main() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/stress-16.toml");
    let mut s = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
    (s.warmup, s.duration) = ((WARMUP_S * NANOS_PER_S as f64) as u64, (SECS * NANOS_PER_S as f64) as u64);
    let key = ClusterKey::new(b"subclusters_engine's own cluster secret").expect("long enough");
    let cfg = EngineConfig { cluster_key: Some(key), ..EngineConfig::default() };
    let dir = std::env::temp_dir().join(format!("baton-subclusters-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let probe = std::cell::Cell::new(0);
    let serve = |routes: &Routes, rate: f64, moves: &[Move]| -> PartitionedRun {
        probe.set(probe.get() + 1);
        let origin = dir.join(format!("origin-{}", probe.get()));
        let load = LoadConfig {
            connections: 2,
            warmup: Duration::from_secs_f64(WARMUP_S),
            ..LoadConfig::new(cfg.listen, rate, Duration::from_secs_f64(SECS))
        };
        partitioned::run(&s, &cfg, routes, 1, load, Control::Moves(moves), &origin).unwrap_or_else(|e| panic!("{e}"))
    };
    println!(
        "# {}: seed {}, {} models, {} GPUs; role processes on this machine ({} cores), one frontend, {WARMUP_S} s warm-up + {SECS} s per probe",
        s.name,
        s.seed,
        s.models.len(),
        s.cluster.backends,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "{:>2} {:>12} {:>10} {:>14} {:>14} {:>10} {:>30} {:>16} {:>12}",
        "K",
        "goodput_rps",
        "bad_rate",
        "decisions_s",
        "scheduled_rps",
        "mean_batch",
        "requests per scheduler",
        "sim_goodput_rps",
        "sim_bad_rate"
    );
    let guess = 150_000.0;
    let mut last = guess;
    for k in [1, 2, 4] {
        let p = plan(&s, k, s.rate_rps.unwrap_or(guess)).unwrap_or_else(|e| panic!("{e}"));
        let routes = Routes::of_plan(&p);
        let sim = |rate| simulated(&s, &p, rate);
        // The row is the passing probe at the goodput itself (a run of its
        // own at that rate could land either side of 1%).
        let mut best: Option<PartitionedRun> = None;
        let (goodput, _) = search_rate(guess, (1.1, 0.8), GOODPUT_TOLERANCE, 12, &mut |rate| {
            let run = serve(&routes, rate, &[]);
            let ok = passes(&run.load);
            if ok && best.as_ref().is_none_or(|b| rate > b.load.offered_rps) {
                best = Some(run);
            }
            ok
        });
        let at = best.unwrap_or_else(|| serve(&routes, 1_000.0, &[]));
        let secs = WARMUP_S + SECS;
        let decisions: u64 = at.cluster.batches().iter().sum();
        let scheduled: u64 = at.cluster.schedulers.iter().map(|r| r.scheduler.requests).sum();
        let shares: Vec<String> = at.cluster.schedulers.iter().map(|r| r.scheduler.requests.to_string()).collect();
        let name = format!("{}/{k}-schedulers", s.policy.as_str());
        let sim_goodput = find_goodput_with(&s, &name, &sim, GOODPUT_TOLERANCE).goodput_rps;
        let sim_bad = run_with(&s, &name, sim(goodput).as_mut(), goodput).bad_rate;
        println!(
            "{k:>2} {goodput:>12.1} {:>10.4} {:>14.1} {:>14.1} {:>10.2} {:>30} {sim_goodput:>16.1} {sim_bad:>12.4}",
            at.load.bad_rate,
            decisions as f64 / secs,
            scheduled as f64 / secs,
            at.load.mean_batch,
            shares.join("/")
        );
        last = goodput.max(1_000.0);
    }
    moved(&s, &serve, last);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two sub-clusters at 70% of the last goodput; at half-time the first
/// sub-cluster's first model and first GPU move to the second.
fn moved(s: &Scenario, serve: &impl Fn(&Routes, f64, &[Move]) -> PartitionedRun, goodput: f64) {
    let routes = Routes::of_plan(&plan(s, 2, goodput).unwrap_or_else(|e| panic!("{e}")));
    let (model, gpu) = (routes.subclusters[0].models[0], routes.subclusters[0].backends[0]);
    let at = Duration::from_secs_f64((WARMUP_S + SECS) / 2.0);
    let rate = 0.7 * goodput;
    let run = serve(&routes, rate, &[Move { at, model, to: 1, gpu: Some(gpu) }]);
    let l = &run.load;
    let shares: Vec<u64> = run.cluster.schedulers.iter().map(|r| r.scheduler.requests).collect();
    println!(
        "# move: `{}` and GPU {gpu} from sub-cluster 0 to 1 at {:.2} s, {rate:.0} r/s: sent {} (+{} warm-up), ok {}, late {}, dropped {}, \
         errors {}, bad rate {:.4}; unanswered {}, duplicates {}, held at stop {}; requests per scheduler {shares:?} \
         (sum {}, frontend received {})",
        s.models[model].spec.name,
        run.cluster.moved_at[0].as_nanos() as f64 / NANOS_PER_S as f64,
        l.sent,
        l.warmup_sent,
        l.ok,
        l.late,
        l.dropped,
        l.errors,
        l.bad_rate,
        l.unanswered,
        l.duplicates,
        run.cluster.held_at_stop(),
        shares.iter().sum::<u64>(),
        run.cluster.frontends.iter().map(|r| r.frontend.received).sum::<u64>()
    );
}
