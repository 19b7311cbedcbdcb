//! The scheduler's part on a shard, as one type: `SchedulerPart` says what
//! a shard hosts (nothing, the whole policy, Symphony's rank shard, or some
//! of Symphony's model shards), `SchedulerPart::build` makes it, and the
//! shard drives whatever it built through `Part` alone — messages it may
//! take, its timer, its counts — without knowing which part it is.

use baton_sched::build;
use baton_sched::scenario::Scenario;
use baton_sched::symphony::{models_of, CandidateRule, ToModel, ToRank};
use baton_sched::time::Nanos;
use baton_sched::PolicyKind;
use baton_wire::Message;
use std::sync::Arc;

use super::link::{self, ShardMsg};
use super::EngineConfig;
use crate::models::ModelTable;
use crate::roles::autoscaling::Autoscaling;
use crate::roles::scheduler::{SchedulerRole, SchedulerStats};
use crate::roles::symphony::{model_of, ModelShardRole, RankRole};
use crate::roles::{Addr, Envelope};

/// What a shard hosts of the scheduler.
#[derive(Clone, Copy, Debug)]
pub enum SchedulerPart {
    None,
    Whole(PolicyKind),
    Rank,
    /// Model shard `index` of `of`.
    Models {
        index: usize,
        of: usize,
        rule: CandidateRule,
    },
}

impl SchedulerPart {
    /// The part for a cluster of `backends` backends, starting at `now`.
    pub fn build(
        self,
        scenario: &Scenario,
        table: &ModelTable,
        cfg: &EngineConfig,
        backends: u32,
        now: Nanos,
    ) -> Box<dyn Part> {
        let spec = &scenario.cluster;
        match self {
            SchedulerPart::None => Box::new(Nothing),
            SchedulerPart::Whole(p) => {
                let policy = build::scheduler(p, scenario, cfg.plan_rate_rps);
                // Batch ids from the Unix clock: a restarted scheduler's
                // never match a batch its last run left in flight.
                let role = SchedulerRole::new(policy, table.clone(), backends)
                    .starting_at(crate::clock::unix_ns())
                    .with_policy_delay(scenario.knobs.msg_delay);
                Box::new(match &cfg.autoscale {
                    Some((a, sink)) => role.with_autoscaling(Autoscaling::new(*a, sink.clone(), backends, now)),
                    None => role,
                })
            }
            SchedulerPart::Rank => Box::new(RankRole::new(spec)),
            SchedulerPart::Models { index, of, rule } => {
                let owned = models_of(index, of, spec.models.len());
                let role = ModelShardRole::new(spec, &owned, rule, index, table.clone());
                Box::new(role.starting_at(crate::clock::unix_ns(), index))
            }
        }
    }
}

/// Symphony split as `baton serve --model-shards` runs it, every part in
/// one place: the rank shard first, then `shards` model shards, their
/// batch ids from `first` on. (The chaos simulator runs it as one
/// scheduler process; `pump` carries the parts' messages between them.)
pub fn symphony_split(scenario: &Scenario, table: &ModelTable, shards: usize, first: u64) -> Vec<Box<dyn Part>> {
    let spec = &scenario.cluster;
    let mut parts: Vec<Box<dyn Part>> = vec![Box::new(RankRole::new(spec))];
    for index in 0..shards {
        let owned = models_of(index, shards, spec.models.len());
        let role = ModelShardRole::new(spec, &owned, CandidateRule::NonWorkConserving, index, table.clone());
        parts.push(Box::new(role.starting_at(first, index)));
    }
    parts
}

/// Hands `first` and everything it causes to the first of `parts` that
/// takes each message, at `now`, as the rings between one process's shards
/// would (nothing lost or reordered); what leaves for other roles goes to
/// `out`. Returns the messages no part took.
pub fn pump(parts: &mut [Box<dyn Part>], now: Nanos, first: ShardMsg, out: &mut Vec<Envelope>) -> usize {
    let mut queue = std::collections::VecDeque::from([first]);
    let mut untaken = 0;
    while let Some(m) = queue.pop_front() {
        let mut caused = Caused::default();
        let mut left = Some(m);
        for p in parts.iter_mut() {
            match left.take() {
                Some(m) => left = p.take(now, m, &mut caused),
                None => break,
            }
        }
        untaken += usize::from(left.is_some());
        out.append(&mut caused.env);
        queue.extend(caused.rank.into_iter().map(ShardMsg::Rank));
        queue.extend(caused.model.into_iter().map(ShardMsg::Model));
    }
    untaken
}

/// What a part's handling caused: envelopes for roles, and Symphony's own
/// messages for the rank shard and the model shards.
#[derive(Default)]
pub struct Caused {
    pub env: Vec<Envelope>,
    pub rank: Vec<ToRank>,
    pub model: Vec<ToModel>,
}

pub trait Part {
    /// Handles `m` at `now` if it is this part's, or hands it back.
    fn take(&mut self, now: Nanos, m: ShardMsg, caused: &mut Caused) -> Option<ShardMsg>;
    /// Fires the part's timers due at `now`.
    fn on_timeout(&mut self, now: Nanos, caused: &mut Caused);
    fn next_timeout(&self) -> Option<Nanos>;
    /// The scheduler's counts (none for a part that makes no decisions).
    fn stats(&self) -> SchedulerStats;
    /// Lets the part run long computations off the shard, ringing `waker`
    /// when one is done (`SchedulerRole::offloading`); by default it has
    /// none.
    fn offloading(&mut self, _waker: &baton_gpu::Waker) {}
}

/// A shard that hosts no part of the scheduler (backends only).
struct Nothing;

