//! The deterministic discrete-event cluster simulator.
//!
//! It drives any `Scheduler` (the production state machines, not copies)
//! with open-loop arrivals (`arrivals.rs`) and emulated backends. A batch
//! starts at `max(exec_at, previous batch end)` and runs for what the model
//! really takes: `l(b)` of its profile, of the subnet the plan names, the
//! shared prefix plus each member's suffix for a prefix batch, or
//! `g(b, longest solo time)` for input-dependent models — times an optional
//! jitter. On a partition of a GPU (`partitions.rs`) a batch runs the
//! measured L(b, p), slowed by what the GPU's other partition runs.
//! Query stages spawn their children as parents complete (`queries.rs`);
//! backends fail at the scenario's fault times, losing what they hold.
//! While the engine's host stalls (`[[stalls]]`, `Stall`) the clock is
//! held: what falls due within a stall is handled at its end, the GPUs'
//! batches finishing on time but heard of, and answered, then.
//! Under the autoscaler (`autoscaled.rs`) GPUs join and leave at period
//! boundaries. Virtual time jumps from event to event; at equal times
//! faults go first, then scaling steps, completions, arrivals and
//! scheduler timers. All
//! randomness comes from the scenario's seed, so one seed reproduces a run
//! bit for bit.
//!
//! Asked (`run_fates`), a run also keeps what became of each arrival
//! (`fates.rs`), to set it beside the engine's run request by request.
//!
//! The checker lives here, apart from the schedulers: every request must end
//! exactly once (served, dropped with a reason), every dispatched request
//! must be queued and of the batch's model, and every plan must be able to
//! meet its earliest deadline per the profile. Violations of the first two
//! are scheduler bugs and panic with the seed; infeasible plans are counted
//! and reported.

mod arrivals;
mod autoscaled;
mod fates;
mod goodput;
mod partitions;
mod queries;
mod report;

pub use arrivals::{Arrivals, Source};
pub use autoscaled::Period;
pub use fates::{End, Fate};
pub use goodput::{find_goodput, find_goodput_with, GoodputSearch};
pub use partitions::{batch_times, Layout};
pub use queries::QueryReport;
pub use report::{Checks, ModelReport, Report, BAD_RATE_LIMIT};

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use queries::{QueryBook, Spawn};
use report::{to_us, ModelTally, RunSummary};

use crate::autoscale::{AutoscaleConfig, Meter};
use crate::build;
use crate::policy::PolicyKind;
use crate::rng::Rng;
use crate::scenario::{Scenario, Stall};
use crate::time::Nanos;
use crate::types::{
    AppId, BackendId, BatchDone, BatchPlan, Completed, DropReason, ModelId, Output, Partition, PrefixId, Request,
    RequestId, Scheduler,
};

/// Stop a run whose scheduler keeps asking to be woken at the same instant
/// without doing anything: that is a livelock, not a simulation.
const MAX_IDLE_WAKEUPS: u32 = 10_000;
/// The highest aggregate rate a run accepts: a billion requests per second
/// of simulated time is beyond any cluster and keeps gaps above a nanosecond.
pub const MAX_RATE_RPS: f64 = 1e9;

/// Stop a run that has not settled this long after its last arrival: a
/// scheduler holding requests forever.
const MAX_DRAIN: Nanos = 3_600 * crate::time::NANOS_PER_S;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Queued,
    Running,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Record {
    model: ModelId,
    app: AppId,
    /// Solo execution time: drawn for input-dependent models, l(1) for static ones.
    solo: Nanos,
    arrival: Nanos,
    deadline: Nanos,
    state: State,
    /// The query instance and stage this request serves, if any.
    stage: Option<(u32, u16)>,
}

#[derive(Debug)]
struct Running {
    start: Nanos,
    finish: Nanos,
    plan: BatchPlan,
}

#[derive(Debug, Default)]
struct EmulatedBackend {
    busy_until: Nanos,
    running: VecDeque<Running>,
    failed: bool,
}

struct Sim<'a> {
    scenario: &'a Scenario,
    window: (Nanos, Nanos),
    records: Vec<Record>,
    tallies: Vec<ModelTally>,
    backends: Vec<EmulatedBackend>,
    layout: Layout,
    completions: BinaryHeap<Reverse<(Nanos, u32)>>,
    jitter: Rng,
    busy: Nanos,
    batch_sizes: BTreeMap<u32, u64>,
    infeasible_plans: u64,
    /// Query stage requests that ended since last looked at: (instance, stage, in SLO).
    stage_ends: Vec<(u32, u16, bool)>,
    /// The autoscaler's signals, counted (when it runs).
    meter: Option<Meter>,
    /// Each request's fate, when asked (`run_fates`).
    fates: Option<fates::Book>,
}

