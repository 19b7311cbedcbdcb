//! Re-partitioning at epoch boundaries in the engine (Symphony's
//! sub-clusters; `baton_tools::repartition`): `cargo run --release -p
//! baton-perf --bin repartition_engine > perf/results/repartition_engine.txt`.
//!
//! The workload whose mix shifts (`nexus-shift.toml`: ResNet50's traffic
//! ramps from 1.8x to 0.2x its mean, InceptionV3's the other way) under
//! Symphony, split into two sub-clusters by the partitioner from the mean
//! rates — one model each, the GPUs shared by mean demand. Served by role
//! processes (a scheduler per sub-cluster, one frontend, a backend process
//! per GPU) under `baton load`, at a few rates: with the plan made once
//! (static), and with the controller re-planning every epoch from the
//! rates the frontend's `/metrics` shows, GPUs following the load between
//! the schedulers. Beside each run, the simulator on the same file, seed,
//! rate and first plan: static (`partitioned.rs`) or re-planned by the
//! same rule every epoch (`repartitioned.rs`, from the rates it measured). Each row: bad rate as the client sees it, every
//! request answered exactly once (`unanswered`, `duplicates`), and for the
//! controlled runs the GPUs each sub-cluster held after each re-plan.
//! Then the gap between the two in parts, per run: the engine's late
//! answers as the client saw them and by the frontends' clock (the rest
//! late on the way back), its drops, the simulator's late and dropped
//! shares, the time moved GPUs served no one (from leaving one scheduler
//! to joining the other; the simulator's move takes none), and the p99 of
//! the engine's overhead parts.

use std::time::Duration;

use baton_core::routes::{Change, Routes};
use baton_core::runtime::auth::ClusterKey;
use baton_core::runtime::EngineConfig;
use baton_perf::load_scenario;
use baton_perf::subclusters::simulated;
use baton_sched::partition::{plan, Plan};
use baton_sched::policy::PolicyKind;
use baton_sched::repartitioned::{Epochs as SimEpochs, Repartitioned};
use baton_sched::sim::{run_with, Report};
use baton_sched::time::Nanos;
use baton_sched::Scenario;
use baton_tools::load::LoadConfig;
use baton_tools::partitioned::{self, Control, PartitionedRun};
use baton_tools::repartition::Epochs;

const EPOCHS: Epochs = Epochs { every: Duration::from_secs(2), moves: 1 };

