//! Orloj: scheduling models whose execution time depends on the input
//! (`../shared/design/orloj.md`; seeds/001). Per model:
//!
//! - solo-time histograms per app (`histogram.rs`), started from offline
//!   profiling samples and replaced window by window from completions;
//! - per batch size class b (`CLASS_SIZES`), the batch time distribution
//!   T_b (`batch_time.rs`) and a priority queue of the requests feasible at
//!   b: a request is in class 1 while it can still finish at all
//!   (`s > min T_1`) and in class b >= 2 while `quantile_0.9(T_b) <= s`;
//! - each request's score in each class is a line in `E(t) = e^{mu (t - t0)}`
//!   (`score.rs`) kept in a kinetic hull (`hull.rs`); at a milestone (a bin
//!   edge or the feasibility quantile crossed by the slack) its lines are
//!   recomputed; a request in no class is dropped;
//! - `mu(t - t0)` is kept below `REBASE_AT` by moving `t0` to now and
//!   recomputing every line, so `E` never overflows.
//!
//! Batches are timed by Symphony's rule (`symphony/candidate.rs`): while a
//! proposed batch of b holds fewer than beta*lambda requests (beta = the
//! mean fixed cost `E[T_1](1 - kappa)`, lambda the measured arrival rate)
//! and could still grow into the next class, it waits until its frontrun
//! time — the earliest member deadline minus the 0.9 quantile of the next
//! class's batch time — unless it can no longer grow. This is Baton's
//! synthesis: Orloj's queue and batch choice on Symphony's spine; without
//! it a work-conserving Orloj runs small batches and loses half its
//! goodput on static models.
//!
//! When a backend is idle, each class holding at least b requests proposes
//! its b highest-scoring requests; a batch's priority is the sum of its
//! members' scores — expected in-SLO completions per unit of worker time,
//! since each score is already divided by E[T_b] — and the highest wins,
//! ties to the larger b. (Choosing the class with the earliest deadline, as
//! the paper's text reads, always picks b = 1 under load: the oldest
//! requests have left the larger classes. Throughput then collapses far
//! below capacity; the batch priority avoids it.) Orloj is work-conserving and learns
//! when backends free from completions, since batch times are random.

mod batch_time;
mod histogram;
mod score;

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

use batch_time::BatchTime;
use histogram::{AppHistogram, Grid, BINS};

use crate::backends::{no_backend, Backends};
use crate::hull::{KineticHull, Slot};
use crate::rate::RateEstimator;
use crate::rng::Rng;
use crate::symphony::CandidateRule;
use crate::time::{Nanos, NANOS_PER_MS};
use crate::types::{
    BackendId, BatchDone, BatchPlan, ClusterSpec, DispatchDelay, DropReason, DynamicExec, ModelId, Output, Request,
    RequestId, Scheduler,
};

/// Batch size classes, about x1.4 apart; a model uses those up to its
/// maximum batch. A class of b serves batches larger than the class below.
const CLASS_SIZES: [u32; 12] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64];
const MAX_CLASSES: usize = CLASS_SIZES.len();
/// A request belongs to class b >= 2 while this quantile of T_b fits its slack.
const FEASIBLE_QUANTILE: f64 = 0.9;
/// Rebase once `mu (t - t0)` exceeds this, keeping `E <= e^30`.
const REBASE_AT: f64 = 30.0;
/// Offline profiling samples per app.
const PROFILE_SAMPLES: usize = 2_000;
/// Window of the arrival-rate estimate behind beta*lambda.
const RATE_WINDOW: Nanos = 50 * NANOS_PER_MS;

#[derive(Debug)]
struct Class {
    b: u32,
    /// Per app of the member: the batch time distribution...
    bt: Vec<BatchTime>,
    /// ...and the slack below which the member leaves the class.
    leave_below: Vec<f64>,
    hull: KineticHull,
    /// Hull slot -> request slot.
    owner: Vec<u32>,
    /// Members by (deadline, request slot): the earliest deadline is first.
    members: BTreeSet<(Nanos, u32)>,
}

impl Class {
    fn insert(&mut self, slot: u32, deadline: Nanos, a: f64, b: f64) -> Slot {
        let h = self.hull.insert(a, b);
        if self.owner.len() <= h.0 as usize {
            self.owner.resize(h.0 as usize + 1, u32::MAX);
        }
        self.owner[h.0 as usize] = slot;
        self.members.insert((deadline, slot));
        h
    }