impl<'a> Sim<'a> {
    /// An idle cluster of `layout`'s backends, measuring from the warm-up
    /// to `end`.
    fn new(scenario: &'a Scenario, layout: Layout, end: Nanos) -> Self {
        Sim {
            scenario,
            window: (scenario.warmup, end),
            records: Vec::new(),
            tallies: vec![ModelTally::default(); scenario.models.len()],
            backends: (0..layout.backends()).map(|_| EmulatedBackend::default()).collect(),
            layout,
            completions: BinaryHeap::new(),
            jitter: Rng::stream(scenario.seed, u64::MAX),
            busy: 0,
            batch_sizes: BTreeMap::new(),
            infeasible_plans: 0,
            stage_ends: Vec::new(),
            meter: None,
            fates: None,
        }
    }

    /// Ends the earliest running batch and tells the scheduler, each
    /// member with its app and solo time (`completed` is scratch space).
    fn complete_next(&mut self, now: Nanos, sched: &mut dyn Scheduler, completed: &mut Vec<Completed>) {
        let Some(Reverse((_, b))) = self.completions.pop() else { unreachable!("a completion is due") };
        let run = self.complete(b, now);
        completed.clear();
        completed.extend(run.plan.requests.iter().map(|&request| {
            let r = &self.records[request.0 as usize];
            Completed { request, app: r.app, solo: r.solo }
        }));
        let done = BatchDone { backend: BackendId(b), model: run.plan.model, started: run.start, members: completed };
        sched.on_batch_done(now, &done);
    }

    /// The run's report, once nothing is left to happen.
    fn report(mut self, policy_name: &str, rate_rps: f64, book: &QueryBook) -> Report {
        let scenario = self.scenario;
        let unanswered = self.records.iter().filter(|r| r.state != State::Done).count() as u64;
        let rates = scenario.model_rates(rate_rps);
        let models = std::mem::take(&mut self.tallies)
            .into_iter()
            .zip(&scenario.models)
            .zip(rates)
            .map(|((t, m), r)| t.finish(&m.spec.name, r, !m.spec.subnets.is_empty()))
            .collect();
        let queries = book.reports(scenario, &scenario.query_rates(rate_rps));
        report::build(
            RunSummary {
                scenario: &scenario.name,
                policy: policy_name,
                seed: scenario.seed,
                window: scenario.duration,
                offered_rps: rate_rps,
                backends: scenario.cluster.backends,
                busy: self.busy,
                batch_sizes: self.batch_sizes,
                checks: Checks { unanswered, infeasible_plans: self.infeasible_plans },
            },
            models,
            queries,
        )
    }

    fn measured(&self, t: Nanos) -> bool {
        t >= self.window.0 && t < self.window.1
    }

    fn apply(&mut self, now: Nanos, out: Output, seed: u64) {
        match out {
            Output::Dropped { request, reason } => self.drop_request(request, reason, seed),
            Output::Dispatch(plan) => self.dispatch(now, plan, seed),
            Output::Layout(slots) => self.relayout(slots, seed),
        }
    }

    /// The scheduler re-partitioned GPUs: each GPU that changes must run
    /// nothing now (the checker's rule; a scheduler bug otherwise).
    fn relayout(&mut self, slots: Vec<Partition>, seed: u64) {
        for b in self.layout.touched_by(&slots) {
            let running = self.backends[b].running.len();
            assert!(running == 0, "backend {b} re-partitioned while running {running} batches (seed {seed})");
        }
        self.layout = Layout::new(slots, self.scenario.cluster.backends);
    }

    /// A queued or running request lost with its backend.
    fn fail(&mut self, id: RequestId, seed: u64) {
        let r = &mut self.records[id.0 as usize];
        assert_ne!(r.state, State::Done, "request {id:?} failed after it ended (seed {seed})");
        r.state = State::Queued;
        self.drop_request(id, DropReason::BackendFailed, seed);
    }

    /// `backend` dies now: what it runs or has queued is lost.
    fn kill(&mut self, backend: BackendId, seed: u64) {
        let be = &mut self.backends[backend.index()];
        be.failed = true;
        let lost: Vec<RequestId> = be.running.drain(..).flat_map(|r| r.plan.requests).collect();
        for id in lost {
            self.fail(id, seed);
        }
    }

