//! The backend role: one per GPU (or GPU partition). It receives batch
//! plans in the order the scheduler sent them, fetches each plan's inputs
//! from the frontends holding them, starts the batch at
//! `max(exec_at, previous batch's end)` — the rule the simulator's
//! emulated backends follow — and when its executor is done sends each
//! frontend its results and the scheduler a `BatchDone`. A batch runs the
//! subnet its plan names (SuperServe). For a model whose time depends on
//! its input (Orloj), it reports each member's solo time — what its input
//! takes alone, by the executor's measure of its work — to the frontends
//! (the answers carry it) and to the scheduler (the policy learns from it).
//!
//! Executors that return the device time instead of spending it (the
//! emulated one with deferred pacing) are waited out on the role's clock;
//! a batch an executor leaves in flight (the CUDA executor's asynchronous
//! launch) is polled every `POLL_NS` until the device is done — or, for an
//! executor that wakes its owner when a batch is done (`set_waker`: CPU
//! compute on a thread of its own), when it says so, with a poll every
//! `WOKEN_POLL_NS` only as a backstop. Either way
//! `next_wake` says when to call `poll`. An executor with a device queue
//! (`pipeline_depth` > 1) gets the next batch as soon as its inputs are in
//! and its time has come, while the previous one still runs: the device
//! runs them in order, and the host's copying and launching overlaps the
//! device's work instead of idling it. Results come back in launch order.
//!
//! A batch the executor does not run is dropped with its cause: a failed
//! device is `BackendFailed`, a plan the executor cannot run as given
//! (the device is fine) is `BadPlan`; either way the executor's error goes
//! to the client as the answer's message, and the scheduler gets its
//! backend back (`BatchDone.failed`).
//!
//! Inputs come by one-sided RDMA READs from the frontends' registered
//! memory where a reader is given (`with_reader`), over TCP otherwise or
//! where a READ cannot be done (`fetch.rs`).
//!
//! A backend never waits forever for inputs, nor queues without bound. A
//! batch whose inputs have not all come `FETCH_PATIENCE` after it could
//! have started (lost between roles, or their frontend gone:
//! `frontend_lost`) runs with those that came; the requests it had to leave
//! out are answered `Lost` to their frontends. A plan beyond `max_jobs`
//! queued is refused: its requests answered `QueueFull`, and the scheduler
//! gets its backend back (`BatchDone.failed`). A plan delivered twice is
//! run once.
//!
//! A backend may fail for good at a set time (a scenario's `[[faults]]`,
//! as the simulator fails its backends): it forgets what it held and tells
//! the scheduler (`BackendStatus`, unhealthy), which drops the requests of
//! every batch it had sent there. A plan reaching it afterwards is lost as
//! the simulator loses it: its requests are answered `BackendFailed`, and
//! no `BatchDone` comes back, so a policy that ignores failures stops
//! granting the backend after that batch. (Over TCP a plan already on the
//! wire when the backend fails is dropped by both; the frontend answers
//! once and counts the second drop as a duplicate it refused.)
//!
//! A backend leaves without losing a request (`leave`, scaling in): it
//! says so (`BackendStatus { leaving }`), the scheduler stops planning on
//! it and says so back after every plan it sent there, and the backend
//! is `gone` once it has run them all.

use std::collections::VecDeque;

use baton_gpu::{Batch, ExecError, Executor, Launched, Waker};
use baton_sched::time::Nanos;
use baton_wire::{fb, Message};

use super::fetch::{FetchStats, Fetcher, Read};
use super::frontend::{as_le_floats, le_floats};
use super::{frontend_of, Addr, Envelope};
use crate::pool;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    pub batches: u64,
    pub requests: u64,
    /// Batches lost to a failed device (or to the backend failing).
    pub failed_batches: u64,
    /// Batches the executor refused as planned (`DropReason::BadPlan`).
    pub refused_batches: u64,
    /// How late batches started after their `exec_at`: sum and maximum.
    pub start_lag_ns: u64,
    pub max_start_lag_ns: u64,
    /// Messages that are not for this backend or name no batch it holds.
    pub rejected: u64,
    /// Time the device ran batches (each batch's start to its end).
    pub busy_ns: u64,
    /// Batches by size: at most `BATCH_BOUNDS[i]` requests in `i`, more
    /// than the last bound in the last.
    pub sizes: [u64; BATCH_BOUNDS.len() + 1],
    /// Inputs read by RDMA, and what fell back to TCP fetch.
    pub fetch: FetchStats,
}

