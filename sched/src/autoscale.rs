//! Symphony's autoscaling advice (section 4.4; `design/symphony.md`,
//! "Autoscaling signals"). Its goodput has a flat top: offered `o` above
//! the peak goodput `p` of `N` GPUs, the bad rate is about `r = (o − p) /
//! o`; below it, the GPUs' idle fraction is about `f = (p − o) / p`. So
//! each period, from the last period's signals:
//!
//! - `r > threshold`: add `ceil(N r / (1 − r))` GPUs (at least one): the
//!   `N (o/p − 1)` that bring the peak up to the offered load;
//! - otherwise, idle fraction `f` above `headroom`: remove `floor(N (f −
//!   headroom))` GPUs. The paper removes `N f`, which leaves the cluster
//!   exactly at its peak; `headroom` (ours, default 0.1) keeps a margin
//!   so that a load still rising does not cross the flat top before the
//!   next period. `headroom = 0` is the paper's rule.
//!
//! The flat top reads the period's mean. A load that swings within the
//! period (a day of function invocations: timers firing together, bursts
//! of queue triggers) is bad in its busiest seconds while the period's
//! mean and idle fraction say the cluster is too large, so the rule keeps
//! removing GPUs it needs (`perf/results/autoscale_day.txt`). Peak sizing
//! (ours, `PeakSizing`) adds what the load's shape needs: the period also
//! reports its busiest `window`'s arrival rate, the GPUs' measured rate
//! per busy second gives the rate one GPU sustains (`c = good / busy
//! GPU-seconds`, averaged over periods), and the cluster is sized for
//! the highest peak of the last `memory` periods: `ceil(peak / (c (1 −
//! headroom)))` GPUs. Scaling out is at once (the flat-top rule's
//! addition when it asks for more); scaling in waits until a peak has
//! left the memory — the cooldown.
//!
//! The count is kept within `[min_gpus, max_gpus]`. Pure: signals in,
//! advice out; the simulator (`sim::run_autoscaled`) measures the signals
//! and makes GPUs join and leave.

use std::collections::VecDeque;

use crate::time::{Nanos, NANOS_PER_S};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AutoscaleConfig {
    /// How often advice is taken.
    pub period: Nanos,
    /// Bad rate above which GPUs are added (Symphony's 1%).
    pub threshold: f64,
    /// Idle fraction kept when removing GPUs.
    pub headroom: f64,
    pub min_gpus: usize,
    pub max_gpus: usize,
    /// GPUs at the start.
    pub initial: usize,
    /// Size for recent peaks; `None` is Symphony's flat-top rule alone.
    pub sizing: Option<PeakSizing>,
}

/// Sizing for the busiest window of recent periods (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakSizing {
    /// The span over which a peak rate is measured; divides the period.
    pub window: Nanos,
    /// Periods whose peaks are remembered (at least 1).
    pub memory: usize,
}

impl AutoscaleConfig {
    pub fn check(&self) -> Result<(), String> {
        if self.period == 0 {
            return Err("the autoscaling period must be positive".into());
        }
        if !(0.0..1.0).contains(&self.threshold) || !(0.0..1.0).contains(&self.headroom) {
            return Err(format!("threshold {} and headroom {} must be in [0, 1)", self.threshold, self.headroom));
        }
        if !(1 <= self.min_gpus && self.min_gpus <= self.initial && self.initial <= self.max_gpus) {
            return Err(format!(
                "GPUs must satisfy 1 <= min {} <= initial {} <= max {}",
                self.min_gpus, self.initial, self.max_gpus
            ));
        }
        if let Some(p) = self.sizing {
            if p.window == 0 || !self.period.is_multiple_of(p.window) || p.memory == 0 {
                return Err(format!(
                    "peak sizing needs a window dividing the period ({} ns, window {} ns) and a memory of at least one period",
                    self.period, p.window
                ));
            }
        }
        Ok(())
    }
}

/// What one period showed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Signals {
    /// GPUs serving during the period.
    pub gpus: usize,
    /// Requests that arrived in the period.
    pub arrived: u64,
    /// Requests that ended in the period, and how many of them were bad
    /// (late or dropped).
    pub ended: u64,
    pub bad: u64,
    /// The serving GPUs' idle share of the period, in [0, 1].
    pub idle_fraction: f64,
    /// The highest arrival rate over the period's sizing windows (r/s;
    /// 0 when not measured).
    pub peak_rps: f64,
}

impl Signals {
    pub fn bad_rate(&self) -> f64 {
        if self.ended == 0 {
            0.0
        } else {
            self.bad as f64 / self.ended as f64
        }
    }
}

/// Counts a period's signals as they happen (the simulator and the
/// engine's scheduler feed it the same events): arrivals, with the
/// busiest sizing window's count when peak sizing is on; requests ended
/// and how many of them bad; GPU time busy.
#[derive(Clone, Debug)]
pub struct Meter {
    arrived: u64,
    ended: u64,
    bad: u64,
    busy: Nanos,
    /// Arrivals per window aligned to multiples of the window: the window,
    /// the current one's index and count, the period's most.
    window: Option<Nanos>,
    index: u64,
    count: u64,
    peak: u64,
}

