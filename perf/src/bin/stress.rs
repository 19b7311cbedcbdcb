//! The engine's dispatcher stress test, set beside Symphony's own
//! (nexuslb `tools/bench_dispatcher/run_rankmt_main.cpp`): an open-loop
//! Poisson generator in process feeding the frontend role, the scheduler
//! shard with the policy (or Symphony's rank shard and `--model-shards K`
//! model shards) and the file's emulated GPUs, on the real clock, timer
//! wheel and rings — no TCP (`core/src/runtime/clients.rs`).
//!
//! `cargo run --release -p baton-perf --bin stress -- FILE [--secs S]
//! [--warmup W] [--model-shards K] [--frontends F] [--backend-shards B]
//! [--gpus G] [--from R] [--probes N] [--rates R,R..] [--shed-when-behind]
//! [--shed-aged S]`
//!
//! `--frontends F` runs F clients' loops, each a front shard with its own
//! frontend role and a 1/F share of the arrivals (`clients.rs`).
//! `--backend-shards B` moves the GPUs off the scheduler shard onto B
//! shards of their own.
//!
//! `--shed-when-behind` turns arrivals away while the engine runs behind
//! its plans, as `baton serve --shed-when-behind` does. `--shed-aged S`
//! sets the share of its SLO a request may have waited for the clients'
//! loop (the loop behind their schedule) before the frontend turns it
//! away, and those after it until one waited at most half the share
//! (default 0.8, the engine's; 1: none; `roles/overload.rs`).
//!
//! `--gpus G` gives the cluster G fake GPUs instead of the file's: the
//! GPUs' bound (printed) caps what any dispatcher can pass, the simulator
//! too, so a dispatcher faster than that bound is measured on more GPUs.
//!
//! Each probe first runs `baton sim` on the same file, rate, seed and
//! window and prints its bad rate beside the engine's, both as the
//! clients see them (a query once, not its stage requests).
//!
//! Finds the highest rate at which at most 1% of the requests due in the
//! measured window are bad (late by their client's clock, dropped, failed
//! or unanswered): from `--from` (default 100,000 r/s), doubling while
//! probes pass and halving while they fail, then bisecting to 2% (at most
//! N probes, default 10); or runs the listed `--rates` only. Each probe is
//! a fresh engine: W s of warm-up (default the file's) and S s measured
//! (default the file's). Pin it with `taskset -c 0` for one core; the
//! shards go round-robin over the cores it may use, and every line says
//! which. Each line counts the drops by reason, the bad requests by the
//! second of the window they arrived in (a probe that collapsed shows
//! when, and whether it came back), and gives the engine's
//! time beyond its plan for the measured ok answers, p50/p99/max µs:
//! start lag (batch start − `exec_at`) and completion (batch end − the
//! clients hold the answer), and where the clients' loop stalled: the
//! longest one of its turns spent in its own work, in the round of the
//! shards it hosts, yielding to the executor after a busy round and
//! parked after an idle one, ms, while requests were due
//! (`clients::Longest`); and the share of its core the clients' loop
//! spent in its turns that did work in the measured window (`Parts::busy`:
//! below capacity, the rate over it bounds the capacity from below, a
//! steadier figure for an A/B than a pass or fail at the edge; before
//! 2026-11-26 it counted the idle turns too and read ~1 at any high rate).
//! Check `uptime` first.

use baton_core::runtime::clients::{run, Load, Outcome, Parts};
use baton_core::runtime::EngineConfig;
use baton_perf::engine_bench::search_rate;
use baton_perf::report::load_scenario;
use baton_sched::scenario::Scenario;
use baton_sched::sim::{run as simulate, BAD_RATE_LIMIT};
use std::time::Duration;

const USAGE: &str = "usage: stress FILE [--secs S] [--warmup W] [--model-shards K] [--frontends F] [--backend-shards B] [--gpus G] [--from R] [--probes N] [--rates R,R..] [--shed-when-behind] [--shed-aged S]";

/// Bad input: what is wrong and the usage, exit 2.
fn fail(why: impl std::fmt::Display) -> ! {
    eprintln!("stress: {why}\n{USAGE}");
    std::process::exit(2)
}

fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    Some(args.get(i + 1).unwrap_or_else(|| fail(format!("{name} takes a value"))).clone())
}

/// A number at least 0 (a count, a rate or seconds).
fn parse_number(name: &str, v: &str) -> f64 {
    v.parse()
        .ok()
        .filter(|x: &f64| x.is_finite() && *x >= 0.0)
        .unwrap_or_else(|| fail(format!("{name} takes a number at least 0, not `{v}`")))
}

fn number(name: &str) -> Option<f64> {
    flag(name).map(|v| parse_number(name, &v))
}

