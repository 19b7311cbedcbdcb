//! The model shard (Symphony's ModelThread): owns a disjoint set of models,
//! their deadline-ordered queues and their candidates. It hears requests,
//! grants and invalidations; it says candidates, freed backends, batches and
//! drops. It never sees another shard's models or any backend but the one it
//! was just granted.

use std::collections::VecDeque;

use super::candidate::worth_shedding;
use super::{Candidate, CandidateRule, ToModel, ToRank};
use crate::heap::IndexedMinHeap;
use crate::profile::Profile;
use crate::queue::{BatchQueue, Pending, Start};
use crate::rate::RateEstimator;
use crate::time::{Nanos, NANOS_PER_MS};
use crate::types::{BackendId, BatchPlan, ClusterSpec, DispatchDelay, DropReason, ModelId, Output, Request};

/// Window of the online arrival-rate estimate behind beta*lambda.
const RATE_WINDOW: Nanos = 50 * NANOS_PER_MS;
const NOT_OWNED: u32 = u32::MAX;

#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum ShardOutput {
    ToRank(ToRank),
    Decision(Output),
}

#[derive(Debug)]
struct ModelState {
    id: ModelId,
    profile: Profile,
    queue: BatchQueue,
    rate: RateEstimator,
    /// beta*lambda in requests, refreshed when the rate window rolls.
    beta_lambda: f64,
    /// The earliest backend free time the rank shard last told us of in an
    /// `Invalidated`; candidates are planned no earlier until the next grant.
    not_before: Nanos,
}

#[derive(Debug)]
pub struct ModelShard {
    models: Vec<ModelState>,
    /// Global model index → local index, or NOT_OWNED.
    local: Vec<u32>,
    /// Per local model: when its head request stops being reachable alone.
    drop_timers: IndexedMinHeap,
    delay: DispatchDelay,
    rule: CandidateRule,
    out: VecDeque<ShardOutput>,
}

impl ModelShard {
    pub fn new(spec: &ClusterSpec, owned: &[ModelId], rule: CandidateRule) -> Self {
        let mut local = vec![NOT_OWNED; spec.models.len()];
        let models: Vec<ModelState> = owned
            .iter()
            .enumerate()
            .map(|(i, &id)| {
                assert_eq!(local[id.index()], NOT_OWNED, "model {id:?} owned twice");
                local[id.index()] = i as u32;
                let m = &spec.models[id.index()];
                ModelState {
                    id,
                    profile: m.profile.clone(),
                    queue: BatchQueue::new(spec.queue_capacity),
                    rate: RateEstimator::new(RATE_WINDOW),
                    beta_lambda: 0.0,
                    not_before: 0,
                }
            })
            .collect();
        let n = models.len();
        Self {
            models,
            local,
            drop_timers: IndexedMinHeap::with_capacity(n),
            delay: spec.delay,
            rule,
            out: VecDeque::new(),
        }
    }

    pub fn owns(&self, model: ModelId) -> bool {
        self.local.get(model.index()).is_some_and(|&l| l != NOT_OWNED)
    }

    /// Requests held, over all owned models.
    pub fn pending(&self) -> usize {
        self.models.iter().map(|m| m.queue.len()).sum()
    }

    fn local_of(&self, model: ModelId) -> usize {
        let l = self.local[model.index()];
        assert_ne!(l, NOT_OWNED, "model {model:?} is not owned by this shard");
        l as usize
    }

    pub fn on_request(&mut self, now: Nanos, req: Request) {
        let l = self.local_of(req.model);
        let st = &mut self.models[l];
        st.rate.observe(now);
        st.beta_lambda = st.profile.fixed_cost() as f64 * st.rate.rate_rps() / 1e9;
        if st.queue.push(Pending { id: req.id, deadline: req.deadline }).is_err() {
            self.out
                .push_back(ShardOutput::Decision(Output::Dropped { request: req.id, reason: DropReason::QueueFull }));
            return;
        }
        let not_before = st.not_before;
        let c = self.update_candidate(now, l, not_before, false);
        self.inform(l, c);
    }

    pub fn on_message(&mut self, now: Nanos, msg: ToModel) {
        match msg {
            ToModel::Grant { model, backend, free_at } => self.on_grant(now, self.local_of(model), backend, free_at),
            ToModel::Invalidated { model, free_at } => {
                let l = self.local_of(model);
                self.models[l].not_before = free_at;
                let c = self.update_candidate(now, l, free_at, true);
                self.inform(l, c);
            }
        }
    }

