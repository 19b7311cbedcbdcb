//! # baton-core — the engine
//!
//! **Owns:** the clock (`clock`: quanta re-anchored on the monotonic
//! clock, the only source of cluster time),
//! the hierarchical timer wheel (`timer`), read-mostly state published with
//! crossbeam-epoch (`publish`: the model table, read per request), the
//! model table and what the engine refuses to serve (`models`), the role
//! engines that drive `baton-sched` (`roles`: frontend, scheduler,
//! backend), and the thread-per-core runtime that runs them on pinned
//! glommio executors and serves clients over io_uring TCP — all roles in
//! one process, or each in its own (`runtime`).
//!
//! **Is not:** a scheduler. Every scheduling decision is made by
//! `baton-sched`; this crate only feeds it time and events and carries its
//! decisions out. There is no second copy of any policy here.

pub mod chaos;
pub mod clock;
pub mod metrics;
pub mod models;
pub mod partitions;
pub mod pool;
pub mod prefetch;
pub mod publish;
pub mod roles;
pub mod routes;
pub mod runtime;
pub mod timer;