fn line(rate: f64, sim_bad: f64, secs: f64, o: &mut Outcome) -> String {
    let t = &o.tally;
    let p = &mut o.parts;
    let q = |v: &mut Vec<u32>| {
        let mut at = |x| Parts::quantile(v, x);
        format!("{}/{}/{}", at(0.5), at(0.99), at(1.0))
    };
    let parts = format!("start lag {} completion {}", q(&mut p.start_lag_us), q(&mut p.completion_us));
    let drops: Vec<String> = t.drops().map(|(why, n)| format!("{why:?} {n}")).collect();
    let drops = if drops.is_empty() { String::new() } else { format!(": {}", drops.join(", ")) };
    let ms = |ns: u64| ns as f64 / 1e6;
    let (l, shards) = (p.longest, o.cores.len() > 1 && o.cores[1..].iter().all(|&c| c == o.cores[0]));
    let hosted = if shards { format!(", hosted shards {:.2}", ms(l.shards)) } else { String::new() };
    let longest = format!(
        "longest turn part ms: clients {:.2}{hosted}, yielded {:.2}, parked {:.2}; clients' loop busy {:.3} of its core",
        ms(l.clients),
        ms(l.yielded),
        ms(l.parked),
        p.busy as f64 / (secs * 1e9)
    );
    format!(
        "rate {rate:>10.0} r/s  baton sim bad {sim_bad:.4}  engine: sent {:>9}  bad {:.4} (late {} dropped {}{drops} errors {} unanswered {} duplicates {}; by second {:?})  \
         generator behind at most {:.2} ms  us p50/p99/max: {parts}  {longest}  batches {}  cores {:?}",
        t.sent,
        t.bad_rate(),
        t.late,
        t.dropped,
        t.errors,
        t.unanswered,
        t.duplicates,
        p.bad_by_second,
        t.behind_max as f64 / 1e6,
        o.engine.backends.iter().map(|b| b.batches).sum::<u64>(),
        o.cores,
    )
}

fn main() {
    let Some(file) = std::env::args().nth(1).filter(|a| !a.starts_with("--")) else { fail("no scenario file") };
    let mut scenario = load_scenario(std::path::Path::new(&file)).unwrap_or_else(|e| fail(e));
    if let Some(gpus) = number("--gpus") {
        if gpus < 1.0 || !scenario.faults.is_empty() {
            fail("--gpus takes a count of at least 1, for a file without faults");
        }
        scenario.cluster.backends = gpus as u32;
    }
    if number("--frontends").is_some_and(|f| f < 1.0) {
        fail("--frontends takes a count of at least 1");
    }
    if number("--shed-aged").is_some_and(|s| s <= 0.0) {
        fail("--shed-aged takes a share of the SLO above 0 (1 or more: none turned away)");
    }
    let load = |rate_rps| Load {
        rate_rps,
        warmup: Duration::from_secs_f64(number("--warmup").unwrap_or(scenario.warmup as f64 / 1e9)),
        measure: Duration::from_secs_f64(number("--secs").unwrap_or(scenario.duration as f64 / 1e9)),
        seed: scenario.seed,
    };
    let cfg = EngineConfig {
        model_shards: number("--model-shards").map_or(0, |k| k as usize),
        frontend_shards: number("--frontends").map_or(1, |f| f as usize),
        backend_shards: number("--backend-shards").map_or(0, |b| b as usize),
        shed_when_behind: std::env::args().any(|a| a == "--shed-when-behind"),
        shed_aged_share: number("--shed-aged").unwrap_or(EngineConfig::default().shed_aged_share),
        // No network path to keep time back for.
        reserve_floor: 0,
        input_floats: 1,
        ..EngineConfig::default()
    };
    let probe = |rate: f64| {
        // The simulator first, on the same file, rate and seed (never
        // beside the engine: it would take the engine's cores).
        // Over the probe's window, as the clients see it (a query once,
        // not its stage requests).
        let l = load(rate);
        let window =
            Scenario { warmup: l.warmup.as_nanos() as u64, duration: l.measure.as_nanos() as u64, ..scenario.clone() };
        let sim = simulate(&window, window.policy, rate).client_bad_rate(&window);
        // Static planners (Nexus, glet) plan for the rate offered, as the
        // simulator does (before, a file without `rate_rps` left Nexus
        // planning for none: every request dropped `NoBackend`).
        let cfg = EngineConfig { plan_rate_rps: rate, ..cfg.clone() };
        let mut o = run(&scenario, scenario.policy, &cfg, load(rate)).unwrap_or_else(|e| fail(e));
        println!("  {}", line(rate, sim, load(rate).measure.as_secs_f64(), &mut o));
        o
    };
    println!(
        "{} / {} (seed {}), model shards {}, clients' loops {}, backend shards {}, warm-up {:?}, measured {:?}; {} GPUs, their bound {:.0} r/s",
        scenario.name,
        scenario.policy.as_str(),
        scenario.seed,
        cfg.model_shards,
        cfg.frontend_shards.max(1),
        cfg.backend_shards,
        load(0.0).warmup,
        load(0.0).measure,
        scenario.cluster.backends,
        scenario.capacity_bound_rps()
    );
    if let Some(rates) = flag("--rates") {
        for r in rates.split(',') {
            probe(parse_number("--rates", r));
        }
        return;
    }
    let ok = |o: &Outcome| o.tally.bad_rate() <= BAD_RATE_LIMIT && o.tally.duplicates == 0;
    let from = number("--from").unwrap_or(100_000.0);
    let probes = number("--probes").map_or(10, |n| n as usize);
    let (best, tried) = search_rate(from, (2.0, 0.5), 0.02, probes, &mut |r| ok(&probe(r)));
    println!("highest passing rate: {best:.0} r/s ({} probes)", tried.len());
}
