//! Symphony's centralized, non-work-conserving scheduler: model shards
//! (ModelThread) and one rank shard (RankThread), as separate state machines
//! that talk only through the messages below.
//!
//! The math is in `../shared/design/symphony.md`; `candidate.rs` restates
//! the rule it implements. `wiring.rs` connects the shards in one thread with
//! timed message events, which is how the simulator runs them; the engine
//! runs the same shards on their own cores.

mod candidate;
mod model_shard;
mod rank_shard;
mod wiring;

pub use candidate::{Candidate, CandidateRule};
pub use model_shard::{ModelShard, ShardOutput};
pub use rank_shard::RankShard;
pub use wiring::Symphony;

use crate::time::Nanos;
use crate::types::{BackendId, ModelId};

/// The model shard that owns `model` among `shards`.
pub fn shard_of(model: ModelId, shards: usize) -> usize {
    model.index() % shards
}

/// The models shard `s` of `shards` owns, of `models`.
pub fn models_of(s: usize, shards: usize, models: usize) -> Vec<ModelId> {
    (s..models).step_by(shards).map(|m| ModelId(m as u32)).collect()
}

/// Model shard → rank shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToRank {
    /// The model's current candidate (None: nothing to run). Replaces any
    /// earlier one.
    Candidate { model: ModelId, candidate: Option<Candidate> },
    /// A granted backend is back: it will be free at `free_at`; `dispatched`
    /// says whether a batch was sent to it.
    BackendFree { backend: BackendId, free_at: Nanos, dispatched: bool },
    /// A backend finished a batch at `at` (its real end, which may differ
    /// from the profile's prediction).
    BatchDone { backend: BackendId, at: Nanos },
    /// A backend failed for good: never granted again, and what it held is
    /// forgotten (its batches' requests are the dropper's to answer).
    BackendFailed { backend: BackendId },
    /// A failed backend is back, empty, free from `at`.
    BackendJoined { backend: BackendId, at: Nanos },
}

/// Rank shard → model shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToModel {
    /// `backend` is yours; it is free at `free_at`. Answer with
    /// `BackendFree` exactly once.
    Grant { model: ModelId, backend: BackendId, free_at: Nanos },
    /// Your parked candidate cannot start by its `invalid_after`: the
    /// earliest backend frees at `free_at`. Re-plan against that time.
    Invalidated { model: ModelId, free_at: Nanos },
}

#[cfg(test)]
mod tests;
