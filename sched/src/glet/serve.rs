//! A partition plan at run time: the planner plans the demands for the
//! cluster (`cluster.rs`), and Nexus's runtime executes the plan — one
//! backend per used partition, frontends routing by planned rate, each
//! backend cycling its sessions with early drop, each session batching by
//! its profile on that partition. Which demands a scenario makes is
//! `build.rs`'s business; this file needs only the parts below.

use super::cluster::{plan_for_gpus, runtime_profiles, Planner};
use super::oracle::PartitionData;
use super::parts::GletPlan;
use super::planner::Demand;
use crate::nexus::{DropPolicy, Nexus, Plan};
use crate::types::ClusterSpec;

/// What serving a cluster on partitions takes.
#[derive(Clone, Debug)]
pub struct Serving<'a> {
    pub planner: Planner,
    /// Measured partition profiles; each demand's `model` is a row of them.
    pub data: &'a PartitionData,
    /// Demand `i` is the cluster's model `i`.
    pub demands: Vec<Demand>,
    pub cluster: &'a ClusterSpec,
    pub seed: u64,
}

impl Serving<'_> {
    /// The plan for the demands on the cluster's GPUs, or None if not even
    /// a small fraction of the rates fits.
    pub fn plan(&self) -> Option<GletPlan> {
        plan_for_gpus(self.planner, self.data, &self.demands, self.cluster.backends as usize)
    }

    /// The runtime executing `plan` (an empty plan serves nothing: every
    /// request is dropped with `NoBackend`).
    pub fn runtime(&self, plan: &GletPlan) -> Nexus {
        assert_eq!(self.demands.len(), self.cluster.models.len(), "one demand per model");
        let profiles = runtime_profiles(self.planner, self.data, &self.demands, plan);
        let nodes = Plan {
            backends: plan.used().map(|(_, p)| p.node.clone().expect("used")).collect(),
            rate_scale: plan.rate_scale,
        };
        Nexus::partitioned(self.cluster, nodes, plan.slots(), profiles, DropPolicy::Early, self.seed)
    }

    /// Plans and builds the runtime in one step.
    pub fn scheduler(&self) -> Nexus {
        self.runtime(&self.plan().unwrap_or_default())
    }
}
