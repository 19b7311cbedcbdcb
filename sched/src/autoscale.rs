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
//! The count is kept within `[min_gpus, max_gpus]`. Pure: signals in,
//! advice out; the simulator (`sim::run_autoscaled`) measures the signals
//! and makes GPUs join and leave.

use crate::time::Nanos;

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
        Ok(())
    }
}

/// What one period showed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Signals {
    /// GPUs serving during the period.
    pub gpus: usize,
    /// Requests that ended in the period, and how many of them were bad
    /// (late or dropped).
    pub ended: u64,
    pub bad: u64,
    /// The serving GPUs' idle share of the period, in [0, 1].
    pub idle_fraction: f64,
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

/// The GPU count for the next period.
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

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: AutoscaleConfig =
        AutoscaleConfig { period: 1, threshold: 0.01, headroom: 0.1, min_gpus: 1, max_gpus: 64, initial: 8 };

    fn signals(gpus: usize, bad: u64, ended: u64, idle: f64) -> Signals {
        Signals { gpus, ended, bad, idle_fraction: idle }
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
    }
}
