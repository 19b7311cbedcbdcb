//! The simulator's side of the sub-cluster harnesses (`subclusters_engine`,
//! `repartition_engine`): the partitioned cluster an engine run on the same
//! file, seed and plan is set beside.

use baton_sched::partition::Plan;
use baton_sched::partitioned::Partitioned;
use baton_sched::{Scenario, Scheduler};

/// The simulator's scheduler for `s` split by `p` (the engine's plan) at
/// `rate`, each sub-cluster under `s`'s policy. Panics on a plan or
/// scenario a partitioned cluster refuses: the harnesses pick both.
pub fn simulated(s: &Scenario, p: &Plan, rate: f64) -> Box<dyn Scheduler> {
    let each = |sub: &Scenario, r: f64| baton_sched::build::scheduler(s.policy, sub, r);
    Box::new(Partitioned::new(s, p, rate, &each).unwrap_or_else(|e| panic!("{e}")))
}