    fn drop_request(&mut self, id: RequestId, reason: DropReason, seed: u64) {
        let r = &mut self.records[id.0 as usize];
        assert_eq!(r.state, State::Queued, "request {id:?} dropped while {:?} (seed {seed})", r.state);
        r.state = State::Done;
        let r = *r;
        if let Some(f) = &mut self.fates {
            f.end(id.0, fates::End::Dropped(reason));
        }
        if let Some(m) = &mut self.meter {
            m.end(true);
        }
        if let Some((inst, stage)) = r.stage {
            self.stage_ends.push((inst, stage, false));
        }
        if self.measured(r.arrival) {
            let i = DropReason::ALL.iter().position(|&x| x == reason).expect("listed");
            self.tallies[r.model.index()].dropped[i] += 1;
        }
    }

    fn dispatch(&mut self, now: Nanos, plan: BatchPlan, seed: u64) {
        let b = plan.requests.len() as u32;
        let model = &self.scenario.models[plan.model.index()].spec;
        let cap = match (plan.prefix, plan.subnet) {
            (Some(g), _) => self.scenario.cluster.prefixes[g.0 as usize].prefix.max_batch(),
            (None, Some(s)) => {
                assert!((s as usize) < model.subnets.len(), "subnet {s} of {} (seed {seed})", model.name);
                model.subnets[s as usize].profile.max_batch()
            }
            (None, None) => model.profile.max_batch(),
        };
        assert!(b >= 1 && b <= cap, "batch of {b} for {} (seed {seed})", model.name);
        assert!(plan.exec_at >= now, "batch planned in the past (seed {seed})");
        let percent = self.layout.percent(plan.backend.index());
        assert!(percent > 0, "a batch sent to backend {:?}, which holds no partition (seed {seed})", plan.backend);
        if self.backends[plan.backend.index()].failed {
            // Sent to a dead backend: lost.
            for &id in &plan.requests {
                self.fail(id, seed);
            }
            return;
        }
        let mut earliest_deadline = Nanos::MAX;
        for id in &plan.requests {
            let r = &mut self.records[id.0 as usize];
            assert_eq!(r.state, State::Queued, "request {id:?} dispatched while {:?} (seed {seed})", r.state);
            match plan.prefix {
                None => assert_eq!(r.model, plan.model, "request {id:?} in another model's batch (seed {seed})"),
                Some(g) => assert!(
                    self.scenario.cluster.prefixes[g.0 as usize].members.contains(&r.model),
                    "request {id:?} outside prefix group {g:?} (seed {seed})"
                ),
            }
            r.state = State::Running;
            earliest_deadline = earliest_deadline.min(r.deadline);
        }
        let l = match (plan.prefix, plan.subnet) {
            (Some(g), _) => self.prefix_batch_time(g, &plan.requests),
            (None, Some(s)) => model.subnets[s as usize].profile.latency(b),
            (None, None) => model.profile.latency(b),
        };
        let start = plan.exec_at.max(self.backends[plan.backend.index()].busy_until);
        let partition = self.partition_times(&plan, start, seed);
        let l = partition.map_or(l, |t| t.0);
        if plan.exec_at + l > earliest_deadline {
            self.infeasible_plans += 1;
        }
        // What the batch really takes: the profile, or for input-dependent
        // models g(b, longest member).
        let real = match &model.dynamic {
            Some(d) => {
                d.batch_time(b, plan.requests.iter().map(|id| self.records[id.0 as usize].solo).max().unwrap_or(0))
            }
            None => l,
        };
        let real = partition.map_or(real, |t| t.1);
        let j = self.scenario.knobs.exec_jitter;
        let run = if j > 0.0 { (real as f64 * (1.0 + j * (2.0 * self.jitter.unit() - 1.0))) as Nanos } else { real };
        let be = &mut self.backends[plan.backend.index()];
        let finish = start + run.max(1);
        be.busy_until = finish;
        let (w0, w1) = self.window;
        self.busy += self.layout.gpu_time(plan.backend.index(), finish.min(w1).saturating_sub(start.max(w0)));
        if let Some(m) = &mut self.meter {
            m.busy(self.layout.gpu_time(plan.backend.index(), finish - start));
        }
        if self.measured(start) {
            *self.batch_sizes.entry(b).or_default() += 1;
            let t = &mut self.tallies[plan.model.index()];
            t.batches += 1;
            t.batched_requests += b as u64;
        }
        self.ran(&plan, start, finish);
        self.completions.push(Reverse((finish, plan.backend.0)));
        self.backends[plan.backend.index()].running.push_back(Running { start, finish, plan });
    }