/// The batch-size buckets' upper bounds.
pub const BATCH_BOUNDS: [u32; 12] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048];

struct Job {
    plan: fb::BatchPlan,
    /// Inputs received so far, by request id.
    inputs: Vec<(u64, Vec<u8>)>,
    /// Frontends yet to send their part of the inputs (one entry per
    /// `FetchInputs` sent).
    awaiting: Vec<u32>,
    /// Requests whose inputs are being read by RDMA.
    reading: Vec<u64>,
    /// When to stop waiting for them.
    fetch_by: Nanos,
}

/// How long a batch waits for inputs past the later of its `exec_at` and
/// its plan's arrival, unless set (`with_limits`).
pub const FETCH_PATIENCE: Nanos = 100_000_000;
/// How many plans a backend queues, unless set (`with_limits`).
pub const MAX_JOBS: usize = 4_096;

/// How often, at most, a batch in flight on a device is polled (the shard
/// owning the device polls every round while one is in flight).
const POLL_NS: Nanos = 5_000;
/// How often a batch in flight on an executor that wakes its owner is
/// polled anyway.
const WOKEN_POLL_NS: Nanos = 1_000_000;

struct Running {
    plan: fb::BatchPlan,
    start: Nanos,
    /// When the batch is done; while `in_flight`, when to poll it next.
    finish: Nanos,
    in_flight: bool,
    requests: Vec<u64>,
    /// When the scheduler saw each of `requests` (0 where the plan did not say).
    seen: Vec<Nanos>,
    /// Each of `requests`' solo time, for a dynamic model (else empty).
    solo: Vec<Nanos>,
    outputs: Vec<Vec<f32>>,
    /// Why the executor did not run it, if it did not.
    error: Option<ExecError>,
}

/// How a batch the executor did not run is dropped: a device that failed
/// is `BackendFailed`; a plan it cannot run as given (the device is fine)
/// is `BadPlan`. Either way the executor's words go with it.
fn drop_of(e: &ExecError) -> (fb::DropReason, String) {
    let reason = match e {
        ExecError::Device(_) | ExecError::NoDevice(_) => fb::DropReason::BackendFailed,
        _ => fb::DropReason::BadPlan,
    };
    (reason, e.to_string())
}

pub struct BackendRole {
    id: u32,
    exec: Box<dyn Executor>,
    jobs: VecDeque<Job>,
    /// Batches started and not finished, oldest first (at most the
    /// executor's pipeline depth).
    running: VecDeque<Running>,
    /// Output buffers of finished batches, for the next ones to start: an
    /// executor that writes into the buffers it is given (the emulated
    /// one) allocates nothing per request once they have grown.
    spare: Vec<Vec<Vec<f32>>>,
    /// A finished batch's results by frontend (kept: its lists are the
    /// results', taken from the pool).
    parts: Vec<FrontendPart>,
    /// Whether the executor calls a waker when a batch is done.
    wakes: bool,
    /// When the backend fails for good, if it does; and whether it has.
    fails_at: Option<Nanos>,
    failed: bool,
    leaving: Leaving,
    patience: Nanos,
    max_jobs: usize,
    fetch: Fetcher,
    /// The scheduler it reports to: its sub-cluster's.
    scheduler: Addr,
    pub stats: BackendStats,
}

/// Where a backend is in leaving the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leaving {
    No,
    /// Said so; plans may still come.
    Asked,
    /// The scheduler answered: no plan comes any more.
    Told,
}

/// A finished batch's requests held by one frontend, with what goes back.
struct FrontendPart {
    fe: u32,
    ids: Vec<u64>,
    seen: Vec<Nanos>,
    solo: Vec<Nanos>,
    outputs: Vec<fb::Tensor>,
}

impl FrontendPart {
    /// A part with room for `n` requests (the rest of its batch: most
    /// batches are one frontend's, and their lists never grow).
    fn with_room(fe: u32, n: usize, solo: bool, outputs: bool) -> Self {
        let room = |on: bool| if on { n } else { 0 };
        Self {
            fe,
            ids: pool::with_room(n),
            seen: pool::with_room(n),
            solo: pool::with_room(room(solo)),
            outputs: pool::with_room(room(outputs)),
        }
    }
}

/// Answers `reason` for `plan`'s requests held by the frontends `pick`
/// keeps, one `Dropped` to each.
pub fn drop_plan(
    plan: &fb::BatchPlan,
    reason: fb::DropReason,
    why: Option<&str>,
    pick: impl Fn(u32) -> bool,
    out: &mut Vec<Envelope>,
) {
    let ids = plan.requests.iter().flatten().copied().filter(|&r| pick(frontend_of(r)));
    drop_requests(ids, reason, why, out);
}