    fn remove(&mut self, h: Slot, slot: u32, deadline: Nanos) {
        self.hull.remove(h);
        self.owner[h.0 as usize] = u32::MAX;
        self.members.remove(&(deadline, slot));
    }
}

#[derive(Debug)]
struct Pending {
    id: RequestId,
    app: u32,
    deadline: Nanos,
    slots: [Option<Slot>; MAX_CLASSES],
}

#[derive(Debug)]
struct ModelState {
    exec: DynamicExec,
    grid: Grid,
    hists: Vec<AppHistogram>,
    arrivals_by_app: Vec<u64>,
    classes: Vec<Class>,
    pending: Vec<Option<Pending>>,
    /// Per request slot, bumped at every placement and kept across reuse:
    /// milestones carry it, and stale ones are skipped.
    generation: Vec<u32>,
    free: Vec<u32>,
    /// Rate of the anticipated extra wait, per nanosecond.
    mu: f64,
    t0: Nanos,
    rate: RateEstimator,
    /// beta of beta*lambda: the mean fixed cost of a batch, ns.
    beta: f64,
    rebases: u64,
}

/// A model's proposed batch: its `batch` highest-scoring requests of size
/// class `class`, worth `priority` (the sum of their scores).
#[derive(Clone, Copy, Debug)]
struct Pick {
    priority: f64,
    batch: u32,
    model: usize,
    class: usize,
}

#[derive(Debug)]
pub struct Orloj {
    spec: ClusterSpec,
    models: Vec<ModelState>,
    backends: Backends,
    /// Milestones: (time, model, request slot, generation); stale ones skipped.
    milestones: BinaryHeap<Reverse<(Nanos, u32, u32, u32)>>,
    /// When a held batch reaches its frontrun time (at most one pending).
    wake: Option<Nanos>,
    out: VecDeque<Output>,
}

impl ModelState {
    fn new(spec: &crate::types::ModelSpec, delay: &DispatchDelay, rng: &mut Rng) -> Self {
        let exec = spec.as_dynamic();
        let samples: Vec<Vec<Nanos>> =
            exec.apps.iter().map(|a| (0..PROFILE_SAMPLES).map(|_| a.exec.sample(rng)).collect()).collect();
        let top = samples.iter().flatten().copied().max().expect("profiled") as f64 * 1.25;
        let grid = Grid { top };
        let hists = samples.iter().map(|s| AppHistogram::from_profile(&grid, s)).collect();
        let max_b = spec.profile.max_batch();
        let mut st = ModelState {
            arrivals_by_app: exec.apps.iter().map(|a| (a.weight * 1000.0).round() as u64 + 1).collect(),
            exec,
            grid,
            hists,
            classes: Vec::new(),
            pending: Vec::new(),
            generation: Vec::new(),
            free: Vec::new(),
            mu: 0.0,
            t0: 0,
            rate: RateEstimator::new(RATE_WINDOW),
            beta: 0.0,
            rebases: 0,
        };
        let sizes: Vec<u32> = CLASS_SIZES.iter().copied().take_while(|&b| b <= max_b).collect();
        st.classes = sizes
            .into_iter()
            .map(|b| Class {
                b,
                bt: Vec::new(),
                leave_below: Vec::new(),
                hull: KineticHull::default(),
                owner: Vec::new(),
                members: BTreeSet::new(),
            })
            .collect();
        st.refresh_distributions(delay);
        // Scores in units of the mean solo time: mu*T ~ 1 keeps every
        // exponent small.
        st.mu = 1.0 / st.mean_solo();
        st
    }

    /// Recomputes every class's T_b from the histograms and the app mix;
    /// a class's exit slack adds the dispatch delay of its batch size.
    fn refresh_distributions(&mut self, delay: &DispatchDelay) {
        let total: f64 = self.arrivals_by_app.iter().sum::<u64>() as f64;
        let mut mix = [0.0; BINS];
        for (h, &n) in self.hists.iter().zip(&self.arrivals_by_app) {
            for (m, &p) in mix.iter_mut().zip(h.masses()) {
                *m += p * n as f64 / total;
            }
        }
        for c in &mut self.classes {
            c.bt =
                self.hists.iter().map(|h| BatchTime::new(&self.grid, h.masses(), &mix, c.b, self.exec.kappa)).collect();
            c.leave_below =
                c.bt.iter()
                    .map(|bt| if c.b == 1 { bt.min() } else { bt.quantile(FEASIBLE_QUANTILE) } + delay.of(c.b) as f64)
                    .collect();
        }
        self.beta = self.mean_solo() * (1.0 - self.exec.kappa);
    }

