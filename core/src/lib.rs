//! # baton-core — the engine (not yet built)
//!
//! **Will own:** the thread-per-core shard runtime (one glommio executor per
//! core, pinned with core_affinity / hwloc), SPSC rings between shards,
//! hierarchical timer wheels on integer ticks fed by a quanta clock (the only
//! place Baton reads time), crossbeam-epoch publication of read-mostly state,
//! and the role engines (frontend, scheduler, backend) that drive the
//! `baton-sched` state machines with real time and real transports.
//!
//! **Is not:** a scheduler. Every scheduling decision is made by
//! `baton-sched`; this crate only feeds it time and events and carries its
//! decisions out. There is no second copy of any policy here.
//!
//! Built so far: the timer wheel (`timer`).

pub mod timer;
