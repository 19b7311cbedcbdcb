//! The candidate batch of one model and the rule that times it.
//!
//! With the queue ordered by deadline, `dl` the head's deadline, `bs` the
//! largest prefix that can still finish by `dl` (see `queue.rs`):
//!
//! ```text
//! earliest     = max(now + delay(bs), gpu_free_at)
//! frontrun_at  = dl - l(bs + 1)          the last moment the batch can still grow
//! exec_at      = earliest                                   if bs >= beta*lambda
//!              = max(earliest, frontrun_at)                 otherwise (non-work-conserving)
//! invalid_after = dl - l(bs)             the last start that still meets dl
//! ```
//!
//! Appendix C of the paper assigns `exec_at` twice in a row; that is a typo,
//! the rule above is section 4.3's. A candidate that cannot grow (every
//! queued request is in it already pruned out, or it is at the profile's
//! maximum batch) runs at `earliest`: waiting cannot make it larger.
//! The work-conserving ablation always runs at `earliest`; the frontrun-only
//! ablation ignores beta*lambda and always waits for `frontrun_at`.
//!
//! Shedding (overload). Pruning alone serves the most urgent request with
//! whatever batch its deadline still allows; under overload the head ages,
//! batches shrink, throughput falls and the queue ages further: the
//! earliest-deadline-first collapse. When a backend is actually granted, the
//! shard therefore compares the prefix batch `b0` with the best window of the
//! queue (`queue.rs`, `best_window`: skip `k` heads to run `b*` together)
//! and sheds the `k` heads iff the prefix batch is markedly less efficient:
//!
//! ```text
//! b0 / l(b0)  <  (1 - SHED_MARGIN) * b* / l(b*)
//! ```
//!
//! Below capacity prefixes are full and nothing is shed; above it batches
//! stay within SHED_MARGIN of the best efficiency the queue allows, which
//! is what keeps goodput flat past the peak. Models with little batching
//! benefit (beta ~ 0) have flat efficiency and are never shed.

use crate::policy::PolicyKind;
use crate::profile::Profile;
use crate::time::Nanos;

/// How much batch efficiency (requests per unit of backend time) a shed must
/// win back.
pub const SHED_MARGIN: f64 = 0.1;

/// Whether shedding heads to run `best` instead of `prefix` is worth it.
pub fn worth_shedding(profile: &Profile, prefix: u32, best: u32) -> bool {
    let efficiency = |b: u32| b as f64 / profile.latency(b) as f64;
    best > prefix && efficiency(prefix) < (1.0 - SHED_MARGIN) * efficiency(best)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub bs: u32,
    pub exec_at: Nanos,
    pub invalid_after: Nanos,
}

/// Symphony's rule, or one of its two ablations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidateRule {
    /// Section 4.3: run at once from beta*lambda requests on, else wait
    /// until the batch can no longer grow (`symphony`).
    NonWorkConserving,
    /// Always wait until the batch can no longer grow; beta*lambda is
    /// ignored (`symphony-frontrun`). Larger batches at low load, so the GPU
    /// idle fraction is the autoscaling signal of section 4.4.
    FrontrunOnly,
    /// Run as soon as possible (`symphony-wc`, Clockwork-like).
    WorkConserving,
}

impl CandidateRule {
    /// The rule of a Symphony policy (whose shards the engine can run on
    /// cores of their own); None for every other policy.
    pub fn of(policy: PolicyKind) -> Option<Self> {
        match policy {
            PolicyKind::Symphony => Some(Self::NonWorkConserving),
            PolicyKind::SymphonyWc => Some(Self::WorkConserving),
            PolicyKind::SymphonyFrontrun => Some(Self::FrontrunOnly),
            _ => None,
        }
    }

    /// Whether a candidate of `bs` waits for its frontrun time at all, if
    /// it can still grow (callers may skip computing that time otherwise).
    pub fn waits(self, bs: u32, beta_lambda: f64) -> bool {
        match self {
            CandidateRule::WorkConserving => false,
            CandidateRule::NonWorkConserving => (bs as f64) < beta_lambda,
            CandidateRule::FrontrunOnly => true,
        }
    }

    /// When to run a candidate of `bs`, given the moment it can start at the
    /// earliest, the moment it stops being able to grow (None: it cannot
    /// grow), and beta*lambda.
    #[must_use]
    pub fn exec_at(self, bs: u32, earliest: Nanos, frontrun_at: Option<Nanos>, beta_lambda: f64) -> Nanos {
        match frontrun_at {
            Some(f) if self.waits(bs, beta_lambda) => earliest.max(f),
            _ => earliest,
        }
    }
}
