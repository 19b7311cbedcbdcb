//! Building a policy for a scenario: the one place that reads a whole
//! `Scenario` to make a `Scheduler`. Each policy is handed only the parts
//! it uses (the cluster, the simulator's Symphony knobs, planned rates, the
//! re-planning epoch, partition profiles, the seed).

use crate::clipper::Clipper;
use crate::clockwork::Clockwork;
use std::sync::Arc;

use crate::glet::{Demand, Planner, Replanning, Serving};
use crate::nexus::{DropPolicy, Nexus};
use crate::orloj::Orloj;
use crate::policy::PolicyKind;
use crate::scenario::Scenario;
use crate::superserve::{SubnetPolicy, SuperServe};
use crate::symphony::{CandidateRule, Symphony};
use crate::types::Scheduler;

/// Builds `policy` for `scenario` at aggregate offered rate `rate_rps`
/// (static planners plan for it; online policies measure it themselves).
/// Panics if the scenario cannot run the policy: callers check
/// `Scenario::supports` first (the parser does for the file's own policy).
pub fn scheduler(policy: PolicyKind, scenario: &Scenario, rate_rps: f64) -> Box<dyn Scheduler> {
    if let Err(e) = scenario.supports(policy) {
        panic!("{e} (check Scenario::supports before building)");
    }
    let spec = &scenario.cluster;
    let subnets = |p| -> Box<dyn Scheduler> { Box::new(SuperServe::new(spec, p)) };
    match policy {
        PolicyKind::Symphony | PolicyKind::SymphonyWc | PolicyKind::SymphonyFrontrun => {
            let rule = CandidateRule::of(policy).expect("a Symphony policy");
            let knobs = &scenario.knobs;
            Box::new(Symphony::new(spec, rule, knobs.model_shards, knobs.msg_delay))
        }
        PolicyKind::Clockwork => Box::new(Clockwork::new(spec)),
        PolicyKind::Orloj => Box::new(Orloj::new(spec, scenario.seed)),
        PolicyKind::Clipper => Box::new(Clipper::new(spec)),
        PolicyKind::SlackFit => subnets(SubnetPolicy::SlackFit),
        PolicyKind::Fixed(k) => subnets(SubnetPolicy::Fixed(k)),
        PolicyKind::MinAcc => subnets(SubnetPolicy::MinAcc),
        PolicyKind::MaxAcc => subnets(SubnetPolicy::MaxAcc),
        PolicyKind::MaxBatch => subnets(SubnetPolicy::MaxBatch),
        PolicyKind::Nexus | PolicyKind::NexusLazy | PolicyKind::Nexus8Fe => {
            let frontends = if policy == PolicyKind::Nexus8Fe { 8 } else { 1 };
            let drops = if policy == PolicyKind::NexusLazy { DropPolicy::Lazy } else { DropPolicy::Early };
            let rates = scenario.model_rates(rate_rps);
            Box::new(Nexus::new(spec, &rates, frontends, drops, true, scenario.policy_epoch, scenario.seed))
        }
        PolicyKind::Glet | PolicyKind::GletNoint | PolicyKind::Sbp | PolicyKind::GreedyPart => {
            let planner = Planner::of(policy).expect("a glet-family policy");
            let serving = serving(planner, scenario, rate_rps).expect("supported");
            match (scenario.policy_epoch, &scenario.partitions) {
                (Some(epoch), Some(data)) => Box::new(Replanning::new(&serving, Arc::clone(data), epoch)),
                _ => Box::new(serving.scheduler()),
            }
        }
    }
}

/// What `planner` needs to serve `scenario` at aggregate rate `rate_rps` on
/// partitions: each model's measured profile row and planned rate. An
/// error if the scenario has no partition profiles for some model.
pub fn serving(planner: Planner, scenario: &Scenario, rate_rps: f64) -> Result<Serving<'_>, String> {
    let data = scenario.partitions.as_deref().ok_or("partition policies need `cluster.partition_profiles`")?;
    let demands = scenario
        .models
        .iter()
        .zip(scenario.model_rates(rate_rps))
        .map(|(m, rate_rps)| match m.partition_profile {
            Some(model) => Ok(Demand { model, rate_rps, slo: m.spec.slo }),
            None => Err(format!("model {} has no partition `profile`", m.spec.name)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Serving { planner, data, demands, cluster: &scenario.cluster, seed: scenario.seed })
}