    /// The mean solo time over the app mix, from the histograms.
    fn mean_solo(&self) -> f64 {
        let total: f64 = self.arrivals_by_app.iter().sum::<u64>() as f64;
        self.hists
            .iter()
            .zip(&self.arrivals_by_app)
            .map(|(h, &n)| {
                let mean: f64 =
                    h.masses().iter().enumerate().map(|(k, p)| p * (self.grid.edge(k) + 0.5 * self.grid.width())).sum();
                mean * n as f64 / total
            })
            .sum()
    }

    /// This model's best batch at `now`: a class of size b offers its top
    /// k = min(b, members) once that is more than the class below; the
    /// highest priority wins, ties to the larger batch. Also brings the
    /// score origin and the rate estimate up to `now`.
    fn best_batch(&mut self, now: Nanos, model: usize, top: &mut Vec<(Slot, f64)>) -> Option<Pick> {
        self.rebase_if_needed(now);
        let e = self.e_at(now);
        self.rate.advance(now);
        let mut best: Option<Pick> = None;
        for (class, c) in self.classes.iter_mut().enumerate() {
            let k = (c.b as usize).min(c.hull.len());
            let below = if class == 0 { 0 } else { CLASS_SIZES[class - 1] as usize };
            if k <= below {
                continue;
            }
            c.hull.advance(e.max(c.hull.e()));
            top.clear();
            c.hull.top(k, top);
            let priority: f64 = top.iter().map(|&(_, v)| v).sum();
            let batch = k as u32;
            if best.is_none_or(|b| (priority, batch) > (b.priority, b.batch)) {
                best = Some(Pick { priority, batch, model, class });
            }
        }
        best
    }

    /// When `pick` stops being able to grow — one ns before its earliest
    /// member would leave the class it could grow into — or None if it
    /// cannot grow (a full class with no larger class its members fit).
    fn frontrun_at(&self, pick: &Pick, slo: Nanos, top: &mut Vec<(Slot, f64)>) -> Option<Nanos> {
        let c = &self.classes[pick.class];
        let grow_into = if pick.batch == c.b { pick.class + 1 } else { pick.class };
        let next = self.classes.get(grow_into).filter(|n| n.leave_below.iter().any(|&l| l < slo as f64))?;
        top.clear();
        c.hull.top(pick.batch as usize, top);
        let earliest = top
            .iter()
            .map(|&(h, _)| self.pending[c.owner[h.0 as usize] as usize].as_ref().expect("pending"))
            .min_by_key(|p| p.deadline)
            .expect("a batch has a member");
        // Negative times saturate to 0: the batch cannot wait at all.
        Some((earliest.deadline as f64 - next.leave_below[earliest.app as usize] - 1.0).ceil() as Nanos)
    }

    fn e_at(&self, now: Nanos) -> f64 {
        (self.mu * now.saturating_sub(self.t0) as f64).exp()
    }

    /// Puts request `slot` in the classes it is feasible for, with its lines
    /// at `now`; returns its next milestone, or None if it fits no class.
    fn place(&mut self, now: Nanos, slot: u32) -> Option<Nanos> {
        self.generation[slot as usize] = self.generation[slot as usize].wrapping_add(1);
        let p = self.pending[slot as usize].as_mut().expect("placing a pending request");
        let s = p.deadline as f64 - now as f64;
        let d_rel = p.deadline as f64 - self.t0 as f64;
        let app = p.app as usize;
        let mut next: Option<f64> = None;
        let mut any = false;
        for (ci, c) in self.classes.iter_mut().enumerate() {
            let leave_below = c.leave_below[app];
            let inside = s > leave_below;
            match (inside, p.slots[ci]) {
                (true, at) => {
                    any = true;
                    let bt = &c.bt[app];
                    let (a, b) = score::line(bt, self.mu, d_rel, s);
                    let edge = score::next_edge_below(bt, s).into_iter().chain([leave_below]).filter(|&e| e < s);
                    for e in edge {
                        next = Some(next.map_or(e, |n: f64| n.max(e)));
                    }
                    match at {
                        Some(h) => c.hull.set(h, a, b),
                        None => p.slots[ci] = Some(c.insert(slot, p.deadline, a, b)),
                    }
                }
                (false, Some(h)) => {
                    c.remove(h, slot, p.deadline);
                    p.slots[ci] = None;
                }
                (false, None) => {}
            }
        }
        if !any {
            return None;
        }
        // The slack falls to `next` at deadline - next; at least one ns on.
        let at = next.map_or(p.deadline, |e| (p.deadline as f64 - e).ceil() as Nanos);
        Some(at.max(now + 1))
    }

