//! The engine's clock: the only place Baton reads time. It reads the TSC
//! through quanta (about 11 ns a read) and hands out `Nanos` since the
//! engine started, the unit `baton-sched` works in. Every shard of one
//! process shares one `Clock`, so their times compare.

use baton_sched::time::Nanos;

#[derive(Clone, Debug)]
pub struct Clock {
    clock: quanta::Clock,
    start: quanta::Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let start = clock.now();
        Self { clock, start }
    }

    /// Nanoseconds since the engine started; never decreases.
    pub fn now(&self) -> Nanos {
        self.clock.now().saturating_duration_since(self.start).as_nanos() as Nanos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_moves_forward_and_clones_agree() {
        let c = Clock::new();
        let d = c.clone();
        let a = c.now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = d.now();
        assert!(b >= a + 1_000_000, "{a} then {b}");
    }
}
