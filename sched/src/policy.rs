//! The policies `baton sim --policy` selects, and how each is built from a
//! cluster description. Every policy is a `Scheduler`; the simulator cannot
//! tell them apart.

use crate::clipper::Clipper;
use crate::clockwork::Clockwork;
use crate::glet::{serve, Planner};
use crate::nexus::{DropPolicy, Nexus};
use crate::orloj::Orloj;
use crate::scenario::Scenario;
use crate::superserve::{SubnetPolicy, SuperServe};
use crate::symphony::{CandidateRule, Symphony};
use crate::types::Scheduler;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// Symphony: centralized, non-work-conserving (the spine).
    Symphony,
    /// Symphony's ablation: the same shards, candidates run as soon as possible.
    SymphonyWc,
    /// Symphony's other ablation: candidates always wait until they cannot grow.
    SymphonyFrontrun,
    /// Centralized, work-conserving, earliest deadline first.
    Clockwork,
    /// Orloj: priority by expected cost saved, per batch-size convex-hull queues.
    Orloj,
    /// Clipper: AIMD batch size, lazy drop.
    Clipper,
    /// SuperServe's SlackFit over a supernet's subnets.
    SlackFit,
    /// One fixed subnet, the k-th of six accuracy points (Clipper+), 1..=6.
    Fixed(u8),
    /// The least accurate subnet (INFaaS without accuracy constraints).
    MinAcc,
    /// The most accurate subnet that meets the slack.
    MaxAcc,
    /// The largest batch that meets the slack.
    MaxBatch,
    /// Static squishy bin packing, one frontend routing, early drop.
    Nexus,
    /// The same with lazy drop (Nexus's ablation, Figures 5 and 9).
    NexusLazy,
    /// The same plan, eight frontends routing independently.
    Nexus8Fe,
    /// glet: elastic GPU partitioning with temporal sharing, interference
    /// accounted, executed on partitions by Nexus's runtime.
    Glet,
    /// glet planning as if partitions never slowed each other.
    GletNoint,
    /// Squishy bin packing on whole GPUs of measured profiles (glet's baseline).
    Sbp,
    /// Greedy best-fit partitioning, one model per partition (glet's baseline).
    GreedyPart,
}