/// Answers `reason` for requests `ids`, one `Dropped` to each of their
/// frontends (in first-seen order).
fn drop_requests(ids: impl Iterator<Item = u64>, reason: fb::DropReason, why: Option<&str>, out: &mut Vec<Envelope>) {
    let mut by_fe: Vec<(u32, Vec<u64>)> = Vec::new();
    for r in ids {
        match by_fe.iter_mut().find(|(fe, _)| *fe == frontend_of(r)) {
            Some((_, ids)) => ids.push(r),
            None => by_fe.push((frontend_of(r), vec![r])),
        }
    }
    for (fe, ids) in by_fe {
        let dropped = fb::Dropped { requests: Some(ids), reason, message: why.map(str::to_owned) };
        out.push(Envelope { to: Addr::Frontend(fe), msg: Message::Dropped(dropped) });
    }
}

impl Job {
    /// Whether every input it waits for has come.
    fn fetched(&self) -> bool {
        self.awaiting.is_empty() && self.reading.is_empty()
    }
}

impl BackendRole {
    pub fn new(id: u32, exec: Box<dyn Executor>) -> Self {
        Self {
            id,
            exec,
            jobs: VecDeque::new(),
            running: VecDeque::new(),
            spare: Vec::new(),
            parts: Vec::new(),
            wakes: false,
            fails_at: None,
            failed: false,
            leaving: Leaving::No,
            patience: FETCH_PATIENCE,
            max_jobs: MAX_JOBS,
            fetch: Fetcher::default(),
            scheduler: Addr::Scheduler(0),
            stats: BackendStats::default(),
        }
    }

    /// Reads registered inputs with `reader` (one-sided RDMA READs).
    pub fn with_reader(mut self, reader: Box<dyn baton_net::rdma::InputReader>) -> Self {
        self.fetch = Fetcher::reading(reader);
        self
    }

    /// Reports to the scheduler of sub-cluster `k` (0 unless the cluster
    /// is partitioned).
    pub fn in_subcluster(mut self, k: u32) -> Self {
        self.scheduler = Addr::Scheduler(k);
        self
    }

    /// Waits at most `patience` for a batch's inputs; queues at most
    /// `max_jobs` plans.
    pub fn with_limits(mut self, patience: Nanos, max_jobs: usize) -> Self {
        (self.patience, self.max_jobs) = (patience, max_jobs.max(1));
        self
    }

    /// Plans queued, waiting for inputs or their time.
    pub fn queued(&self) -> usize {
        self.jobs.len()
    }

    /// Frontend `fe` became unreachable: no batch waits for its inputs (its
    /// requests run without them: they are left out).
    pub fn frontend_lost(&mut self, now: Nanos, fe: u32, out: &mut Vec<Envelope>) {
        for j in &mut self.jobs {
            j.awaiting.retain(|&f| f != fe);
            j.reading.retain(|&r| frontend_of(r) != fe);
        }
        self.fetch.lost(fe);
        self.poll(now, out);
    }

    /// Frontend `fe` is reachable (again): it is offered a queue pair for
    /// one-sided fetch, if on.
    pub fn frontend_joined(&mut self, fe: u32, out: &mut Vec<Envelope>) {
        self.fetch.offer(self.id, fe, out);
    }

    /// Starts leaving the cluster: tells the scheduler (once).
    pub fn leave(&mut self, out: &mut Vec<Envelope>) {
        if self.leaving == Leaving::No && !self.failed {
            self.leaving = Leaving::Asked;
            let status = fb::BackendStatus { backend: self.id, healthy: true, leaving: true, ..Default::default() };
            out.push(Envelope { to: self.scheduler, msg: Message::BackendStatus(status) });
        }
    }

    /// The scheduler is unreachable: no plan comes from it any more, so a
    /// backend leaving need not wait for its answer.
    pub fn scheduler_lost(&mut self) {
        if self.leaving == Leaving::Asked {
            self.leaving = Leaving::Told;
        }
    }

    /// Whether it has left: the scheduler sends it nothing more and it has
    /// run everything it was sent (or it has failed).
    pub fn gone(&self) -> bool {
        self.failed || (self.leaving == Leaving::Told && self.jobs.is_empty() && self.running.is_empty())
    }

    /// The backend will fail for good at `at`.
    pub fn fail_at(&mut self, at: Nanos) {
        self.fails_at = Some(at);
    }