impl Part for Nothing {
    fn take(&mut self, _: Nanos, m: ShardMsg, _: &mut Caused) -> Option<ShardMsg> {
        Some(m)
    }

    fn on_timeout(&mut self, _: Nanos, _: &mut Caused) {}

    fn next_timeout(&self) -> Option<Nanos> {
        None
    }

    fn stats(&self) -> SchedulerStats {
        SchedulerStats::default()
    }
}

impl Part for SchedulerRole {
    fn take(&mut self, now: Nanos, m: ShardMsg, caused: &mut Caused) -> Option<ShardMsg> {
        match m {
            ShardMsg::Meta { meta, .. } => self.on_message(now, Message::RequestMeta(meta), &mut caused.env),
            ShardMsg::Env(e) if matches!(e.to, Addr::Scheduler(_)) => {
                self.on_message(now, link::open(e).msg, &mut caused.env)
            }
            m => return Some(m),
        }
        None
    }

    fn on_timeout(&mut self, now: Nanos, caused: &mut Caused) {
        SchedulerRole::on_timeout(self, now, &mut caused.env);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        SchedulerRole::next_timeout(self)
    }

    fn stats(&self) -> SchedulerStats {
        self.stats
    }

    fn offloading(&mut self, waker: &baton_gpu::Waker) {
        SchedulerRole::offloading(self, Arc::clone(waker));
    }
}

impl Part for RankRole {
    fn take(&mut self, now: Nanos, m: ShardMsg, caused: &mut Caused) -> Option<ShardMsg> {
        let (to, msg) = match m {
            ShardMsg::Rank(m) => {
                self.on_message(m, &mut caused.model);
                return None;
            }
            ShardMsg::Env(e) if matches!(e.to, Addr::Scheduler(_)) => {
                let e = link::open(e);
                (e.to, e.msg)
            }
            m => return Some(m),
        };
        match msg {
            Message::BatchDone(d) => self.on_batch_done(now, &d, &mut caused.model),
            // The rank shard owns backend availability: a failed backend is
            // never granted again until it is back (its batches' requests
            // are answered by their frontends: `Lost` past the grace); a
            // leaving one neither, and is told so after its last plan.
            Message::BackendStatus(s) if self.has(s.backend) => {
                let backend = baton_sched::types::BackendId(s.backend);
                let m = match (s.healthy, s.leaving) {
                    (true, false) => ToRank::BackendJoined { backend, at: now },
                    (_, true) => {
                        caused.env.push(crate::roles::scheduler::leaving_told(s.backend));
                        ToRank::BackendFailed { backend }
                    }
                    (false, false) => ToRank::BackendFailed { backend },
                };
                self.on_message(m, &mut caused.model);
            }
            msg => return Some(ShardMsg::env(Envelope { to, msg })),
        }
        None
    }

    fn on_timeout(&mut self, now: Nanos, caused: &mut Caused) {
        RankRole::on_timeout(self, now, &mut caused.model);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        RankRole::next_timeout(self)
    }

    fn stats(&self) -> SchedulerStats {
        SchedulerStats::default()
    }
}

impl Part for ModelShardRole {
    fn take(&mut self, now: Nanos, m: ShardMsg, caused: &mut Caused) -> Option<ShardMsg> {
        match m {
            ShardMsg::Model(m) if self.owns(model_of(&m).0) => {
                self.on_message(now, m, &mut caused.env, &mut caused.rank);
            }
            ShardMsg::Meta { meta, .. } if self.owns(meta.model) => {
                self.on_request(now, meta, &mut caused.env, &mut caused.rank);
            }
            m => return Some(m),
        }
        None
    }

    fn on_timeout(&mut self, now: Nanos, caused: &mut Caused) {
        ModelShardRole::on_timeout(self, now, &mut caused.env, &mut caused.rank);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        ModelShardRole::next_timeout(self)
    }

    fn stats(&self) -> SchedulerStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_sched::symphony::{Candidate, ToModel};
    use baton_sched::types::{BackendId, ModelId};
    use baton_wire::fb;

    /// Symphony split over shards hears a backend fail and come back: the
    /// rank shard grants it no more until then (before, the status passed
    /// it by and the failed backend kept being granted).
    #[test]
    fn the_rank_shard_takes_backend_failures_and_returns() {
        let s = Scenario::parse(ONE).unwrap();
        let mut rank = RankRole::new(&s.cluster);
        let status = |healthy| {
            let st = fb::BackendStatus { backend: 0, healthy, ..Default::default() };
            ShardMsg::env(Envelope { to: Addr::Scheduler(0), msg: Message::BackendStatus(st) })
        };
        let mut caused = Caused::default();
        assert!(rank.take(0, status(false), &mut caused).is_none(), "the rank shard takes it");
        let c = Some(Candidate { bs: 1, exec_at: 1_000_000, invalid_after: 2_000_000 });
        let candidate = ShardMsg::Rank(ToRank::Candidate { model: ModelId(0), candidate: c });
        rank.take(0, candidate, &mut caused);
        Part::on_timeout(&mut rank, 1_000_000, &mut caused);
        assert!(!caused.model.iter().any(|m| matches!(m, ToModel::Grant { .. })), "granted a failed backend");
        rank.take(1_000_000, status(true), &mut caused);
        Part::on_timeout(&mut rank, 1_500_000, &mut caused);
        assert!(
            caused.model.iter().any(|m| matches!(m, ToModel::Grant { backend: BackendId(0), .. })),
            "{:?}",
            caused.model
        );
    }

    /// One model on one backend.
    const ONE: &str = r#"
name = "one"
[cluster]
gpus = 1
[[models]]
name = "m"
alpha_ms = 1.0
beta_ms = 1.0
slo_ms = 100.0
"#;
}
