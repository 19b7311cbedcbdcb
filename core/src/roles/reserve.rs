//! Deadlines the client can keep. A request's SLO runs from when the client
//! sends it to when the client has the answer, but the scheduler plans its
//! batch against the deadline the frontend gives it. Symphony's own code
//! keeps a fixed share back for the response path (2 ms by default); here
//! the frontend keeps back what it measures the engine adding around a
//! batch, online:
//!
//! ```text
//! sample  = (started - exec_at) + (written - finished),  one per batch
//! reserve = path + p99(last BATCHES samples),  at most slo / MAX_SHARE
//! planned deadline = received + slo - reserve
//! ```
//!
//! One sample per batch, not per request: a batch's members share its
//! start and its answers' writing, so per-request samples are copies, and
//! a window of 1,024 of them held some 70 of Table 4's batches (its "p99"
//! the worst of them, about their 98.6th percentile, recomputed every
//! 0.2 s). What a batch's delay puts at risk is its member nearest its
//! deadline, the one the policy planned it for, so the p99 over batches
//! is what lets 1% of those be late. Measured beside the per-request
//! window on this VM (Table 4 at 5,242 and 5,349 r/s, interleaved): the
//! mean kept back 552-629 µs against 593-995, and bad rates that did not
//! separate through the host's noise (`perf/results/overhead_ab.txt`,
//! "reserve per batch").
//!
//! `path` is the part no server clock sees: the client's own network path
//! both ways, at least the configured floor (`EngineConfig::reserve_floor`,
//! loopback on a loaded small machine). A client that measures it says so
//! in each request (`InferRequest.path_ns`: the load generator keeps the
//! p99 of `(received - sent) - (written - read)` over its answers, exact
//! on its clock and the server's), and a client further away than the
//! floor assumes gets its own path kept back. (Below the floor a client's
//! word is not taken: on this project's 2-core VM a loopback client's p99,
//! 115–130 µs against the 250 µs floor, traded the drops it saved for as
//! many late answers from the host's stalls.) The p99s are
//! recomputed once per window (`P99Window`), so the reserve moves in
//! steps, not per request. The frontend still counts lateness against the client's true
//! deadline; only the scheduler sees the earlier one.
//!
//! What a sample leaves out, and the bound, keep the reserve from feeding
//! on itself: the hop from frontend to scheduler (`seen - received`) grows
//! with the scheduler's backlog, and a reserve that grew with it would
//! shrink batches, lengthen the backlog and grow again (measured: a burst
//! of machine noise tipped `engine-tiny` at 80,000 r/s into 6% bad that
//! way). The policy sees that hop anyway: it plans from `seen`.

use baton_sched::time::Nanos;

/// Samples per recomputation of a p99 by default.
const WINDOW: usize = 1024;
/// Batches per recomputation of the reserve's p99.
const BATCHES: usize = 256;
/// The reserve takes at most this fraction (1/MAX_SHARE) of an SLO.
const MAX_SHARE: Nanos = 10;

/// The p99 of the last complete window of samples (`WINDOW` unless told;
/// 0 before the first is complete).
#[derive(Clone, Debug)]
pub struct P99Window {
    samples: Vec<Nanos>,
    size: usize,
    p99: Nanos,
}

impl Default for P99Window {
    fn default() -> Self {
        Self::new(WINDOW)
    }
}

impl P99Window {
    /// Windows of `size` samples (at least 100, so the p99 is one of them).
    pub fn new(size: usize) -> Self {
        assert!(size >= 100, "a window of {size} has no p99");
        Self { samples: Vec::with_capacity(size), size, p99: 0 }
    }

    /// Adds a sample; true when it completed a window (the p99 moved).
    pub fn observe(&mut self, sample: Nanos) -> bool {
        self.samples.push(sample);
        if self.samples.len() < self.size {
            return false;
        }
        self.samples.sort_unstable();
        self.p99 = self.samples[self.size * 99 / 100];
        self.samples.clear();
        true
    }

    pub fn p99(&self) -> Nanos {
        self.p99
    }
}

#[derive(Clone, Debug)]
pub struct Reserve {
    floor: Nanos,
    around: P99Window,
}

impl Reserve {
    pub fn new(floor: Nanos) -> Self {
        Self { floor, around: P99Window::new(BATCHES) }
    }

    /// One answered batch's time around it (formula above).
    pub fn observe(&mut self, sample: Nanos) {
        self.around.observe(sample);
    }

    /// What to keep back from a request with this SLO whose client says
    /// its path both ways takes `path` (0: unmeasured).
    pub fn of(&self, slo: Nanos, path: Nanos) -> Nanos {
        path.max(self.floor).saturating_add(self.around.p99()).min(slo / MAX_SHARE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_follows_the_p99_of_each_window_and_stays_bounded() {
        let mut r = Reserve::new(100);
        assert_eq!(r.of(1_000_000, 0), 100, "the floor before any sample");
        for i in 0..BATCHES as Nanos - 1 {
            r.observe(i);
        }
        assert_eq!(r.of(1_000_000, 0), 100, "moves once per window");
        r.observe(5_000);
        assert_eq!(r.of(1_000_000, 0), 100 + 253, "p99 of 0..254 and 5000");
        assert_eq!(r.of(1_000, 0), 100, "never more than a tenth of the SLO");
        // A client that measured a path longer than the floor gets it kept back.
        assert_eq!(r.of(1_000_000, 40), 100 + 253);
        assert_eq!(r.of(1_000_000, 3_000), 3_000 + 253);
        assert_eq!(r.of(100_000, 50_000), 10_000, "still a tenth of the SLO at most");
        let mut w = P99Window::default();
        assert!((0..WINDOW as Nanos - 1).all(|i| !w.observe(i)) && w.observe(5_000));
        assert_eq!(w.p99(), 1013, "p99 of 0..1022 and 5000");
    }
}
