//! Nexus at run time. Each arrival lands on one of `frontends` frontends
//! (uniformly at random, as behind a load balancer); each frontend routes
//! each model's requests over the plan's backends for that model by its own
//! smooth weighted round-robin, knowing nothing of the others. A backend
//! cycles its sessions round-robin and is work-conserving: when it frees, the
//! next session with queued requests runs a batch of what it has, capped at
//! the planned batch. Which requests it drops first is the batch policy:
//!
//! - lazy drop (Clipper's): drop a request only once it cannot finish even
//!   alone; the batch is the largest prefix that meets the oldest request's
//!   deadline — under bursts the oldest request forces small batches;
//! - early drop (Nexus's, section 6.3): slide a window of the planned batch
//!   size from the head and stop at the first request whose deadline allows
//!   the whole window's batch latency; drop every request before it.
//!
//! Backends decide locally, so their batches pay no dispatch delay: the
//! benefit of the doubt goes to the baseline.

use std::collections::VecDeque;

use super::sessions::{sessions, Sessions};
use super::squishy::{plan_for_cluster, Plan};
use crate::queue::{BatchQueue, Pending, Start};
use crate::rng::Rng;
use crate::time::Nanos;
use crate::types::{
    BackendId, BatchDone, BatchPlan, ClusterSpec, DispatchDelay, DropReason, ModelId, Output, Request, Scheduler,
};

#[derive(Debug)]
struct Session {
    /// Index into `Nexus::sessions`.
    session: usize,
    batch: u32,
    queue: BatchQueue,
}

#[derive(Debug)]
struct Backend {
    sessions: Vec<Session>,
    next: usize,
    busy: bool,
}

/// One frontend's smooth weighted round-robin over a model's targets.
#[derive(Clone, Debug)]
struct Wrr {
    current: Vec<f64>,
}

#[derive(Debug)]
struct Route {
    /// (backend, session index on it)
    targets: Vec<(usize, usize)>,
    weights: Vec<f64>,
    per_frontend: Vec<Wrr>,
}

/// How a Nexus backend drops requests before forming a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropPolicy {
    Lazy,
    Early,
}

#[derive(Debug)]
pub struct Nexus {
    sessions: Sessions,
    plan: Plan,
    backends: Vec<Backend>,
    routes: Vec<Route>,
    frontends: usize,
    drop_policy: DropPolicy,
    rng: Rng,
    out: VecDeque<Output>,
}