    /// A batch's members' fates, if kept: their answers leave when it
    /// ends, or when a stall holding that ends.
    fn ran(&mut self, plan: &BatchPlan, start: Nanos, finish: Nanos) {
        let Some(f) = &mut self.fates else { return };
        let finish = Stall::held(&self.scenario.stalls, finish);
        let end = fates::End::Ran { exec_at: plan.exec_at, start, finish, batch: plan.requests.len() as u32 };
        for id in &plan.requests {
            f.end(id.0, end);
        }
    }

    /// (planned, real) time of a batch on a partition below a whole GPU,
    /// from the measured profiles and what the sibling partition runs at
    /// `start`; None on a whole GPU.
    fn partition_times(&self, plan: &BatchPlan, start: Nanos, seed: u64) -> Option<(Nanos, Nanos)> {
        let backend = plan.backend.index();
        let percent = self.layout.percent(backend);
        if percent == 100 {
            return None;
        }
        let m = &self.scenario.models[plan.model.index()];
        let (Some(data), Some(row)) = (&self.scenario.partitions, m.partition_profile) else {
            panic!("{} runs on a {percent}% partition without a measured profile (seed {seed})", m.spec.name);
        };
        assert!(plan.prefix.is_none() && plan.subnet.is_none(), "partitions run plain batches (seed {seed})");
        let sibling = self.layout.sibling(backend).and_then(|s| {
            let r = self.backends[s].running.iter().find(|r| r.start <= start && start < r.finish)?;
            let row = self.scenario.models[r.plan.model.index()].partition_profile?;
            Some((row, r.plan.requests.len() as u32))
        });
        Some(partitions::batch_times(data, row, plan.requests.len() as u32, percent, sibling))
    }

    /// A prefix-batched batch: the shared prefix once over all b requests,
    /// then each member model's suffix over its own sub-batch.
    fn prefix_batch_time(&self, g: PrefixId, requests: &[RequestId]) -> Nanos {
        let group = &self.scenario.cluster.prefixes[g.0 as usize];
        let mut t = group.prefix.latency(requests.len() as u32);
        for &m in &group.members {
            let n = requests.iter().filter(|id| self.records[id.0 as usize].model == m).count() as u32;
            if n > 0 {
                let (_, suffix) = self.scenario.models[m.index()].spec.prefix.as_ref().expect("members have suffixes");
                t += suffix.latency(n);
            }
        }
        t
    }

    fn complete(&mut self, backend: u32, now: Nanos) -> Running {
        let run = self.backends[backend as usize].running.pop_front().expect("a completion has its batch");
        assert!(run.finish <= now, "a batch is heard of when it ends, or when a stall that held it ends");
        // Accuracy served, for supernet models: the subnet run, or the most
        // accurate one for policies that know no subnets.
        let subnets = &self.scenario.models[run.plan.model.index()].spec.subnets;
        let accuracy =
            run.plan.subnet.map(|s| s as usize).or(subnets.len().checked_sub(1)).map(|s| subnets[s].accuracy);
        for id in &run.plan.requests {
            let r = &mut self.records[id.0 as usize];
            r.state = State::Done;
            let r = *r;
            if let Some(m) = &mut self.meter {
                m.end(now > r.deadline);
            }
            if let Some((inst, stage)) = r.stage {
                self.stage_ends.push((inst, stage, now <= r.deadline));
            }
            if self.measured(r.arrival) {
                let t = &mut self.tallies[r.model.index()];
                if now <= r.deadline {
                    t.ok += 1;
                    t.accuracy_sum += accuracy.unwrap_or(0.0);
                } else {
                    t.late += 1;
                }
                t.latency_us.push(to_us(now - r.arrival));
                t.queue_delay_us.push(to_us(run.start - r.arrival));
            }
        }
        run
    }
}

