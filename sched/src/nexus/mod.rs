//! Nexus as the Symphony paper evaluated it: a per-epoch squishy bin
//! packing of models onto backends (`squishy.rs`, math in
//! `../shared/design/planners.md`), frontends routing each model's requests
//! over the plan independently (`runtime.rs`), and backends cycling their
//! sessions round-robin, each batch capped at its planned size.
//!
//! The same runtime executes glet's partition plans (`glet/serve.rs`):
//! each backend is then a GPU partition with its own per-session profiles.
//!
//! Epochs: without `[policy] epoch_s` the planner runs once, on the offered
//! rates — what an epoch planner measures when arrivals are stationary.
//! With it, the runtime re-plans every epoch from the rates it measured
//! (`incremental.rs`: Nexus §6.1's incremental update, or a plan from
//! scratch when that has clearly more headroom) and moves queued requests
//! to their sessions' new backends.

mod incremental;
mod report;
mod runtime;
mod sessions;
mod squishy;

pub use incremental::{moved_sessions, replan};
pub use report::{plan_report, PlanReport};
pub use runtime::{DropPolicy, Nexus};
pub use sessions::{sessions, Sessions};
pub use squishy::{
    batch_oblivious_gpus, lower_bound_gpus, plan_for_cluster, squishy_bin_packing, BackendPlan, Plan, PlannedSession,
};
pub(crate) use squishy::{merged, residual};
