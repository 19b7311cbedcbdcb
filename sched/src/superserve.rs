//! SuperServe's scheduling over a supernet's subnets (`../shared/design/
//! planners.md`; seeds/004): one earliest-deadline-first queue, and, when a
//! backend is idle, a control tuple (batch size B, subnet phi) chosen from
//! the most urgent query's slack `s = deadline - now - d_ctrl`:
//!
//! - `slackfit`: the tuples of every subnet, sorted by `l_phi(B)` into
//!   `BUCKETS` evenly sized latency buckets; take the highest bucket whose
//!   upper edge is not above the slack (every tuple in it meets the deadline),
//!   and in it the tuple with the largest B (ties: higher accuracy). Low
//!   slack lands in low buckets — small subnets at large batches; high slack
//!   in high buckets — accurate subnets. One refinement: only tuples whose
//!   B does not exceed the queries waiting count (the highest bucket holding
//!   one such). Without it, at low load the top bucket's largest-B tuple is
//!   a mid-accuracy subnet at a batch of 32 that is then run with the two
//!   queries there are: lower accuracy for no throughput.
//! - `fixed-k` (Clipper+ at six accuracy points, k = 1 lowest .. 6 highest)
//!   and `min-acc` (INFaaS without constraints): one subnet, the largest
//!   batch that meets the slack.
//! - `max-acc`: the most accurate subnet that meets the slack at all, at its
//!   largest fitting batch; `max-batch`: the largest batch that meets the
//!   slack, on the most accurate subnet that allows it.
//!
//! The batch is the B earliest-deadline queries (fewer if fewer wait). A
//! query that no tuple can serve in time is dropped. Work-conserving;
//! backends free on completion; failed backends are never used again.

use std::collections::VecDeque;

use crate::backends::{no_backend, Backends};
use crate::policy::FixedPoint;
use crate::queue::{EdfQueues, Pending};
use crate::time::Nanos;
use crate::types::{BackendId, BatchDone, BatchPlan, ClusterSpec, DropReason, ModelId, Output, Request, Scheduler};

/// Latency buckets SlackFit sorts control tuples into.
pub const BUCKETS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubnetPolicy {
    SlackFit,
    /// One of six subnets spread evenly over the pareto set.
    Fixed(FixedPoint),
    MinAcc,
    MaxAcc,
    MaxBatch,
}

#[derive(Clone, Copy, Debug)]
struct Tuple {
    batch: u32,
    subnet: u16,
    latency: Nanos,
}

#[derive(Debug)]
struct ModelTuples {
    /// Every (B, phi), by latency.
    tuples: Vec<Tuple>,
    /// Upper latency edge of each bucket, and the index in `tuples` where
    /// each bucket ends.
    edges: Vec<Nanos>,
    ends: Vec<usize>,
}

#[derive(Debug)]
pub struct SuperServe {
    spec: ClusterSpec,
    policy: SubnetPolicy,
    queues: EdfQueues,
    models: Vec<ModelTuples>,
    backends: Backends,
    out: VecDeque<Output>,
}

impl SuperServe {
    /// Models without subnets run as one subnet: their own profile.
    pub fn new(spec: &ClusterSpec, policy: SubnetPolicy) -> Self {
        let models = spec
            .models
            .iter()
            .map(|m| {
                let profiles: Vec<_> = if m.subnets.is_empty() {
                    vec![m.profile.clone()]
                } else {
                    m.subnets.iter().map(|s| s.profile.clone()).collect()
                };
                let mut tuples: Vec<Tuple> = profiles
                    .iter()
                    .enumerate()
                    .flat_map(|(s, p)| {
                        (1..=p.max_batch()).map(move |b| Tuple { batch: b, subnet: s as u16, latency: p.latency(b) })
                    })
                    .filter(|t| t.latency <= m.slo)
                    .collect();
                tuples.sort_by_key(|t| (t.latency, t.batch, t.subnet));
                let (lo, hi) = (tuples.first().map_or(0, |t| t.latency), tuples.last().map_or(0, |t| t.latency));
                let width = ((hi - lo) / BUCKETS as Nanos).max(1);
                let edges: Vec<Nanos> = (1..=BUCKETS).map(|i| lo + width * i as Nanos).collect();
                let ends = edges.iter().map(|&e| tuples.partition_point(|t| t.latency <= e)).collect();
                ModelTuples { tuples, edges, ends }
            })
            .collect();
        Self {
            queues: EdfQueues::new(spec.models.len(), spec.queue_capacity),
            models,
            backends: Backends::new(spec.backends),
            policy,
            spec: spec.clone(),
            out: VecDeque::new(),
        }
    }

