//! Symphony's autoscaler in the engine: the scheduler role counts each
//! period's signals as it sees them — requests arriving (and the busiest
//! sizing window), requests ending (a member whose batch is done by its
//! deadline is good; one done after it, or a request dropped, is bad),
//! GPU time busy (each batch's start to its completion), the backends in
//! use — into the same `Meter` the simulator fills, and takes the same
//! `Autoscaler`'s advice at the end of each period. It advises; acting is
//! an operator's (or a supervisor's): starting backend processes, which
//! join when they connect, and stopping them, which leave without losing
//! a request (`backend.rs`). The advice goes to the sink the runtime
//! gives (a log line for `baton scheduler --autoscale-period`).
//!
//! The scheduler's clock is the judge of lateness here (a completion is
//! seen when its `BatchDone` arrives), as Symphony's own scheduler
//! measures its signals; the client's view adds the answer's way back.

use std::sync::Arc;

use baton_sched::autoscale::{AutoscaleConfig, Autoscaler, Meter, Signals};
use baton_sched::time::Nanos;

/// One period's signals and the advice taken from them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Advice {
    /// When the period ended, on the cluster clock.
    pub at: Nanos,
    pub signals: Signals,
    /// GPUs to serve in the next period.
    pub gpus: usize,
}

/// Where advice goes.
#[derive(Clone)]
pub struct AdviceSink(pub Arc<dyn Fn(&Advice) + Send + Sync>);

impl std::fmt::Debug for AdviceSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdviceSink")
    }
}

pub struct Autoscaling {
    advice: Autoscaler,
    meter: Meter,
    sink: AdviceSink,
    next_at: Nanos,
    /// Backends the policy may use (joined, neither failed nor leaving).
    up: Vec<bool>,
    /// Drops counted so far (the scheduler's running total).
    dropped: u64,
}

impl Autoscaling {
    /// Counting from `now` on, for a cluster of `backends`, all in use
    /// until said otherwise (a scheduler process hears every backend
    /// failed at its start, and up as each connects).
    pub fn new(cfg: AutoscaleConfig, sink: AdviceSink, backends: u32, now: Nanos) -> Self {
        let (advice, meter) = (Autoscaler::new(cfg), Meter::new(&cfg));
        Self { advice, meter, sink, next_at: now + cfg.period, up: vec![true; backends as usize], dropped: 0 }
    }

    pub fn arrived(&mut self, now: Nanos) {
        self.meter.arrive(now);
    }

    /// A batch that started at `started` is done at `now` (`failed`: its
    /// backend could not run it, and dropped its members); its members'
    /// deadlines.
    pub fn batch_done(&mut self, now: Nanos, started: Nanos, failed: bool, deadlines: &[Nanos]) {
        self.meter.busy(now.saturating_sub(started));
        deadlines.iter().for_each(|&d| self.meter.end(failed || now > d));
    }

    /// The scheduler's total of drops is now `total`.
    pub fn dropped(&mut self, total: u64) {
        (self.dropped..total).for_each(|_| self.meter.end(true));
        self.dropped = self.dropped.max(total);
    }

    /// Backend `b` is in use (`true`) or not.
    pub fn set_up(&mut self, b: usize, up: bool) {
        if let Some(u) = self.up.get_mut(b) {
            *u = up;
        }
    }

    pub fn next_timeout(&self) -> Nanos {
        self.next_at
    }

    /// Ends the period if its time has come: the advice goes to the sink.
    pub fn on_timeout(&mut self, now: Nanos) {
        if now < self.next_at {
            return;
        }
        let period = self.advice.config().period;
        let gpus = self.up.iter().filter(|&&u| u).count();
        let signals = self.meter.take(gpus, period);
        let advice = Advice { at: now, signals, gpus: self.advice.advise(&signals) };
        (self.sink.0)(&advice);
        // Periods follow one another; one missed (a stalled shard) is skipped.
        self.next_at = (self.next_at + period).max(now + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_period_counts_what_the_scheduler_saw_and_advises() {
        let cfg = AutoscaleConfig {
            period: 1_000,
            threshold: 0.01,
            headroom: 0.1,
            min_gpus: 1,
            max_gpus: 8,
            initial: 2,
            sizing: None,
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = {
            let seen = Arc::clone(&seen);
            AdviceSink(Arc::new(move |a: &Advice| seen.lock().unwrap().push(*a)))
        };
        let mut a = Autoscaling::new(cfg, sink, 4, 0);
        a.set_up(2, false);
        a.set_up(3, false);
        (0..10).for_each(|t| a.arrived(t * 50));
        // Two batches: one done by its members' deadlines, one late for one.
        a.batch_done(400, 100, false, &[500, 500]);
        a.batch_done(700, 400, false, &[600, 900]);
        a.dropped(2);
        a.on_timeout(999);
        assert!(seen.lock().unwrap().is_empty(), "not before the period ends");
        a.on_timeout(1_000);
        let advice = seen.lock().unwrap()[0];
        let s = advice.signals;
        assert_eq!((s.gpus, s.arrived, s.ended, s.bad), (2, 10, 6, 3));
        assert_eq!(s.idle_fraction, 1.0 - 600.0 / 2_000.0);
        assert_eq!(advice.gpus, 4, "half bad: add 2 x 0.5 / 0.5 = 2");
        assert_eq!(a.next_timeout(), 2_000);
        // Drops already counted are not counted again.
        a.dropped(2);
        a.on_timeout(2_000);
        assert_eq!(seen.lock().unwrap()[1].signals.ended, 0);
    }
}
