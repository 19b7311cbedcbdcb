//! The distribution of a batch's execution time, precomputed per batch size
//! off the request path (`../shared/design/orloj.md`, "Distributions").
//!
//! A batch of b is padded to its longest member. Seen from one member of
//! app a, its batch mates are unknown (section 4.3): they are b - 1
//! independent draws from the model's app mixture, so the batch's longest
//! solo time has `F_a,b(x) = F_a(x) * (sum_a' w_a' F_a'(x))^(b-1)` — the
//! design note's `F_max,b` with the member's own app known, which is what
//! per-application tracking is for. Evaluated at the grid's edges, then
//! stretched by `1 + kappa*(b-1)`. Each bin keeps its mass spread uniformly
//! over `[lo, hi)`.

use super::histogram::{Grid, BINS};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    pub p: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BatchTime {
    pub b: u32,
    /// Bins with mass, in increasing time.
    pub bins: Vec<Bin>,
    pub mean: f64,
}

impl BatchTime {
    /// From the member's own app masses and the app mixture's masses on
    /// `grid` (each sums to 1).
    pub fn new(grid: &Grid, own: &[f64; BINS], mix: &[f64; BINS], b: u32, kappa: f64) -> Self {
        assert!(b >= 1);
        let stretch = 1.0 + kappa * (b - 1) as f64;
        let mut bins = Vec::new();
        let (mut cdf_own, mut cdf_mix, mut prev) = (0.0f64, 0.0f64, 0.0f64);
        for (k, (&o, &m)) in own.iter().zip(mix).enumerate() {
            cdf_own = (cdf_own + o).min(1.0);
            cdf_mix = (cdf_mix + m).min(1.0);
            let at = cdf_own * cdf_mix.powi(b as i32 - 1);
            let p = at - prev;
            prev = at;
            if p > 1e-12 {
                bins.push(Bin { lo: grid.edge(k) * stretch, hi: grid.edge(k + 1) * stretch, p });
            }
        }
        let total: f64 = bins.iter().map(|x| x.p).sum();
        assert!(total > 0.0, "batch time distribution without mass");
        for x in &mut bins {
            x.p /= total;
        }
        let mean = bins.iter().map(|x| x.p * 0.5 * (x.lo + x.hi)).sum();
        Self { b, bins, mean }
    }

    /// The q-quantile, interpolating inside its bin.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut acc = 0.0;
        for x in &self.bins {
            if acc + x.p >= q {
                return x.lo + (x.hi - x.lo) * ((q - acc) / x.p).clamp(0.0, 1.0);
            }
            acc += x.p;
        }
        self.bins.last().map_or(0.0, |x| x.hi)
    }

    /// The shortest time the batch can take.
    pub fn min(&self) -> f64 {
        self.bins[0].lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_of_b_draws_shifts_mass_up() {
        let grid = Grid { top: BINS as f64 };
        let mut mix = [0.0; BINS];
        mix[10] = 0.5;
        mix[20] = 0.5;
        let t1 = BatchTime::new(&grid, &mix, &mix, 1, 0.0);
        let t2 = BatchTime::new(&grid, &mix, &mix, 2, 0.0);
        // max of two fair coin draws is the high one with probability 3/4.
        assert!((t2.bins[1].p - 0.75).abs() < 1e-12);
        assert!(t2.mean > t1.mean);
        let t4k = BatchTime::new(&grid, &mix, &mix, 4, 0.1);
        // A short member of a pair still waits for a long mate half the time.
        let mut short = [0.0; BINS];
        short[10] = 1.0;
        let s2 = BatchTime::new(&grid, &short, &mix, 2, 0.0);
        assert!((s2.bins[0].p - 0.5).abs() < 1e-12 && (s2.bins[1].lo - 20.0).abs() < 1e-12);
        assert!((t4k.bins[0].lo - 10.0 * 1.3).abs() < 1e-9);
        assert!((t1.quantile(0.5) - 11.0).abs() < 1e-9);
    }
}
