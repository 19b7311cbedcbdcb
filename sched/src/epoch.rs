//! Arrival rates measured over epochs: what a re-planning policy plans the
//! next epoch for (Nexus's epochs, `nexus/runtime.rs`; glet's,
//! `glet/epochs.rs`; a re-partitioned cluster's, `repartitioned.rs`).
//!
//! The counter counts arrivals per key (a model, or a Nexus session) over
//! the epoch in progress. An epoch closes at the first `close(now)` at or
//! after its start plus its length — the policy's timer, which may fire
//! late — and the next one starts at that `now`: each key's rate is its
//! count over the time that really passed, `n / (now − start)` per second.
//! An epoch in which nothing arrived closes without rates (nothing to
//! re-plan from). The counter wants waking at the end of the epoch only
//! while requests arrive or its policy has work (`deadline`): a quiet
//! cluster sleeps, and the epoch it wakes into spans the quiet time too.

use crate::time::Nanos;

/// A measured rate never counts below this in a re-plan, so that a quiet
/// epoch does not plan a model (or a Nexus session) out of the cluster.
pub const MIN_PLANNED_RPS: f64 = 1.0;

/// Per-key arrival counts over the epoch in progress (module doc).
#[derive(Clone, Debug)]
pub struct EpochCounter {
    /// The epoch's length.
    length: Nanos,
    /// When the epoch in progress began.
    start: Nanos,
    /// Each key's arrivals since `start`.
    arrived: Vec<u64>,
    last_arrival: Nanos,
}

impl EpochCounter {
    /// Counts `keys` keys over epochs of `length` (> 0), the first from 0.
    pub fn new(keys: usize, length: Nanos) -> Self {
        assert!(length > 0, "an epoch of 0");
        Self { length, start: 0, arrived: vec![0; keys], last_arrival: 0 }
    }

    /// One arrival of `key` at `now`.
    pub fn count(&mut self, now: Nanos, key: usize) {
        self.arrived[key] += 1;
        self.last_arrival = now;
    }

    /// Closes the epoch in progress if it has ended by `now` and starts
    /// the next at `now`. Each key's rate over the closed epoch (arrivals
    /// per second), or None: the epoch has not ended, or nothing arrived
    /// in it.
    #[must_use]
    pub fn close(&mut self, now: Nanos) -> Option<Vec<f64>> {
        if now < self.start + self.length {
            return None;
        }
        let secs = (now - self.start) as f64 / 1e9;
        let any = self.arrived.iter().any(|&n| n > 0);
        let rates = any.then(|| self.arrived.iter().map(|&n| n as f64 / secs).collect());
        self.arrived.iter_mut().for_each(|n| *n = 0);
        self.start = now;
        rates
    }

    /// When the epoch in progress ends, if the counter wants waking then:
    /// while its policy is `busy` (requests wait) or a request arrived in
    /// this epoch.
    pub fn deadline(&self, busy: bool) -> Option<Nanos> {
        (busy || self.last_arrival >= self.start).then_some(self.start + self.length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn an_epoch_closes_at_its_end_or_later_with_the_rates_over_its_real_length() {
        let mut c = EpochCounter::new(2, 2 * S);
        c.count(S / 2, 0);
        c.count(S, 0);
        c.count(S, 1);
        assert_eq!(c.close(2 * S - 1), None, "not ended yet");
        // The timer fired late: the rates span 4 s, not 2.
        assert_eq!(c.close(4 * S), Some(vec![0.5, 0.25]));
        // The next epoch starts at the close.
        c.count(5 * S, 1);
        assert_eq!(c.close(5 * S), None);
        assert_eq!(c.close(6 * S), Some(vec![0.0, 0.5]));
    }

    #[test]
    fn a_quiet_epoch_closes_without_rates_and_a_quiet_counter_sleeps() {
        let mut c = EpochCounter::new(1, S);
        // A fresh counter wants waking at its first epoch's end.
        assert_eq!(c.deadline(false), Some(S));
        assert_eq!(c.close(S), None, "nothing arrived");
        assert_eq!(c.deadline(false), None, "a quiet counter sleeps");
        assert_eq!(c.deadline(true), Some(2 * S), "unless its policy is busy");
        c.count(3 * S, 0);
        assert_eq!(c.deadline(false), Some(2 * S));
        assert_eq!(c.close(3 * S), Some(vec![0.5]));
        assert_eq!(c.deadline(false), Some(4 * S), "the last arrival opened this epoch");
    }
}