    /// Whether the backend has failed by `now` (failing it if its time has
    /// come).
    fn down(&mut self, now: Nanos, out: &mut Vec<Envelope>) -> bool {
        if !self.failed && self.fails_at.is_some_and(|t| t <= now) {
            self.fail(out);
        }
        self.failed
    }

    /// Fails now: what it holds is dropped by the scheduler once told.
    fn fail(&mut self, out: &mut Vec<Envelope>) {
        self.failed = true;
        self.stats.failed_batches += (self.jobs.len() + self.running.len()) as u64;
        self.jobs.clear();
        self.running.clear();
        let status = fb::BackendStatus { backend: self.id, healthy: false, ..Default::default() };
        out.push(Envelope { to: self.scheduler, msg: Message::BackendStatus(status) });
    }

    /// A plan for a failed backend: its requests answered `BackendFailed`.
    fn lose(&mut self, plan: &fb::BatchPlan, out: &mut Vec<Envelope>) {
        self.stats.failed_batches += 1;
        drop_plan(plan, fb::DropReason::BackendFailed, None, |_| true, out);
    }

    /// Whether a plan for batch `id` is queued or running here already.
    fn holds(&self, id: u64) -> bool {
        self.jobs.iter().any(|j| j.plan.batch_id == id) || self.running.iter().any(|r| r.plan.batch_id == id)
    }

    /// Gives the executor `wake` to call when a batch is done; if it takes
    /// it, batches in flight are polled when it calls (`poll_device`), not
    /// every round.
    pub fn set_waker(&mut self, wake: Waker) {
        self.wakes = self.exec.set_waker(wake);
    }

    /// How long until a batch in flight is polled again.
    fn pace(&self) -> Nanos {
        if self.wakes {
            WOKEN_POLL_NS
        } else {
            POLL_NS
        }
    }