impl Meter {
    pub fn new(cfg: &AutoscaleConfig) -> Self {
        Self::fresh(cfg.sizing.map(|p| p.window), 0)
    }

    fn fresh(window: Option<Nanos>, index: u64) -> Self {
        Self { arrived: 0, ended: 0, bad: 0, busy: 0, window, index, count: 0, peak: 0 }
    }

    pub fn arrive(&mut self, now: Nanos) {
        self.arrived += 1;
        if let Some(w) = self.window {
            let i = now / w;
            if i != self.index {
                self.peak = self.peak.max(self.count);
                (self.index, self.count) = (i, 0);
            }
            self.count += 1;
        }
    }

    /// A request ended (served or dropped), `bad` if late or dropped.
    pub fn end(&mut self, bad: bool) {
        self.ended += 1;
        self.bad += u64::from(bad);
    }

    /// GPU time spent on a batch.
    pub fn busy(&mut self, gpu_time: Nanos) {
        self.busy += gpu_time;
    }

    /// The period of `span` that ends now, on `gpus` serving GPUs; the
    /// next starts afresh (windows divide the period, so none straddles
    /// two).
    pub fn take(&mut self, gpus: usize, span: Nanos) -> Signals {
        // No GPU serving is idle time of none: nothing to remove.
        let idle_fraction = match gpus {
            0 => 0.0,
            _ => (1.0 - self.busy as f64 / (gpus as f64 * span as f64)).clamp(0.0, 1.0),
        };
        let peak = self.peak.max(self.count);
        let peak_rps = self.window.map_or(0.0, |w| peak as f64 * NANOS_PER_S as f64 / w as f64);
        let s = Signals { gpus, arrived: self.arrived, ended: self.ended, bad: self.bad, idle_fraction, peak_rps };
        *self = Self::fresh(self.window, self.index);
        s
    }
}

/// Symphony's flat-top rule: the GPU count for the next period.
pub fn advise(cfg: &AutoscaleConfig, s: &Signals) -> usize {
    let n = s.gpus as f64;
    let r = s.bad_rate();
    let target = if r > cfg.threshold {
        // r < 1 here unless everything was bad; then add as many as allowed.
        let add = if r < 1.0 { (n * r / (1.0 - r)).ceil().max(1.0) } else { cfg.max_gpus as f64 };
        s.gpus.saturating_add(add as usize)
    } else if s.idle_fraction > cfg.headroom {
        s.gpus - ((n * (s.idle_fraction - cfg.headroom)).floor() as usize).min(s.gpus)
    } else {
        s.gpus
    };
    target.clamp(cfg.min_gpus, cfg.max_gpus)
}

/// The advice with the state peak sizing keeps between periods.
#[derive(Clone, Debug)]
pub struct Autoscaler {
    cfg: AutoscaleConfig,
    /// The rate one GPU sustains, per busy second (None until measured).
    per_gpu: Option<f64>,
    /// The last `memory` periods' peak rates.
    peaks: VecDeque<f64>,
}

impl Autoscaler {
    pub fn new(cfg: AutoscaleConfig) -> Self {
        assert_eq!(cfg.check(), Ok(()), "a checked configuration");
        Self { cfg, per_gpu: None, peaks: VecDeque::new() }
    }

    pub fn config(&self) -> &AutoscaleConfig {
        &self.cfg
    }

    /// The rate one GPU sustains, as measured so far.
    pub fn per_gpu_rps(&self) -> Option<f64> {
        self.per_gpu
    }

