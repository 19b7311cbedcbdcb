//! A partitioned cluster re-partitioned at epoch boundaries: the
//! simulator's counterpart of the engine's controller
//! (`tools/src/repartition.rs`), so that a re-planned engine run can be set
//! beside the simulator on the same file, seed, rate and first plan.
//!
//! As in the engine (`core/src/routes.rs`), every sub-cluster's scheduler
//! is built on the whole scenario (one numbering of models and GPUs) and
//! starts with every GPU it does not hold down; it only ever receives the
//! requests of the models routed to it. Every `every`, each model's
//! arrivals over the epoch that ended are its rate; `partition::plan_with`
//! re-plans them against the assignment in force, moving at most `moves`
//! models, and `handover` turns the plan into steps:
//!
//! - a moved model's new requests go to its new scheduler; those already
//!   queued stay with the old one and are answered there;
//! - a moved GPU leaves its scheduler at once (`on_backend_failed`: it is
//!   granted nothing more) and joins the other (`on_backend_joined`) once
//!   every batch it was sent has ended — as a backend process finishes
//!   what it holds before it leaves one scheduler for another. A batch
//!   ends with the scheduler that sent it; one whose scheduler no longer
//!   holds the GPU is forgotten there (it took the GPU for failed).
//!
//! The policy must plan nothing ahead from the rates (Symphony, Clockwork,
//! ...): a static planner would plan its first sub-cluster's share for
//! every GPU. Scenarios with faults are refused (a GPU in transit that
//! fails has no owner to tell).

use std::collections::VecDeque;

use crate::epoch::EpochCounter;
use crate::handover::{handover, Change};
use crate::partition::{plan_with, Options, PartitionError, Plan};
use crate::partitioned::{refuses, weight_share};
use crate::scenario::Scenario;
use crate::side_by_side::SideBySide;
use crate::time::Nanos;
use crate::types::{BackendId, BatchDone, Output, Request, Scheduler};

/// When to re-plan and how far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epochs {
    pub every: Nanos,
    /// The most models one re-plan may move.
    pub moves: usize,
}

pub struct Repartitioned {
    scenario: Scenario,
    /// Each sub-cluster's scheduler.
    subs: SideBySide,
    /// Each sub-cluster's GPUs under the plan in force.
    gpus: Vec<Vec<u32>>,
    /// Each model's sub-cluster.
    model_at: Vec<usize>,
    /// The scheduler each GPU is up in (None while in transit), and where
    /// a GPU in transit goes.
    holder: Vec<Option<usize>>,
    bound_for: Vec<Option<usize>>,
    /// Per GPU, the scheduler of each batch sent to it and not yet ended,
    /// in order (a backend runs its batches in order).
    sent_by: Vec<VecDeque<usize>>,
    epochs: Epochs,
    /// Each model's arrivals over the epoch in progress.
    counter: EpochCounter,
    /// Every step taken, with when.
    pub steps: Vec<(Nanos, Change)>,
}

impl Repartitioned {
    /// The plan's sub-clusters (GPUs numbered in plan order,
    /// `Plan::gpu_ranges`), each under a scheduler `build` makes for
    /// the whole scenario at its models' share of `rate_rps`.
    pub fn new(
        s: &Scenario,
        plan: &Plan,
        rate_rps: f64,
        epochs: Epochs,
        build: &dyn Fn(&Scenario, f64) -> Box<dyn Scheduler>,
    ) -> Result<Self, PartitionError> {
        if let Some(what) = refuses(s) {
            return Err(PartitionError::Unsupported(what));
        }
        if !s.faults.is_empty() {
            return Err(PartitionError::Unsupported("faults while re-partitioning"));
        }
        assert!(epochs.every > 0, "an epoch of 0");
        let n = s.models.len();
        let total: u32 = plan.subclusters.iter().map(|c| c.gpus).sum();
        assert_eq!(total, s.cluster.backends, "a plan shares out every GPU");
        let ranges = plan.gpu_ranges();
        let gpus: Vec<Vec<u32>> = ranges.iter().map(|r| r.clone().collect()).collect();
        let model_at = plan.assignment();
        assert_eq!(model_at.len(), n, "a plan places every model");
        let mut holder = vec![None; total as usize];
        let mut subs = Vec::with_capacity(gpus.len());
        for (k, (c, mine)) in plan.subclusters.iter().zip(&ranges).enumerate() {
            let mut sched = build(s, rate_rps * weight_share(s, &c.models));
            if sched.partitions().is_some() {
                return Err(PartitionError::Unsupported("policies that partition GPUs"));
            }
            for b in 0..total {
                match mine.contains(&b) {
                    true => holder[b as usize] = Some(k),
                    false => sched.on_backend_failed(0, BackendId(b)),
                }
            }
            subs.push(sched);
        }
        Ok(Self {
            scenario: s.clone(),
            subs: SideBySide::new(subs),
            gpus,
            model_at,
            holder,
            bound_for: vec![None; total as usize],
            sent_by: vec![VecDeque::new(); total as usize],
            epochs,
            counter: EpochCounter::new(n, epochs.every),
            steps: Vec::new(),
        })
    }

