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
//!
//! The same runtime executes partitioned plans (glet, `Nexus::partitioned`):
//! each backend is then a GPU partition, and each session on it batches by
//! its own profile there (L(b, p), with the planned slowdown) instead of
//! its model's whole-GPU profile. A new partitioned plan
//! (`Nexus::repartition`) routes to its sessions at once, but a GPU whose
//! partitions change is held: its backends start nothing until both have
//! finished what they run, and then it switches (`Output::Layout`) and
//! runs what queued for it meanwhile.

use std::collections::VecDeque;

use super::incremental::replan;
use super::sessions::{sessions, Sessions};
use super::squishy::{plan_for_cluster, Plan};
use crate::epoch::{EpochCounter, MIN_PLANNED_RPS};
use crate::profile::Profile;
use crate::queue::{BatchQueue, Pending, Start};
use crate::rng::Rng;
use crate::time::Nanos;
use crate::types::{
    BackendId, BatchDone, BatchPlan, ClusterSpec, DispatchDelay, DropReason, Output, Partition, Request, Scheduler,
};

#[derive(Debug)]
struct Session {
    /// Index into `Nexus::sessions`.
    session: usize,
    /// The planned batch: early drop's window.
    batch: u32,
    /// The largest batch a run may take: the planned one, except on a
    /// partition with a single session, where no other session waits for
    /// the duty cycle and a burst may run as one batch up to the saturating
    /// one (`2 l(B) <= SLO`, so a request that waits a whole batch still
    /// makes it). The partition planners plan its sibling for any batch.
    cap: u32,
    /// The plan's rate for it here: its routing weight.
    rate: f64,
    queue: BatchQueue,
    /// The session's profile on this backend, when it differs from its
    /// model's whole-GPU one (a partition).
    profile: Option<Profile>,
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
    capacity: usize,
    cluster_backends: u32,
    /// Failed backends: never routed to again, whatever the plan says.
    dead: Vec<bool>,
    gpu_memory_mb: Option<f64>,
    /// Re-planning: each session's arrivals over the epoch in progress.
    epochs: Option<EpochCounter>,
    /// The rate scale of the first plan: the headroom the cluster had.
    first_scale: f64,
    rng: Rng,
    out: VecDeque<Output>,
    /// A partitioned plan (None: whole GPUs).
    partitions: Option<Partitions>,
}

/// Where a partitioned plan's backends run.
#[derive(Debug)]
struct Partitions {
    /// The partition each backend runs on now (the last layout announced).
    now: Vec<Partition>,
    /// The partition the plan in force puts it on: differs from `now` on
    /// GPUs still draining for a re-partitioning.
    planned: Vec<Partition>,
    /// The other backend on the same GPU, if any (fixed: a backend never
    /// changes GPU).
    sibling: Vec<Option<usize>>,
    /// Each session's profile on its planned partition (`[backend][session]`).
    profiles: Vec<Vec<Profile>>,
}

impl Partitions {
    fn new(slots: Vec<Partition>, profiles: Vec<Vec<Profile>>) -> Self {
        let sibling = (0..slots.len()).map(|i| (0..slots.len()).find(|&j| j != i && slots[j].gpu == slots[i].gpu));
        let sibling = sibling.collect();
        Self { now: slots.clone(), planned: slots, sibling, profiles }
    }

    /// Whether backend b's GPU waits to be re-partitioned.
    fn held(&self, b: usize) -> bool {
        self.now[b] != self.planned[b] || self.sibling[b].is_some_and(|s| self.now[s] != self.planned[s])
    }
}

/// Attempts to shrink the rate scale until a re-plan fits the cluster.
const FIT_ATTEMPTS: usize = 40;
/// Each failed fit shrinks the rate scale by this factor.
const SCALE_STEP: f64 = 0.85;

impl Nexus {
    /// `offered_rps[m]` is what the epoch planner measured for model m.
    /// With `prefix_batching`, each prefix group is one session. With an
    /// `epoch`, the plan is redone every epoch from the rates measured in
    /// the last one, incrementally (`incremental.rs`).
    pub fn new(
        spec: &ClusterSpec,
        offered_rps: &[f64],
        frontends: usize,
        drop_policy: DropPolicy,
        prefix_batching: bool,
        epoch: Option<Nanos>,
        seed: u64,
    ) -> Self {
        assert!(frontends >= 1);
        assert!(epoch.is_none_or(|e| e > 0));
        let sessions = sessions(spec, offered_rps, prefix_batching);
        let plan = plan_for_cluster(&sessions.specs, &sessions.rates_rps, spec.backends, spec.gpu_memory_mb);
        Self::with_plan(spec, sessions, plan, frontends, drop_policy, epoch, seed, None)
    }

