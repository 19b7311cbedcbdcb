//! The engine beside the simulator request by request (`baton demo --gap`).
//! The load generator sends the simulator's arrivals in order, so request
//! i of an engine run and of `baton sim` on the same file, rate, seed and
//! length is the same request (`baton_sched::sim::run_fates`). For each
//! model request after the warm-up: bad in the engine only, in the
//! simulator only, or in both; and for those late in the engine only, the
//! time each part of the engine's path took beyond the simulator's:
//!
//! ```text
//! part         engine                      simulator         excess
//! generator    sent - scheduled            0                 engine
//! ingress      seen - sent                 0                 engine
//! wait         exec_at - seen              exec_at - arrival engine - simulator
//! start lag    started - exec_at           start - exec_at   engine - simulator
//! run          finished - started          finish - start    engine - simulator
//! completion   written - finished          0                 engine
//! egress       received - written          0                 engine
//! ```
//!
//! The engine's parts add up to its latency as the client sees it, the
//! simulator's three to its latency, so the excesses add up to the
//! difference. Each such request is counted under the part with the
//! largest excess: where, of the engine's path, the SLO was lost. (The
//! engine's and the client's clocks are placed on one Unix clock as in
//! `overhead.rs`; a part that comes out negative there is 0.)

use baton_sched::sim::{End, Fate};
use baton_sched::time::Nanos;
use baton_wire::fb;
use serde::Serialize;

use crate::load::{add_at, bump};

/// How many parts.
pub const N: usize = 7;

/// The parts, in the order of a request's way.
pub const PARTS: [&str; N] = ["generator", "ingress", "wait", "start lag", "run", "completion", "egress"];

/// How the client saw one request end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Outcome {
    Ok,
    Late,
    Dropped(fb::DropReason),
    Error,
}

/// One request as the client saw it: how it ended, and the engine's parts
/// (ns) where its answer carried a batch's timing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Answered {
    pub outcome: Outcome,
    pub parts: Option<[i64; N]>,
}

/// Each model request's `Answered` by request id, as the client saw them
/// (`load::run_with_fates`): None for a query's, or one never answered.
pub type Fates = Vec<Option<Answered>>;

/// The engine's parts of one answer: `scheduled`, `sent` and `received`
/// are the client's times on the Unix clock.
pub fn engine_parts(scheduled: u64, sent: u64, received: u64, t: &fb::Timing) -> [i64; N] {
    let server = |x: u64| t.origin_unix_ns as i128 + x as i128;
    let d = |a: i128, b: i128| (a - b).clamp(0, i64::MAX as i128) as i64;
    [
        d(sent as i128, scheduled as i128),
        d(server(t.seen_ns), sent as i128),
        d(t.exec_at_ns as i128, t.seen_ns as i128),
        d(t.started_ns as i128, t.exec_at_ns as i128),
        d(t.finished_ns as i128, t.started_ns as i128),
        d(t.written_ns as i128, t.finished_ns as i128),
        d(received as i128, server(t.written_ns)),
    ]
}

