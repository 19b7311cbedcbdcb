//! Time in `sched` is a plain integer: nanoseconds since the engine (or the
//! simulation) started. It is always passed in; nothing here reads a clock.

/// Nanoseconds since the start of the engine or simulation.
pub type Nanos = u64;

pub const NANOS_PER_US: Nanos = 1_000;
pub const NANOS_PER_MS: Nanos = 1_000_000;
pub const NANOS_PER_S: Nanos = 1_000_000_000;

/// Converts milliseconds (as written in scenario files and paper tables) to
/// nanoseconds, rounding to the nearest nanosecond.
pub fn ms_to_nanos(ms: f64) -> Nanos {
    assert!(ms.is_finite() && ms >= 0.0, "ms_to_nanos: {ms} is not a duration");
    (ms * NANOS_PER_MS as f64).round() as Nanos
}

pub fn us_to_nanos(us: f64) -> Nanos {
    assert!(us.is_finite() && us >= 0.0, "us_to_nanos: {us} is not a duration");
    (us * NANOS_PER_US as f64).round() as Nanos
}

pub fn nanos_to_ms(ns: Nanos) -> f64 {
    ns as f64 / NANOS_PER_MS as f64
}

pub fn nanos_to_s(ns: Nanos) -> f64 {
    ns as f64 / NANOS_PER_S as f64
}