    pub fn on_timeout(&mut self, now: Nanos) {
        while let Some((l, at)) = self.drop_timers.peek() {
            if at > now {
                break;
            }
            let not_before = self.models[l].not_before;
            let c = self.update_candidate(now, l, not_before, false);
            self.inform(l, c);
        }
    }

    pub fn next_timeout(&self) -> Option<Nanos> {
        self.drop_timers.peek().map(|(_, at)| at)
    }

    pub fn poll_output(&mut self) -> Option<ShardOutput> {
        crate::fifo::pop_front(&mut self.out)
    }

    fn on_grant(&mut self, now: Nanos, l: usize, backend: BackendId, free_at: Nanos) {
        self.models[l].not_before = 0;
        let dispatched;
        let free_again = match self.update_candidate(now, l, free_at, true) {
            Some(c) => {
                let st = &mut self.models[l];
                // A grant is the decision to run: start as soon as both the
                // dispatch and the backend allow.
                let exec_at = (now + self.delay.of(c.bs)).max(free_at);
                assert!(exec_at <= c.invalid_after, "granted batch would miss its deadline");
                let mut requests = Vec::with_capacity(c.bs as usize);
                st.queue.pop_batch(c.bs, &mut requests);
                let plan = BatchPlan { model: st.id, backend, exec_at, requests, prefix: None, subnet: None };
                self.out.push_back(ShardOutput::Decision(Output::Dispatch(plan)));
                dispatched = true;
                exec_at + st.profile.latency(c.bs)
            }
            None => {
                dispatched = false;
                free_at.max(now)
            }
        };
        self.out.push_back(ShardOutput::ToRank(ToRank::BackendFree { backend, free_at: free_again, dispatched }));
        let c = self.update_candidate(now, l, 0, false);
        self.inform(l, c);
    }

    /// Drops what can no longer make it, prunes the batch to the largest
    /// prefix that meets the head's deadline, and times it (`candidate.rs`).
    /// With `shed` (a backend's free time is known: a grant or an
    /// invalidation), heads are shed when that makes the batch markedly more
    /// efficient (`candidate::worth_shedding`).
    fn update_candidate(&mut self, now: Nanos, l: usize, gpu_free_at: Nanos, shed: bool) -> Option<Candidate> {
        let st = &mut self.models[l];
        let out = &mut self.out;
        let at = Start { now, not_before: gpu_free_at, profile: &st.profile, delay: &self.delay };
        st.queue.drop_unreachable(&at, |id| {
            out.push_back(ShardOutput::Decision(Output::Dropped {
                request: id,
                reason: DropReason::DeadlineUnreachable,
            }))
        });
        if st.queue.is_empty() {
            self.drop_timers.remove(l);
            return None;
        }
        let max_batch = st.profile.max_batch();
        let prefix = st.queue.feasible_batch(&at, max_batch);
        assert!(prefix >= 1, "a reachable head always fits alone");
        let window = if shed { st.queue.best_window(&at, max_batch) } else { (0, prefix) };
        let (skip, bs) = match window {
            (skip, best) if skip > 0 && worth_shedding(&st.profile, prefix, best) => (skip, best),
            _ => (0, prefix),
        };
        st.queue.drop_front(skip, |id| {
            out.push_back(ShardOutput::Decision(Output::Dropped { request: id, reason: DropReason::Shed }))
        });
        let dl = st.queue.head().expect("the window is not empty").deadline;
        let earliest = (now + self.delay.of(bs)).max(gpu_free_at);
        let can_grow = bs as usize == st.queue.len() && bs < max_batch;
        let frontrun_at = can_grow.then(|| dl.saturating_sub(st.profile.latency(bs + 1)));
        let exec_at = self.rule.exec_at(bs, earliest, frontrun_at, st.beta_lambda);
        let invalid_after = dl - st.profile.latency(bs);
        assert!(exec_at <= invalid_after, "candidate planned past its deadline");
        // The head stops being reachable alone once now + delay(1) + l(1) > dl.
        let unreachable_at = (dl + 1).saturating_sub(self.delay.of(1) + st.profile.latency(1));
        self.drop_timers.set(l, unreachable_at.max(now + 1));
        Some(Candidate { bs, exec_at, invalid_after })
    }

    fn inform(&mut self, l: usize, candidate: Option<Candidate>) {
        let model = self.models[l].id;
        self.out.push_back(ShardOutput::ToRank(ToRank::Candidate { model, candidate }));
    }
}
