//! Online arrival-rate estimate (lambda of the beta*lambda rule).
//!
//! Arrivals are counted in fixed windows; at each window boundary the
//! estimate moves halfway towards the window's rate (an EWMA with a half-life
//! of one window). Windows with no arrivals count as zero. The cost per
//! arrival is one comparison and one increment.

use crate::time::{Nanos, NANOS_PER_S};

#[derive(Clone, Debug)]
pub struct RateEstimator {
    window: Nanos,
    window_end: Nanos,
    count: u64,
    rate_rps: f64,
    primed: bool,
}

impl RateEstimator {
    pub fn new(window: Nanos) -> Self {
        assert!(window > 0);
        Self { window, window_end: window, count: 0, rate_rps: 0.0, primed: false }
    }

    /// Counts one arrival at `now` (non-decreasing across calls).
    #[inline]
    pub fn observe(&mut self, now: Nanos) {
        self.advance(now);
        self.count += 1;
    }

    /// Rolls the windows forward to `now`; returns true if the estimate moved.
    pub fn advance(&mut self, now: Nanos) -> bool {
        if now < self.window_end {
            return false;
        }
        let per_window = NANOS_PER_S as f64 / self.window as f64;
        let sample = self.count as f64 * per_window;
        self.rate_rps = if self.primed { 0.5 * (self.rate_rps + sample) } else { sample };
        self.primed = true;
        self.count = 0;
        self.window_end += self.window;
        if now >= self.window_end {
            // Whole windows with no arrivals: each halves the estimate.
            let empty = (now - self.window_end) / self.window + 1;
            self.rate_rps *= 0.5f64.powi(empty.min(64) as i32);
            self.window_end += empty * self.window;
        }
        true
    }

    pub fn rate_rps(&self) -> f64 {
        self.rate_rps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NANOS_PER_MS;

    #[test]
    fn converges_to_a_steady_rate_and_decays_when_idle() {
        let mut r = RateEstimator::new(50 * NANOS_PER_MS);
        // 2000 r/s: one arrival every 0.5 ms for one second.
        for i in 0..2000u64 {
            r.observe(i * NANOS_PER_MS / 2);
        }
        r.advance(NANOS_PER_S);
        assert!((r.rate_rps() - 2000.0).abs() < 50.0, "{}", r.rate_rps());
        r.advance(2 * NANOS_PER_S);
        assert!(r.rate_rps() < 1.0);
    }
}
