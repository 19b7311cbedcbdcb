//! The `clipper` baseline (Clipper, NSDI'17, as Orloj evaluates it): one
//! queue per model, a batch size found reactively by AIMD — grow by one
//! while batches finish within the latency objective (the SLO), shrink by
//! 10% when one does not — and lazy drop: a request is dropped only when it
//! reaches the head after its deadline has passed. Work-conserving: an idle
//! backend takes the model whose head has the earliest deadline.

use std::collections::VecDeque;

use crate::backends::{no_backend, Backends};
use crate::queue::{EdfQueues, Pending};
use crate::time::Nanos;
use crate::types::{BackendId, BatchDone, BatchPlan, ClusterSpec, DropReason, ModelId, Output, Request, Scheduler};

/// Multiplicative decrease of the batch size on a late batch.
const BACKOFF: f64 = 0.9;

#[derive(Debug)]
pub struct Clipper {
    spec: ClusterSpec,
    queues: EdfQueues,
    /// Per model: the AIMD batch size (fractional; batches use its floor).
    limit: Vec<f64>,
    backends: Backends,
    out: VecDeque<Output>,
}

impl Clipper {
    pub fn new(spec: &ClusterSpec) -> Self {
        Self {
            queues: EdfQueues::new(spec.models.len(), spec.queue_capacity),
            limit: vec![1.0; spec.models.len()],
            backends: Backends::new(spec.backends),
            spec: spec.clone(),
            out: VecDeque::new(),
        }
    }

    fn dispatch(&mut self, now: Nanos) {
        while let Some(backend) = self.backends.next_idle() {
            let Some((m, head_deadline)) = self.queues.earliest() else { return };
            let out = &mut self.out;
            if head_deadline <= now {
                // Lazy drop: only what is already late, only at the head.
                self.queues.with(m, |q| {
                    let late = (0..q.len()).take_while(|&i| q.deadline(i) <= now).count();
                    q.drop_front(late, |id| {
                        out.push_back(Output::Dropped { request: id, reason: DropReason::DeadlineUnreachable })
                    })
                });
                continue;
            }
            self.backends.take();
            let cap = (self.limit[m].floor() as u32).clamp(1, self.spec.models[m].profile.max_batch());
            let mut requests = Vec::with_capacity(cap as usize);
            let bs = self.queues.with(m, |q| {
                let bs = cap.min(q.len() as u32);
                q.pop_batch(bs, &mut requests);
                bs
            });
            let exec_at = now + self.spec.delay.of(bs);
            let plan = BatchPlan { model: ModelId(m as u32), backend, exec_at, requests, prefix: None, subnet: None };
            self.out.push_back(Output::Dispatch(plan));
        }
    }
}

impl Scheduler for Clipper {
    fn on_request(&mut self, now: Nanos, req: Request) {
        let m = req.model.index();
        if self.backends.refuse(req.id, &mut self.out) {
            return;
        }
        if self.queues.push(m, Pending { id: req.id, deadline: req.deadline }).is_err() {
            self.out.push_back(Output::Dropped { request: req.id, reason: DropReason::QueueFull });
            return;
        }
        self.dispatch(now);
    }

    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        let m = done.model.index();
        let max = self.spec.models[m].profile.max_batch() as f64;
        let took = now - done.started;
        self.limit[m] = if took <= self.spec.models[m].slo {
            (self.limit[m] + 1.0).min(max)
        } else {
            (self.limit[m] * BACKOFF).max(1.0)
        };
        self.backends.release(done.backend);
        self.dispatch(now);
    }

    fn on_backend_failed(&mut self, _now: Nanos, backend: BackendId) {
        if self.backends.fail(backend) {
            let out = &mut self.out;
            self.queues.drain(|id| out.push_back(no_backend(id)));
        }
    }

    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId) {
        self.backends.join(backend);
        self.dispatch(now);
    }

    /// Clipper keeps no timers: it acts on arrivals and completions.
    fn on_timeout(&mut self, _now: Nanos) {}

    fn next_timeout(&self) -> Option<Nanos> {
        None
    }

    fn poll_output(&mut self) -> Option<Output> {
        crate::fifo::pop_front(&mut self.out)
    }
}
