//! `baton load`: an open-loop load generator for a running engine. It
//! draws arrivals from the scenario file exactly as `baton sim` does (same
//! laws, weights and seed), sends each request at its scheduled time over
//! a few TCP connections, and accounts for every answer.
//!
//! Latency is measured from the request's *scheduled* send time, so a
//! generator that falls behind cannot hide queueing (no coordinated
//! omission). A request is good when answered ok within its model's SLO.
//! After the last send the generator waits `drain` for the remaining
//! answers; what is still missing then is reported as `unanswered` (the
//! exactly-once check: `ok + late + dropped + errors + unanswered = sent`,
//! and a second answer to one request is counted in `duplicates`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use baton_net::client::{self, Receiver, Sender};
use baton_sched::scenario::Scenario;
use baton_sched::sim::{Arrivals, Source};
use baton_sched::time::{Nanos, NANOS_PER_S};
use baton_wire::{fb, ReadError};
use serde::Serialize;

use crate::gap::{self, Answered, Fates, Outcome};
use crate::overhead::{Overhead, OverheadReport};
use baton_core::roles::reserve::P99Window;

mod drive;

/// How early a request may go out with an earlier one (one OS sleep's slop).
const EARLY: Nanos = 50_000;
/// How long after the threads are started the run's clock starts.
const START_AFTER: Duration = Duration::from_millis(20);

#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// Frontends to spread the connections over, round-robin (at least one).
    pub targets: Vec<SocketAddr>,
    pub rate_rps: f64,
    /// Seconds of sending that count, after `warmup`.
    pub duration: Duration,
    /// Seconds of sending first that do not count (the scenario's
    /// `warmup_s`, as `baton sim` skips it): those requests are sent and
    /// must be answered exactly once, but their answers are not tallied.
    pub warmup: Duration,
    pub connections: usize,
    /// Floats in each request's input (the server's `--input-floats`): one
    /// size for every model, or one per model of the scenario.
    pub input_floats: Vec<usize>,
    pub drain: Duration,
    pub progress: bool,
    /// Cores the generator runs on: one thread per core, at most one per
    /// connection, each pinned to its core (`drive.rs`); empty: one
    /// thread, not pinned.
    pub cores: Vec<usize>,
    /// Busy-poll the sockets between sends instead of sleeping: for a
    /// generator on cores of its own, whose wake-up (tens of µs on a VM's
    /// idle core) would otherwise be counted in egress.
    pub spin: bool,
    /// The generator threads' nice value (`set_nice`). `SHARING_NICE`
    /// (the default) where they may share a core with the server; 0 on
    /// cores of their own, where a lower weight only lets the kernel's
    /// housekeeping hold the generator's core longer (measured on the
    /// 2-core VM: kdamond ran 12 ms at a stretch on the generator's core
    /// at nice 10; at 1,000,000 r/s mean bad 2.1% at nice 0 against 4.1%
    /// at nice 10 over five pairs, no separation at Table 4's rate,
    /// perf/results/overhead_ab.txt).
    pub nice: i32,
}

/// The generator's nice value where it may share a core with the server.
pub const SHARING_NICE: i32 = 10;

/// The generator's nice value for its `generator` cores beside a server
/// pinned to `server` (None: not pinned) and to the `compute` threads'
/// cores: 0 where they are its own, `SHARING_NICE` where they may be the
/// server's.
pub fn nice_for(server: Option<&[usize]>, compute: &[usize], generator: &[usize]) -> i32 {
    match server {
        Some(s) if !generator.is_empty() && !generator.iter().any(|c| s.contains(c) || compute.contains(c)) => 0,
        _ => SHARING_NICE,
    }
}

