//! # baton-tests — cross-crate integration tests
//!
//! The tests live in `tests/tests/*.rs`. They drive the production
//! `baton-sched` code through the simulator and the perf harnesses in their
//! quick modes and assert what users see. This library is intentionally
//! empty: it is not a place for shared test doubles.
