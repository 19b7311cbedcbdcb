//! The `clockwork` baseline: centralized and work-conserving. Whenever a
//! backend is (about to be) free and anything is queued, it dispatches the
//! model whose head request has the earliest deadline, at the largest batch
//! that still meets that deadline. It never waits for a batch to grow: that
//! is the difference from Symphony that the paper measures.
//!
//! Backends are handed work `delay.ctrl` before they free up, so a batch
//! starts the moment the previous one ends (the same lead Symphony's rank
//! shard uses). Queue arithmetic is shared with Symphony (`queue.rs`).

use std::collections::VecDeque;

use crate::heap::IndexedMinHeap;
use crate::queue::{BatchQueue, Pending};
use crate::time::Nanos;
use crate::types::{
    BackendId, BatchPlan, ClusterSpec, DropReason, ModelId, Output, Request, Scheduler,
};

#[derive(Debug)]
pub struct Clockwork {
    spec: ClusterSpec,
    queues: Vec<BatchQueue>,
    /// Models with queued requests, keyed by their head's deadline.
    heads: IndexedMinHeap,
    /// Every backend, keyed by when it is free (predicted from the profile).
    free: IndexedMinHeap,
    out: VecDeque<Output>,
}

impl Clockwork {
    pub fn new(spec: &ClusterSpec) -> Self {
        let mut free = IndexedMinHeap::with_capacity(spec.backends as usize);
        for b in 0..spec.backends as usize {
            free.set(b, 0);
        }
        Self {
            queues: spec
                .models
                .iter()
                .map(|_| BatchQueue::new(spec.queue_capacity))
                .collect(),
            heads: IndexedMinHeap::with_capacity(spec.models.len()),
            free,
            spec: spec.clone(),
            out: VecDeque::new(),
        }
    }

    fn refresh_head(&mut self, m: usize) {
        match self.queues[m].head() {
            Some(h) => self.heads.set(m, h.deadline),
            None => {
                self.heads.remove(m);
            }
        }
    }

    /// Hands every backend that is free by `now + ctrl` the most urgent batch.
    fn dispatch(&mut self, now: Nanos) {
        while let Some((b, free_at)) = self.free.peek() {
            if free_at > now + self.spec.delay.ctrl {
                return;
            }
            let Some((m, _)) = self.heads.peek() else {
                return;
            };
            let profile = &self.spec.models[m].profile;
            let out = &mut self.out;
            self.queues[m].drop_unreachable(now, free_at, profile, &self.spec.delay, |id| {
                out.push_back(Output::Dropped {
                    request: id,
                    reason: DropReason::DeadlineUnreachable,
                })
            });
            let bs = self.queues[m].feasible_batch(
                now,
                free_at,
                profile,
                &self.spec.delay,
                profile.max_batch(),
            );
            if bs == 0 {
                // Everything this model had was unreachable; pick again.
                self.refresh_head(m);
                continue;
            }
            let exec_at = (now + self.spec.delay.of(bs)).max(free_at);
            let mut requests = Vec::with_capacity(bs as usize);
            self.queues[m].pop_batch(bs, &mut requests);
            self.free.set(b, exec_at + profile.latency(bs));
            let plan = BatchPlan {
                model: ModelId(m as u32),
                backend: BackendId(b as u32),
                exec_at,
                requests,
            };
            self.out.push_back(Output::Dispatch(plan));
            self.refresh_head(m);
        }
    }
}

impl Scheduler for Clockwork {
    fn on_request(&mut self, now: Nanos, req: Request) {
        let m = req.model.index();
        if self.queues[m]
            .push(Pending {
                id: req.id,
                deadline: req.deadline,
            })
            .is_err()
        {
            self.out.push_back(Output::Dropped {
                request: req.id,
                reason: DropReason::QueueFull,
            });
            return;
        }
        self.refresh_head(m);
        self.dispatch(now);
    }

    fn on_batch_done(&mut self, _now: Nanos, _backend: BackendId) {}

    fn on_timeout(&mut self, now: Nanos) {
        self.dispatch(now);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        if self.heads.is_empty() {
            return None;
        }
        self.free
            .peek()
            .map(|(_, free_at)| free_at.saturating_sub(self.spec.delay.ctrl))
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }
}
