//! A partition plan at run time: the scenario's models become demands, the
//! planner plans them for the cluster (`cluster.rs`), and Nexus's runtime
//! executes the plan — one backend per used partition, frontends routing
//! by planned rate, each backend cycling its sessions with early drop,
//! each session batching by its profile on that partition.

use super::cluster::{plan_for_gpus, runtime_profiles, Planner};
use super::parts::GletPlan;
use super::planner::Demand;
use crate::nexus::{DropPolicy, Nexus, Plan};
use crate::scenario::Scenario;

/// The scenario's models at aggregate rate `rate_rps` as demands. Panics
/// (a caller's bug: `PolicyKind::needs_partition_profiles`) unless every
/// model has a measured partition profile.
pub fn demands(scenario: &Scenario, rate_rps: f64) -> Vec<Demand> {
    scenario
        .models
        .iter()
        .zip(scenario.model_rates(rate_rps))
        .map(|(m, rate_rps)| {
            let model = m.partition_profile.unwrap_or_else(|| {
                panic!("{} has no partition profile; partition policies need `profile` on every model", m.spec.name)
            });
            Demand { model, rate_rps, slo: m.spec.slo }
        })
        .collect()
}

/// The plan `planner` makes for `scenario` at `rate_rps` on its GPUs, or
/// None if not even a small fraction of the rate fits.
pub fn plan(planner: Planner, scenario: &Scenario, rate_rps: f64) -> Option<GletPlan> {
    let data = scenario.partitions.as_deref().expect("partition policies need cluster.partition_profiles");
    plan_for_gpus(planner, data, &demands(scenario, rate_rps), scenario.cluster.backends as usize)
}

/// The runtime executing `plan` (an empty plan serves nothing: every
/// request is dropped with `NoBackend`).
pub fn runtime(planner: Planner, scenario: &Scenario, rate_rps: f64, plan: &GletPlan) -> Nexus {
    let data = scenario.partitions.as_deref().expect("partition policies need cluster.partition_profiles");
    let profiles = runtime_profiles(planner, data, &demands(scenario, rate_rps), plan);
    let nodes = Plan {
        backends: plan.used().map(|(_, p)| p.node.clone().expect("used")).collect(),
        rate_scale: plan.rate_scale,
    };
    Nexus::partitioned(&scenario.cluster, nodes, plan.slots(), profiles, DropPolicy::Early, scenario.seed)
}

/// Plans and builds the runtime in one step.
pub fn build(planner: Planner, scenario: &Scenario, rate_rps: f64) -> Nexus {
    let p = plan(planner, scenario, rate_rps).unwrap_or_default();
    runtime(planner, scenario, rate_rps, &p)
}