impl LoadConfig {
    /// `rate_rps` for `duration` at `target`: one connection, the engine's
    /// default input size, 2 s to drain, quiet, not pinned.
    pub fn new(target: SocketAddr, rate_rps: f64, duration: Duration) -> Self {
        Self {
            targets: vec![target],
            rate_rps,
            duration,
            warmup: Duration::ZERO,
            connections: 1,
            input_floats: vec![baton_core::models::DEFAULT_INPUT_FLOATS],
            drain: Duration::from_secs(2),
            progress: false,
            cores: Vec::new(),
            spin: false,
            nice: SHARING_NICE,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadReport {
    pub target: String,
    pub offered_rps: f64,
    pub duration_s: f64,
    /// Sent first and not counted below but in `unanswered` and
    /// `duplicates` (`LoadConfig::warmup`).
    pub warmup_s: f64,
    pub warmup_sent: u64,
    /// Sent after the warm-up: what the counts below are of.
    pub sent: u64,
    /// Answered ok within the SLO.
    pub ok: u64,
    /// Answered ok after the SLO.
    pub late: u64,
    pub dropped: u64,
    pub errors: u64,
    /// Of every request sent, warm-up included.
    pub unanswered: u64,
    pub duplicates: u64,
    pub bad_rate: f64,
    /// In-SLO answers per second at this offered rate, under the name
    /// `baton sim --json` gives the same quantity. Goodput in the papers'
    /// sense is the highest rate at <= 1% bad, found by search
    /// (`engine_bench::engine_goodput`).
    pub goodput_rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// Latency of the answers that were not ok (dropped or refused): how
    /// fast a client hears that its request will not be served.
    pub not_ok_p50_ms: f64,
    pub not_ok_p99_ms: f64,
    pub mean_batch: f64,
    /// Requests answered ok, by the size of the batch that served them.
    pub batch_sizes: std::collections::BTreeMap<u32, u64>,
    /// Mean accuracy (%) of the subnets that served in-SLO answers of
    /// supernet models, as `baton sim --json` reports it; None without any.
    pub mean_accuracy: Option<f64>,
    /// The time the engine added beyond its plan, in four parts
    /// (`overhead.rs`), over the requests answered ok.
    pub overhead: OverheadReport,
    /// The four parts' histograms (`Overhead::write_hgrm` exports them).
    #[serde(skip)]
    pub overhead_histograms: Overhead,
    /// The longest the generator ran behind its schedule.
    pub max_send_lag_ms: f64,
    /// The network path both ways the generator last told the frontend
    /// (`InferRequest.path_ns`: the p99 over a window of answers), µs.
    pub path_p99_us: f64,
    /// The cores the generator's threads were pinned to (empty: any).
    pub generator_cores: Vec<usize>,
    /// Whether the generator busy-polled (`LoadConfig::spin`).
    pub generator_spun: bool,
    pub drop_reasons: Vec<(String, u64)>,
    pub error_codes: Vec<(String, u64)>,
    /// Bad answers (late, dropped or failed) by the second of the measured
    /// window their request was due to be sent in: when a run went bad.
    pub bad_by_second: Vec<u64>,
    /// Queries that failed, by the stage that missed.
    pub failed_stages: Vec<(String, u64)>,
    /// Each model's requests, then each query's, that were sent after the
    /// warm-up: what goodput's 1% applies to, each on its own
    /// (`meets_slos`).
    pub targets: Vec<TargetReport>,
}

/// What one model's (or query's) requests came to.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TargetReport {
    pub name: String,
    pub sent: u64,
    /// Answered ok within the SLO.
    pub ok: u64,
    pub bad_rate: f64,
}

impl LoadReport {
    /// Whether the run meets goodput's bar as the papers set it (`../shared/
    /// design/evaluation.md`, as `baton sim` checks it): every model's and
    /// every query's bad rate at most 1% — not just the mix's, where a
    /// small model's misses hide among a large one's hits — and every
    /// request answered exactly once.
    pub fn meets_slos(&self) -> bool {
        let limit = baton_sched::sim::BAD_RATE_LIMIT;
        self.bad_rate <= limit
            && self.targets.iter().filter(|t| t.sent > 0).all(|t| t.bad_rate <= limit)
            && self.duplicates == 0
            && self.unanswered == 0
    }

    /// The largest bad rate of any model or query sent to.
    pub fn worst_bad_rate(&self) -> f64 {
        self.targets.iter().filter(|t| t.sent > 0).map(|t| t.bad_rate).fold(0.0, f64::max)
    }
}

#[derive(Debug)]
pub enum LoadError {
    Connect(std::io::Error),
    Send(std::io::Error),
    UnknownModel(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) => write!(f, "cannot connect: {e}"),
            Self::Send(e) => write!(f, "sending failed: {e}"),
            Self::UnknownModel(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// One request of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Planned {
    /// When it is sent, ns from the run's start.
    pub at: Nanos,
    /// A model, or with `query` its root model.
    pub model: u32,
    /// A multi-model query (`InferRequest.query`), by index.
    pub query: Option<u32>,
    pub app: u32,
    /// For a dynamic model, its input's first float: the work it carries
    /// (`Arrivals::input`).
    pub work: Option<f32>,
}

impl Planned {
    /// Its target's index among `models` models, then the queries: the
    /// order of a run's SLOs and of `LoadReport::targets`.
    fn target(&self, models: usize) -> usize {
        self.query.map_or(self.model as usize, |q| models + q as usize)
    }
}

/// The requests of one run of `length` (warm-up included), in time order:
/// the simulator's arrivals, and each request's app and work drawn as the
/// simulator draws them.
pub fn schedule(scenario: &Scenario, rate_rps: f64, length: Duration) -> Result<Vec<Planned>, LoadError> {
    let end = length.as_nanos() as Nanos;
    let mut arrivals = Arrivals::new(scenario, rate_rps, scenario.seed, end);
    let mut out = Vec::with_capacity((rate_rps * length.as_secs_f64() * 1.05) as usize + 16);
    while let Some((at, src)) = arrivals.pop() {
        match src {
            Source::Model(m) => {
                let (app, work) = arrivals.input(m);
                out.push(Planned { at, model: m.0, query: None, app: app.0, work });
            }
            Source::Query(q) => {
                let root = scenario.queries[q].stages[0].model.0;
                out.push(Planned { at, model: root, query: Some(q as u32), app: 0, work: None });
            }
        }
    }
    Ok(out)
}

#[derive(Default)]
struct Tally {
    /// Requests answered (the first answer to each, warm-up included).
    firsts: u64,
    ok: u64,
    late: u64,
    dropped: u64,
    errors: u64,
    duplicates: u64,
    latency_us: Vec<u32>,
    /// Latencies of answers that were not ok (dropped or refused).
    refused_us: Vec<u32>,
    /// Accuracy served to in-SLO answers that name a subnet, and their number.
    accuracy_sum: f64,
    accuracy_ok: u64,
    overhead: Overhead,
    batch_sum: u64,
    /// Answers ok by the size of the batch that served them.
    batch_sizes: std::collections::BTreeMap<u32, u64>,
    drop_reasons: Vec<(fb::DropReason, u64)>,
    error_codes: Vec<(fb::ErrorCode, u64)>,
    failed_stages: Vec<(String, u64)>,
    bad_by_second: Vec<u64>,
    /// Answered ok within the SLO, by target (a model, then a query: the
    /// index of its SLO in `Shared::slo`).
    ok_by_target: Vec<u64>,
    /// Each model request's end and parts, by request id, when kept
    /// (`run_with_fates`).
    fates: Option<Vec<(usize, Answered)>>,
}

/// Adds `by` to `k`'s count.
pub(crate) fn bump<K: PartialEq>(v: &mut Vec<(K, u64)>, k: K, by: u64) {
    match v.iter_mut().find(|x| x.0 == k) {
        Some(x) => x.1 += by,
        None => v.push((k, by)),
    }
}

pub(crate) use baton_core::roles::outcomes::add_at;

struct Shared {
    start: Instant,
    /// `start` on the Unix clock, where the engine's times are placed too.
    start_unix_ns: u64,
    /// When each request went out, ns since `start`.
    sent: Vec<AtomicU64>,
    schedule: Vec<Planned>,
    /// Each model's SLO, then each query's.
    slo: Vec<Nanos>,
    answered: Vec<AtomicU8>,
    answers: AtomicU64,
    /// How many of `slo` are models'.
    models: usize,
    /// Requests sent before this (ns since `start`) are not tallied.
    warmup: Nanos,
    /// The network path both ways of every answer, all connections', by
    /// window (`reserve.rs`), and its last p99, which every request tells
    /// the frontend (`InferRequest.path_ns`; 0 until a window is complete).
    path: Mutex<P99Window>,
    path_ns: AtomicU64,
}

/// The cores this process may run on.
pub fn allowed_cores() -> Vec<usize> {
    core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect()
}

/// `cores` split for a server and a load generator on one machine: the
/// generator on the last quarter (at least one), the server on the rest;
/// None with fewer than two. On a small machine a generator sharing the
/// server's cores takes whole time slices from it (measured on the 2-core
/// VM, Table 4 at 5,282 r/s: 1.35–1.42% bad sharing both cores, 0.78–0.89%
/// split one and one).
pub fn split_cores(cores: &[usize]) -> Option<(Vec<usize>, Vec<usize>)> {
    if cores.len() < 2 {
        return None;
    }
    let server = cores.len() - (cores.len() / 4).max(1);
    Some((cores[..server].to_vec(), cores[server..].to_vec()))
}

/// `cores` split for `backends` CPU compute threads and the rest: the
/// threads on the last cores, one each, as many as leave one core for the
/// server and generator (which then share it, the generator at lower
/// priority); the rest first. A compute thread sharing a shard's core
/// holds it for whole batches: on the 2-core VM, `cpu-varlen` under Orloj
/// at 250 r/s finished 0.70 of the simulator's in-SLO share with its
/// compute thread unpinned (the stop before's perf/results/engine_seeds.txt)
/// and 0.993 on a core of its own (the file now).
pub fn split_for_compute(cores: &[usize], backends: usize) -> (Vec<usize>, Vec<usize>) {
    let n = backends.min(cores.len().saturating_sub(1));
    let (rest, compute) = cores.split_at(cores.len() - n);
    (rest.to_vec(), compute.to_vec())
}

/// Sets the calling thread's nice value (`LoadConfig::nice`). The
/// generator often shares a small machine with the server it measures; at
/// equal priority its threads hold the server's cores for whole time
/// slices and the server's timing slips by milliseconds (measured: mean
/// batch start lag 24 µs in some runs, 160–240 µs with 7 ms spikes in
/// others), so by default it yields (`SHARING_NICE`).
fn set_nice(nice: i32) {
    // SAFETY: setpriority on the calling thread's own id changes only its
    // scheduling weight; failure (no permission) leaves it as it was.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice);
    }
}

impl Tally {
    /// Counts answer `r`, read at `now`. Its fields are read first: an
    /// answer one of whose fields does not read is not counted at all.
    fn answer(&mut self, shared: &Shared, now: Nanos, r: fb::InferResponseRef<'_>) -> Result<(), ReadError> {
        let id = r.id()? as usize;
        let (status, timing, subnet, accuracy) =
            (r.status()?, r.timing()?.map(fb::Timing::from), r.subnet()?, r.accuracy()?);
        let (drop_reason, error_code, stage) = (r.drop_reason()?, r.error_code()?, r.stage()?);
        let Some(planned) = shared.schedule.get(id) else { return Ok(()) };
        let (at, target) = (planned.at, planned.target(shared.models));
        let slo = shared.slo[target];
        if shared.answered[id].fetch_add(1, Ordering::Relaxed) > 0 {
            self.duplicates += 1;
            return Ok(());
        }
        shared.answers.fetch_add(1, Ordering::Relaxed);
        self.firsts += 1;
        if let Some(tm) = &timing {
            // Round trip less the server's part: exact on each clock.
            let round_trip = now.saturating_sub(shared.sent[id].load(Ordering::Relaxed));
            let mut path = shared.path.lock().expect("no generator thread panics holding it");
            if path.observe(round_trip.saturating_sub(tm.written_ns.saturating_sub(tm.received_ns))) {
                shared.path_ns.store(path.p99(), Ordering::Relaxed);
            }
        }
        let latency = now.saturating_sub(at);
        if let Some(fates) = self.fates.as_mut().filter(|_| planned.query.is_none()) {
            let outcome = match status {
                fb::Status::Ok if latency <= slo => Outcome::Ok,
                fb::Status::Ok => Outcome::Late,
                fb::Status::Dropped => Outcome::Dropped(drop_reason),
                fb::Status::Error => Outcome::Error,
            };
            let unix = |t: Nanos| shared.start_unix_ns + t;
            let sent = shared.sent[id].load(Ordering::Relaxed);
            let parts = timing.as_ref().map(|tm| gap::engine_parts(unix(at), unix(sent), unix(now), tm));
            fates.push((id, Answered { outcome, parts }));
        }
        if at < shared.warmup {
            return Ok(());
        }
        if status != fb::Status::Ok || latency > slo {
            add_at(&mut self.bad_by_second, ((at - shared.warmup) / NANOS_PER_S) as usize, 1);
        }
        if status != fb::Status::Ok {
            self.refused_us.push((latency / 1_000).min(u32::MAX as u64) as u32);
        }
        match status {
            fb::Status::Ok => {
                if latency <= slo {
                    self.ok += 1;
                    add_at(&mut self.ok_by_target, target, 1);
                    if subnet.is_some() {
                        self.accuracy_sum += f64::from(accuracy);
                        self.accuracy_ok += 1;
                    }
                } else {
                    self.late += 1;
                }
                self.latency_us.push((latency / 1_000).min(u32::MAX as u64) as u32);
                if let Some(tm) = timing {
                    self.batch_sum += u64::from(tm.batch_size);
                    *self.batch_sizes.entry(tm.batch_size).or_default() += 1;
                    let sent = shared.sent[id].load(Ordering::Relaxed);
                    self.overhead.record(shared.start_unix_ns + sent, shared.start_unix_ns + now, &tm);
                }
            }
            fb::Status::Dropped => {
                self.dropped += 1;
                bump(&mut self.drop_reasons, drop_reason, 1);
                if let Some(stage) = stage {
                    bump(&mut self.failed_stages, stage.to_owned(), 1);
                }
            }
            fb::Status::Error => {
                self.errors += 1;
                bump(&mut self.error_codes, error_code, 1);
            }
        }
        Ok(())
    }
}

/// Touches every page of `v`'s spare room once, so that its first pushes
/// do not fault pages in one by one mid-run.
fn prefault(v: &mut Vec<u32>) {
    const PAGE: usize = 4096 / std::mem::size_of::<u32>();
    for slot in v.spare_capacity_mut().iter_mut().step_by(PAGE) {
        slot.write(0);
    }
}

/// The share of `sent` not answered ok in time (0 of none), counted as
/// bad requests over sent so that exactly 1% reads 0.01.
fn bad_share(sent: u64, ok: u64) -> f64 {
    if sent == 0 {
        0.0
    } else {
        sent.saturating_sub(ok) as f64 / sent as f64
    }
}

fn percentile_ms(v: &mut [u32], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1_000.0
}

/// Sends `scenario`'s requests to `cfg.targets` and accounts for the answers.
pub fn run(scenario: &Scenario, cfg: &LoadConfig) -> Result<LoadReport, LoadError> {
    run_inner(scenario, cfg, false).map(|(r, _)| r)
}

/// `run`, and how each model request ended as the client saw it, by
/// request id (the simulator's arrival ordinal, `gap.rs`).
pub fn run_with_fates(scenario: &Scenario, cfg: &LoadConfig) -> Result<(LoadReport, Fates), LoadError> {
    run_inner(scenario, cfg, true).map(|(r, f)| (r, f.expect("kept")))
}

fn run_inner(
    scenario: &Scenario,
    cfg: &LoadConfig,
    keep_fates: bool,
) -> Result<(LoadReport, Option<Fates>), LoadError> {
    let schedule = schedule(scenario, cfg.rate_rps, cfg.warmup + cfg.duration)?;
    let warmup = cfg.warmup.as_nanos() as Nanos;
    let warmup_sent = schedule.partition_point(|p| p.at < warmup) as u64;
    let slo: Vec<Nanos> =
        scenario.models.iter().map(|m| m.spec.slo).chain(scenario.queries.iter().map(|q| q.slo)).collect();
    let max_slo = slo.iter().copied().max().unwrap_or(0);
    let names: Vec<String> = scenario.models.iter().map(|m| m.spec.name.clone()).collect();
    let queries: Vec<String> = scenario.queries.iter().map(|q| q.name.clone()).collect();
    if cfg.targets.is_empty() {
        let none = std::io::Error::new(std::io::ErrorKind::InvalidInput, "no target to send to");
        return Err(LoadError::Connect(none));
    }
    let to = |i: usize| cfg.targets[i % cfg.targets.len()];
    let halves = (0..cfg.connections.max(1)).map(|i| client::connect(to(i))).collect::<Result<Vec<_>, _>>();
    let (senders, receivers): (Vec<Sender>, Vec<Receiver>) = halves.map_err(LoadError::Connect)?.into_iter().unzip();
    let n = schedule.len();
    // Everything a run writes per request is made before the clock starts
    // (faulting in tens of megabytes after it sent the first requests
    // 20 ms late), and each generator thread's room for every answer it
    // may read too: a list of millions grown while answers arrive moves
    // (or faults in) megabytes in one turn.
    let sent: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
    let answered: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
    let threads = cfg.cores.len().clamp(1, senders.len());
    let mut tallies: Vec<Tally> = (0..threads)
        .map(|_| {
            // Room for every answer, as for the latencies (the runs that keep them are short).
            let fates = keep_fates.then(|| Vec::with_capacity(n.div_ceil(threads) + 1024));
            let mut t = Tally { latency_us: Vec::with_capacity(n.div_ceil(threads) + 1024), fates, ..Tally::default() };
            prefault(&mut t.latency_us);
            t
        })
        .collect();
    // The clock starts once every generator thread is up (`drive` waits
    // for it): a thread that came up after the first requests were due
    // would send them at once, a clump the simulator never sees (measured:
    // the first five requests of a 15,500 r/s uniform run, due 65 µs
    // apart, reached the frontend at one instant).
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| (d + START_AFTER).as_nanos() as u64);
    let shared = Shared {
        start: Instant::now() + START_AFTER,
        start_unix_ns,
        sent,
        schedule,
        models: scenario.models.len(),
        warmup,
        path: Mutex::new(P99Window::default()),
        path_ns: AtomicU64::new(0),
        slo,
        answered,
        answers: AtomicU64::new(0),
    };
    // Threads: one per generator core, at most one per connection; each
    // drives its connections in one loop (`drive.rs`), from a thread of
    // its own pinned and reniced there: the caller's thread (a harness
    // that starts engines between runs, which inherit its priority and
    // cores) keeps its own.
    let mut shares: Vec<Vec<drive::Conn>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, (tx, rx)) in senders.into_iter().zip(receivers).enumerate() {
        shares[i % threads].push(drive::Conn::new(i, tx, rx).map_err(LoadError::Connect)?);
    }
    let floats = |m: usize| cfg.input_floats.get(m).or(cfg.input_floats.last()).copied().unwrap_or(0);
    let plan = drive::Plan {
        names: &names,
        queries: &queries,
        floats: &floats,
        connections: cfg.connections.max(1),
        drain: cfg.drain + Duration::from_nanos(max_slo),
        progress: cfg.progress,
        spin: cfg.spin,
    };
    let (plan, shared_ref, nice) = (&plan, &shared, cfg.nice);
    let driven: Vec<Result<(Tally, u64), LoadError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .into_iter()
            .enumerate()
            .map(|(i, conns)| {
                let tally = tallies.pop().expect("one per thread");
                let core = cfg.cores.get(i).copied();
                scope.spawn(move || {
                    if let Some(id) = core {
                        core_affinity::set_for_current(core_affinity::CoreId { id });
                    }
                    set_nice(nice);
                    drive::drive(plan, shared_ref, conns, tally)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a generator thread does not panic")).collect()
    });
    if cfg.progress {
        eprintln!();
    }
    let mut max_lag = 0u64;
    for d in driven {
        let (t, lag) = d?;
        tallies.push(t);
        max_lag = max_lag.max(lag);
    }
    let mut t = Tally::default();
    let mut fates = keep_fates.then(|| vec![None; n]);
    for x in tallies {
        if let (Some(all), Some(mine)) = (&mut fates, &x.fates) {
            for &(id, a) in mine {
                all[id] = Some(a);
            }
        }
        t.ok += x.ok;
        t.late += x.late;
        t.dropped += x.dropped;
        t.errors += x.errors;
        t.duplicates += x.duplicates;
        t.latency_us.extend(x.latency_us);
        t.refused_us.extend(x.refused_us);
        t.accuracy_sum += x.accuracy_sum;
        t.accuracy_ok += x.accuracy_ok;
        t.overhead.merge(&x.overhead);
        t.batch_sum += x.batch_sum;
        for (b, c) in x.batch_sizes {
            *t.batch_sizes.entry(b).or_default() += c;
        }
        for (k, c) in x.drop_reasons {
            bump(&mut t.drop_reasons, k, c);
        }
        for (k, c) in x.error_codes {
            bump(&mut t.error_codes, k, c);
        }
        for (k, c) in x.failed_stages {
            bump(&mut t.failed_stages, k, c);
        }
        for (i, &c) in x.bad_by_second.iter().enumerate() {
            add_at(&mut t.bad_by_second, i, c);
        }
        for (i, &c) in x.ok_by_target.iter().enumerate() {
            add_at(&mut t.ok_by_target, i, c);
        }
    }
    let mut sent_by_target = vec![0u64; shared.slo.len()];
    for p in &shared.schedule[warmup_sent as usize..] {
        sent_by_target[p.target(shared.models)] += 1;
    }
    let targets = names
        .iter()
        .chain(&queries)
        .zip(sent_by_target)
        .enumerate()
        .map(|(i, (name, sent))| {
            let ok = t.ok_by_target.get(i).copied().unwrap_or(0);
            TargetReport { name: name.clone(), sent, ok, bad_rate: bad_share(sent, ok) }
        })
        .collect();
    let sent = n as u64 - warmup_sent;
    let answered_ok = t.latency_us.len() as u64;
    let secs = cfg.duration.as_secs_f64();
    let report = LoadReport {
        target: cfg.targets.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(","),
        offered_rps: cfg.rate_rps,
        duration_s: secs,
        warmup_s: cfg.warmup.as_secs_f64(),
        warmup_sent,
        sent,
        ok: t.ok,
        late: t.late,
        dropped: t.dropped,
        errors: t.errors,
        unanswered: n as u64 - shared.answers.load(Ordering::Relaxed),
        duplicates: t.duplicates,
        bad_rate: bad_share(sent, t.ok),
        goodput_rps: t.ok as f64 / secs,
        p50_ms: percentile_ms(&mut t.latency_us, 0.5),
        p99_ms: percentile_ms(&mut t.latency_us, 0.99),
        p999_ms: percentile_ms(&mut t.latency_us, 0.999),
        not_ok_p50_ms: percentile_ms(&mut t.refused_us, 0.5),
        not_ok_p99_ms: percentile_ms(&mut t.refused_us, 0.99),
        mean_batch: if answered_ok == 0 { 0.0 } else { t.batch_sum as f64 / answered_ok as f64 },
        batch_sizes: t.batch_sizes,
        mean_accuracy: (t.accuracy_ok > 0).then(|| t.accuracy_sum / t.accuracy_ok as f64),
        overhead: t.overhead.report(),
        overhead_histograms: t.overhead,
        max_send_lag_ms: max_lag as f64 / 1e6,
        path_p99_us: shared.path_ns.load(Ordering::Relaxed) as f64 / 1e3,
        generator_cores: cfg.cores.clone(),
        generator_spun: cfg.spin,
        drop_reasons: t.drop_reasons.into_iter().map(|(k, c)| (format!("{k:?}"), c)).collect(),
        error_codes: t.error_codes.into_iter().map(|(k, c)| (format!("{k:?}"), c)).collect(),
        failed_stages: t.failed_stages,
        bad_by_second: t.bad_by_second,
        targets,
    };
    Ok((report, fates))
}

pub fn print(r: &LoadReport) {
    let cores = if r.generator_cores.is_empty() { "any".to_string() } else { format!("{:?}", r.generator_cores) };
    println!(
        "target {}  offered {:.0} r/s for {:.1} s after {:.1} s of warm-up ({} sent, not counted)  generator on cores {cores}",
        r.target, r.offered_rps, r.duration_s, r.warmup_s, r.warmup_sent
    );
    println!(
        "sent {}  ok {}  late {}  dropped {}  errors {}  unanswered {}  duplicates {}",
        r.sent, r.ok, r.late, r.dropped, r.errors, r.unanswered, r.duplicates
    );
    println!("in SLO {:.1} r/s  bad rate {:.4}", r.goodput_rps, r.bad_rate);
    if r.targets.iter().filter(|t| t.sent > 0).count() > 1 {
        let each: Vec<String> = r.targets.iter().map(|t| format!("{} {:.4}", t.name, t.bad_rate)).collect();
        println!("bad rate by model or query: {}  (worst {:.4})", each.join("  "), r.worst_bad_rate());
    }
    println!("latency p50 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms", r.p50_ms, r.p99_ms, r.p999_ms);
    if r.dropped + r.errors > 0 {
        println!("answers not ok: latency p50 {:.3} ms  p99 {:.3} ms", r.not_ok_p50_ms, r.not_ok_p99_ms);
    }
    println!("mean batch {:.2}  max send lag {:.3} ms", r.mean_batch, r.max_send_lag_ms);
    if let Some(a) = r.mean_accuracy {
        println!("mean accuracy of in-SLO answers {a:.2}%");
    }
    println!("{}", crate::overhead::one_line(&r.overhead));
    let sizes: Vec<String> = r.batch_sizes.iter().map(|(b, c)| format!("{b}:{c}")).collect();
    println!("requests by batch size: {}", sizes.join(" "));
    if !r.drop_reasons.is_empty() {
        println!("drops: {:?}", r.drop_reasons);
    }
    if !r.error_codes.is_empty() {
        println!("errors: {:?}", r.error_codes);
    }
    if !r.failed_stages.is_empty() {
        println!("failed queries by stage: {:?}", r.failed_stages);
    }
}

#[cfg(test)]
mod tests {
    use super::{nice_for, split_cores, split_for_compute, LoadReport, TargetReport, SHARING_NICE};

    fn target(name: &str, sent: u64, ok: u64) -> TargetReport {
        TargetReport { name: name.into(), sent, ok, bad_rate: super::bad_share(sent, ok) }
    }

    /// Goodput's 1% holds for each model on its own: a small model's misses
    /// do not pass for the mix's.
    #[test]
    fn a_run_meets_its_slos_only_when_every_model_does() {
        let mut r = LoadReport {
            sent: 10_000,
            ok: 9_930,
            bad_rate: 0.007,
            targets: vec![target("big", 9_000, 8_980), target("small", 1_000, 950), target("idle", 0, 0)],
            ..Default::default()
        };
        assert!(!r.meets_slos(), "small misses 5%");
        assert!((r.worst_bad_rate() - 0.05).abs() < 1e-9);
        r.targets[1] = target("small", 1_000, 990);
        assert!(r.meets_slos(), "1% each, and a target sent nothing is not held to it");
        r.unanswered = 1;
        assert!(!r.meets_slos(), "every request answered");
        r.unanswered = 0;
        r.bad_rate = 0.02;
        assert!(!r.meets_slos(), "the mix too");
    }

    #[test]
    fn the_generator_yields_only_where_it_may_share_the_servers_cores() {
        assert_eq!(nice_for(Some(&[0]), &[], &[1]), 0);
        assert_eq!(nice_for(Some(&[0]), &[], &[0]), SHARING_NICE);
        assert_eq!(nice_for(Some(&[0]), &[1], &[1]), SHARING_NICE, "a compute thread's core");
        assert_eq!(nice_for(None, &[], &[1]), SHARING_NICE, "a server not pinned runs anywhere");
        assert_eq!(nice_for(Some(&[0]), &[], &[]), SHARING_NICE, "a generator not pinned runs anywhere");
    }

    #[test]
    fn the_generator_takes_the_last_quarter_and_compute_threads_the_last_cores() {
        assert_eq!(split_cores(&[3]), None);
        assert_eq!(split_cores(&[0, 1]), Some((vec![0], vec![1])));
        let eight: Vec<usize> = (0..8).collect();
        assert_eq!(split_cores(&eight), Some(((0..6).collect(), vec![6, 7])));
        // One core is always left for the server and the generator.
        assert_eq!(split_for_compute(&[0, 1], 1), (vec![0], vec![1]));
        assert_eq!(split_for_compute(&[0, 1], 4), (vec![0], vec![1]));
        assert_eq!(split_for_compute(&[5], 1), (vec![5], vec![]));
        assert_eq!(split_for_compute(&eight, 2), ((0..6).collect(), vec![6, 7]));
        assert_eq!(split_for_compute(&eight, 0), (eight.clone(), vec![]));
    }
}
