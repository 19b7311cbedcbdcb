//! The `clockwork` baseline: centralized and work-conserving. Whenever a
//! backend is (about to be) free and anything is queued, it dispatches the
//! model whose head request has the earliest deadline, at the largest batch
//! that still meets that deadline. It never waits for a batch to grow: that
//! is the difference from Symphony that the paper measures.
//!
//! Three traits of the Clockwork system the Symphony paper measured are kept,
//! with the defaults of Clockwork's own controller (its `infer5` scheduler),
//! because they, not the EDF rule, explain its batch sizes:
//! - batches come only in the sizes Clockwork compiles models for: powers of
//!   two up to 16 (`BATCH_SIZES`);
//! - work is handed to a backend up to `SCHEDULE_AHEAD` (10 ms) before it
//!   frees, so a batch is formed from what is queued that early;
//! - batches are planned to finish `SLO_BUFFER` (5 ms) before the deadline
//!   (less if the time the request has left when the scheduler sees it
//!   leaves no room for it beside l(1) and the dispatch delay: that is the
//!   SLO in the simulator; in the engine, the SLO less the response path's
//!   reserve and the request's way to the scheduler).
//!
//! Queue arithmetic is shared with Symphony (`queue.rs`); the queue holds
//! each request's planning deadline (deadline minus the buffer).

use std::collections::VecDeque;

use crate::backends::no_backend;
use crate::heap::IndexedMinHeap;
use crate::queue::{EdfQueues, Pending, Start};
use crate::time::{Nanos, NANOS_PER_MS};
use crate::types::{BackendId, BatchDone, BatchPlan, ClusterSpec, DropReason, ModelId, Output, Request, Scheduler};

/// How far ahead of a backend's free time Clockwork hands it work.
pub const SCHEDULE_AHEAD: Nanos = 10 * NANOS_PER_MS;
/// How much before the deadline Clockwork aims batches to finish.
pub const SLO_BUFFER: Nanos = 5 * NANOS_PER_MS;
/// The batch sizes Clockwork runs: the largest of these that fits is used.
pub const BATCH_SIZES: [u32; 5] = [1, 2, 4, 8, 16];

#[derive(Debug)]
pub struct Clockwork {
    spec: ClusterSpec,
    queues: EdfQueues,
    /// Per model: the least a request needs, l(1) plus the dispatch delay
    /// (what the buffer may not eat into).
    fastest: Vec<Nanos>,
    /// Every backend, keyed by when it is free (predicted from the profile,
    /// corrected by completions).
    free: IndexedMinHeap,
    /// Per backend: predicted run times of batches handed out, not yet done.
    outstanding: Vec<VecDeque<Nanos>>,
    /// Backends failed for good: out of `free`, their completions ignored.
    failed: Vec<bool>,
    /// Backends not failed; with none, requests are dropped, not held.
    alive: u32,
    out: VecDeque<Output>,
}

impl Clockwork {
    pub fn new(spec: &ClusterSpec) -> Self {
        let mut free = IndexedMinHeap::with_capacity(spec.backends as usize);
        for b in 0..spec.backends as usize {
            free.set(b, 0);
        }
        Self {
            queues: EdfQueues::new(spec.models.len(), spec.queue_capacity),
            outstanding: vec![VecDeque::new(); spec.backends as usize],
            failed: vec![false; spec.backends as usize],
            alive: spec.backends,
            fastest: spec.models.iter().map(|m| m.profile.latency(1) + spec.delay.of(1)).collect(),
            free,
            spec: spec.clone(),
            out: VecDeque::new(),
        }
    }

    /// Hands every backend that frees within `SCHEDULE_AHEAD` the most
    /// urgent batch.
    fn dispatch(&mut self, now: Nanos) {
        while let Some((b, free_at)) = self.free.peek() {
            if free_at > now + SCHEDULE_AHEAD {
                return;
            }
            let Some((m, _)) = self.queues.earliest() else {
                return;
            };
            let profile = &self.spec.models[m].profile;
            let out = &mut self.out;
            let at = Start { now, not_before: free_at, profile, delay: &self.spec.delay };
            let mut requests = Vec::new();
            let bs = self.queues.with(m, |q| {
                q.drop_unreachable(&at, |id| {
                    out.push_back(Output::Dropped { request: id, reason: DropReason::DeadlineUnreachable })
                });
                let fits = q.feasible_batch(&at, profile.max_batch());
                let bs = BATCH_SIZES.iter().copied().filter(|&b| b <= fits).max().unwrap_or(0);
                q.pop_batch(bs, &mut requests);
                bs
            });
            if bs == 0 {
                // Everything this model had was unreachable; pick again.
                continue;
            }
            let exec_at = (now + self.spec.delay.of(bs)).max(free_at);
            self.free.set(b, exec_at + profile.latency(bs));
            self.outstanding[b].push_back(profile.latency(bs));
            let plan = BatchPlan {
                model: ModelId(m as u32),
                backend: BackendId(b as u32),
                exec_at,
                requests,
                prefix: None,
                subnet: None,
            };
            self.out.push_back(Output::Dispatch(plan));
        }
    }
}

impl Scheduler for Clockwork {
    fn on_request(&mut self, now: Nanos, req: Request) {
        if self.alive == 0 {
            self.out.push_back(no_backend(req.id));
            return;
        }
        let m = req.model.index();
        let window = req.deadline.saturating_sub(now);
        let planning_deadline = req.deadline - SLO_BUFFER.min(window.saturating_sub(self.fastest[m]));
        if self.queues.push(m, Pending { id: req.id, deadline: planning_deadline }).is_err() {
            self.out.push_back(Output::Dropped { request: req.id, reason: DropReason::QueueFull });
            return;
        }
        self.dispatch(now);
    }

    /// A completion tells when the backend really frees: now, plus what
    /// is still queued on it (batch times can differ from the profile).
    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        let b = done.backend.index();
        if self.failed[b] {
            return;
        }
        self.outstanding[b].pop_front().expect("a completion follows a dispatch");
        self.free.set(b, now + self.outstanding[b].iter().sum::<Nanos>());
        self.dispatch(now);
    }

    /// Never handed work again; what it held is lost (the simulator and
    /// the engine's scheduler role drop those requests). With the last
    /// backend gone, what is queued is dropped (`NoBackend`).
    fn on_backend_failed(&mut self, _now: Nanos, backend: BackendId) {
        let b = backend.index();
        if std::mem::replace(&mut self.failed[b], true) {
            return;
        }
        self.alive -= 1;
        self.free.remove(b);
        self.outstanding[b].clear();
        if self.alive == 0 {
            let out = &mut self.out;
            self.queues.drain(|id| out.push_back(no_backend(id)));
        }
    }

    /// Back, free now, with nothing outstanding.
    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId) {
        let b = backend.index();
        if !std::mem::replace(&mut self.failed[b], false) {
            return;
        }
        self.alive += 1;
        self.free.set(b, now);
        self.dispatch(now);
    }

    fn on_timeout(&mut self, now: Nanos) {
        self.dispatch(now);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        if self.queues.is_empty() {
            return None;
        }
        self.free.peek().map(|(_, free_at)| free_at.saturating_sub(SCHEDULE_AHEAD))
    }

    fn poll_output(&mut self) -> Option<Output> {
        crate::fifo::pop_front(&mut self.out)
    }
}
