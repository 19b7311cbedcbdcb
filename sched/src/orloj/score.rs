//! Orloj's priority score (`../shared/design/orloj.md`, "Priority"): the
//! expected cost saved per unit of worker time by running a request now
//! rather than after an extra Exp(mu) wait. For batch time bins
//! `[a_k, b_k)` with mass `p_k`, width `w_k`, `c_k = p_k/(w_k mu)`, slack
//! `s = D - t`, and `E(t) = e^{mu (t - t0)}`:
//!
//! ```text
//! s >= b_k      : A += c_k (e^{mu (b_k - D')} - e^{mu (a_k - D')})      D' = D - t0
//! a_k < s < b_k : A -= c_k e^{mu (a_k - D')},   B += c_k
//! s <= a_k      : nothing (misses either way)
//! score = (A E(t) + B) / E[T_b]
//! ```
//!
//! so between milestones — the instants `t = D - a_k` and `t = D - b_k` at
//! which a bin changes case — every score is a line in `E`.

use super::batch_time::BatchTime;

/// The line `(A, B)` of a request with deadline `d_rel = D - t0` and slack
/// `s` under batch time `bt`, for rate `mu` (per nanosecond).
pub fn line(bt: &BatchTime, mu: f64, d_rel: f64, s: f64) -> (f64, f64) {
    let (mut a, mut b) = (0.0, 0.0);
    for x in &bt.bins {
        if s <= x.lo {
            break;
        }
        let c = x.p / ((x.hi - x.lo) * mu);
        if s >= x.hi {
            a += c * ((mu * (x.hi - d_rel)).exp() - (mu * (x.lo - d_rel)).exp());
        } else {
            a -= c * (mu * (x.lo - d_rel)).exp();
            b += c;
        }
    }
    (a / bt.mean, b / bt.mean)
}

/// The largest bin edge strictly below `s`, if any: when the slack falls to
/// it, the line changes.
pub fn next_edge_below(bt: &BatchTime, s: f64) -> Option<f64> {
    bt.bins.iter().flat_map(|x| [x.lo, x.hi]).filter(|&e| e < s).fold(None, |m, e| Some(m.map_or(e, |m: f64| m.max(e))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orloj::batch_time::Bin;

    /// The closed form against the definition: expected saved cost by
    /// numeric integration over the bins and the exponential wait.
    #[test]
    fn closed_form_matches_numeric_integration() {
        let bt = BatchTime {
            b: 1,
            bins: vec![Bin { lo: 2.0, hi: 4.0, p: 0.3 }, Bin { lo: 6.0, hi: 7.0, p: 0.7 }],
            mean: 0.3 * 3.0 + 0.7 * 6.5,
        };
        let mu = 0.4;
        for (t0, t, d) in [(0.0, 1.0, 9.0), (0.0, 3.5, 9.0), (2.0, 4.5, 9.0), (0.0, 0.0, 3.0)] {
            let s = d - t;
            // Saved = P(T <= s) - P(T + W <= s), W ~ Exp(mu).
            let n = 20_000;
            let mut saved = 0.0;
            for x in &bt.bins {
                for i in 0..n {
                    let tt = x.lo + (x.hi - x.lo) * (i as f64 + 0.5) / n as f64;
                    let p = x.p / n as f64;
                    if tt <= s {
                        saved += p * (-mu * (s - tt)).exp();
                    }
                }
            }
            let (a, b) = line(&bt, mu, d - t0, s);
            let score = a * (mu * (t - t0)).exp() + b;
            assert!((score - saved / bt.mean).abs() < 1e-4, "t={t}: {score} vs {}", saved / bt.mean);
        }
    }
}
