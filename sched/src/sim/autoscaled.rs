//! The simulator under Symphony's autoscaler (`crate::autoscale`): every
//! `period` the last period's signals — bad rate among requests that
//! ended in it, the serving GPUs' idle fraction, the busiest sizing
//! window's arrival rate — become advice, and GPUs
//! join (`Scheduler::on_backend_joined`) or leave
//! (`Scheduler::on_backend_failed`) the running cluster.
//!
//! A GPU that leaves drains: the simulator keeps running what it was sent
//! (a plan already on its way when the scheduler learns of the leave), so
//! scaling in loses no request; its last batches count as busy time of
//! the period. Those that join come from the idle pool, empty, lowest
//! index first; those that leave are the highest-index serving ones. The
//! cluster's `gpus` is the pool; whole GPUs only (no partitions), and the
//! policy must accept completions from a GPU it was told has left
//! (Symphony's rank shard does).

use crate::autoscale::{AutoscaleConfig, Autoscaler, Meter, Signals};
use crate::time::{Nanos, NANOS_PER_S};
use crate::types::{BackendId, Scheduler};

/// One period of an autoscaled run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Period {
    pub start_s: f64,
    /// Arrivals in the period per second.
    pub offered_rps: f64,
    pub signals: Signals,
    /// GPUs serving in the next period.
    pub next_gpus: usize,
}

pub(super) struct Scaler {
    cfg: AutoscaleConfig,
    advice: Autoscaler,
    serving: Vec<bool>,
    next_at: Nanos,
    pub periods: Vec<Period>,
}

impl Scaler {
    /// A pool of `pool` GPUs of which `cfg.initial` serve; tells `sched`
    /// the others are out, at time 0.
    pub fn start(cfg: AutoscaleConfig, pool: usize, sched: &mut dyn Scheduler) -> Self {
        assert!(cfg.max_gpus <= pool, "the autoscaler's maximum exceeds the cluster's {pool} GPUs");
        let serving: Vec<bool> = (0..pool).map(|b| b < cfg.initial).collect();
        for b in cfg.initial..pool {
            sched.on_backend_failed(0, BackendId(b as u32));
        }
        Self { cfg, advice: Autoscaler::new(cfg), serving, next_at: cfg.period, periods: Vec::new() }
    }

    pub fn config(&self) -> &AutoscaleConfig {
        &self.cfg
    }

    pub fn next_at(&self) -> Nanos {
        self.next_at
    }

    fn gpus(&self) -> usize {
        self.serving.iter().filter(|&&s| s).count()
    }

