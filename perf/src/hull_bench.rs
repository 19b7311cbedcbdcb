//! Orloj's priority queue against the alternative it replaces: re-sorting
//! every pending request by its current score at every decision. For n
//! pending lines, measures insert, delete and query (advance E, read the
//! maximum) on `KineticHull`, and a full re-sort, per operation.

use std::hint::black_box;
use std::time::Instant;

use serde::Serialize;

use baton_sched::hull::{KineticHull, Slot};
use baton_sched::rng::Rng;

#[derive(Clone, Debug, Serialize)]
pub struct HullBenchRow {
    pub pending: usize,
    pub insert_ns: f64,
    pub delete_ns: f64,
    pub query_ns: f64,
    pub resort_ns: f64,
    /// How many times faster a query is than a re-sort.
    pub query_speedup: f64,
}

/// Lines shaped like Orloj scores: slopes spread over orders of magnitude
/// (deadlines spread over the SLO), intercepts of both signs.
fn random_line(rng: &mut Rng) -> (f64, f64) {
    (rng.unit() * 10f64.powf(-3.0 * rng.unit()), rng.unit() * 2.0 - 1.0)
}

fn per_op(ops: u64, f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_nanos() as f64 / ops as f64
}

pub fn run(sizes: &[usize], ops: u64) -> Vec<HullBenchRow> {
    sizes
        .iter()
        .map(|&n| {
            let mut rng = Rng::new(n as u64);
            let mut h = KineticHull::with_capacity(2 * n);
            let mut slots: Vec<Slot> = (0..n)
                .map(|_| {
                    let (a, b) = random_line(&mut rng);
                    h.insert(a, b)
                })
                .collect();
            // Inserts and deletes alternate in chunks, so the size stays
            // within n..n+CHUNK while each kind is timed on its own.
            const CHUNK: usize = 64;
            let (mut insert_total, mut delete_total) = (0u128, 0u128);
            let mut done = 0u64;
            while done < ops {
                let lines: Vec<(f64, f64)> = (0..CHUNK).map(|_| random_line(&mut rng)).collect();
                let t = Instant::now();
                for &(a, b) in &lines {
                    slots.push(h.insert(a, b));
                }
                insert_total += t.elapsed().as_nanos();
                let picks: Vec<usize> = (0..CHUNK).map(|i| rng.below((n + CHUNK - i) as u64) as usize).collect();
                let t = Instant::now();
                for &i in &picks {
                    h.remove(slots.swap_remove(i));
                }
                delete_total += t.elapsed().as_nanos();
                done += CHUNK as u64;
            }
            let insert_ns = insert_total as f64 / done as f64;
            let delete_ns = delete_total as f64 / done as f64;
            assert_eq!(h.len(), n);
            // Queries as the scheduler makes them: time (and E) moves on a little each time.
            let mut e = h.e();
            let query_ns = per_op(ops, || {
                for _ in 0..ops {
                    e *= 1.0001;
                    e += 1e-6;
                    h.advance(e);
                    black_box(h.max());
                }
            });
            let pending: Vec<(f64, f64)> = (0..n).map(|_| random_line(&mut rng)).collect();
            let rounds = (ops / n as u64).clamp(3, ops);
            let mut scores: Vec<(f64, usize)> = Vec::with_capacity(n);
            let resort_ns = per_op(rounds, || {
                for r in 0..rounds {
                    let e = 1.0 + r as f64 * 1e-3;
                    scores.clear();
                    scores.extend(pending.iter().enumerate().map(|(i, &(a, b))| (a * e + b, i)));
                    scores.sort_unstable_by(|x, y| y.0.total_cmp(&x.0));
                    black_box(scores.first());
                }
            });
            HullBenchRow { pending: n, insert_ns, delete_ns, query_ns, resort_ns, query_speedup: resort_ns / query_ns }
        })
        .collect()
}
