//! The policies `baton sim --policy` selects, and how each is built from a
//! cluster description. Every policy is a `Scheduler`; the simulator cannot
//! tell them apart.

use crate::clockwork::Clockwork;
use crate::nexus::Nexus;
use crate::scenario::Scenario;
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
    /// Static squishy bin packing, one frontend routing.
    Nexus,
    /// The same plan, eight frontends routing independently.
    Nexus8Fe,
}

impl PolicyKind {
    /// Every policy, in the order comparisons print them.
    pub const ALL: [PolicyKind; 6] =
        [Self::Symphony, Self::SymphonyWc, Self::SymphonyFrontrun, Self::Clockwork, Self::Nexus, Self::Nexus8Fe];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Symphony => "symphony",
            Self::SymphonyWc => "symphony-wc",
            Self::SymphonyFrontrun => "symphony-frontrun",
            Self::Clockwork => "clockwork",
            Self::Nexus => "nexus",
            Self::Nexus8Fe => "nexus-8fe",
        }
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|p| p.as_str()).collect();
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
                let rule = match self {
                    Self::SymphonyWc => CandidateRule::WorkConserving,
                    Self::SymphonyFrontrun => CandidateRule::FrontrunOnly,
                    _ => CandidateRule::NonWorkConserving,
                };
                Box::new(Symphony::new(spec, rule, knobs.model_shards, knobs.msg_delay))
            }
            Self::Clockwork => Box::new(Clockwork::new(spec)),
            Self::Nexus | Self::Nexus8Fe => {
                let frontends = if self == Self::Nexus { 1 } else { 8 };
                Box::new(Nexus::new(spec, &scenario.model_rates(rate_rps), frontends, scenario.seed))
            }
        }
    }
}