    /// The GPU count for the next period.
    pub fn advise(&mut self, s: &Signals) -> usize {
        let flat = advise(&self.cfg, s);
        let Some(sizing) = self.cfg.sizing else { return flat };
        let busy_s = s.gpus as f64 * (1.0 - s.idle_fraction) * self.cfg.period as f64 / NANOS_PER_S as f64;
        let good = s.ended.saturating_sub(s.bad) as f64;
        // A period with little work measures little: at least one GPU-second.
        if busy_s >= 1.0 && good > 0.0 {
            let c = good / busy_s;
            self.per_gpu = Some(self.per_gpu.map_or(c, |p| 0.5 * (p + c)));
        }
        if self.peaks.len() == sizing.memory {
            self.peaks.pop_front();
        }
        self.peaks.push_back(s.peak_rps);
        let Some(c) = self.per_gpu else { return flat };
        let peak = self.peaks.iter().copied().fold(0.0, f64::max);
        let sized =
            ((peak / (c * (1.0 - self.cfg.headroom))).ceil() as usize).clamp(self.cfg.min_gpus, self.cfg.max_gpus);
        if s.bad_rate() > self.cfg.threshold {
            sized.max(flat)
        } else {
            sized
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: AutoscaleConfig = AutoscaleConfig {
        period: 1,
        threshold: 0.01,
        headroom: 0.1,
        min_gpus: 1,
        max_gpus: 64,
        initial: 8,
        sizing: None,
    };

    fn signals(gpus: usize, bad: u64, ended: u64, idle: f64) -> Signals {
        Signals { gpus, arrived: ended, ended, bad, idle_fraction: idle, peak_rps: 0.0 }
    }

    #[test]
    fn the_meter_counts_a_period_and_its_busiest_window() {
        let cfg = AutoscaleConfig { period: 10, sizing: Some(PeakSizing { window: 5, memory: 1 }), ..CFG };
        let mut m = Meter::new(&cfg);
        for t in [0, 1, 5, 6, 7, 9] {
            m.arrive(t);
        }
        (0..5).for_each(|i| m.end(i == 0));
        m.busy(10);
        let s = m.take(2, 10);
        assert_eq!((s.arrived, s.ended, s.bad, s.idle_fraction), (6, 5, 1, 0.5));
        assert_eq!(s.peak_rps, 4.0 * NANOS_PER_S as f64 / 5.0, "4 arrivals in [5, 10)");
        m.arrive(12);
        let s = m.take(2, 10);
        assert_eq!((s.arrived, s.ended, s.idle_fraction, s.peak_rps), (1, 0, 1.0, NANOS_PER_S as f64 / 5.0));
    }

    #[test]
    fn the_flat_top_rule() {
        // Offered 25% above the peak of 8 GPUs: r = 0.2, add 8 x 0.25 = 2.
        assert_eq!(advise(&CFG, &signals(8, 200, 1000, 0.0)), 10);
        // A trace of badness still adds one.
        assert_eq!(advise(&CFG, &signals(8, 11, 1000, 0.0)), 9);
        // At or under the threshold with little idle time: keep.
        assert_eq!(advise(&CFG, &signals(8, 10, 1000, 0.05)), 8);
        // Half idle: 8 x (0.5 - 0.1) = 3.2, remove 3; the paper's rule removes 4.
        assert_eq!(advise(&CFG, &signals(8, 0, 1000, 0.5)), 5);
        assert_eq!(advise(&AutoscaleConfig { headroom: 0.0, ..CFG }, &signals(8, 0, 1000, 0.5)), 4);
        // Bounds, and a period with nothing ended.
        assert_eq!(advise(&CFG, &signals(60, 500, 1000, 0.0)), 64);
        assert_eq!(advise(&CFG, &signals(2, 1000, 1000, 0.0)), 64, "all bad: as many as allowed");
        assert_eq!(advise(&CFG, &signals(1, 0, 0, 1.0)), 1);
        assert_eq!(advise(&CFG, &signals(3, 0, 0, 1.0)), 1);
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert_eq!(CFG.check(), Ok(()));
        assert!(AutoscaleConfig { period: 0, ..CFG }.check().is_err());
        assert!(AutoscaleConfig { initial: 65, ..CFG }.check().is_err());
        assert!(AutoscaleConfig { min_gpus: 0, ..CFG }.check().is_err());
        assert!(AutoscaleConfig { headroom: 1.0, ..CFG }.check().is_err());
        let sizing = |window, memory| Some(PeakSizing { window, memory });
        assert!(AutoscaleConfig { period: 10, sizing: sizing(3, 2), ..CFG }.check().is_err());
        assert!(AutoscaleConfig { period: 10, sizing: sizing(5, 0), ..CFG }.check().is_err());
        assert!(AutoscaleConfig { period: 10, sizing: sizing(0, 1), ..CFG }.check().is_err());
        assert_eq!(AutoscaleConfig { period: 10, sizing: sizing(5, 1), ..CFG }.check(), Ok(()));
    }

    #[test]
    fn peak_sizing_follows_the_busiest_window_and_cools_down() {
        let cfg = AutoscaleConfig {
            period: 10 * NANOS_PER_S,
            sizing: Some(PeakSizing { window: NANOS_PER_S, memory: 3 }),
            ..CFG
        };
        let mut a = Autoscaler::new(cfg);
        // 8 GPUs half busy for 10 s (40 GPU-seconds) served 20,000 well:
        // 500 r/s per busy GPU. A peak of 9,000 r/s needs 9,000 / (500 x
        // 0.9) = 20 GPUs though the mean would fit in 4.
        let with_peak = |peak| Signals { peak_rps: peak, ..signals(8, 0, 20_000, 0.5) };
        assert_eq!(a.advise(&with_peak(9_000.0)), 20);
        assert_eq!(a.per_gpu_rps(), Some(500.0));
        // Quieter periods keep the peak until it has left the memory.
        assert_eq!(a.advise(&with_peak(2_250.0)), 20);
        assert_eq!(a.advise(&with_peak(2_250.0)), 20);
        assert_eq!(a.advise(&with_peak(2_250.0)), 5);
        // Bad above the threshold adds at least what the flat top adds:
        // r = 0.2 adds 8 x 0.25 = 2 (sizing asks for 6 at 450 r/s per GPU).
        let bad = Signals { peak_rps: 2_250.0, ..signals(8, 4_000, 20_000, 0.5) };
        assert_eq!(a.advise(&bad), 10);
        // Without sizing, the flat-top rule alone.
        let mut paper = Autoscaler::new(CFG);
        assert_eq!(paper.advise(&with_peak(9_000.0)), advise(&CFG, &with_peak(9_000.0)));
    }
}