    fn subnets(&self, m: usize) -> usize {
        self.spec.models[m].subnets.len().max(1)
    }

    /// The tuple the policy picks for `slack` with `waiting` queries queued,
    /// if any meets the slack.
    fn choose(&self, m: usize, slack: Nanos, waiting: u32) -> Option<Tuple> {
        let mt = &self.models[m];
        let fits = |t: &&Tuple| t.latency + self.spec.delay.per_request * t.batch as Nanos <= slack;
        let largest_batch = |a: &&Tuple, b: &&Tuple| (a.batch, a.subnet).cmp(&(b.batch, b.subnet));
        let on_subnet =
            |s: usize| mt.tuples.iter().filter(|t| t.subnet as usize == s).filter(fits).max_by_key(|t| t.batch);
        let n = self.subnets(m);
        match self.policy {
            SubnetPolicy::SlackFit => {
                let realizable = |t: &&Tuple| t.batch <= waiting.max(1);
                let bucket = |i: usize| {
                    let from = if i == 0 { 0 } else { mt.ends[i - 1] };
                    mt.tuples[from..mt.ends[i]].iter().filter(fits).filter(realizable).max_by(largest_batch)
                };
                // The highest bucket wholly within the slack that has a
                // realizable tuple; below all buckets, what fits of the first.
                let top = mt.edges.iter().rposition(|&e| e <= slack).unwrap_or(0);
                (0..=top).rev().find_map(bucket).copied()
            }
            SubnetPolicy::Fixed(k) => {
                let spread = FixedPoint::COUNT - 1;
                on_subnet((k.index() * (n - 1) + spread / 2) / spread).copied()
            }
            SubnetPolicy::MinAcc => on_subnet(0).copied(),
            SubnetPolicy::MaxAcc => (0..n).rev().find_map(on_subnet).copied(),
            SubnetPolicy::MaxBatch => mt.tuples.iter().filter(fits).max_by(largest_batch).copied(),
        }
    }

    fn dispatch(&mut self, now: Nanos) {
        while let Some(backend) = self.backends.next_idle() {
            let Some((m, deadline)) = self.queues.earliest() else { return };
            let slack = deadline.saturating_sub(now + self.spec.delay.ctrl);
            let waiting = self.queues.with(m, |q| q.len() as u32);
            let Some(t) = self.choose(m, slack, waiting) else {
                // Nothing serves the most urgent query in time.
                let out = &mut self.out;
                self.queues.with(m, |q| {
                    q.drop_front(1, |id| {
                        out.push_back(Output::Dropped { request: id, reason: DropReason::DeadlineUnreachable })
                    })
                });
                continue;
            };
            self.backends.take();
            let mut requests = Vec::with_capacity(t.batch as usize);
            let n = self.queues.with(m, |q| {
                let n = t.batch.min(q.len() as u32);
                q.pop_batch(n, &mut requests);
                n
            });
            let subnet = (!self.spec.models[m].subnets.is_empty()).then_some(t.subnet);
            let exec_at = now + self.spec.delay.of(n);
            let plan = BatchPlan { model: ModelId(m as u32), backend, exec_at, requests, prefix: None, subnet };
            self.out.push_back(Output::Dispatch(plan));
        }
    }
}

impl Scheduler for SuperServe {
    fn on_request(&mut self, now: Nanos, req: Request) {
        if self.backends.refuse(req.id, &mut self.out) {
            return;
        }
        if self.queues.push(req.model.index(), Pending { id: req.id, deadline: req.deadline }).is_err() {
            self.out.push_back(Output::Dropped { request: req.id, reason: DropReason::QueueFull });
            return;
        }
        self.dispatch(now);
    }

    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        self.backends.release(done.backend);
        self.dispatch(now);
    }

    fn on_backend_failed(&mut self, now: Nanos, backend: BackendId) {
        if self.backends.fail(backend) {
            let out = &mut self.out;
            self.queues.drain(|id| out.push_back(no_backend(id)));
        }
        self.dispatch(now);
    }

    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId) {
        self.backends.join(backend);
        self.dispatch(now);
    }

    /// Work-conserving: it acts on arrivals and completions only.
    fn on_timeout(&mut self, _now: Nanos) {}

    fn next_timeout(&self) -> Option<Nanos> {
        None
    }

    fn poll_output(&mut self) -> Option<Output> {
        crate::fifo::pop_front(&mut self.out)
    }
}