/// Creates a request of `model` that arrived at `arrival` and hands it to
/// the scheduler `now` (later while a stall held it).
fn new_request(
    sim: &mut Sim<'_>,
    arrivals: &mut Arrivals,
    sched: &mut dyn Scheduler,
    (arrival, now): (Nanos, Nanos),
    model: ModelId,
    deadline: Nanos,
    stage: Option<(u32, u16)>,
) {
    let id = RequestId(sim.records.len() as u64);
    let spec = &sim.scenario.models[model.index()].spec;
    let (app, solo) = arrivals.content(model);
    // A static model's request takes l(1) alone.
    let solo = if spec.dynamic.is_some() { solo } else { spec.profile.latency(1) };
    sim.records.push(Record { model, app, solo, arrival, deadline, state: State::Queued, stage });
    if let Some(f) = &mut sim.fates {
        let fate = Fate { model, arrival, deadline, end: fates::End::Unanswered };
        // A query's stage is no arrival: it keeps no ordinal.
        f.new_request(id.0, fate, stage.is_none().then(|| arrivals.popped() - 1));
    }
    if let Some(m) = &mut sim.meter {
        m.arrive(now);
    }
    if sim.measured(arrival) {
        sim.tallies[model.index()].sent += 1;
    }
    sched.on_request(now, Request { id, model, app, arrival, deadline });
}

/// One run of `policy` on `scenario` at aggregate offered rate `rate_rps`,
/// seeded by `scenario.seed`.
pub fn run(scenario: &Scenario, policy: PolicyKind, rate_rps: f64) -> Report {
    let mut sched = build::scheduler(policy, scenario, rate_rps);
    run_with(scenario, policy.as_str(), sched.as_mut(), rate_rps)
}

/// The backends `sched` runs: whole GPUs, or the partitions it asks for.
fn layout(scenario: &Scenario, sched: &dyn Scheduler) -> Layout {
    let layout = match sched.partitions() {
        Some(slots) => Layout::new(slots, scenario.cluster.backends),
        None => Layout::whole(scenario.cluster.backends),
    };
    assert!(
        scenario.faults.iter().all(|f| f.1.index() < layout.backends()),
        "a fault names a backend beyond the {} the scheduler runs (seed {})",
        layout.backends(),
        scenario.seed
    );
    layout
}

/// One run of any scheduler (tests hand in their own).
pub fn run_with(scenario: &Scenario, policy_name: &str, sched: &mut dyn Scheduler, rate_rps: f64) -> Report {
    run_inner(scenario, policy_name, sched, rate_rps, None, false).0
}

/// One run, and what became of each arrival (`fates.rs`), by ordinal.
pub fn run_fates(scenario: &Scenario, policy: PolicyKind, rate_rps: f64) -> (Report, Vec<Option<Fate>>) {
    let mut sched = build::scheduler(policy, scenario, rate_rps);
    let (report, fates) = run_inner(scenario, policy.as_str(), sched.as_mut(), rate_rps, None, true);
    (report, fates.expect("asked for"))
}

/// One run of Symphony under its autoscaler (`autoscaled.rs`): the report
/// and the periods' signals and advice. Refused (why) for other policies,
/// GPU partitions, and a configuration outside the cluster.
pub fn run_autoscaled(
    scenario: &Scenario,
    policy: PolicyKind,
    rate_rps: f64,
    cfg: AutoscaleConfig,
) -> Result<(Report, Vec<Period>), String> {
    if policy != PolicyKind::Symphony {
        return Err(format!("autoscaling runs Symphony, not {}", policy.as_str()));
    }
    cfg.check()?;
    if !scenario.faults.is_empty() {
        return Err("autoscaling a cluster with scripted faults is not supported".into());
    }
    let pool = scenario.cluster.backends as usize;
    if cfg.max_gpus > pool {
        return Err(format!("at most {} GPUs: the cluster has {}", cfg.max_gpus, scenario.cluster.backends));
    }
    let mut sched = build::scheduler(policy, scenario, rate_rps);
    if sched.partitions().is_some() {
        return Err("autoscaling adds and removes whole GPUs, not partitions".into());
    }
    let mut scaler = autoscaled::Scaler::start(cfg, pool, sched.as_mut());
    let (report, _) = run_inner(scenario, "symphony/autoscaled", sched.as_mut(), rate_rps, Some(&mut scaler), false);
    Ok((report, scaler.periods))
}