    /// Executes a partitioned plan: backend i runs on `slots[i]`, its j-th
    /// session batching by `profiles[i][j]`; one frontend, no re-planning.
    /// Sessions are the scenario's models (no prefix batching).
    pub fn partitioned(
        spec: &ClusterSpec,
        plan: Plan,
        slots: Vec<Partition>,
        profiles: Vec<Vec<Profile>>,
        drop_policy: DropPolicy,
        seed: u64,
    ) -> Self {
        assert_eq!(plan.backends.len(), slots.len(), "one partition per planned backend");
        assert_eq!(plan.backends.len(), profiles.len(), "profiles for every planned backend");
        for (b, p) in plan.backends.iter().zip(&profiles) {
            assert_eq!(b.sessions.len(), p.len(), "a profile for every session");
            for (s, prof) in b.sessions.iter().zip(p) {
                assert!(s.batch >= 1 && s.batch <= prof.max_batch(), "planned batch beyond the profile");
            }
        }
        let rates: Vec<f64> = (0..spec.models.len())
            .map(|m| {
                plan.backends
                    .iter()
                    .flat_map(|b| &b.sessions)
                    .filter(|s| s.model.index() == m)
                    .map(|s| s.rate_rps)
                    .sum()
            })
            .collect();
        let sessions = sessions(spec, &rates, false);
        Self::with_plan(spec, sessions, plan, 1, drop_policy, None, seed, Some(Partitions::new(slots, profiles)))
    }

    /// Makes a new partitioned plan the running one (`slots` and
    /// `profiles` as for `partitioned`, the same backends each on the same
    /// GPU): queued requests move to their sessions' new backends, GPUs
    /// whose partitions change are held until they drain (module doc).
    pub fn repartition(&mut self, now: Nanos, plan: Plan, slots: Vec<Partition>, profiles: Vec<Vec<Profile>>) {
        let p = self.partitions.as_mut().expect("a partitioned plan runs");
        assert_eq!(slots.len(), p.planned.len(), "the same backends");
        assert!(slots.iter().zip(&p.planned).all(|(a, b)| a.gpu == b.gpu), "each backend on its GPU");
        assert_eq!(plan.backends.len(), slots.len(), "one partition per planned backend");
        (p.planned, p.profiles) = (slots, profiles);
        self.switch_to(now, plan);
    }

    /// Installs `plan`, moves queued requests to their sessions' new
    /// backends, and runs every backend that can run (switching GPUs
    /// that were waiting for nothing).
    fn switch_to(&mut self, now: Nanos, plan: Plan) {
        let queued: Vec<(usize, Pending)> = self
            .backends
            .iter_mut()
            .flat_map(|b| {
                b.sessions.iter_mut().flat_map(|s| s.queue.drain_all().map(|p| (s.session, p)).collect::<Vec<_>>())
            })
            .collect();
        self.install(plan);
        for (session, p) in queued {
            self.enqueue(session, p);
        }
        for b in 0..self.backends.len() {
            self.release(now, b);
            self.run_backend(now, b);
        }
    }