    /// The period ending `now`, as `meter` counted it: its signals, the
    /// advice, GPUs joined or left.
    pub fn tick(&mut self, now: Nanos, meter: &mut Meter, sched: &mut dyn Scheduler) {
        let span = self.cfg.period;
        let signals = meter.take(self.gpus(), span);
        let gpus = signals.gpus;
        let next_gpus = self.advice.advise(&signals);
        let offered_rps = signals.arrived as f64 * NANOS_PER_S as f64 / span as f64;
        self.periods.push(Period {
            start_s: (now - span) as f64 / NANOS_PER_S as f64,
            offered_rps,
            signals,
            next_gpus,
        });
        for _ in gpus..next_gpus {
            let b = self.serving.iter().position(|&s| !s).expect("the pool holds max_gpus");
            self.serving[b] = true;
            sched.on_backend_joined(now, BackendId(b as u32));
        }
        for _ in next_gpus..gpus {
            let b = self.serving.iter().rposition(|&s| s).expect("serving GPUs to remove");
            self.serving[b] = false;
            sched.on_backend_failed(now, BackendId(b as u32));
        }
        self.next_at = now + span;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyKind;
    use crate::scenario::Scenario;
    use crate::sim::run_autoscaled;

    /// Table 4's ResNet50 on a pool of 24 GPUs, the load ramping from a
    /// quarter to all of `rate` over 15 s, then flat.
    fn scenario(arrival: &str) -> Scenario {
        Scenario::parse(&format!(
            "name = \"ramp\"\nseed = 3\nduration_s = 30\nwarmup_s = 0\n[cluster]\ngpus = 24\nctrl_delay_us = 200\n\
             [[models]]\nname = \"ResNet50\"\nalpha_ms = 1.053\nbeta_ms = 5.072\nslo_ms = 25.0\narrival = \"{arrival}\"\n\
             [policy]\nname = \"symphony\"\n"
        ))
        .unwrap()
    }

    fn cfg(initial: usize) -> AutoscaleConfig {
        AutoscaleConfig {
            period: NANOS_PER_S,
            threshold: 0.01,
            headroom: 0.1,
            min_gpus: 1,
            max_gpus: 24,
            initial,
            sizing: None,
        }
    }

    #[test]
    fn gpus_follow_a_rising_load_and_every_request_is_answered_once() {
        // 8 GPUs peak near 5,300 r/s: 8,000 r/s needs about 12.
        let s = scenario("accel:0.25,0.05,1");
        let (report, periods) = run_autoscaled(&s, PolicyKind::Symphony, 8000.0, cfg(2)).unwrap();
        assert_eq!(report.checks.unanswered, 0, "every request ends once (the simulator checks none twice)");
        assert_eq!(periods.len(), 30);
        let gpus: Vec<usize> = periods.iter().map(|p| p.signals.gpus).collect();
        assert!(gpus[2] < gpus[20] && (11..=16).contains(&gpus[25]), "{gpus:?}");
        // Once the load is flat the cluster keeps its bad rate under 1%.
        let (bad, ended) = periods[20..].iter().fold((0, 0), |(b, e), p| (b + p.signals.bad, e + p.signals.ended));
        assert!(bad as f64 <= 0.01 * ended as f64, "{bad} of {ended}: {periods:?}");
        // Deterministic: the same seed, the same periods.
        assert_eq!(run_autoscaled(&s, PolicyKind::Symphony, 8000.0, cfg(2)).unwrap().1, periods);
    }

    #[test]
    fn idle_gpus_leave_without_losing_requests() {
        let (report, periods) = run_autoscaled(&scenario("poisson"), PolicyKind::Symphony, 2000.0, cfg(24)).unwrap();
        assert_eq!(report.checks.unanswered, 0);
        let last = periods.last().unwrap().signals.gpus;
        assert!((4..=8).contains(&last), "2,000 r/s needs about 4 of 24 GPUs: {last}");
        let total_bad: u64 = periods.iter().map(|p| p.signals.bad).sum();
        let ended: u64 = periods.iter().map(|p| p.signals.ended).sum();
        assert!(total_bad as f64 <= 0.01 * ended as f64, "{total_bad} of {ended}");
    }

    #[test]
    fn peak_sizing_keeps_a_spiky_load_in_slo_where_the_flat_top_does_not() {
        // 2,000 r/s with one second in every ten at four times the rest
        // (about 5,300 r/s against about 1,300): the periods' means and
        // idle fractions hide the spikes. Measured once the first spike
        // (in the second period) has been seen.
        let mut s = scenario("poisson");
        s.duration = 60 * NANOS_PER_S;
        let shape: Vec<f64> = (0..60).map(|t| if t % 10 == 7 { 4.0 } else { 1.0 }).collect();
        s.models[0].arrival = crate::arrival::Arrival::Trace { file: "spikes".into(), shape: Some(shape.into()) };
        let period = 5 * NANOS_PER_S;
        let flat = AutoscaleConfig { period, ..cfg(8) };
        let sizing = Some(crate::autoscale::PeakSizing { window: NANOS_PER_S, memory: 3 });
        let bad_rate = |cfg| {
            let (report, periods) = run_autoscaled(&s, PolicyKind::Symphony, 2000.0, cfg).unwrap();
            assert_eq!(report.checks.unanswered, 0);
            let (bad, ended) = periods[2..].iter().fold((0, 0), |(b, e), p| (b + p.signals.bad, e + p.signals.ended));
            bad as f64 / ended as f64
        };
        let (flat_top, sized) = (bad_rate(flat), bad_rate(AutoscaleConfig { sizing, ..flat }));
        assert!(flat_top > 0.01 && sized <= 0.01, "flat top {flat_top}, sized {sized}");
    }

    #[test]
    fn what_cannot_scale_is_refused() {
        let s = scenario("poisson");
        assert!(run_autoscaled(&s, PolicyKind::Clockwork, 100.0, cfg(2)).unwrap_err().contains("Symphony"));
        let too_many = AutoscaleConfig { max_gpus: 25, ..cfg(2) };
        assert!(run_autoscaled(&s, PolicyKind::Symphony, 100.0, too_many).unwrap_err().contains("24"));
    }
}
