//! Goodput as the papers define it: the highest rate at which at most 1%
//! of requests are bad (late, dropped or failed) as the client sees them,
//! for every model and query alike (Symphony's definition, the one `baton
//! sim --find-goodput` applies), found by search — one fresh engine and
//! one load run per probe (`baton demo --find-goodput`, perf's
//! `engine_bench` and the harnesses built on it).

use crate::load::LoadReport;

/// The precision of goodput searches, the simulator's and the engine's: a
/// bracket within 1% of its upper end.
pub const GOODPUT_TOLERANCE: f64 = 0.01;

/// A probe that counts toward goodput: at most 1% bad for every model
/// and query, every request answered exactly once (`LoadReport::meets_slos`).
pub fn passes(r: &LoadReport) -> bool {
    r.meets_slos()
}

/// The engine's goodput: the highest rate at which `run(rate)` passes, by
/// search around `guess` until the bracket is within `GOODPUT_TOLERANCE`
/// of its upper end or `max_probes` ran. Returns it (0 if none passed) and
/// every probe.
pub fn engine_goodput(guess: f64, max_probes: usize, run: &dyn Fn(f64) -> LoadReport) -> (f64, Vec<(f64, bool)>) {
    search_rate(guess, (1.1, 0.8), GOODPUT_TOLERANCE, max_probes, &mut |rate| passes(&run(rate)))
}

/// The highest rate `ok` passes, by search from `guess`: scaled by
/// `steps.0` while every probe passed, by `steps.1` while every probe
/// failed, then bisected until the bracket is within `rel_tolerance` or
/// `max_probes` ran. Returns it (0 if none passed) and every probe.
pub fn search_rate(
    guess: f64,
    steps: (f64, f64),
    rel_tolerance: f64,
    max_probes: usize,
    ok: &mut dyn FnMut(f64) -> bool,
) -> (f64, Vec<(f64, bool)>) {
    let mut probes = Vec::new();
    let (mut lo, mut hi) = (0.0_f64, f64::INFINITY);
    let mut rate = guess;
    while probes.len() < max_probes {
        let ok = ok(rate);
        eprintln!("  probe {rate:>11.1} r/s: {}", if ok { "ok" } else { "bad" });
        probes.push((rate, ok));
        if ok {
            lo = rate;
        } else {
            hi = rate;
        }
        if hi.is_finite() && hi - lo <= rel_tolerance * hi {
            break;
        }
        rate = match (lo > 0.0, hi.is_finite()) {
            (true, true) => 0.5 * (lo + hi),
            (true, false) => rate * steps.0,
            _ => rate * steps.1,
        };
    }
    (lo, probes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_brackets_the_highest_passing_rate() {
        // Passes up to 1,234 r/s: found within 1% from a guess on either side.
        for guess in [500.0, 1_000.0, 3_000.0] {
            let (best, probes) = search_rate(guess, (1.1, 0.8), GOODPUT_TOLERANCE, 40, &mut |r| r <= 1_234.0);
            assert!((1_234.0 * 0.99..=1_234.0).contains(&best), "{guess}: {best} after {probes:?}");
        }
        let (best, probes) = search_rate(1_000.0, (1.1, 0.8), GOODPUT_TOLERANCE, 3, &mut |_| false);
        assert_eq!((best, probes.len()), (0.0, 3), "nothing passes: 0, within the probes allowed");
    }
}
