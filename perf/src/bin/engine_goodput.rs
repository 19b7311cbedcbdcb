//! The engine's goodput next to the simulator's on any scenario file:
//! `cargo run --release -p baton-perf --bin engine_goodput -- FILE.. [--secs S] [--probes N]`.
//!
//! For each file: the simulator's goodput (search, the file's policy and
//! seed), then the engine's, found the same way from the client's side
//! (`engine_bench::engine_goodput`: the highest rate at which every model's
//! and every query's requests are at most 1% bad), each probe served for S
//! seconds (default: the file's duration), at most N probes (default 8); a
//! probe at a rate the engine refuses to serve (a partition plan that fits
//! nothing there) fails. Prints one line per file with the ratio and the
//! run at the simulator's rate (exactly-once counts, the worst model's bad
//! rate, the engine's time beyond its plan in four parts, drops, and that
//! run beside the simulator's request by request: `baton_tools::gap`). Check
//! `uptime` first: the engine needs both cores.

use baton_perf::engine_bench::{engine_goodput, probe, serve_and_load_gap, sim_goodput};
use baton_perf::overhead::one_line;
use baton_perf::report::load_scenario;

fn flag(name: &str) -> Option<f64> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    Some(args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} takes a number")))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let files: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || !args[i - 1].starts_with("--")))
        .map(|x| x.1)
        .collect();
    assert!(!files.is_empty(), "usage: engine_goodput FILE.. [--secs S] [--probes N]");
    let probes = flag("--probes").map_or(8, |p| p as usize);
    for f in files {
        let mut s = load_scenario(std::path::Path::new(f)).unwrap_or_else(|e| panic!("{e}"));
        let secs = flag("--secs").unwrap_or(s.duration as f64 / 1e9);
        s.duration = (secs * 1e9) as u64;
        let sim = sim_goodput(&s);
        if sim < 1.0 {
            // Below a request a second nothing is sent: no rate passes.
            println!(
                "{} / {}: sim goodput {sim:.1} r/s: no rate the simulator serves; the engine not run",
                s.name,
                s.policy.as_str()
            );
            continue;
        }
        let (engine, tried) = engine_goodput(sim, probes, &|r| {
            let report = probe(&s, r, secs);
            eprintln!("  probe {r:.1} r/s: {}", probe_line(&report));
            report
        });
        let (at_sim, report, gap) = serve_and_load_gap(&s, sim, secs);
        println!(
            "{} / {}: sim goodput {sim:.1} r/s, engine goodput {engine:.1} r/s (ratio {:.3}; probes {tried:?})",
            s.name,
            s.policy.as_str(),
            engine / sim
        );
        println!(
            "  engine at the sim's rate: sent {} ok {} late {} dropped {} errors {} unanswered {} duplicates {}, bad rate {:.4} (worst model or query {:.4}); held at stop {}",
            at_sim.sent,
            at_sim.ok,
            at_sim.late,
            at_sim.dropped,
            at_sim.errors,
            at_sim.unanswered,
            at_sim.duplicates,
            at_sim.bad_rate,
            at_sim.worst_bad_rate(),
            report.held_at_stop
        );
        println!("  {}", one_line(&at_sim.overhead));
        if !at_sim.drop_reasons.is_empty() {
            println!("  drops: {:?}", at_sim.drop_reasons);
        }
        if !at_sim.failed_stages.is_empty() {
            println!("  failed queries by stage: {:?}", at_sim.failed_stages);
        }
        if gap.compared > 0 {
            baton_perf::gap::print(&gap, &s.models.iter().map(|m| m.spec.name.clone()).collect::<Vec<_>>());
        }
    }
}

/// One probe in a line (stderr): its bad rate, its worst model's, and why.
fn probe_line(r: &baton_tools::load::LoadReport) -> String {
    let worst = r.targets.iter().filter(|t| t.sent > 0).max_by(|a, b| a.bad_rate.total_cmp(&b.bad_rate));
    format!(
        "bad {:.4} (late {} dropped {} errors {} unanswered {} duplicates {}), worst {} {:.4}, ingress p99.9 {:.0} max {:.0} us",
        r.bad_rate,
        r.late,
        r.dropped,
        r.errors,
        r.unanswered,
        r.duplicates,
        worst.map_or("-", |t| &t.name),
        worst.map_or(0.0, |t| t.bad_rate),
        r.overhead.ingress.p999_us,
        r.overhead.ingress.max_us,
    )
}
