//! Symphony's scheduler split across shards, as engine roles: each
//! `ModelShardRole` owns some models' queues and candidates
//! (`baton_sched::symphony::ModelShard`, model m on shard m mod K), one
//! `RankRole` owns backend availability and grants
//! (`baton_sched::symphony::RankShard`). They exchange Symphony's own
//! messages (`ToRank`, `ToModel`) — the same state machines and messages
//! the simulator wires together in one thread, here each on its own core.
//! A model shard's decisions leave as wire messages (`Decisions`); a
//! backend's `BatchDone` reaches the rank shard as the time its backend
//! really freed.

use baton_sched::symphony::{ModelShard, RankShard, ShardOutput, ToModel, ToRank};
use baton_sched::time::Nanos;
use baton_sched::types::{BackendId, ClusterSpec, ModelId};
use baton_wire::fb;

use super::decisions::Decisions;
use super::scheduler::SchedulerStats;
use super::{request_of, Envelope};
use crate::models::ModelTable;

/// Batch ids of model shard k start at k << BATCH_ID_SHIFT.
const BATCH_ID_SHIFT: u32 = 48;

pub struct ModelShardRole {
    shard: ModelShard,
    decisions: Decisions,
    pub stats: SchedulerStats,
}

impl ModelShardRole {
    pub fn new(
        spec: &ClusterSpec,
        owned: &[ModelId],
        rule: baton_sched::symphony::CandidateRule,
        index: usize,
        table: ModelTable,
    ) -> Self {
        Self {
            shard: ModelShard::new(spec, owned, rule),
            decisions: Decisions::new(table, (index as u64) << BATCH_ID_SHIFT),
            stats: SchedulerStats::default(),
        }
    }

    /// Gives batch ids from `first` on (each shard apart, by its index in
    /// the top bits): a restarted scheduler starts where its last run's ids
    /// are not, e.g. from the clock.
    pub fn starting_at(mut self, first: u64, index: usize) -> Self {
        let table = self.decisions.table().clone();
        self.decisions = Decisions::new(table, first.wrapping_add((index as u64) << BATCH_ID_SHIFT));
        self
    }

    pub fn owns(&self, model: u32) -> bool {
        self.shard.owns(ModelId(model))
    }

    pub fn on_request(&mut self, now: Nanos, m: fb::RequestMeta, out: &mut Vec<Envelope>, rank: &mut Vec<ToRank>) {
        if !self.decisions.knows(&m) {
            self.stats.rejected += 1;
            return;
        }
        self.stats.requests += 1;
        let req = request_of(&m);
        self.decisions.saw(&req, now, m.input);
        self.shard.on_request(now, req);
        self.drain(out, rank);
    }

    pub fn on_message(&mut self, now: Nanos, msg: ToModel, out: &mut Vec<Envelope>, rank: &mut Vec<ToRank>) {
        self.shard.on_message(now, msg);
        self.drain(out, rank);
    }

    pub fn on_timeout(&mut self, now: Nanos, out: &mut Vec<Envelope>, rank: &mut Vec<ToRank>) {
        self.shard.on_timeout(now);
        self.drain(out, rank);
    }

    pub fn next_timeout(&self) -> Option<Nanos> {
        self.shard.next_timeout()
    }

    fn drain(&mut self, out: &mut Vec<Envelope>, rank: &mut Vec<ToRank>) {
        while let Some(o) = self.shard.poll_output() {
            match o {
                ShardOutput::ToRank(m) => rank.push(m),
                // Symphony's model shard plans no prefix batches; were one
                // to, its requests are dropped and the refusal counted.
                ShardOutput::Decision(d) => {
                    if self.decisions.push(d, out).is_err() {
                        self.stats.refused += 1;
                    }
                }
            }
        }
        self.decisions.flush(out);
        self.stats.batches = self.decisions.batches;
        self.stats.dropped = self.decisions.dropped;
    }
}

/// The model a rank message is about, to route it to its shard.
pub fn model_of(m: &ToModel) -> ModelId {
    match *m {
        ToModel::Grant { model, .. } | ToModel::Invalidated { model, .. } => model,
    }
}

pub struct RankRole {
    rank: RankShard,
}

impl RankRole {
    pub fn new(spec: &ClusterSpec) -> Self {
        Self { rank: RankShard::new(spec.models.len(), spec.backends, spec.delay) }
    }

    pub fn on_message(&mut self, msg: ToRank, out: &mut Vec<ToModel>) {
        self.rank.on_message(msg);
        self.drain(out);
    }

    /// A backend finished a batch at `now`. (One the cluster does not have
    /// is a peer's mistake, ignored.)
    pub fn on_batch_done(&mut self, now: Nanos, d: &fb::BatchDone, out: &mut Vec<ToModel>) {
        if self.has(d.backend) {
            self.on_message(ToRank::BatchDone { backend: BackendId(d.backend), at: now }, out);
        }
    }

    /// Whether backend `b` is one of the cluster's.
    pub fn has(&self, b: u32) -> bool {
        (b as usize) < self.rank.backends()
    }

    pub fn on_timeout(&mut self, now: Nanos, out: &mut Vec<ToModel>) {
        self.rank.on_timeout(now);
        self.drain(out);
    }

    pub fn next_timeout(&self) -> Option<Nanos> {
        self.rank.next_timeout()
    }

    fn drain(&mut self, out: &mut Vec<ToModel>) {
        while let Some(m) = self.rank.poll_output() {
            out.push(m);
        }
    }
}