    /// The epoch that ended at `now` measured `rates`: re-plan, and take
    /// the steps.
    fn new_epoch(&mut self, now: Nanos, rates: &[f64]) {
        let opts = Options { current: Some((self.model_at.clone(), self.epochs.moves)), ..Options::default() };
        let plan = match plan_with(&self.scenario, self.subs.count(), rates, &opts) {
            Ok(plan) => plan,
            // Nothing fits better within the limits: the plan in force stays.
            Err(_) => return,
        };
        let (gpus, changes) = handover(&self.gpus, &self.model_at, &plan);
        self.gpus = gpus;
        for &c in &changes {
            self.steps.push((now, c));
            match c {
                Change::Model { model, to, .. } => self.model_at[model] = to as usize,
                Change::Gpu { gpu, from, to } => {
                    let b = gpu as usize;
                    debug_assert_eq!(self.holder[b], Some(from as usize));
                    self.subs.sched(from as usize).on_backend_failed(now, BackendId(gpu));
                    (self.holder[b], self.bound_for[b]) = (None, Some(to as usize));
                    self.arrive(now, b);
                }
            }
        }
    }

    /// GPU b joins the scheduler it is bound for once nothing sent to it
    /// is left.
    fn arrive(&mut self, now: Nanos, b: usize) {
        if !self.sent_by[b].is_empty() {
            return;
        }
        if let Some(to) = self.bound_for[b].take() {
            self.holder[b] = Some(to);
            self.subs.sched(to).on_backend_joined(now, BackendId(b as u32));
        }
    }
}

impl Scheduler for Repartitioned {
    fn on_request(&mut self, now: Nanos, req: Request) {
        self.counter.count(now, req.model.index());
        self.subs.sched(self.model_at[req.model.index()]).on_request(now, req);
    }

    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        let b = done.backend.index();
        let by = self.sent_by[b].pop_front().expect("a batch ends that was sent");
        if self.holder[b] == Some(by) {
            self.subs.sched(by).on_batch_done(now, done);
        }
        self.arrive(now, b);
    }

    fn on_backend_failed(&mut self, _now: Nanos, _backend: BackendId) {
        unreachable!("scenarios with faults are refused");
    }

    fn on_backend_joined(&mut self, _now: Nanos, _backend: BackendId) {
        unreachable!("scenarios with faults are refused");
    }

    fn on_timeout(&mut self, now: Nanos) {
        if let Some(rates) = self.counter.close(now) {
            self.new_epoch(now, &rates);
        }
        self.subs.on_timeout(now);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        let subs = self.subs.next_timeout();
        // Epochs run while requests arrive or a scheduler has work; a quiet cluster sleeps.
        let epoch = self.counter.deadline(subs.is_some());
        subs.into_iter().chain(epoch).min()
    }

    fn poll_output(&mut self) -> Option<Output> {
        let (i, out) = self.subs.poll_output()?;
        if let Output::Dispatch(plan) = &out {
            self.sent_by[plan.backend.index()].push_back(i);
        }
        Some(out)
    }
}