    /// The executor said a batch is done: polls the oldest in flight now.
    pub fn poll_device(&mut self, now: Nanos, out: &mut Vec<Envelope>) {
        if let Some(r) = self.running.front_mut().filter(|r| r.in_flight) {
            r.finish = now;
        }
        self.poll(now, out);
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn on_message(&mut self, now: Nanos, msg: Message, out: &mut Vec<Envelope>) {
        match msg {
            Message::BatchPlan(p) if self.down(now, out) && p.backend == self.id => self.lose(&p, out),
            Message::BatchPlan(p) if p.backend == self.id && self.holds(p.batch_id) => self.stats.rejected += 1,
            Message::BatchPlan(p) if p.backend == self.id && self.jobs.len() >= self.max_jobs => {
                self.stats.refused_batches += 1;
                let why = format!("backend {} has {} batches queued, its limit", self.id, self.max_jobs);
                drop_plan(&p, fb::DropReason::QueueFull, Some(&why), |_| true, out);
                let done = fb::BatchDone {
                    batch_id: p.batch_id,
                    backend: self.id,
                    model: p.model,
                    started_ns: now,
                    finished_ns: now,
                    failed: true,
                    ..Default::default()
                };
                out.push(Envelope { to: self.scheduler, msg: Message::BatchDone(done) });
            }
            Message::BatchPlan(p) if p.backend == self.id && !p.requests.as_deref().unwrap_or(&[]).is_empty() => {
                let (awaiting, reading) = self.fetch.start(self.id, &p, out);
                let fetch_by = now.max(p.exec_at_ns).saturating_add(self.patience);
                self.jobs.push_back(Job { plan: p, inputs: pool::take(), awaiting, reading, fetch_by });
            }
            Message::Inputs(i) => {
                let fe = i.frontend;
                match self.jobs.iter_mut().find(|j| j.plan.batch_id == i.batch_id && j.awaiting.contains(&fe)) {
                    Some(job) => {
                        let first = job.awaiting.iter().position(|&f| f == fe).expect("found by it");
                        job.awaiting.swap_remove(first);
                        let (requests, mut tensors) = (i.requests.unwrap_or_default(), i.tensors.unwrap_or_default());
                        let bytes = tensors.drain(..).map(|t| t.data.unwrap_or_default());
                        job.inputs.extend(requests.iter().copied().zip(bytes));
                        pool::give(requests);
                        pool::give(tensors);
                    }
                    None => self.stats.rejected += 1,
                }
            }
            Message::RdmaConnect(c) if c.backend == self.id => self.fetch.on_answer(&c),
            Message::BackendStatus(s) if s.leaving && s.backend == self.id && self.leaving == Leaving::Asked => {
                self.leaving = Leaving::Told;
            }
            _ => self.stats.rejected += 1,
        }
        self.poll(now, out);
    }

    /// Whether a batch is running on a device that must be polled every
    /// round (one whose executor does not wake its owner).
    pub fn needs_polling(&self) -> bool {
        (!self.wakes && self.in_flight()) || self.fetch.in_flight()
    }

    fn in_flight(&self) -> bool {
        self.running.iter().any(|r| r.in_flight)
    }

    fn room(&self) -> bool {
        self.running.len() < self.exec.pipeline_depth().max(1)
    }

    /// When `poll` has something to do next, if anything.
    pub fn next_wake(&self) -> Option<Nanos> {
        if self.failed {
            return None;
        }
        let next_job = self.jobs.front().filter(|_| self.room()).map(|j| match j.fetched() {
            true => j.plan.exec_at_ns,
            false => j.fetch_by,
        });
        // READs in flight: polled at the next round.
        let reads = self.fetch.in_flight().then_some(0);
        self.running.front().map(|r| r.finish).into_iter().chain(next_job).chain(self.fails_at).chain(reads).min()
    }

    /// Finishes the oldest running batch if its time is up (polling the
    /// device for one in flight), and starts the next one if there is room
    /// and its inputs are in and its time has come; until neither happens.
    pub fn poll(&mut self, now: Nanos, out: &mut Vec<Envelope>) {
        if self.down(now, out) {
            return;
        }
        self.reap(out);
        loop {
            let mut progressed = false;
            if self.running.front().is_some_and(|r| r.finish <= now) {
                let mut r = self.running.pop_front().expect("checked");
                let pace = self.pace();
                let done = !r.in_flight
                    || match self.exec.poll(&mut r.outputs) {
                        None => {
                            r.finish = now + pace;
                            false
                        }
                        Some(result) => {
                            (r.in_flight, r.finish, r.error) = (false, now, result.err());
                            true
                        }
                    };
                if done {
                    self.finish(r, out);
                    progressed = true;
                } else {
                    self.running.push_front(r);
                }
            }
            self.give_up_waiting(now, out);
            let ready = matches!(self.jobs.front(), Some(j) if j.fetched() && j.plan.exec_at_ns <= now);
            if ready && self.room() {
                let job = self.jobs.pop_front().expect("checked");
                self.start(now, job);
                progressed = true;
            }
            if !progressed {
                return;
            }
        }
    }

    /// The next batch has waited its patience for inputs: it runs with
    /// those that came, and the frontends that sent none are told their
    /// requests were lost.
    fn give_up_waiting(&mut self, now: Nanos, out: &mut Vec<Envelope>) {
        let Some(job) = self.jobs.front_mut().filter(|j| !j.fetched() && j.fetch_by <= now) else { return };
        let (awaiting, reading) = (std::mem::take(&mut job.awaiting), std::mem::take(&mut job.reading));
        let has = |r: u64| job.inputs.iter().any(|(id, _)| *id == r);
        let missing = job
            .plan
            .requests
            .iter()
            .flatten()
            .copied()
            .filter(|&r| (awaiting.contains(&frontend_of(r)) || reading.contains(&r)) && !has(r));
        let why = format!("its input did not reach backend {} in time", self.id);
        drop_requests(missing, fb::DropReason::Lost, Some(&why), out);
    }

    /// Takes the READs that completed into their batches.
    fn reap(&mut self, out: &mut Vec<Envelope>) {
        for r in self.fetch.reap(self.id, out) {
            let job = self.jobs.iter_mut().find(|j| j.plan.batch_id == r.batch && j.reading.contains(&r.id));
            // A batch that stopped waiting for it has answered it Lost.
            let Some(job) = job else { continue };
            job.reading.retain(|&id| id != r.id);
            match r.read {
                Read::Got(bytes) => job.inputs.push((r.id, bytes)),
                Read::Gone => {}
                Read::Refetched => job.awaiting.push(r.frontend),
            }
        }
        self.stats.fetch = self.fetch.stats;
    }

    fn start(&mut self, now: Nanos, job: Job) {
        let plan = job.plan;
        let lag = now.saturating_sub(plan.exec_at_ns);
        self.stats.start_lag_ns += lag;
        self.stats.max_start_lag_ns = self.stats.max_start_lag_ns.max(lag);
        // Inputs in plan order; a request its frontend no longer held (it
        // has already been answered) is left out of the run.
        let n = job.inputs.len();
        // The run's lists go to its frontends' results (`finish`), which
        // give them back (`pool`).
        let (mut requests, mut seen, mut spans) = (pool::with_room(n), pool::with_room(n), Vec::with_capacity(n));
        // Each input read in place from its bytes where it can be
        // (`as_le_floats`: no copy before the executor's own), else copied
        // into one buffer, a span of it.
        let mut floats: Vec<f32> = pool::with_room(0);
        let mut heads: Vec<u16> = Vec::new();
        let seen_at = |i: usize| plan.seen_ns.as_deref().and_then(|s| s.get(i)).copied().unwrap_or(0);
        // Inputs come in plan order but for a refetch or a READ: look where
        // the last one was found first, and index them by id (once) when
        // they do not follow.
        let mut next = 0;
        let mut by_id: Option<std::collections::HashMap<u64, usize>> = None;
        for (i, &id) in plan.requests.as_deref().unwrap_or(&[]).iter().enumerate() {
            let at = match job.inputs.get(next) {
                Some((r, _)) if *r == id => Some(next),
                _ => {
                    let index =
                        by_id.get_or_insert_with(|| job.inputs.iter().enumerate().map(|(k, (r, _))| (*r, k)).collect());
                    index.get(&id).copied()
                }
            };
            if let Some(at) = at {
                next = at + 1;
                requests.push(id);
                seen.push(seen_at(i));
                let bytes = &job.inputs[at].1;
                spans.push(match as_le_floats(bytes) {
                    Some(_) => Span::InPlace(at),
                    None => {
                        let from = floats.len();
                        floats.extend(le_floats(bytes));
                        Span::Copied(from..floats.len())
                    }
                });
                // The decoder checked: one head per request, if any.
                heads.extend(plan.heads.as_deref().map(|h| h[i]));
            }
        }
        let inputs: Vec<&[f32]> = spans
            .into_iter()
            .map(|s| match s {
                Span::InPlace(at) => as_le_floats(&job.inputs[at].1).expect("read in place above"),
                Span::Copied(r) => &floats[r],
            })
            .collect();
        let work = self.exec.models().get(plan.model as usize).and_then(|m| m.work.as_ref());
        let solo = work.map_or_else(Vec::new, |w| {
            inputs.iter().map(|x| w.solo_time(x).map_or(0, |d| d.as_nanos() as Nanos)).collect()
        });
        let mut outputs = self.spare.pop().unwrap_or_default();
        let (finish, in_flight, error) = if inputs.is_empty() {
            (now + 1, false, None)
        } else {
            let heads = plan.heads.is_some().then_some(&heads[..]);
            let batch = Batch { model: plan.model, variant: plan.subnet, heads, inputs: &inputs };
            match self.exec.launch(&batch, &mut outputs) {
                Ok(Launched::Done(d)) => (now + (d.as_nanos() as Nanos).max(1), false, None),
                Ok(Launched::InFlight) => (now + self.pace(), true, None),
                Err(e) => (now + 1, false, Some(e)),
            }
        };
        // The inputs' bytes, read into `floats`, go back to the frontend's
        // next request (`pool`).
        let mut inputs = job.inputs;
        inputs.drain(..).for_each(|(_, b)| pool::give_bytes(b));
        pool::give(inputs);
        pool::give(job.awaiting);
        pool::give(floats);
        self.running.push_back(Running { plan, start: now, finish, in_flight, requests, seen, solo, outputs, error });
    }

    fn finish(&mut self, r: Running, out: &mut Vec<Envelope>) {
        self.stats.batches += 1;
        self.stats.requests += r.requests.len() as u64;
        let dropped = r.error.as_ref().map(drop_of);
        match dropped {
            Some((fb::DropReason::BackendFailed, _)) => self.stats.failed_batches += 1,
            Some(_) => self.stats.refused_batches += 1,
            None => {}
        }
        let exec_ns = r.finish - r.start;
        let batch_size = r.requests.len() as u32;
        self.stats.busy_ns += exec_ns;
        self.stats.sizes[BATCH_BOUNDS.partition_point(|&b| b < batch_size)] += 1;
        let mut per_fe = std::mem::take(&mut self.parts);
        for (i, &id) in r.requests.iter().enumerate() {
            let fe = frontend_of(id);
            let k = match per_fe.iter().position(|x| x.fe == fe) {
                Some(k) => k,
                None => {
                    let n = r.requests.len() - i;
                    per_fe.push(FrontendPart::with_room(fe, n, !r.solo.is_empty(), dropped.is_none()));
                    per_fe.len() - 1
                }
            };
            per_fe[k].ids.push(id);
            per_fe[k].seen.push(r.seen[i]);
            per_fe[k].solo.extend(r.solo.get(i));
            if dropped.is_none() {
                per_fe[k].outputs.push(pool::f32_tensor(&r.outputs[i]));
            }
        }
        let solo = |s: Vec<Nanos>| (!s.is_empty()).then_some(s);
        for FrontendPart { fe, ids, seen, solo: fe_solo, outputs } in per_fe.drain(..) {
            let msg = if let Some((reason, why)) = &dropped {
                Message::Dropped(fb::Dropped { requests: Some(ids), reason: *reason, message: Some(why.clone()) })
            } else {
                let results = fb::Results {
                    batch_id: r.plan.batch_id,
                    requests: Some(ids),
                    outputs: Some(outputs),
                    exec_ns,
                    batch_size,
                    seen_ns: Some(seen),
                    exec_at_ns: r.plan.exec_at_ns,
                    started_ns: r.start,
                    finished_ns: r.finish,
                    subnet: r.plan.subnet,
                    solo_ns: solo(fe_solo),
                };
                Message::Results(results)
            };
            out.push(Envelope { to: Addr::Frontend(fe), msg });
        }
        let done = fb::BatchDone {
            batch_id: r.plan.batch_id,
            backend: self.id,
            model: r.plan.model,
            batch_size,
            started_ns: r.start,
            finished_ns: r.finish,
            failed: dropped.is_some(),
            requests: (!r.solo.is_empty()).then(|| r.requests.clone()),
            solo_ns: solo(r.solo),
        };
        out.push(Envelope { to: self.scheduler, msg: Message::BatchDone(done) });
        self.parts = per_fe;
        // The plan's lists (`Decisions::push`) and the run's.
        let plan = r.plan;
        pool::give_some(plan.requests);
        pool::give_some(plan.frontends);
        pool::give_some(plan.seen_ns);
        pool::give(r.requests);
        pool::give(r.seen);
        // One spare per batch that may run at once is all `start` takes.
        if self.spare.len() < self.exec.pipeline_depth() {
            self.spare.push(r.outputs);
        }
    }
}

/// Where a batch member's floats are: in place in its input's bytes
/// (`Job::inputs[i]`), or copied into the batch's buffer.
enum Span {
    InPlace(usize),
    Copied(std::ops::Range<usize>),
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::time::Duration;