    /// Switches backend b's GPU to its planned partitions if it waits for
    /// that and both its backends are idle (or dead), then runs them.
    fn release(&mut self, now: Nanos, b: usize) {
        let Some(p) = self.partitions.as_mut() else { return };
        if !p.held(b) {
            return;
        }
        let sibling = p.sibling[b];
        let idle = |x: usize| self.dead[x] || !self.backends[x].busy;
        if !idle(b) || !sibling.is_none_or(idle) {
            return;
        }
        for x in std::iter::once(b).chain(sibling) {
            p.now[x] = p.planned[x];
        }
        self.out.push_back(Output::Layout(p.now.clone()));
        for x in std::iter::once(b).chain(sibling) {
            self.run_backend(now, x);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn with_plan(
        spec: &ClusterSpec,
        sessions: Sessions,
        plan: Plan,
        frontends: usize,
        drop_policy: DropPolicy,
        epoch: Option<Nanos>,
        seed: u64,
        partitions: Option<Partitions>,
    ) -> Self {
        let n = sessions.specs.len();
        let backends = partitions.as_ref().map_or(spec.backends as usize, |p| p.planned.len());
        let mut nexus = Self {
            sessions,
            plan: Plan::default(),
            backends: Vec::new(),
            routes: Vec::new(),
            frontends,
            drop_policy,
            capacity: spec.queue_capacity,
            cluster_backends: spec.backends,
            dead: vec![false; backends],
            gpu_memory_mb: spec.gpu_memory_mb,
            epochs: epoch.map(|e| EpochCounter::new(n, e)),
            first_scale: plan.rate_scale,
            rng: Rng::stream(seed, 0x4E58),
            out: VecDeque::new(),
            partitions,
        };
        nexus.install(plan);
        nexus
    }

    /// Makes `plan` the running one: backend i runs the plan's backend i
    /// (whatever it is running now finishes first); every frontend gets the
    /// new routing table, starting its round-robin at a random phase.
    fn install(&mut self, plan: Plan) {
        let mut routes: Vec<Route> = self
            .sessions
            .specs
            .iter()
            .map(|_| Route { targets: vec![], weights: vec![], per_frontend: vec![] })
            .collect();
        let busy: Vec<bool> = self.backends.iter().map(|b| b.busy).collect();
        self.backends = plan
            .backends
            .iter()
            .enumerate()
            .map(|(b, bp)| Backend {
                sessions: bp
                    .sessions
                    .iter()
                    .enumerate()
                    .map(|(si, s)| {
                        if !self.dead[b] {
                            let r = &mut routes[s.model.index()];
                            r.targets.push((b, si));
                            r.weights.push(s.rate_rps.max(1e-9));
                        }
                        let profile = self.partitions.as_ref().map(|p| p.profiles[b][si].clone());
                        let slo = self.sessions.specs[s.model.index()].slo;
                        let cap = match &profile {
                            Some(p) if bp.sessions.len() == 1 => {
                                p.max_batch_within(slo / 2, 0, p.max_batch()).max(s.batch)
                            }
                            _ => s.batch,
                        };
                        Session {
                            session: s.model.index(),
                            batch: s.batch,
                            cap,
                            rate: s.rate_rps.max(1e-9),
                            queue: BatchQueue::new(self.capacity),
                            profile,
                        }
                    })
                    .collect(),
                next: 0,
                busy: busy.get(b).copied().unwrap_or(false),
            })
            .collect();
        // Backends the plan leaves idle keep their state (a batch may be running).
        for &was_busy in busy.iter().skip(self.backends.len()) {
            self.backends.push(Backend { sessions: vec![], next: 0, busy: was_busy });
        }
        for r in &mut routes {
            let total: f64 = r.weights.iter().sum();
            r.per_frontend = (0..self.frontends)
                .map(|_| Wrr { current: r.weights.iter().map(|_| self.rng.unit() * total).collect() })
                .collect();
        }
        self.routes = routes;
        self.plan = plan;
    }

    /// A new epoch, each session's arrivals over the last one at `rates`:
    /// re-plan incrementally for them (scaled as
    /// the running plan is, shrinking the scale until the plan fits; from
    /// scratch when that has clearly more headroom), move
    /// queued requests to their sessions' new backends, and run idle ones.
    fn new_epoch(&mut self, now: Nanos, rates: &[f64]) {
        let measured: Vec<f64> = rates.iter().map(|&r| r.max(MIN_PLANNED_RPS)).collect();
        // Start above both the last scale and the first plan's headroom:
        // an incremental re-plan packs less tightly than a fresh one, and a
        // scale that only ever shrank would leave every later plan short.
        let mut scale = (self.plan.rate_scale / SCALE_STEP).max(self.first_scale).max(1e-9);
        let mut plan = Plan::default();
        for _ in 0..FIT_ATTEMPTS {
            let target: Vec<f64> = measured.iter().map(|r| r * scale).collect();
            plan = replan(&self.sessions.specs, &self.plan, &target, self.gpu_memory_mb);
            if plan.backends.len() <= self.cluster_backends as usize {
                break;
            }
            scale *= SCALE_STEP;
        }
        plan.backends.truncate(self.cluster_backends as usize);
        plan.rate_scale = scale;
        // Keeping sessions where they were fragments them as the mix moves
        // (a model spread over many backends at batch 1); when a plan from
        // scratch has clearly more headroom, take it despite the moves.
        let fresh = plan_for_cluster(&self.sessions.specs, &measured, self.cluster_backends, self.gpu_memory_mb);
        if fresh.rate_scale > scale / SCALE_STEP {
            plan = fresh;
        }
        self.switch_to(now, plan);
    }

    /// Routes a request of `session` and queues it; false if it was dropped.
    fn enqueue(&mut self, session: usize, p: Pending) -> Option<usize> {
        let Some((b, si)) = self.route(session) else {
            self.out.push_back(Output::Dropped { request: p.id, reason: DropReason::NoBackend });
            return None;
        };
        if self.backends[b].sessions[si].queue.push(p).is_err() {
            self.out.push_back(Output::Dropped { request: p.id, reason: DropReason::QueueFull });
            return None;
        }
        Some(b)
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Whether any request waits in a queue.
    pub fn queued(&self) -> bool {
        self.backends.iter().any(|b| b.sessions.iter().any(|s| !s.queue.is_empty()))
    }

    fn route(&mut self, session: usize) -> Option<(usize, usize)> {
        let f = self.rng.below(self.frontends as u64) as usize;
        let r = &mut self.routes[session];
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
        if self.partitions.as_ref().is_some_and(|p| p.held(b)) {
            return;
        }
        let be = &mut self.backends[b];
        if be.busy {
            return;
        }
        let n = be.sessions.len();
        for k in 0..n {
            let si = (be.next + k) % n;
            let s = &mut be.sessions[si];
            let profile = s.profile.as_ref().unwrap_or(&self.sessions.specs[s.session].profile);
            let out = &mut self.out;
            let at = Start { now, not_before: now, profile, delay: &no_delay };
            s.queue.drop_unreachable(&at, |id| {
                out.push_back(Output::Dropped { request: id, reason: DropReason::DeadlineUnreachable })
            });
            if self.drop_policy == DropPolicy::Early {
                let skip = s.queue.early_drop_count(&at, s.batch);
                s.queue.drop_front(skip, |id| out.push_back(Output::Dropped { request: id, reason: DropReason::Shed }));
            }
            let bs = s.queue.feasible_batch(&at, s.cap);
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
        let session = self.sessions.of_model[req.model.index()];
        if let Some(epochs) = &mut self.epochs {
            epochs.count(now, session);
        }
        if let Some(b) = self.enqueue(session, Pending { id: req.id, deadline: req.deadline }) {
            self.run_backend(now, b);
        }
    }

    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        let backend = done.backend;
        let be = &mut self.backends[backend.index()];
        assert!(be.busy, "batch done on an idle backend");
        be.busy = false;
        self.release(now, backend.index());
        self.run_backend(now, backend.index());
    }

    /// A failed backend's queued requests are lost, and frontends stop
    /// routing to it (its share goes to the model's other backends until
    /// the next plan).
    fn on_backend_failed(&mut self, now: Nanos, backend: BackendId) {
        let b = backend.index();
        self.dead[b] = true;
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
        // A GPU waiting to be re-partitioned no longer waits for it.
        self.release(now, b);
    }

    /// Back: idle, and frontends route to its sessions of the running plan
    /// again, with the plan's weights.
    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId) {
        let b = backend.index();
        if !std::mem::replace(&mut self.dead[b], false) {
            return;
        }
        let Some(be) = self.backends.get_mut(b) else { return };
        be.busy = false;
        for (si, s) in be.sessions.iter().enumerate() {
            let r = &mut self.routes[s.session];
            r.targets.push((b, si));
            r.weights.push(s.rate);
            for f in &mut r.per_frontend {
                f.current.push(0.0);
            }
        }
        self.run_backend(now, b);
    }

    /// Nexus's only timer is the epoch: re-plan from what arrived in it.
    fn on_timeout(&mut self, now: Nanos) {
        let Some(rates) = self.epochs.as_mut().and_then(|e| e.close(now)) else { return };
        self.new_epoch(now, &rates);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        // Epochs run while requests arrive or wait; a quiet cluster sleeps.
        self.epochs.as_ref()?.deadline(self.queued())
    }

    fn poll_output(&mut self) -> Option<Output> {
        crate::fifo::pop_front(&mut self.out)
    }

    fn partitions(&self) -> Option<Vec<Partition>> {
        self.partitions.as_ref().map(|p| p.now.clone())
    }
}
