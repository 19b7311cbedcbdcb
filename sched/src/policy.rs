//! The names of the policies `baton sim --policy` selects, the sets the
//! papers compare, and what each policy needs of a scenario. A leaf: it
//! imports nothing of the crate. Building a policy for a scenario is
//! `build.rs`'s job.

/// One of the six accuracy points of SuperServe's fixed-subnet baselines
/// (`fixed-1` .. `fixed-6`, least to most accurate): it cannot hold any
/// other value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FixedPoint(u8);

impl FixedPoint {
    /// How many accuracy points the fixed baselines span.
    pub const COUNT: usize = 6;

    /// The k-th point, 1-based; None outside 1..=6.
    pub const fn new(k: u8) -> Option<Self> {
        if k >= 1 && k as usize <= Self::COUNT {
            Some(Self(k))
        } else {
            None
        }
    }

    /// The point's 0-based index among the subnets the baselines pick from.
    pub fn index(self) -> usize {
        self.0 as usize - 1
    }

    const fn nth(k: u8) -> Self {
        match Self::new(k) {
            Some(p) => p,
            None => panic!("a fixed point is 1..=6"),
        }
    }
}

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
    /// One fixed subnet, the k-th of six accuracy points (Clipper+).
    Fixed(FixedPoint),
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
    /// Symphony's comparison (its Table 4 goodput), in the order tables print them.
    pub const SYMPHONY_SET: [PolicyKind; 6] =
        [Self::Symphony, Self::SymphonyWc, Self::SymphonyFrontrun, Self::Clockwork, Self::Nexus, Self::Nexus8Fe];
    /// Orloj's comparison: Orloj and the baselines its paper runs.
    pub const ORLOJ_SET: [PolicyKind; 4] = [Self::Orloj, Self::Clockwork, Self::Nexus, Self::Clipper];
    /// SuperServe's comparison: SlackFit and the baselines its paper runs.
    pub const SUPERSERVE_SET: [PolicyKind; 10] = [
        Self::SlackFit,
        Self::Fixed(FixedPoint::nth(1)),
        Self::Fixed(FixedPoint::nth(2)),
        Self::Fixed(FixedPoint::nth(3)),
        Self::Fixed(FixedPoint::nth(4)),
        Self::Fixed(FixedPoint::nth(5)),
        Self::Fixed(FixedPoint::nth(6)),
        Self::MinAcc,
        Self::MaxAcc,
        Self::MaxBatch,
    ];
    /// glet's comparison: its planner, the interference-blind ablation and the two baselines; these need measured partition profiles,
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
            Self::Fixed(k) => ["fixed-1", "fixed-2", "fixed-3", "fixed-4", "fixed-5", "fixed-6"][k.index()],
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

    /// Whether the policy promises never to plan a batch that, per the
    /// profile, finishes after its earliest deadline. Orloj plans with
    /// distributions and Clipper drops lazily: neither promises it.
    pub fn plans_within_deadlines(self) -> bool {
        !matches!(self, Self::Orloj | Self::Clipper)
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
}
