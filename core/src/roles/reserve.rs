//! Deadlines the client can keep. A request's SLO runs from when the client
//! sends it to when the client has the answer, but the scheduler plans its
//! batch against the deadline the frontend gives it. Symphony's own code
//! keeps a fixed share back for the response path (2 ms by default); here
//! the frontend keeps back what it measures the engine adding around a
//! batch, online:
//!
//! ```text
//! sample  = (started - exec_at) + (written - finished)
//! reserve = floor + p99(last WINDOW samples),  at most slo / MAX_SHARE
//! planned deadline = received + slo - reserve
//! ```
//!
//! `floor` is the part no server clock sees: the client's own network path
//! both ways (configured, `EngineConfig::reserve_floor`). The p99 is
//! recomputed once per window, so the reserve moves in steps, not per
//! request. The frontend still counts lateness against the client's true
//! deadline; only the scheduler sees the earlier one.
//!
//! What a sample leaves out, and the bound, keep the reserve from feeding
//! on itself: the hop from frontend to scheduler (`seen - received`) grows
//! with the scheduler's backlog, and a reserve that grew with it would
//! shrink batches, lengthen the backlog and grow again (measured: a burst
//! of machine noise tipped `engine-tiny` at 80,000 r/s into 6% bad that
//! way). The policy sees that hop anyway: it plans from `seen`.

use baton_sched::time::Nanos;

/// Samples per recomputation of the p99.
const WINDOW: usize = 1024;
/// The reserve takes at most this fraction (1/MAX_SHARE) of an SLO.
const MAX_SHARE: Nanos = 10;

#[derive(Clone, Debug)]
pub struct Reserve {
    floor: Nanos,
    samples: Vec<Nanos>,
    measured: Nanos,
}

impl Reserve {
    pub fn new(floor: Nanos) -> Self {
        Self { floor, samples: Vec::with_capacity(WINDOW), measured: 0 }
    }

    /// One answered request's time around its batch (formula above).
    pub fn observe(&mut self, sample: Nanos) {
        self.samples.push(sample);
        if self.samples.len() == WINDOW {
            self.samples.sort_unstable();
            self.measured = self.samples[WINDOW * 99 / 100];
            self.samples.clear();
        }
    }

    /// What to keep back from a request with this SLO.
    pub fn of(&self, slo: Nanos) -> Nanos {
        self.floor.saturating_add(self.measured).min(slo / MAX_SHARE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_follows_the_p99_of_each_window_and_stays_bounded() {
        let mut r = Reserve::new(100);
        assert_eq!(r.of(1_000_000), 100, "the floor before any sample");
        for i in 0..WINDOW as Nanos - 1 {
            r.observe(i);
        }
        assert_eq!(r.of(1_000_000), 100, "moves once per window");
        r.observe(5_000);
        assert_eq!(r.of(1_000_000), 100 + 1013, "p99 of 0..1022 and 5000");
        assert_eq!(r.of(1_000), 100, "never more than a tenth of the SLO");
    }
}