    use baton_gpu::executor::validate;
    use baton_gpu::{ExecError, ModelInfo};

    use super::*;
    use crate::roles::frontend::{f32_tensor, le_bytes};

    /// A device queue of depth 2 whose batches finish after `polls` polls
    /// each, in launch order; outputs are each input's sum.
    struct Queue {
        infos: Vec<ModelInfo>,
        queue: VecDeque<(Vec<Vec<f32>>, u32)>,
        polls: u32,
        most_in_flight: usize,
    }

    impl Executor for Queue {
        fn models(&self) -> &[ModelInfo] {
            &self.infos
        }

        fn run(&mut self, _: &Batch<'_>, _: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
            unreachable!("the role launches")
        }

        fn launch(&mut self, batch: &Batch<'_>, _: &mut Vec<Vec<f32>>) -> Result<Launched, ExecError> {
            validate(&self.infos, batch)?;
            assert!(self.queue.len() < self.pipeline_depth(), "launched beyond the depth");
            let outputs = batch.inputs.iter().map(|x| vec![x.iter().sum()]).collect();
            self.queue.push_back((outputs, self.polls));
            self.most_in_flight = self.most_in_flight.max(self.queue.len());
            Ok(Launched::InFlight)
        }

        fn poll(&mut self, outputs: &mut Vec<Vec<f32>>) -> Option<Result<Duration, ExecError>> {
            let front = self.queue.front_mut()?;
            if front.1 > 0 {
                front.1 -= 1;
                return None;
            }
            *outputs = self.queue.pop_front().expect("checked").0;
            Some(Ok(Duration::from_micros(100)))
        }

