//! # baton-sched — every scheduling decision, as pure state machines
//!
//! **Owns:** latency profiles, Symphony's model shards and rank shard, the
//! baselines the papers compare against (Clockwork-style EDF, Nexus squishy
//! bin packing), scenario parsing, and the deterministic discrete-event
//! simulator that drives them with emulated backends.
//!
//! **Is not:** a runtime. Nothing here reads a clock, spawns a thread or does
//! I/O. Time is an argument (`Nanos`), inputs are method calls, decisions
//! come out as data (`Output`), and every state machine says when it next
//! needs to be woken (`next_timeout`). The simulator in [`sim`] and the
//! engine in `baton-core` drive the same code, so every result measured in
//! the simulator is a result of the production scheduler.
//!
//! The math of each policy lives in `../shared/design/` and is restated in
//! the doc comment of the file that implements it.

pub mod arrival;
pub mod autoscale;
pub mod backends;
pub mod build;
pub mod clipper;
pub mod clockwork;
pub mod dist;
pub mod epoch;
pub mod fifo;
pub mod glet;
pub mod handover;
pub mod heap;
pub mod hull;
pub mod nexus;
pub mod offload;
pub mod orloj;
pub mod partition;
pub mod partition_milp;
pub mod partitioned;
pub mod policy;
pub mod profile;
pub mod query;
pub mod query_run;
pub mod queue;
pub mod rate;
pub mod repartitioned;
pub mod rng;
pub mod scenario;
pub mod side_by_side;
pub mod sim;
pub mod supernet;
pub mod superserve;
pub mod symphony;
pub mod time;
pub mod trace;
pub mod types;

pub use policy::{FixedPoint, PolicyKind};
pub use profile::Profile;
pub use scenario::Scenario;
pub use time::Nanos;
pub use types::{
    AppId, AppSpec, BackendId, BatchDone, BatchPlan, ClusterSpec, Completed, DispatchDelay, DropReason, DynamicExec,
    ModelId, ModelSpec, Output, Partition, PrefixGroup, PrefixId, Request, RequestId, Scheduler,
};