impl Nexus {
    /// `offered_rps[m]` is what the epoch planner measured for model m.
    /// With `prefix_batching`, each prefix group is one session.
    pub fn new(
        spec: &ClusterSpec,
        offered_rps: &[f64],
        frontends: usize,
        drop_policy: DropPolicy,
        prefix_batching: bool,
        seed: u64,
    ) -> Self {
        assert!(frontends >= 1);
        let sessions = sessions(spec, offered_rps, prefix_batching);
        let plan = plan_for_cluster(&sessions.specs, &sessions.rates_rps, spec.backends, spec.gpu_memory_mb);
        let mut rng = Rng::stream(seed, 0x4E58);
        let mut routes: Vec<Route> =
            sessions.specs.iter().map(|_| Route { targets: vec![], weights: vec![], per_frontend: vec![] }).collect();
        let backends = plan
            .backends
            .iter()
            .enumerate()
            .map(|(b, bp)| Backend {
                sessions: bp
                    .sessions
                    .iter()
                    .enumerate()
                    .map(|(si, s)| {
                        let r = &mut routes[s.model.index()];
                        r.targets.push((b, si));
                        r.weights.push(s.rate_rps.max(1e-9));
                        Session {
                            session: s.model.index(),
                            batch: s.batch,
                            queue: BatchQueue::new(spec.queue_capacity),
                        }
                    })
                    .collect(),
                next: 0,
                busy: false,
            })
            .collect();
        for r in &mut routes {
            let total: f64 = r.weights.iter().sum();
            // Independent frontends start their round-robins at random phases.
            r.per_frontend = (0..frontends)
                .map(|_| Wrr { current: r.weights.iter().map(|_| rng.unit() * total).collect() })
                .collect();
        }
        Self { sessions, plan, backends, routes, frontends, drop_policy, rng, out: VecDeque::new() }
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    fn route(&mut self, model: ModelId) -> Option<(usize, usize)> {
        let f = self.rng.below(self.frontends as u64) as usize;
        let r = &mut self.routes[self.sessions.of_model[model.index()]];
        if r.targets.is_empty() {
            return None;
        }
        let total: f64 = r.weights.iter().sum();
        let cur = &mut r.per_frontend[f].current;
        for (c, w) in cur.iter_mut().zip(&r.weights) {
            *c += w;
        }
        let pick =
            (0..cur.len()).max_by(|&a, &b| cur[a].total_cmp(&cur[b]).then(b.cmp(&a))).expect("targets non-empty");
        cur[pick] -= total;
        Some(r.targets[pick])
    }

    /// Runs the next session with work, if the backend is idle.
    fn run_backend(&mut self, now: Nanos, b: usize) {
        let no_delay = DispatchDelay::default();
        let be = &mut self.backends[b];
        if be.busy {
            return;
        }
        let n = be.sessions.len();
        for k in 0..n {
            let si = (be.next + k) % n;
            let s = &mut be.sessions[si];
            let profile = &self.sessions.specs[s.session].profile;
            let out = &mut self.out;
            let at = Start { now, not_before: now, profile, delay: &no_delay };
            s.queue.drop_unreachable(&at, |id| {
                out.push_back(Output::Dropped { request: id, reason: DropReason::DeadlineUnreachable })
            });
            if self.drop_policy == DropPolicy::Early {
                let skip = s.queue.early_drop_count(&at, s.batch);
                s.queue.drop_front(skip, |id| out.push_back(Output::Dropped { request: id, reason: DropReason::Shed }));
            }
            let bs = s.queue.feasible_batch(&at, s.batch);
            if bs == 0 {
                continue;
            }
            let mut requests = Vec::with_capacity(bs as usize);
            s.queue.pop_batch(bs, &mut requests);
            let (model, prefix) = (self.sessions.representative[s.session], self.sessions.prefix[s.session]);
            be.busy = true;
            be.next = (si + 1) % n;
            self.out.push_back(Output::Dispatch(BatchPlan {
                model,
                backend: BackendId(b as u32),
                exec_at: now,
                requests,
                prefix,
                subnet: None,
            }));
            return;
        }
    }
}

impl Scheduler for Nexus {
    fn on_request(&mut self, now: Nanos, req: Request) {
        let Some((b, si)) = self.route(req.model) else {
            self.out.push_back(Output::Dropped { request: req.id, reason: DropReason::NoBackend });
            return;
        };
        let q = &mut self.backends[b].sessions[si].queue;
        if q.push(Pending { id: req.id, deadline: req.deadline }).is_err() {
            self.out.push_back(Output::Dropped { request: req.id, reason: DropReason::QueueFull });
            return;
        }
        self.run_backend(now, b);
    }

    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        let backend = done.backend;
        let be = &mut self.backends[backend.index()];
        assert!(be.busy, "batch done on an idle backend");
        be.busy = false;
        self.run_backend(now, backend.index());
    }

    /// A failed backend's queued requests are lost, and frontends stop
    /// routing to it (its share goes to the model's other backends until
    /// the next plan).
    fn on_backend_failed(&mut self, _now: Nanos, backend: BackendId) {
        let b = backend.index();
        let Some(be) = self.backends.get_mut(b) else { return };
        be.busy = true;
        for s in &mut be.sessions {
            let n = s.queue.len();
            s.queue.drop_front(n, |id| {
                self.out.push_back(Output::Dropped { request: id, reason: DropReason::BackendFailed })
            });
        }
        for r in &mut self.routes {
            while let Some(i) = r.targets.iter().position(|&(tb, _)| tb == b) {
                r.targets.remove(i);
                r.weights.remove(i);
                for f in &mut r.per_frontend {
                    f.current.remove(i);
                }
            }
        }
    }

    /// Nexus keeps no timers: backends act on arrivals and completions.
    fn on_timeout(&mut self, _now: Nanos) {}

    fn next_timeout(&self) -> Option<Nanos> {
        None
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }
}