        fn pipeline_depth(&self) -> usize {
            2
        }
    }

    fn plan(batch_id: u64, requests: Vec<u64>) -> Message {
        Message::BatchPlan(fb::BatchPlan {
            batch_id,
            model: 0,
            backend: 0,
            exec_at_ns: 0,
            expected_finish_ns: 0,
            subnet: None,
            requests: Some(requests),
            frontends: Some(vec![0]),
            seen_ns: None,
            heads: None,
            inputs: None,
        })
    }

    fn inputs(batch_id: u64, requests: Vec<u64>, value: f32) -> Message {
        let tensors = requests.iter().map(|_| f32_tensor(le_bytes(&[value, value]))).collect();
        Message::Inputs(fb::Inputs {
            batch_id,
            requests: Some(requests),
            tensors: Some(tensors),
            backend: 0,
            frontend: 0,
        })
    }

    #[test]
    fn a_device_queue_runs_the_next_batch_behind_the_current_one_and_answers_in_order() {
        let info = ModelInfo::fixed("m", 2, 1, 4);
        let exec = Queue { infos: vec![info], queue: VecDeque::new(), polls: 3, most_in_flight: 0 };
        let mut role = BackendRole::new(0, Box::new(exec));
        let mut out = Vec::new();
        for (id, reqs, v) in [(1, vec![10, 11], 1.0), (2, vec![12], 2.0), (3, vec![13], 3.0)] {
            role.on_message(0, plan(id, reqs.clone()), &mut out);
            role.on_message(0, inputs(id, reqs, v), &mut out);
        }
        assert_eq!(role.running.len(), 2, "two batches on the device, the third waits for room");
        assert!(role.in_flight());
        let mut now = 0;
        while role.stats.batches < 3 {
            now = role.next_wake().expect("work left");
            role.poll(now, &mut out);
        }
        assert_eq!(role.stats.requests, 4);
        let done: Vec<u64> = out
            .iter()
            .filter_map(|e| match &e.msg {
                Message::BatchDone(d) => Some(d.batch_id),
                _ => None,
            })
            .collect();
        assert_eq!(done, vec![1, 2, 3], "answered in launch order");
        let results: Vec<(Vec<u64>, Vec<f32>)> = out
            .iter()
            .filter_map(|e| match &e.msg {
                Message::Results(r) => {
                    let outs =
                        r.outputs.iter().flatten().flat_map(|t| le_floats(t.data.as_deref().unwrap_or(&[]))).collect();
                    Some((r.requests.clone().unwrap_or_default(), outs))
                }
                _ => None,
            })
            .collect();
        assert_eq!(results[0], (vec![10, 11], vec![2.0, 2.0]));
        assert_eq!(results[2], (vec![13], vec![6.0]));
        assert!(!role.in_flight() && role.next_wake().is_none() && now > 0);
    }