    /// Takes request `slot` out of every class and the slab.
    fn take(&mut self, slot: u32) -> Pending {
        let p = self.pending[slot as usize].take().expect("taking a pending request");
        for (ci, c) in self.classes.iter_mut().enumerate() {
            if let Some(h) = p.slots[ci] {
                c.remove(h, slot, p.deadline);
            }
        }
        self.free.push(slot);
        p
    }

    /// Moves `t0` to `now` if E is about to leave its range, recomputing
    /// every line (scores are unchanged; only their representation moves).
    fn rebase_if_needed(&mut self, now: Nanos) {
        if self.mu * now.saturating_sub(self.t0) as f64 <= REBASE_AT {
            return;
        }
        self.t0 = now;
        self.rebases += 1;
        self.relines(now);
    }

    /// Recomputes every pending request's lines against the current t0 and
    /// distributions, without changing class membership.
    fn relines(&mut self, now: Nanos) {
        let e = self.e_at(now);
        let (mu, t0) = (self.mu, self.t0);
        let pending = &self.pending;
        for c in self.classes.iter_mut() {
            let (bts, owner) = (&c.bt, &c.owner);
            c.hull.reset_with(e, |h| {
                let p = pending[owner[h.0 as usize] as usize].as_ref().expect("hull members are pending");
                score::line(&bts[p.app as usize], mu, p.deadline as f64 - t0 as f64, p.deadline as f64 - now as f64)
            });
        }
    }
}

impl Orloj {
    /// `seed` drives the offline profiling draws.
    pub fn new(spec: &ClusterSpec, seed: u64) -> Self {
        let mut rng = Rng::stream(seed, 0x7101);
        Self {
            models: spec.models.iter().map(|m| ModelState::new(m, &spec.delay, &mut rng)).collect(),
            backends: Backends::new(spec.backends),
            milestones: BinaryHeap::new(),
            wake: None,
            out: VecDeque::new(),
            spec: spec.clone(),
        }
    }

    /// How many times the score origin t0 moved, over all models.
    pub fn rebases(&self) -> u64 {
        self.models.iter().map(|m| m.rebases).sum()
    }

    fn schedule_milestone(&mut self, m: usize, slot: u32, at: Nanos) {
        let g = self.models[m].generation[slot as usize];
        self.milestones.push(Reverse((at, m as u32, slot, g)));
    }

    fn replace(&mut self, now: Nanos, m: usize, slot: u32) {
        match self.models[m].place(now, slot) {
            Some(at) => self.schedule_milestone(m, slot, at),
            None => {
                let p = self.models[m].take(slot);
                self.out.push_back(Output::Dropped { request: p.id, reason: DropReason::DeadlineUnreachable });
            }
        }
    }

    /// Runs batches on idle backends while some class is ready and not held.
    fn dispatch(&mut self, now: Nanos) {
        let mut top = Vec::new();
        while self.backends.next_idle().is_some() {
            let mut best: Option<Pick> = None;
            let mut wake: Option<Nanos> = None;
            for m in 0..self.models.len() {
                let Some(pick) = self.models[m].best_batch(now, m, &mut top) else { continue };
                // Symphony's rule: below beta*lambda, wait while the batch can
                // still grow (within its class, or into the next one).
                let slo = self.spec.models[m].slo;
                let st = &self.models[m];
                let beta_lambda = st.beta * st.rate.rate_rps() / 1e9;
                let rule = CandidateRule::NonWorkConserving;
                let frontrun_at = rule.waits(pick.batch, beta_lambda).then(|| st.frontrun_at(&pick, slo, &mut top));
                let exec_at = rule.exec_at(pick.batch, now, frontrun_at.flatten(), beta_lambda);
                if exec_at > now {
                    wake = Some(wake.map_or(exec_at, |w| w.min(exec_at)));
                } else if best.is_none_or(|b| (pick.priority, pick.batch) > (b.priority, b.batch)) {
                    best = Some(pick);
                }
            }
            let Some(Pick { batch: b, model: m, class: ci, .. }) = best else {
                if let Some(w) = wake {
                    if self.wake.is_none_or(|x| w < x || x <= now) {
                        self.wake = Some(w);
                    }
                }
                return;
            };
            let backend = self.backends.take().expect("checked");
            let st = &mut self.models[m];
            top.clear();
            st.classes[ci].hull.top(b as usize, &mut top);
            assert_eq!(top.len(), b as usize);
            let slots: Vec<u32> = top.iter().map(|&(h, _)| st.classes[ci].owner[h.0 as usize]).collect();
            let requests = slots.into_iter().map(|slot| st.take(slot).id).collect();
            let exec_at = now + self.spec.delay.of(b);
            self.out.push_back(Output::Dispatch(BatchPlan {
                model: ModelId(m as u32),
                backend,
                exec_at,
                requests,
                prefix: None,
                subnet: None,
            }));
        }
    }
}

