//! Nexus as the Symphony paper evaluated it: a per-epoch squishy bin
//! packing of models onto backends (`squishy.rs`, math in
//! `../shared/design/planners.md`), frontends routing each model's requests
//! over the plan independently (`runtime.rs`), and backends cycling their
//! sessions round-robin, each batch capped at its planned size.

mod runtime;
mod squishy;

pub use runtime::Nexus;
pub use squishy::{plan_for_cluster, squishy_bin_packing, BackendPlan, Plan, PlannedSession};