fn run_inner(
    scenario: &Scenario,
    policy_name: &str,
    sched: &mut dyn Scheduler,
    rate_rps: f64,
    mut scaler: Option<&mut autoscaled::Scaler>,
    keep_fates: bool,
) -> (Report, Option<Vec<Option<Fate>>>) {
    assert!(rate_rps.is_finite() && (0.0..=MAX_RATE_RPS).contains(&rate_rps), "rate {rate_rps} out of range");
    let seed = scenario.seed;
    let end = scenario.warmup + scenario.duration;
    let mut arrivals = Arrivals::new(scenario, rate_rps, seed, end);
    let mut sim = Sim::new(scenario, layout(scenario, sched), end);
    sim.meter = scaler.as_ref().map(|s| Meter::new(s.config()));
    sim.fates = keep_fates.then(fates::Book::default);
    let mut book = QueryBook::new(scenario, seed);
    let mut spawn: Vec<Spawn> = Vec::new();
    let mut now: Nanos = 0;
    let mut idle_wakeups = 0;
    let mut completed: Vec<Completed> = Vec::new();
    let mut faults = scenario.faults.iter().copied().peekable();
    loop {
        // Completions of dead backends never come.
        while let Some(&Reverse((_, b))) = sim.completions.peek() {
            if !sim.backends[b as usize].failed {
                break;
            }
            sim.completions.pop();
        }
        let done_at = sim.completions.peek().map(|Reverse((t, _))| *t);
        let arrive_at = arrivals.peek();
        let timer_at = sched.next_timeout();
        // A fault or a scaling step matters only while something else can still happen.
        let pending = done_at.or(arrive_at).or(timer_at).is_some();
        let fault_at = faults.peek().map(|f| f.0).filter(|_| pending);
        let scale_at = scaler.as_ref().map(|s| s.next_at()).filter(|_| pending);
        let Some(t) = [done_at, arrive_at, timer_at, fault_at, scale_at].into_iter().flatten().min() else {
            break;
        };
        let t = Stall::held(&scenario.stalls, t.max(now));
        if t > now {
            idle_wakeups = 0;
        }
        assert!(
            t <= end + MAX_DRAIN,
            "{policy_name} never settles: requests still held an hour after the last arrival (seed {seed})"
        );
        now = t;
        if fault_at.is_some_and(|f| f <= now) {
            let (_, b) = faults.next().expect("peeked");
            sim.kill(b, seed);
            sched.on_backend_failed(now, b);
        } else if let Some(s) = scaler.as_deref_mut().filter(|s| s.next_at() <= now) {
            s.tick(now, sim.meter.as_mut().expect("metered while autoscaled"), sched);
        } else if done_at.is_some_and(|d| d <= now) {
            sim.complete_next(now, sched, &mut completed);
        } else if arrive_at.is_some_and(|a| a <= now) {
            match arrivals.pop().expect("peeked") {
                // An arrival held by a stall keeps its own time.
                (at, Source::Model(model)) => {
                    let deadline = at + scenario.models[model.index()].spec.slo;
                    new_request(&mut sim, &mut arrivals, sched, (at, now), model, deadline, None);
                }
                (at, Source::Query(q)) => spawn.push(book.start(scenario, q, at, sim.measured(at))),
            }
        } else {
            idle_wakeups += 1;
            assert!(idle_wakeups < MAX_IDLE_WAKEUPS, "{policy_name} livelocks at t={now} (seed {seed})");
            sched.on_timeout(now);
        }
        if settle(&mut sim, &mut arrivals, &mut book, &mut spawn, sched, now) {
            idle_wakeups = 0;
        }
    }
    let fates = sim.fates.take().map(|f| f.by_arrival(arrivals.popped()));
    (sim.report(policy_name, rate_rps, &book), fates)
}

/// Decisions, then the query stages they end and the children those
/// spawn, until nothing moves; whether any decision came.
fn settle(
    sim: &mut Sim<'_>,
    arrivals: &mut Arrivals,
    book: &mut QueryBook,
    spawn: &mut Vec<Spawn>,
    sched: &mut dyn Scheduler,
    now: Nanos,
) -> bool {
    let (scenario, seed) = (sim.scenario, sim.scenario.seed);
    let mut decided = false;
    loop {
        while let Some(out) = sched.poll_output() {
            decided = true;
            sim.apply(now, out, seed);
        }
        for (inst, stage, ok) in std::mem::take(&mut sim.stage_ends) {
            book.ended(scenario, inst, stage, ok, spawn);
        }
        if spawn.is_empty() {
            return decided;
        }
        for (inst, stage, deadline, model) in std::mem::take(spawn) {
            new_request(sim, arrivals, sched, (now, now), model, deadline, Some((inst, stage)));
        }
    }
}