impl Scheduler for Orloj {
    fn on_request(&mut self, now: Nanos, req: Request) {
        let m = req.model.index();
        if self.backends.refuse(req.id, &mut self.out) {
            return;
        }
        let st = &mut self.models[m];
        let app = req.app.0 as usize;
        assert!(app < st.hists.len(), "request of unknown app {app}");
        st.arrivals_by_app[app] += 1;
        st.rate.observe(now);
        let live = st.pending.len() - st.free.len();
        if live >= self.spec.queue_capacity {
            self.out.push_back(Output::Dropped { request: req.id, reason: DropReason::QueueFull });
            return;
        }
        let slot = match st.free.pop() {
            Some(s) => s,
            None => {
                st.pending.push(None);
                st.generation.push(0);
                (st.pending.len() - 1) as u32
            }
        };
        st.pending[slot as usize] =
            Some(Pending { id: req.id, app: req.app.0, deadline: req.deadline, slots: [None; MAX_CLASSES] });
        st.rebase_if_needed(now);
        self.replace(now, m, slot);
        self.dispatch(now);
    }

    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        self.backends.release(done.backend);
        let m = done.model.index();
        let st = &mut self.models[m];
        let mut changed = false;
        for c in done.members {
            let grid = st.grid;
            changed |= st.hists[c.app.0 as usize].observe(&grid, now, c.solo);
        }
        if changed {
            st.refresh_distributions(&self.spec.delay);
            st.rebase_if_needed(now);
            let slots: Vec<u32> = (0..st.pending.len() as u32).filter(|&s| st.pending[s as usize].is_some()).collect();
            for slot in slots {
                self.replace(now, m, slot);
            }
        }
        self.dispatch(now);
    }

    fn on_backend_failed(&mut self, _now: Nanos, backend: BackendId) {
        if !self.backends.fail(backend) {
            return;
        }
        for st in &mut self.models {
            for slot in 0..st.pending.len() as u32 {
                if st.pending[slot as usize].is_some() {
                    self.out.push_back(no_backend(st.take(slot).id));
                }
            }
        }
    }

    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId) {
        self.backends.join(backend);
        self.dispatch(now);
    }

    fn on_timeout(&mut self, now: Nanos) {
        if self.wake.is_some_and(|w| w <= now) {
            self.wake = None;
        }
        while let Some(&Reverse((at, m, slot, g))) = self.milestones.peek() {
            if at > now {
                break;
            }
            self.milestones.pop();
            let st = &mut self.models[m as usize];
            let live = st.pending[slot as usize].is_some() && st.generation[slot as usize] == g;
            if live {
                st.rebase_if_needed(now);
                self.replace(now, m as usize, slot);
            }
        }
        self.dispatch(now);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        let milestone = self.milestones.peek().map(|Reverse((at, ..))| *at);
        match (milestone, self.wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn poll_output(&mut self) -> Option<Output> {
        crate::fifo::pop_front(&mut self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;
    use crate::sim::run_with;

    /// Ten simulated minutes: the score origin moves hundreds of times and no
    /// line ever leaves the finite range (the hull asserts it on every update).
    #[test]
    fn long_runs_rebase_and_never_overflow() {
        let s = Scenario::parse(
            "name = \"long\"\nseed = 3\nduration_s = 600\nwarmup_s = 1\n[cluster]\ngpus = 2\n\
             [[models]]\nname = \"m\"\nslo_p99_multiple = 2.0\nkappa = 0.1\nmax_batch = 8\n\
             [[models.apps]]\nname = \"a\"\nexec_ms = \"bimodal:5,1,20,2,0.5\"\n",
        )
        .expect("valid");
        let mut orloj = Orloj::new(&s.cluster, s.seed);
        let r = run_with(&s, "orloj", &mut orloj, 60.0);
        assert!(orloj.rebases() > 100, "only {} rebases", orloj.rebases());
        assert_eq!(r.checks.unanswered, 0);
        assert!(r.bad_rate < 0.01, "bad rate {}", r.bad_rate);
    }
}