/// The simulator's parts of a request that ran (its path has no
/// generator, ingress, completion or egress).
fn sim_parts(f: &Fate) -> Option<[i64; N]> {
    match f.end {
        End::Ran { exec_at, start, finish, .. } => {
            let d = |a: Nanos, b: Nanos| a.saturating_sub(b) as i64;
            Some([0, 0, d(exec_at, f.arrival), d(start, exec_at), d(finish, start), 0, 0])
        }
        End::Dropped(_) | End::Unanswered => None,
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Gap {
    /// Model requests after the warm-up with a fate on both sides.
    pub compared: u64,
    pub bad_engine_only: u64,
    pub bad_sim_only: u64,
    pub bad_both: u64,
    /// The engine's only, by model (index in the scenario).
    pub by_model: Vec<u64>,
    /// Of the engine's only: late, dropped (by reason), errors, unanswered.
    pub late: u64,
    pub dropped: Vec<(String, u64)>,
    pub errors: u64,
    pub unanswered: u64,
    /// The late ones by the part with the largest excess (`PARTS` order).
    pub late_by_part: [u64; N],
    /// Their mean excess of each part over the simulator's, µs.
    pub mean_excess_us: [f64; N],
}

/// Lines up the simulator's fates (by arrival, `run_fates`) and the
/// client's (by request id, the same ordinals) of the requests scheduled
/// at or after `warmup` (ns from the run's start).
pub fn compare(sim: &[Option<Fate>], engine: &[Option<Answered>], warmup: Nanos) -> Gap {
    let mut g = Gap::default();
    let mut excess_sum = [0i64; N];
    for (s, e) in sim.iter().zip(engine) {
        let Some(s) = s.filter(|s| s.arrival >= warmup) else { continue };
        g.compared += 1;
        let engine_ok = matches!(e, Some(Answered { outcome: Outcome::Ok, .. }));
        match (s.ok(), engine_ok) {
            (true, true) => continue,
            (false, true) => {
                g.bad_sim_only += 1;
                continue;
            }
            (false, false) => {
                g.bad_both += 1;
                continue;
            }
            (true, false) => g.bad_engine_only += 1,
        }
        add_at(&mut g.by_model, s.model.index(), 1);
        match e {
            None => g.unanswered += 1,
            Some(Answered { outcome: Outcome::Error, .. }) => g.errors += 1,
            Some(Answered { outcome: Outcome::Dropped(r), .. }) => bump(&mut g.dropped, format!("{r:?}"), 1),
            Some(Answered { parts, .. }) => {
                g.late += 1;
                let (Some(ep), Some(sp)) = (parts, sim_parts(&s)) else { continue };
                let excess: [i64; N] = std::array::from_fn(|i| ep[i] - sp[i]);
                let worst = (0..N).max_by_key(|&i| excess[i]).expect("N > 0");
                g.late_by_part[worst] += 1;
                for (sum, x) in excess_sum.iter_mut().zip(excess) {
                    *sum += x;
                }
            }
        }
    }
    let timed = g.late_by_part.iter().sum::<u64>().max(1) as f64;
    g.mean_excess_us = excess_sum.map(|s| s as f64 / timed / 1e3);
    g
}

/// The comparison in three lines; `names`: the scenario's models.
pub fn print(g: &Gap, names: &[String]) {
    let by_model: Vec<String> =
        g.by_model.iter().zip(names).filter(|(&n, _)| n > 0).map(|(n, name)| format!("{name} {n}")).collect();
    println!(
        "request by request beside the simulator ({} model requests after warm-up): bad in the engine only {} ({}), in the simulator only {}, in both {}",
        g.compared,
        g.bad_engine_only,
        by_model.join(", "),
        g.bad_sim_only,
        g.bad_both
    );
    let by_part: Vec<String> = PARTS.iter().zip(g.late_by_part).map(|(p, n)| format!("{p} {n}")).collect();
    let dropped: Vec<String> = g.dropped.iter().map(|(r, n)| format!("{r} {n}")).collect();
    println!(
        "  the engine's only: late {} (by the part furthest over the simulator's: {}), dropped {} ({}), errors {}, unanswered {}",
        g.late,
        by_part.join(", "),
        g.dropped.iter().map(|d| d.1).sum::<u64>(),
        dropped.join(", "),
        g.errors,
        g.unanswered
    );
    let mean: Vec<String> = PARTS.iter().zip(g.mean_excess_us).map(|(p, us)| format!("{p} {us:.0}")).collect();
    println!("  those late, each part's mean over the simulator's, µs: {}", mean.join(", "));
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_sched::types::{DropReason, ModelId};

    const MS: Nanos = 1_000_000;

    fn fate(arrival: Nanos, end: End) -> Option<Fate> {
        Some(Fate { model: ModelId(0), arrival, deadline: arrival + 10 * MS, end })
    }

    /// Ran from `exec_at` to `finish`, ms after its arrival.
    fn ran(arrival: Nanos, exec_at: Nanos, finish: Nanos) -> Option<Fate> {
        let (exec_at, finish) = (arrival + exec_at * MS, arrival + finish * MS);
        fate(arrival, End::Ran { exec_at, start: exec_at, finish, batch: 4 })
    }

    fn answered(outcome: Outcome, parts: [i64; N]) -> Option<Answered> {
        Some(Answered { outcome, parts: Some(parts.map(|ms| ms * MS as i64)) })
    }

    #[test]
    fn each_late_request_is_counted_under_the_part_furthest_over_the_simulator_s() {
        let sim = [
            ran(0, 1, 9),                                   // warm-up: not compared
            ran(20 * MS, 2, 8),                             // ok in both
            ran(40 * MS, 2, 8),                             // late in the engine: its wait
            ran(60 * MS, 2, 8),                             // late in the engine: egress
            ran(80 * MS, 2, 8),                             // dropped by the engine
            fate(100 * MS, End::Dropped(DropReason::Shed)), // bad in the simulator only
            ran(120 * MS, 2, 8),                            // never answered
            None,                                           // a query's root
        ];
        let engine = [
            answered(Outcome::Late, [0; N]),
            answered(Outcome::Ok, [0, 0, 2, 0, 6, 0, 0]),
            answered(Outcome::Late, [0, 1, 5, 0, 6, 0, 0]),
            answered(Outcome::Late, [0, 0, 2, 0, 6, 0, 3]),
            Some(Answered { outcome: Outcome::Dropped(fb::DropReason::Shed), parts: None }),
            answered(Outcome::Ok, [0; N]),
            None,
            answered(Outcome::Ok, [0; N]),
        ];
        let g = compare(&sim, &engine, 10 * MS);
        assert_eq!((g.compared, g.bad_engine_only, g.bad_sim_only, g.bad_both), (6, 4, 1, 0));
        assert_eq!(g.by_model, vec![4]);
        assert_eq!((g.late, g.errors, g.unanswered), (2, 0, 1));
        assert_eq!(g.dropped, vec![("Shed".to_string(), 1)]);
        assert_eq!(g.late_by_part, [0, 0, 1, 0, 0, 0, 1]);
        // Excesses: (ingress 1, wait 3) and (egress 3), each over two.
        assert_eq!(g.mean_excess_us, [0.0, 500.0, 1500.0, 0.0, 0.0, 0.0, 1500.0]);
    }

    #[test]
    fn an_answer_s_parts_add_up_to_its_latency() {
        let t = fb::Timing {
            origin_unix_ns: 1_000,
            received_ns: 150,
            seen_ns: 200,
            exec_at_ns: 500,
            started_ns: 520,
            finished_ns: 900,
            written_ns: 950,
            ..Default::default()
        };
        let p = engine_parts(1_000, 1_100, 2_000, &t);
        assert_eq!(p, [100, 100, 300, 20, 380, 50, 50]);
        assert_eq!(p.iter().sum::<i64>(), 2_000 - 1_000);
    }
}
