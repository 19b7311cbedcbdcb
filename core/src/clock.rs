//! The engine's clock: the only place Baton reads time. It reads the TSC
//! through quanta (about 11 ns a read) and hands out `Nanos` since the
//! cluster clock's origin, the unit `baton-sched` works in. Every shard of
//! one process shares one `Clock`; roles in separate processes on one host
//! agree on the origin (the scheduler's, sent in its `Hello`) and place it
//! with the system clock once, at start, so their times compare too.

use baton_sched::time::Nanos;

#[derive(Clone, Debug)]
pub struct Clock {
    clock: quanta::Clock,
    start: quanta::Instant,
    /// Cluster time at `start`.
    at_start: Nanos,
    origin_unix_ns: u64,
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Self::with_origin(unix_ns())
    }

    /// A clock counting from `origin_unix_ns` (not after now).
    pub fn with_origin(origin_unix_ns: u64) -> Self {
        let clock = quanta::Clock::new();
        let start = clock.now();
        let at_start = unix_ns().saturating_sub(origin_unix_ns);
        Self { clock, start, at_start, origin_unix_ns }
    }

    pub fn origin_unix_ns(&self) -> u64 {
        self.origin_unix_ns
    }

    /// Nanoseconds since the origin; never decreases.
    pub fn now(&self) -> Nanos {
        self.at_start + self.clock.now().saturating_duration_since(self.start).as_nanos() as Nanos
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
        // Another process's clock on the same origin reads the same time.
        let other = Clock::with_origin(c.origin_unix_ns());
        let (x, y) = (c.now(), other.now());
        assert!(x.abs_diff(y) < 5_000_000, "{x} vs {y}");
    }
}
