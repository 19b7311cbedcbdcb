//! Empirical solo-time histograms per (model, app), on one bin grid per
//! model, fed by sampled completions and replaced window by window: the
//! histogram in use is the last full window's, so the scheduler follows
//! drifting distributions without mixing old and new.

use crate::time::{Nanos, NANOS_PER_S};

/// Bins per histogram.
pub const BINS: usize = 48;
/// A window closes after this long, if it holds at least `WINDOW_MIN_SAMPLES`.
pub const WINDOW: Nanos = NANOS_PER_S;
pub const WINDOW_MIN_SAMPLES: u64 = 200;

/// A grid of `BINS` equal bins over [0, top); values at or above `top` fall
/// in the last bin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Grid {
    pub top: f64,
}

impl Grid {
    pub fn width(&self) -> f64 {
        self.top / BINS as f64
    }

    pub fn edge(&self, k: usize) -> f64 {
        k as f64 * self.width()
    }

    pub fn bin(&self, x: f64) -> usize {
        ((x / self.width()) as usize).min(BINS - 1)
    }
}

#[derive(Clone, Debug)]
pub struct AppHistogram {
    /// Normalised masses in use.
    active: [f64; BINS],
    window: [u64; BINS],
    window_samples: u64,
    window_end: Nanos,
}

impl AppHistogram {
    /// Starts from offline profiling samples (solo times in ns).
    pub fn from_profile(grid: &Grid, samples: &[Nanos]) -> Self {
        assert!(!samples.is_empty(), "profiling needs samples");
        let mut counts = [0u64; BINS];
        for &s in samples {
            counts[grid.bin(s as f64)] += 1;
        }
        Self { active: normalise(&counts), window: [0; BINS], window_samples: 0, window_end: WINDOW }
    }

    pub fn masses(&self) -> &[f64; BINS] {
        &self.active
    }

    /// Records a completion; returns true when a window closed and the
    /// histogram in use changed.
    pub fn observe(&mut self, grid: &Grid, now: Nanos, solo: Nanos) -> bool {
        self.window[grid.bin(solo as f64)] += 1;
        self.window_samples += 1;
        if now < self.window_end {
            return false;
        }
        self.window_end = now + WINDOW;
        if self.window_samples < WINDOW_MIN_SAMPLES {
            return false;
        }
        self.active = normalise(&self.window);
        self.window = [0; BINS];
        self.window_samples = 0;
        true
    }
}

fn normalise(counts: &[u64; BINS]) -> [f64; BINS] {
    let total: u64 = counts.iter().sum();
    let mut m = [0.0; BINS];
    for (x, &c) in m.iter_mut().zip(counts) {
        *x = c as f64 / total as f64;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_replace_the_distribution() {
        let grid = Grid { top: 100.0 };
        let mut h = AppHistogram::from_profile(&grid, &[10, 10, 30]);
        assert!((h.masses()[grid.bin(10.0)] - 2.0 / 3.0).abs() < 1e-12);
        // A window of samples near 90 replaces the profile once it closes.
        for i in 0..WINDOW_MIN_SAMPLES {
            assert!(!h.observe(&grid, i, 90));
        }
        assert!(h.observe(&grid, WINDOW, 90));
        assert!((h.masses()[grid.bin(90.0)] - 1.0).abs() < 1e-12);
        assert_eq!(h.masses()[grid.bin(10.0)], 0.0);
    }
}