impl PolicyKind {
    /// Symphony's comparison (issue 2), in the order tables print them.
    pub const SYMPHONY_SET: [PolicyKind; 6] =
        [Self::Symphony, Self::SymphonyWc, Self::SymphonyFrontrun, Self::Clockwork, Self::Nexus, Self::Nexus8Fe];
    /// Orloj's comparison: Orloj and the baselines its paper runs.
    pub const ORLOJ_SET: [PolicyKind; 4] = [Self::Orloj, Self::Clockwork, Self::Nexus, Self::Clipper];
    /// SuperServe's comparison: SlackFit and the baselines its paper runs.
    pub const SUPERSERVE_SET: [PolicyKind; 10] = [
        Self::SlackFit,
        Self::Fixed(1),
        Self::Fixed(2),
        Self::Fixed(3),
        Self::Fixed(4),
        Self::Fixed(5),
        Self::Fixed(6),
        Self::MinAcc,
        Self::MaxAcc,
        Self::MaxBatch,
    ];
    /// glet's comparison (issue 6); these need measured partition profiles,
    /// so they are not among `all()`.
    pub const GLET_SET: [PolicyKind; 4] = [Self::Glet, Self::GletNoint, Self::Sbp, Self::GreedyPart];
    /// Every policy that runs on any scenario: each comparison set, then the
    /// ablations they leave out.
    pub fn all() -> impl Iterator<Item = PolicyKind> {
        let extra = [Self::Clipper, Self::NexusLazy];
        let sets = Self::SYMPHONY_SET.into_iter().chain(Self::ORLOJ_SET).chain(extra).chain(Self::SUPERSERVE_SET);
        let mut seen = Vec::new();
        sets.filter(move |p| {
            let new = !seen.contains(p);
            seen.push(*p);
            new
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Symphony => "symphony",
            Self::SymphonyWc => "symphony-wc",
            Self::SymphonyFrontrun => "symphony-frontrun",
            Self::Clockwork => "clockwork",
            Self::Orloj => "orloj",
            Self::Clipper => "clipper",
            Self::SlackFit => "slackfit",
            Self::Fixed(1) => "fixed-1",
            Self::Fixed(2) => "fixed-2",
            Self::Fixed(3) => "fixed-3",
            Self::Fixed(4) => "fixed-4",
            Self::Fixed(5) => "fixed-5",
            Self::Fixed(6) => "fixed-6",
            Self::Fixed(k) => panic!("fixed-{k}: the fixed baselines are fixed-1 to fixed-6"),
            Self::MinAcc => "min-acc",
            Self::MaxAcc => "max-acc",
            Self::MaxBatch => "max-batch",
            Self::Nexus => "nexus",
            Self::NexusLazy => "nexus-lazy",
            Self::Nexus8Fe => "nexus-8fe",
            Self::Glet => "glet",
            Self::GletNoint => "glet-noint",
            Self::Sbp => "sbp",
            Self::GreedyPart => "greedy-part",
        }
    }

    /// Whether the policy plans GPU partitions from measured profiles: the
    /// scenario must name `cluster.partition_profiles` and give every model
    /// a `profile`.
    pub fn needs_partition_profiles(self) -> bool {
        Self::GLET_SET.contains(&self)
    }

    /// The partition planner behind a glet-family policy.
    pub fn planner(self) -> Option<Planner> {
        match self {
            Self::Glet => Some(Planner::Glet),
            Self::GletNoint => Some(Planner::GletNoint),
            Self::Sbp => Some(Planner::Sbp),
            Self::GreedyPart => Some(Planner::GreedyPart),
            _ => None,
        }
    }

    /// Why `scenario` cannot run this policy, if it cannot.
    pub fn check(self, scenario: &Scenario) -> Result<(), String> {
        if !self.needs_partition_profiles() {
            return Ok(());
        }
        if scenario.partitions.is_none() {
            return Err(format!("policy {} needs `cluster.partition_profiles`", self.as_str()));
        }
        match scenario.models.iter().find(|m| m.partition_profile.is_none()) {
            Some(m) => Err(format!("policy {} needs a `profile` for model {}", self.as_str(), m.spec.name)),
            None => Ok(()),
        }
    }

    /// Whether the policy promises never to plan a batch that, per the
    /// profile, finishes after its earliest deadline. Orloj plans with
    /// distributions and Clipper drops lazily: neither promises it.
    pub fn plans_within_deadlines(self) -> bool {
        !matches!(self, Self::Orloj | Self::Clipper)
    }

    /// The candidate rule of Symphony's model shards, for the Symphony
    /// policies (whose shards the engine can run on cores of their own).
    pub fn candidate_rule(self) -> Option<CandidateRule> {
        match self {
            Self::Symphony => Some(CandidateRule::NonWorkConserving),
            Self::SymphonyWc => Some(CandidateRule::WorkConserving),
            Self::SymphonyFrontrun => Some(CandidateRule::FrontrunOnly),
            _ => None,
        }
    }

    /// Whether the policy picks among a supernet's subnets.
    pub fn uses_subnets(self) -> bool {
        matches!(self, Self::SlackFit | Self::Fixed(_) | Self::MinAcc | Self::MaxAcc | Self::MaxBatch)
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        Self::all().chain(Self::GLET_SET).find(|p| p.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::all().chain(Self::GLET_SET).map(|p| p.as_str()).collect();
            format!("unknown policy `{s}`; known: {}", names.join(", "))
        })
    }

    /// Builds the policy for `scenario` at aggregate offered rate `rate_rps`
    /// (static planners plan for it; online policies measure it themselves).
    pub fn build(self, scenario: &Scenario, rate_rps: f64) -> Box<dyn Scheduler> {
        let spec = &scenario.cluster;
        let knobs = &scenario.knobs;
        match self {
            Self::Symphony | Self::SymphonyWc | Self::SymphonyFrontrun => {
                let rule = self.candidate_rule().expect("a Symphony policy");
                Box::new(Symphony::new(spec, rule, knobs.model_shards, knobs.msg_delay))
            }
            Self::Clockwork => Box::new(Clockwork::new(spec)),
            Self::Orloj => Box::new(Orloj::new(spec, scenario.seed)),
            Self::Clipper => Box::new(Clipper::new(spec)),
            Self::SlackFit => Box::new(SuperServe::new(spec, SubnetPolicy::SlackFit)),
            Self::Fixed(k) => Box::new(SuperServe::new(spec, SubnetPolicy::Fixed(k as usize - 1))),
            Self::MinAcc => Box::new(SuperServe::new(spec, SubnetPolicy::MinAcc)),
            Self::MaxAcc => Box::new(SuperServe::new(spec, SubnetPolicy::MaxAcc)),
            Self::MaxBatch => Box::new(SuperServe::new(spec, SubnetPolicy::MaxBatch)),
            Self::Nexus | Self::NexusLazy | Self::Nexus8Fe => {
                let frontends = if self == Self::Nexus8Fe { 8 } else { 1 };
                let drops = if self == Self::NexusLazy { DropPolicy::Lazy } else { DropPolicy::Early };
                let rates = scenario.model_rates(rate_rps);
                Box::new(Nexus::new(spec, &rates, frontends, drops, true, scenario.policy_epoch, scenario.seed))
            }
            Self::Glet | Self::GletNoint | Self::Sbp | Self::GreedyPart => {
                if let Err(e) = self.check(scenario) {
                    panic!("{e} (check PolicyKind::check before building)");
                }
                Box::new(serve::build(self.planner().expect("glet family"), scenario, rate_rps))
            }
        }
    }
}