fn main() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/nexus-shift.toml");
    let mut s = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
    s.policy = PolicyKind::Symphony;
    let key = ClusterKey::new(b"repartition_engine's own cluster secret").expect("long enough");
    let cfg = EngineConfig { cluster_key: Some(key), ..EngineConfig::default() };
    let dir = std::env::temp_dir().join(format!("baton-repartition-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let probe = std::cell::Cell::new(0);
    let serve = |routes: &Routes, rate: f64, control: Control<'_>| -> PartitionedRun {
        probe.set(probe.get() + 1);
        let origin = dir.join(format!("origin-{}", probe.get()));
        let load = LoadConfig { connections: 2, ..LoadConfig::new(cfg.listen, rate, Duration::from_nanos(s.duration)) };
        partitioned::run(&s, &cfg, routes, 1, load, control, &origin).unwrap_or_else(|e| panic!("{e}"))
    };
    println!(
        "# {} under symphony: seed {}, {} s ({} s warm-up), {} GPUs, two sub-clusters; role processes on this machine ({} cores); controller every {:?}, at most {} model moved per re-plan",
        s.name,
        s.seed,
        s.duration / 1_000_000_000,
        s.warmup / 1_000_000_000,
        s.cluster.backends,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        EPOCHS.every,
        EPOCHS.moves,
    );
    println!(
        "{:>8} {:>10} {:>14} {:>12} {:>12} {:>10} {:>10}  gpus per sub-cluster after each re-plan (s: counts)",
        "rate", "table", "sub-clusters", "bad_rate", "sim_bad", "unanswered", "duplicates"
    );
    let mut parts = Vec::new();
    for rate in [2_000.0, 3_000.0, 4_000.0] {
        let p = plan(&s, 2, rate).unwrap_or_else(|e| panic!("{e}"));
        let routes = Routes::of_plan(&p);
        let shape =
            |r: &Routes| r.subclusters.iter().map(|c| c.backends.len().to_string()).collect::<Vec<_>>().join("+");
        let sim = run_with(&s, "symphony/2-schedulers", simulated(&s, &p, rate).as_mut(), rate);
        let fixed = serve(&routes, rate, Control::Moves(&[]));
        row(rate, "static", &shape(&routes), &fixed, &format!("{:.4}", sim.bad_rate), "");
        let short = shortened(&s, reserved(&fixed));
        let sim_short = run_with(&short, "symphony/2-schedulers", simulated(&short, &p, rate).as_mut(), rate);
        parts.push(gap(rate, "static", &fixed, &sim, &sim_short));
        let run = serve(&routes, rate, Control::Epochs(EPOCHS));
        let replans = run.cluster.replans.iter().map(|(at, changes)| (at.as_secs_f64(), &changes[..]));
        let steps = gpu_steps(&routes, replans);
        let mut sim = resimulated(&s, &p, rate);
        let sim_report = run_with(&s, "symphony/2-schedulers/epochs", &mut sim, rate);
        let sim_steps = gpu_steps(&routes, sim.steps.iter().map(|(at, c)| (*at as f64 / 1e9, std::slice::from_ref(c))));
        let steps = format!("{steps} | sim: {sim_steps}");
        row(rate, "epochs", &shape(&routes), &run, &format!("{:.4}", sim_report.bad_rate), &steps);
        let short = shortened(&s, reserved(&run));
        let sim_short = run_with(&short, "symphony/2-schedulers/epochs", &mut resimulated(&short, &p, rate), rate);
        parts.push(gap(rate, "epochs", &run, &sim_report, &sim_short));
    }
    println!(
        "# the gap in parts: shares of the requests sent; moved GPUs out of service (count, total s); mean reserve us, \
         and the simulator's drops with every SLO shortened by it; overhead p99 us"
    );
    println!(
        "{:>8} {:>10} {:>9} {:>11} {:>9} {:>9} {:>9} {:>11} {:>8} {:>14} {:>8} {:>6} {:>10} {:>7}",
        "rate",
        "table",
        "eng_late",
        "eng_late_fe",
        "eng_drop",
        "sim_late",
        "sim_drop",
        "gpus_moved",
        "reserve",
        "sim_drop_short",
        "ingress",
        "start",
        "completion",
        "egress"
    );
    for (line, _) in &parts {
        println!("{line}");
    }
    println!("# drops by reason, engine | simulator; engine bad answers in the 2 s from each re-plan that moved a GPU");
    for (_, reasons) in &parts {
        println!("{reasons}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn row(rate: f64, table: &str, shape: &str, run: &PartitionedRun, sim: &str, steps: &str) {
    let l = &run.load;
    assert_eq!(run.cluster.held_at_stop(), 0, "requests held at stop");
    println!(
        "{rate:>8.0} {table:>10} {shape:>14} {:>12.4} {sim:>12} {:>10} {:>10}  {steps}",
        l.bad_rate, l.unanswered, l.duplicates
    );
}

/// The mean time the frontends kept back from an admitted request's SLO.
fn reserved(run: &PartitionedRun) -> Nanos {
    let (kept, n) = run
        .cluster
        .frontends
        .iter()
        .fold((0, 0), |(kept, n), r| (kept + r.frontend.reserved_ns, n + r.frontend.received));
    kept / n.max(1)
}

/// `s` with every model's SLO shortened by `by`.
fn shortened(s: &Scenario, by: Nanos) -> Scenario {
    let mut s = s.clone();
    for m in &mut s.models {
        m.spec.slo -= by.min(m.spec.slo);
    }
    s
}

/// One line of the gap table (`main`'s header); `short`: the simulator
/// with the SLOs shortened by the run's mean reserve.
fn gap(rate: f64, table: &str, run: &PartitionedRun, sim: &Report, short: &Report) -> (String, String) {
    let (l, c) = (&run.load, &run.cluster);
    let share = |n: u64, of: u64| n as f64 / of.max(1) as f64;
    // The frontends' counts include the warm-up's requests, as their own share.
    let (fe_late, fe_received) =
        c.frontends.iter().fold((0, 0), |(late, n), r| (late + r.frontend.late, n + r.frontend.received));
    let out = c.gpu_moves.iter().fold(0.0, |sum, d| sum + d.as_secs_f64());
    let o = &l.overhead;
    let engine: Vec<String> = l.drop_reasons.iter().map(|(why, n)| format!("{why} {n}")).collect();
    let mut by_reason = std::collections::BTreeMap::new();
    for (why, n) in sim.models.iter().flat_map(|m| &m.drop_reasons) {
        *by_reason.entry(*why).or_insert(0) += n;
    }
    let simulated: Vec<String> = by_reason.iter().map(|(why, n)| format!("{why} {n}")).collect();
    let reasons =
        format!("{rate:>8.0} {table:>10}  {} | {}; {}", engine.join(", "), simulated.join(", "), after_moves(run));
    let line = format!(
        "{rate:>8.0} {table:>10} {:>9.4} {:>11.4} {:>9.4} {:>9.4} {:>9.4} {:>11} {:>8.0} {:>14.4} {:>8.0} {:>6.0} {:>10.0} {:>7.0}",
        share(l.late, l.sent),
        share(fe_late, fe_received),
        share(l.dropped, l.sent),
        share(sim.late, sim.sent),
        share(sim.dropped, sim.sent),
        format!("{}, {out:.2}", c.gpu_moves.len()),
        reserved(run) as f64 / 1e3,
        share(short.dropped, short.sent),
        o.ingress.p99_us,
        o.start_lag.p99_us,
        o.completion.p99_us,
        o.egress.p99_us,
    );
    (line, reasons)
}

/// The engine's bad answers whose requests were due in the two seconds
/// from a re-plan that moved a GPU, of all, and how many of the measured
/// window's seconds those are (the window starts the load's warm-up after
/// the cluster's clock for re-plans, give or take the load's start-up).
fn after_moves(run: &PartitionedRun) -> String {
    let (bad, warmup) = (&run.load.bad_by_second, Duration::from_secs_f64(run.load.warmup_s));
    let mut near = vec![false; run.load.duration_s.ceil() as usize];
    for (at, changes) in &run.cluster.replans {
        if changes.iter().any(|c| matches!(c, Change::Gpu { .. })) {
            let first = at.saturating_sub(warmup).as_secs() as usize;
            for s in first..(first + 2).min(near.len()) {
                near[s] = true;
            }
        }
    }
    let total: u64 = bad.iter().sum();
    let there: u64 = bad.iter().zip(&near).filter(|(_, &n)| n).map(|(b, _)| b).sum();
    let seconds = near.iter().filter(|&&n| n).count();
    format!("{there} of {total} bad in {seconds} of {} s", run.load.duration_s)
}

/// Each sub-cluster's GPU count after each time some GPU moved.
fn gpu_steps<'a>(routes: &Routes, replans: impl Iterator<Item = (f64, &'a [Change])>) -> String {
    let mut gpus: Vec<i64> = routes.subclusters.iter().map(|c| c.backends.len() as i64).collect();
    let mut steps: Vec<String> = Vec::new();
    for (at, changes) in replans {
        let mut moved = false;
        for c in changes {
            if let Change::Gpu { from, to, .. } = *c {
                (gpus[from as usize], gpus[to as usize]) = (gpus[from as usize] - 1, gpus[to as usize] + 1);
                moved = true;
            }
        }
        let counts: Vec<String> = gpus.iter().map(i64::to_string).collect();
        let step = format!("{at:.1}: {}", counts.join("+"));
        // Steps at one instant (the simulator's, one change each) show once.
        match steps.last_mut() {
            Some(last) if moved && last.starts_with(&format!("{at:.1}:")) => *last = step,
            _ if moved => steps.push(step),
            _ => {}
        }
    }
    steps.join(", ")
}

/// The simulator's cluster split by `p` (the engine's first plan) at
/// `rate`, re-planned as the engine's controller does (`EPOCHS`).
fn resimulated(s: &Scenario, p: &Plan, rate: f64) -> Repartitioned {
    let each = |whole: &Scenario, r: f64| baton_sched::build::scheduler(s.policy, whole, r);
    let epochs = SimEpochs { every: EPOCHS.every.as_nanos() as u64, moves: EPOCHS.moves };
    Repartitioned::new(s, p, rate, epochs, &each).unwrap_or_else(|e| panic!("{e}"))
}
