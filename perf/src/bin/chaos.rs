//! The chaos campaign: seeded cluster simulations of the real role engines
//! under injected faults (`core/src/chaos`), many seeds at a time.
//!
//! `cargo run --release -p baton-perf --bin chaos -- [--seeds N] [--from S]
//! [--seed S]`
//!
//! Runs seeds `S .. S+N` (default 0 .. 2,000), or the one `--seed`, and
//! prints for each failing seed what the checkers found and the command
//! that replays it; then the totals: runs, faults injected, requests sent
//! and how they were answered. A panic in a run is a failure of its seed.
//! Exits 1 if any seed failed. `--seed` also prints the run's draw.

use baton_core::chaos::{self, Config, FaultCounts, Tally};

fn flag(name: &str) -> Option<u64> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    let v = args.get(i + 1).unwrap_or_else(|| panic!("{name} takes a number"));
    Some(v.parse().unwrap_or_else(|_| panic!("{name} takes a number, not `{v}`")))
}

fn main() {
    let one = flag("--seed");
    let from = one.or(flag("--from")).unwrap_or(0);
    let count = if one.is_some() { 1 } else { flag("--seeds").unwrap_or(2_000) };
    // A failing run's panic message is reported with its seed, not twice.
    std::panic::set_hook(Box::new(|_| {}));
    let (mut tally, mut faults, mut failed) = (Tally::default(), FaultCounts::default(), Vec::new());
    let start = std::time::Instant::now();
    for seed in from..from + count {
        let cfg = Config::from_seed(seed);
        if one.is_some() {
            println!("{cfg:#?}");
        }
        match std::panic::catch_unwind(|| chaos::run(&cfg)) {
            Ok(r) => {
                tally.add(&r.tally);
                faults.add(&r.faults);
                if one.is_some() {
                    println!("{:#?}\n{:#?}", r.tally, r.faults);
                }
                if !r.violations.is_empty() {
                    println!("seed {seed} ({}): {}", r.policy, r.violations.join("; "));
                    println!("  replay: {}", chaos::replay_command(seed));
                    failed.push(seed);
                }
            }
            Err(panic) => {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("seed {seed} ({}): panicked: {why}", cfg.policy.as_str());
                println!("  replay: {}", chaos::replay_command(seed));
                failed.push(seed);
            }
        }
    }
    let f = faults;
    println!(
        "chaos: {count} seeded runs ({from}..{}) in {:.1} s; {} failed{}",
        from + count,
        start.elapsed().as_secs_f64(),
        failed.len(),
        if failed.is_empty() { String::new() } else { format!(": {failed:?}") }
    );
    println!(
        "faults: {} crashes, {} restarts, {} link cuts; {} messages: {} lost, {} duplicated, {} stalled, {} lost with their connection; executors: {} batches failed, {} stalled",
        f.crashes, f.restarts, f.cuts, f.messages, f.lost, f.duplicated, f.stalled_messages, f.broken, f.exec_failed, f.exec_stalled
    );
    let t = tally;
    println!(
        "requests: {} sent, {} answered: {} ok ({} late), {} dropped ({} lost), {} errors, {} refused (frontend down), {} closed with their frontend; {} unanswered",
        t.sent,
        t.answered(),
        t.ok,
        t.late,
        t.dropped,
        t.lost,
        t.errors,
        t.refused,
        t.closed,
        t.sent - t.answered()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
