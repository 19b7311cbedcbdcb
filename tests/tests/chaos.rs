//! The chaos campaign in `cargo test`: a few hundred seeded runs of the
//! role engines under injected faults (`core/src/chaos`), every promise
//! checked. `cargo run --release -p baton-perf --bin chaos` runs thousands.

use baton_core::chaos::{self, Config, FaultCounts, Tally};

/// Runs `seeds`; the failing ones with what their checkers found.
fn campaign(seeds: std::ops::Range<u64>, tune: impl Fn(&mut Config)) -> (Tally, FaultCounts, Vec<String>) {
    let (mut tally, mut faults, mut failed) = (Tally::default(), FaultCounts::default(), Vec::new());
    for seed in seeds {
        let mut cfg = Config::from_seed(seed);
        tune(&mut cfg);
        match std::panic::catch_unwind(|| chaos::run(&cfg)) {
            Ok(r) => {
                tally.add(&r.tally);
                faults.add(&r.faults);
                if !r.violations.is_empty() {
                    failed.push(format!("seed {seed}: {} ({})", r.violations.join("; "), chaos::replay_command(seed)));
                }
            }
            Err(_) => failed.push(format!("seed {seed} panicked ({})", chaos::replay_command(seed))),
        }
    }
    (tally, faults, failed)
}

#[test]
fn three_hundred_seeded_chaos_runs_answer_every_request_exactly_once() {
    let (t, f, failed) = campaign(0..300, |_| {});
    assert!(failed.is_empty(), "{} seeds failed:\n{}", failed.len(), failed.join("\n"));
    println!("{t:?}\n{f:?}");
    assert_eq!(t.answered(), t.sent);
    // Every kind of fault was injected, and the cluster still served.
    for (what, n) in [
        ("crashes", f.crashes),
        ("restarts", f.restarts),
        ("cuts", f.cuts),
        ("lost messages", f.lost),
        ("duplicated messages", f.duplicated),
        ("stalled messages", f.stalled_messages),
        ("messages lost with their connection", f.broken),
        ("failed batches", f.exec_failed),
        ("stalled batches", f.exec_stalled),
        ("requests closed with their frontend", t.closed),
        ("requests answered Lost", t.lost),
    ] {
        assert!(n > 0, "no {what} in 300 runs");
    }
    assert!(t.ok * 2 > t.sent, "most requests are served despite the faults: {t:?}");
}

/// The checkers can fail: with a frontend that holds requests forever (no
/// grace), lost messages leave requests unanswered, and the run says so.
#[test]
fn without_the_frontends_grace_lost_messages_leave_requests_unanswered_and_the_checkers_say_so() {
    let (_, _, failed) = campaign(0..20, |c| c.grace = u64::MAX / 4);
    assert!(failed.len() >= 10, "{failed:?}");
    assert!(failed.iter().any(|f| f.contains("never answered") && f.contains("--seed")), "{failed:?}");
}