    /// A device that fails every batch it is given.
    struct Broken(Vec<ModelInfo>);

    impl Executor for Broken {
        fn models(&self) -> &[ModelInfo] {
            &self.0
        }

        fn run(&mut self, batch: &Batch<'_>, _: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
            validate(&self.0, batch)?;
            Err(ExecError::Device("uncorrectable ECC error".into()))
        }
    }

    /// The drops a batch of `requests` gets on `exec`: (reason, message).
    fn drops(exec: Box<dyn Executor>, requests: Vec<u64>) -> (Vec<(fb::DropReason, Option<String>)>, BackendStats) {
        let mut role = BackendRole::new(0, exec);
        let mut out = Vec::new();
        role.on_message(0, plan(1, requests.clone()), &mut out);
        role.on_message(0, inputs(1, requests, 1.0), &mut out);
        while let Some(now) = role.next_wake() {
            role.poll(now, &mut out);
        }
        let dropped = out
            .iter()
            .filter_map(|e| match &e.msg {
                Message::Dropped(d) => Some((d.reason, d.message.clone())),
                Message::BatchDone(d) => {
                    assert!(d.failed, "a batch not run is reported failed to the scheduler");
                    None
                }
                _ => None,
            })
            .collect();
        (dropped, role.stats)
    }

    #[test]
    fn a_plan_the_executor_refuses_is_a_bad_plan_and_a_failed_device_is_a_failed_backend_each_with_its_cause() {
        let info = ModelInfo::fixed("m", 2, 1, 4);
        let queue = Queue { infos: vec![info.clone()], queue: VecDeque::new(), polls: 0, most_in_flight: 0 };
        let (d, stats) = drops(Box::new(queue), (10..15).collect());
        let why = ExecError::BatchTooLarge { batch: 5, max: 4 }.to_string();
        assert_eq!(d, vec![(fb::DropReason::BadPlan, Some(why))]);
        assert_eq!((stats.refused_batches, stats.failed_batches), (1, 0));
        let (d, stats) = drops(Box::new(Broken(vec![info])), vec![10, 11]);
        let why = "device error: uncorrectable ECC error".to_string();
        assert_eq!(d, vec![(fb::DropReason::BackendFailed, Some(why))]);
        assert_eq!((stats.refused_batches, stats.failed_batches), (0, 1));
    }
}
