//! The thread-per-core runtime of `baton serve`: every role in one
//! process, on shards that are glommio executors pinned to cores.
//!
//! - The *frontend shard* owns the TCP listener and every client
//!   connection (io_uring through glommio) and the frontend role.
//! - The *scheduler shard* owns the scheduler role (the `baton-sched`
//!   policy) and the backends (emulated GPUs, or the CUDA executor's
//!   models on real ones with `--executor cuda`), with one timer wheel for
//!   both.
//!
//! The shards share nothing mutable: they exchange `Envelope`s through a
//! pair of bounded SPSC rings (`baton_net::mesh`); a full ring keeps the
//! sender's messages in its own queue (backpressure) rather than dropping
//! them. The model table is published at start-up and read per request
//! through crossbeam-epoch (`Published`); nothing republishes it yet.
//! Each shard runs one pump task that drains its link, fires due timers
//! and flushes what it produced; while busy it turns through the reactor
//! every so often between rounds, so sockets are served, and it parks
//! when idle (`park.rs`, `lead.rs`).
//!
//! The same two shard programs run the roles as separate processes
//! (`process.rs`): there the link is a `Router` of TCP peers (`router.rs`)
//! instead of a ring (`link.rs`).
//!
//! With `model_shards = K > 0` and a Symphony policy, Symphony runs split
//! as it was designed: the rank shard with the backends on the scheduler
//! shard, and each of K model shards (model m on shard m mod K) on a shard
//! of its own, pinned round-robin over the cores; Symphony's own messages
//! (`ToRank`, `ToModel`) cross the rings like any other. Other policies
//! run whole on the scheduler shard.
//!
//! With `backend_shards = B > 0` the backends leave the scheduler shard for
//! B shards of their own after the model shards, each a contiguous range of
//! them (`Layout::backends_of`); a message for backend b goes to the shard
//! holding it. Their batches' host work (inputs gathered, outputs
//! answered, a CUDA executor's staging) then runs beside, not inside, the
//! policy's rounds.
//!
//! Shards are pinned round-robin over the cores `topology.rs` lists (one
//! NUMA node's, when the operator names one).
//!
//! A policy that splits GPUs (glet) gets one backend per partition of its
//! plan (`partitions.rs`).
//!
//! `clients.rs` runs the same engine with in-process clients (an
//! open-loop generator) in place of the TCP frontend shard: perf's stress
//! harness, set beside Symphony's own dispatcher benchmark.
//!
//! With `frontend_shards = F > 1`, shards `0..F` are frontends, each a
//! frontend role with its own listener on the one port (SO_REUSEPORT: the
//! kernel spreads connections over them) and its own held requests; the
//! scheduler's replies go to the frontend a request came through (its
//! `Addr::Frontend(f)` is shard f). A scheduler-side shard pinned to a
//! frontend shard's core runs in that frontend's loop. The first frontend
//! takes the gateway's calls; `/metrics` adds up every frontend's answers.

mod alarms;
pub mod clients;
mod frontend_shard;
mod gateway;
#[cfg(feature = "hwloc")]
mod hwloc;
mod lead;
pub(crate) mod link;
mod marked;
mod park;
pub(crate) mod part;
mod process;
mod router;
mod sched_shard;
mod stall;
pub mod topology;

pub use baton_net::tcp::{auth, conn};
pub use process::{start_role, RoleProcess, RoleSpec};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use baton_net::kserve::{self, Gateway, GatewayConfig};
use baton_net::mesh::mesh;
use baton_sched::build;
use baton_sched::scenario::Scenario;
use baton_sched::symphony::CandidateRule;
use baton_sched::time::Nanos;
use baton_sched::PolicyKind;
use glommio::{LocalExecutorBuilder, Placement};

use crate::clock::Clock;
use crate::models::{ExecutorChoice, ModelTable, Unsupported};
use crate::partitions::Partitioned;
use crate::publish::Published;
use crate::roles::backend::BackendStats;
use crate::roles::frontend::FrontendStats;
use crate::roles::scheduler::SchedulerStats;
use link::{Layout, Link, Ring, ShardMsg};
use park::{doorbell, Bell, Doorbell, Rhythm};
use part::SchedulerPart;

/// The default `reserve_floor`: loopback TCP both ways on a loaded small
/// machine, measured as the ingress and egress parts' p99 (`baton load`).
pub const DEFAULT_RESERVE_FLOOR: Nanos = 250_000;

/// How long a connection whose client reads too slowly waits before
/// looking at its unsent bytes again.
pub const IDLE: Duration = Duration::from_micros(50);

/// Registered memory per frontend for inputs, unless set.
pub const DEFAULT_RDMA_REGION: usize = 64 << 20;
/// Each backend's landing memory for READs and how many it keeps in flight.
const RDMA_LANDING: usize = 16 << 20;
const RDMA_DEPTH: usize = 4_096;

impl EngineConfig {
    /// How many frontend shards serve.
    fn frontends(&self) -> usize {
        self.frontend_shards.max(1)
    }

    /// A frontend's registered memory, when one-sided fetch is on.
    fn input_store(&self) -> Result<Option<Box<dyn baton_net::rdma::InputStore>>, EngineError> {
        let store = self.fabric.as_ref().map(|f| f.store(self.rdma_region_bytes)).transpose();
        store.map_err(|e| EngineError::Shard(format!("cannot register memory for inputs: {e}")))
    }

    /// A backend's reader of registered inputs, when one-sided fetch is on.
    fn input_reader(&self) -> Result<Option<Box<dyn baton_net::rdma::InputReader>>, String> {
        let reader = self.fabric.as_ref().map(|f| f.reader(RDMA_LANDING, RDMA_DEPTH)).transpose();
        reader.map_err(|e| format!("cannot register landing memory for READs: {e}"))
    }
}

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub listen: SocketAddr,
    /// Floats in each request's input tensor.
    pub input_floats: usize,
    /// Requests the frontend holds at most; more are refused as overloaded.
    pub frontend_capacity: usize,
    /// Messages a frontend lets wait to reach its scheduler (the ring or
    /// connection to it is full) before it sheds new requests `Overloaded`.
    pub max_waiting: usize,
    /// Frontends turn a share of arrivals away (`Overloaded`) while the
    /// engine runs behind its plans (`roles/overload.rs`): past its
    /// capacity it then serves part of the load in time instead of almost
    /// none, at the price of requests turned away near its limit. Off by
    /// default.
    pub shed_when_behind: bool,
    /// Frontends turn away (`Overloaded`) a request that waited more than
    /// this share of its SLO before they read it, and the arrivals after it
    /// until one waited at most half the share, where the wait is known
    /// (the in-process clients: how far their loop is behind; not over
    /// TCP): a loop put behind by a stall then catches up instead of
    /// settling where every request reaches it too late to serve
    /// (`roles/overload.rs`). 1 or more: off.
    pub shed_aged_share: f64,
    /// Connections the frontend keeps open at most; more are answered
    /// `Overloaded` and closed.
    pub max_connections: u64,
    /// Answer bytes a client may leave unread before its connection is
    /// aborted (it is not reading; the frontend buffers no more for it).
    pub max_unread: usize,
    /// Bytes a role process lets a peer role leave unread before it cuts
    /// the connection (the peer is treated as gone).
    pub max_peer_unread: usize,
    /// Relative jitter of the emulated GPUs' batch times.
    pub jitter: f64,
    /// Slots of each ring between the shards.
    pub ring_capacity: usize,
    /// The aggregate rate static planners (Nexus) plan for; 0: the
    /// scenario's `rate_rps`.
    pub plan_rate_rps: f64,
    /// Symphony's model shards on shards of their own (0: the policy runs
    /// whole on the scheduler shard). Other policies run whole regardless.
    pub model_shards: usize,
    /// Shards of their own for the backends, each a contiguous range of
    /// them (0: every backend on the scheduler shard, beside the policy).
    /// A backend's host work (its batches' inputs and outputs, a CUDA
    /// executor's staging) then leaves the scheduler's core.
    pub backend_shards: usize,
    /// Frontend shards of `baton serve`, each listening on `listen` (the
    /// kernel spreads connections over them) and each a frontend role of
    /// its own with the capacities above (0 counts as 1). In-process
    /// clients and a role process run one.
    pub frontend_shards: usize,
    /// Pin every shard to cores of a NUMA node (that named, or that a GPU
    /// or NIC hangs off) and bind its memory there (None: any core).
    pub near: Option<topology::Near>,
    /// Pin the shards, round-robin, to these of the cores placement allows
    /// (None: all of them), leaving the others to a co-located client.
    pub cores: Option<Vec<usize>>,
    /// One-sided input fetch: frontends keep inputs in this fabric's
    /// registered memory (`rdma_region_bytes` each) and backends READ them
    /// (None: backends fetch inputs over TCP).
    pub fabric: Option<baton_net::rdma::Fabric>,
    pub rdma_region_bytes: usize,
    /// What runs the batches.
    pub executor: ExecutorChoice,
    /// Cores for the executors' compute threads (the CPU executor's):
    /// backend b's on `compute_cores[b % len]`; when empty, the cores of
    /// the placement no shard uses, if any, else none pinned. A compute
    /// thread left unpinned may share a shard's core, and the shard's
    /// timing then slips by its batches (`baton_gpu::Threaded`).
    pub compute_cores: Vec<usize>,
    /// The least each frontend keeps back of a request's SLO for the
    /// client's network path, which no server clock sees; it adds what it
    /// measures around batches (`roles/reserve.rs`).
    pub reserve_floor: Nanos,
    /// How long a shard keeps polling after its last work before it parks
    /// (0: it parks at once; `park.rs`).
    pub poll: Duration,
    /// The KServe v2 gateway's listeners (none: no gateway).
    pub gateway: GatewayConfig,
    /// The secret role processes prove to each other (`baton_net::tcp::auth`); role
    /// processes refuse to start without one. Unused by `baton serve`.
    pub cluster_key: Option<auth::ClusterKey>,
    /// Where a scheduler process keeps the cluster clock's origin: read if
    /// there, written if not, so a scheduler restarted with the same file
    /// keeps the clock that running frontends and backends use, and they
    /// take it back (without one, each run has a clock of its own).
    pub clock_origin_file: Option<std::path::PathBuf>,
    /// In a cluster partitioned into sub-clusters (`routes.rs`): the
    /// sub-cluster a scheduler process plans for and a backend process
    /// reports to (0 otherwise).
    pub subcluster: u32,
    /// A frontend's routing table: which sub-cluster's scheduler takes
    /// each model's requests (None: one scheduler takes them all).
    pub routes: Option<crate::routes::Routes>,
    /// Symphony's autoscaler: the scheduler counts its signals and gives
    /// its advice to the sink each period (`roles/autoscaling.rs`).
    pub autoscale: Option<(baton_sched::autoscale::AutoscaleConfig, crate::roles::autoscaling::AdviceSink)>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7700".parse().expect("valid address"),
            input_floats: crate::models::DEFAULT_INPUT_FLOATS,
            frontend_capacity: 1 << 20,
            max_waiting: 1 << 16,
            shed_when_behind: false,
            shed_aged_share: 0.8,
            max_connections: 16_384,
            max_unread: 64 << 20,
            max_peer_unread: 256 << 20,
            jitter: 0.0,
            ring_capacity: 1 << 12,
            plan_rate_rps: 0.0,
            model_shards: 0,
            backend_shards: 0,
            frontend_shards: 1,
            near: None,
            cores: None,
            fabric: None,
            rdma_region_bytes: DEFAULT_RDMA_REGION,
            executor: ExecutorChoice::Emulated,
            compute_cores: Vec::new(),
            reserve_floor: DEFAULT_RESERVE_FLOOR,
            poll: Duration::ZERO,
            gateway: GatewayConfig::default(),
            cluster_key: None,
            clock_origin_file: None,
            subcluster: 0,
            routes: None,
            autoscale: None,
        }
    }
}

#[derive(Debug)]
pub enum EngineError {
    Unsupported(Unsupported),
    /// A shard could not start (executor, pinning, locked memory).
    Shard(String),
    Listen(std::io::Error),
    /// A role process without a usable cluster secret.
    Key(auth::KeyError),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unsupported(u) => write!(f, "{u}"),
            Self::Shard(why) => write!(f, "cannot start a shard: {why}"),
            Self::Listen(e) => write!(f, "cannot listen: {e}"),
            Self::Key(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<Unsupported> for EngineError {
    fn from(u: Unsupported) -> Self {
        Self::Unsupported(u)
    }
}

/// What the engine did, read when it stops.
#[derive(Clone, Debug, Default)]
pub struct EngineReport {
    pub frontend: FrontendStats,
    pub scheduler: SchedulerStats,
    pub backends: Vec<BackendStats>,
    /// Client connections accepted, and those closed for a bad frame.
    pub connections: u64,
    pub bad_frames: u64,
    /// Connections refused: `max_connections` were open.
    pub refused_connections: u64,
    /// Accepts that failed (out of descriptors) and were retried.
    pub accept_failures: u64,
    /// Client connections aborted for leaving more than `max_unread`
    /// bytes of answers unread.
    pub unread_closed: u64,
    /// Connections on a role listener closed for not proving they hold
    /// the cluster secret (`baton_net::tcp::auth`).
    pub refused_peers: u64,
    /// Peer connections cut for leaving more than `max_peer_unread` bytes
    /// unread.
    pub cut_peers: u64,
    /// Requests still held by the frontend at shutdown (they were
    /// answered `dropped` then; 0 after a drained run).
    pub held_at_stop: u64,
}

impl EngineReport {
    /// Adds what a scheduler-side shard reports.
    fn add_shard(&mut self, r: sched_shard::Report) {
        self.scheduler.add(&r.scheduler);
        self.backends.extend(r.backends);
    }
}

/// What a running engine (or role process) has done so far, published as
/// it goes for whoever waits for an event instead of sleeping (tests, a
/// supervisor): each frontend shard stores its gauges whenever they change,
/// the scheduler-side shards add their backends' batches once per round.
#[derive(Debug)]
pub struct Progress {
    /// Per frontend shard: what it holds and its open connections.
    frontends: Box<[FrontendGauges]>,
    /// Batches this process's backends have run.
    batches: AtomicU64,
    /// What backends and scheduler parts have done, for `/metrics`.
    gauges: crate::metrics::Gauges,
}

#[derive(Debug, Default)]
struct FrontendGauges {
    /// Requests the frontend has admitted and not answered yet.
    held: AtomicU64,
    /// Client connections open on the frontend.
    open: AtomicU64,
    /// Its answers by model and outcome, copied now and then for the
    /// first shard's `/metrics` when there are several (`Tally`).
    tally: std::sync::Mutex<crate::roles::outcomes::Tally>,
}

impl Progress {
    /// The progress of a process with `frontends` frontend shards (0 for
    /// one that runs none) and these gauges.
    fn new(frontends: usize, gauges: crate::metrics::Gauges) -> Self {
        let frontends = (0..frontends).map(|_| FrontendGauges::default()).collect();
        Self { frontends, batches: AtomicU64::new(0), gauges }
    }

    /// Requests the frontends have admitted and not answered yet.
    pub fn held(&self) -> u64 {
        self.frontends.iter().map(|f| f.held.load(Ordering::Acquire)).sum()
    }

    /// Client connections open on the frontends.
    pub fn connections_open(&self) -> u64 {
        self.frontends.iter().map(|f| f.open.load(Ordering::Acquire)).sum()
    }

    /// Client connections open on each frontend shard.
    pub fn connections_by_shard(&self) -> Vec<u64> {
        self.frontends.iter().map(|f| f.open.load(Ordering::Acquire)).collect()
    }

    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Acquire)
    }

    /// No connection is open on a frontend and every request they read has
    /// been answered: a client that left has had all its requests finish.
    pub fn drained(&self) -> bool {
        // `open` first: a frontend stores `held` before `open`, so a
        // closed connection's last admissions are seen here.
        self.frontends.iter().all(|f| f.open.load(Ordering::Acquire) == 0 && f.held.load(Ordering::Acquire) == 0)
    }

    /// Frontend shard `shard`'s gauges (`held` before `open`, for `drained`).
    fn set_frontend(&self, shard: usize, held: u64, open: u64) {
        let f = &self.frontends[shard];
        f.held.store(held, Ordering::Release);
        f.open.store(open, Ordering::Release);
    }

    /// Frontend shard `shard`'s answers so far.
    fn set_tally(&self, shard: usize, tally: &crate::roles::outcomes::Tally) {
        self.frontends[shard].tally.lock().unwrap_or_else(|p| p.into_inner()).clone_from(tally);
    }

    /// Every frontend shard's answers, as last copied.
    fn tally(&self) -> crate::roles::outcomes::Tally {
        let mut all = crate::roles::outcomes::Tally::default();
        for f in self.frontends.iter() {
            all.add(&f.tally.lock().unwrap_or_else(|p| p.into_inner()));
        }
        all
    }

    fn add_batches(&self, n: u64) {
        self.batches.fetch_add(n, Ordering::AcqRel);
    }
}

pub struct Engine {
    pub addr: SocketAddr,
    /// Where the KServe gateway listens (HTTP with `/metrics`, and gRPC).
    pub http: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    gateway: Option<Gateway>,
    /// The core each shard is pinned to: the frontend shards' first.
    pub cores: Vec<usize>,
    /// The cores CPU compute threads are pinned to (`EngineConfig::compute_cores`
    /// as given, or the placement's cores no shard uses); empty: not pinned.
    pub compute_cores: Vec<usize>,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    frontends: Vec<glommio::ExecutorJoinHandle<frontend_shard::Report>>,
    sched: Vec<glommio::ExecutorJoinHandle<sched_shard::Report>>,
}

/// The model table of a scenario the engine can serve under `policy`.
/// For a policy that splits GPUs, the table says which partition each
/// backend runs on, as the policy plans them for `cfg.plan_rate_rps`.
fn servable(scenario: &Scenario, policy: PolicyKind, cfg: &EngineConfig) -> Result<ModelTable, EngineError> {
    let unsupported = |why: String| EngineError::Unsupported(Unsupported(why));
    scenario.supports(policy).map_err(unsupported)?;
    if !scenario.faults.is_empty() && cfg.model_shards > 0 && CandidateRule::of(policy).is_some() {
        // The rank shard stops granting a failed backend, but the model
        // shards keep no batches in flight, so nobody would drop those the
        // backend held (the whole policy's scheduler role does).
        let why = "backend faults with Symphony split over model shards (run it whole: --model-shards 0)";
        return Err(unsupported(why.into()));
    }
    let mut table = ModelTable::for_executor(scenario, &cfg.executor, cfg.input_floats)?;
    if policy.needs_partition_profiles() {
        match cfg.executor {
            ExecutorChoice::Emulated | ExecutorChoice::Cuda(_) => {}
            ExecutorChoice::Cpu(_) => {
                let why =
                    format!("{} runs GPU partitions, which the emulated and CUDA executors serve", policy.as_str());
                return Err(unsupported(why));
            }
        }
        if !table.prefixes.is_empty() {
            // A partition's executor times plain batches (L(b, p)), as the simulator does.
            return Err(unsupported(format!("prefix groups on {}'s GPU partitions", policy.as_str())));
        }
        let planned = build::scheduler(policy, scenario, plan_rate(scenario, policy, cfg));
        table.partitions = Partitioned::of(scenario, planned.as_ref())?.map(Arc::new);
    }
    Ok(table)
}

/// The aggregate rate static planners plan for: the configured one, or
/// the scenario's. Without either, a partition planner plans for the
/// cluster's capacity bound — it scales its plan to fill the GPUs from
/// any rate within a factor of 64 (`glet::plan_for_gpus`), and only the
/// mix matters.
fn plan_rate(scenario: &Scenario, policy: PolicyKind, cfg: &EngineConfig) -> f64 {
    match (cfg.plan_rate_rps, scenario.rate_rps) {
        (r, _) if r > 0.0 => r,
        (_, Some(r)) => r,
        _ if policy.needs_partition_profiles() => scenario.capacity_bound_rps(),
        _ => 0.0,
    }
}

/// The gateway's door and the frontend shard's inbox behind it, when `cfg`
/// asks for a gateway (`gateway.rs`).
fn gateway_parts(
    cfg: &EngineConfig,
    bell: Bell,
    table: &Arc<Published<ModelTable>>,
) -> (Option<Arc<gateway::Bridge>>, Option<gateway::Inbox>) {
    if cfg.gateway.http.is_none() && cfg.gateway.grpc.is_none() {
        return (None, None);
    }
    let (bridge, inbox) = gateway::bridge(bell, Arc::clone(table));
    (Some(Arc::new(bridge)), Some(inbox))
}

/// Starts the gateway behind `bridge`, if there is one.
fn start_gateway(bridge: Option<Arc<gateway::Bridge>>, cfg: &EngineConfig) -> Result<Option<Gateway>, EngineError> {
    let Some(bridge) = bridge else { return Ok(None) };
    kserve::start(bridge, &cfg.gateway).map(Some).map_err(EngineError::Listen)
}

/// A shard's executor, placed by `placement`: it spins `SPIN_BEFORE_PARK`
/// before parking its thread, so a pump's turn through the reactor does
/// not sleep in the kernel (`park.rs`).
fn shard_executor(placement: Placement, name: &str) -> LocalExecutorBuilder {
    LocalExecutorBuilder::new(placement).name(name).spin_before_park(park::SPIN_BEFORE_PARK)
}

/// Raises the locked-memory soft limit to the hard one: io_uring needs
/// some, and defaults can be below glommio's 512 KiB minimum.
fn raise_memlock() {
    // SAFETY: getrlimit/setrlimit read and write a plain struct we own.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim);
        }
    }
}

/// The scheduler side of a started engine, and what its front shards (the
/// TCP frontends, or in-process clients: `clients.rs`) are handed.
struct Back {
    sched: Vec<glommio::ExecutorJoinHandle<sched_shard::Report>>,
    table: ModelTable,
    clock: Clock,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    /// The front shards' ends, in shard order.
    fronts: Vec<Front>,
    /// The core each shard is pinned to: the front shards' first.
    cores: Vec<usize>,
    /// The NUMA node shards bind their memory to, if placed on one.
    node: Option<usize>,
    /// The configuration with the rate planners plan for filled in.
    cfg: EngineConfig,
}

/// What a front shard is handed: its rings, its doorbell, and the
/// scheduler-side shards pinned to its core, whose pumps its loop drives.
struct Front {
    ring: Ring,
    doorbell: Doorbell,
    hosted: Vec<Hosted>,
}

impl Back {
    /// Stops the scheduler shards and adds what they report to `report`.
    fn stop(
        sched: Vec<glommio::ExecutorJoinHandle<sched_shard::Report>>,
        stop: &AtomicBool,
        report: &mut EngineReport,
    ) {
        stop.store(true, Ordering::Release);
        for h in sched {
            report.add_shard(h.join().expect("a scheduler shard does not panic"));
        }
    }
}

/// A scheduler-side shard a front shard's pump drives beside its own:
/// shards pinned to one core share one event loop, as Symphony's
/// single-threaded dispatcher does, instead of two threads taking turns on
/// the core through the kernel (each of whose sleeps and wake-ups costs a
/// system call and a time slice).
struct Hosted {
    slot: usize,
    part: SchedulerPart,
    backends: std::ops::Range<u32>,
    ring: Ring,
}

/// The `hosted` shards' states, built on the front shard's thread, with
/// their links.
fn build_hosted(
    hosted: Vec<Hosted>,
    scenario: &Scenario,
    table: &ModelTable,
    cfg: &EngineConfig,
    clock: &Clock,
    node: Option<usize>,
) -> Result<Vec<(sched_shard::State, Link)>, EngineError> {
    let build = |h: Hosted| {
        let state = shard_state(scenario, h.part, h.backends, table, cfg, clock, h.slot, node);
        Ok((state.map_err(EngineError::Shard)?, Link::Ring(h.ring)))
    };
    hosted.into_iter().map(build).collect()
}

/// Scheduler-side shard `slot`'s state, built on the thread that runs it
/// (its memory bound to `node`, if placed on one).
#[allow(clippy::too_many_arguments)]
fn shard_state(
    scenario: &Scenario,
    part: SchedulerPart,
    backends: std::ops::Range<u32>,
    table: &ModelTable,
    cfg: &EngineConfig,
    clock: &Clock,
    slot: usize,
    node: Option<usize>,
) -> Result<sched_shard::State, String> {
    topology::bind_memory(node)?;
    let mut state = sched_shard::State::new(scenario, part, backends, table, cfg, clock.now())?;
    state.slot = slot;
    // The frontends, in this process from the start.
    for f in 0..cfg.frontends() {
        state.peer(clock.now(), crate::roles::Addr::Frontend(f as u32), true);
    }
    Ok(state)
}

/// Starts the scheduler side of serving `scenario`'s models under `policy`:
/// every shard but the front ones (`cfg.frontends()` of them), each part
/// built on its own shard; those pinned to a front shard's core are left to
/// that front shard to drive (`Front::hosted`).
fn start_back(scenario: &Scenario, policy: PolicyKind, cfg: &EngineConfig) -> Result<Back, EngineError> {
    let table = servable(scenario, policy, cfg)?;
    let backends = table.backends(scenario.cluster.backends);
    raise_memlock();
    let clock = Clock::new();
    let stop = Arc::new(AtomicBool::new(false));
    // Symphony's model shards get shards of their own when asked for.
    let rule = CandidateRule::of(policy).filter(|_| cfg.model_shards > 0);
    let frontends = cfg.frontends();
    let model_shards = if rule.is_some() { cfg.model_shards } else { 0 };
    // More backend shards than backends would leave some empty.
    let backend_shards = cfg.backend_shards.min(backends as usize);
    let layout = Layout { frontends, model_shards, backend_shards, backends };
    let gauges = crate::metrics::Gauges::new(backends as usize, layout.sched_shards().len());
    let progress = Arc::new(Progress::new(frontends, gauges));
    let topology::Placement { cores, node } =
        topology::place_on(cfg.near.as_ref(), cfg.cores.as_deref()).map_err(EngineError::Shard)?;
    let core = |shard: usize| cores[shard % cores.len()];
    // The front shard, if any, whose loop drives scheduler-side shard `shard`.
    let host_of = |shard: usize| (0..frontends).find(|&f| core(f) == core(shard)).filter(|_| shard >= frontends);
    // A hosted shard is woken by its host's bell: one loop, one bell.
    let doorbells = (0..layout.shards()).map(|_| doorbell()).collect::<Result<Vec<_>, _>>();
    let doorbells = doorbells.map_err(|e| EngineError::Shard(format!("cannot make a doorbell: {e}")))?;
    let bells: Vec<Bell> = (0..layout.shards()).map(|s| doorbells[host_of(s).unwrap_or(s)].bell()).collect();
    let compute_cores = compute_cores(cfg, &cores, layout.shards());
    let cfg = &EngineConfig { plan_rate_rps: plan_rate(scenario, policy, cfg), compute_cores, ..cfg.clone() };
    let mut links = mesh::<ShardMsg>(layout.shards(), cfg.ring_capacity).into_iter();
    let mut doorbells = doorbells.into_iter();
    let front_ends: Vec<_> = links.by_ref().zip(doorbells.by_ref()).take(frontends).collect();
    let mut hosted: Vec<Vec<Hosted>> = (0..frontends).map(|_| Vec::new()).collect();
    // The scheduler side: its first shard holds the policy (or Symphony's
    // rank shard) and every backend, or none where backends have shards of
    // their own; the next hold Symphony's model shards, then the backend
    // shards. Each part's state is built on the shard that owns it.
    let mut sched = Vec::with_capacity(layout.sched_shards().len());
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    for (i, (shard_links, doorbell)) in links.zip(doorbells).enumerate() {
        let shard = layout.sched() + i;
        let on_sched = if backend_shards == 0 { 0..backends } else { 0..0 };
        let (part, backends) = match (i, rule) {
            (0, None) => (SchedulerPart::Whole(policy), on_sched),
            (0, Some(_)) => (SchedulerPart::Rank, on_sched),
            (i, _) if i > model_shards => (SchedulerPart::None, layout.backends_of(i - 1 - model_shards)),
            (_, Some(rule)) => (SchedulerPart::Models { index: i - 1, of: model_shards, rule }, 0..0),
            (_, None) => unreachable!("model shards only with a candidate rule"),
        };
        let ring = Ring { links: shard_links, layout, bells: bells.clone() };
        if let Some(f) = host_of(shard) {
            hosted[f].push(Hosted { slot: i, part, backends, ring });
            continue;
        }
        let (clock, stop, progress) = (clock.clone(), Arc::clone(&stop), Arc::clone(&progress));
        let (scenario, table, cfg, ready) = (scenario.clone(), table.clone(), cfg.clone(), ready_tx.clone());
        let handle = shard_executor(Placement::Fixed(core(shard)), &format!("baton-sched-{i}"))
            .spawn(move || async move {
                match shard_state(&scenario, part, backends, &table, &cfg, &clock, i, node) {
                    Ok(state) => {
                        let _ = ready.send(Ok(()));
                        let link = Link::Ring(ring);
                        let rhythm = Rhythm::new(doorbell.on_shard(), cfg.poll);
                        sched_shard::run(state, link, clock, stop, rhythm, progress).await
                    }
                    Err(why) => {
                        let _ = ready.send(Err(why));
                        sched_shard::Report::default()
                    }
                }
            })
            .map_err(|e| EngineError::Shard(e.to_string()))?;
        sched.push(handle);
    }
    // Every scheduler shard has built its part (executors included) or
    // said why not; a failed start stops the others.
    let started: Result<Vec<()>, String> = (0..sched.len())
        .map(|_| ready_rx.recv().unwrap_or_else(|_| Err("a scheduler shard exited while starting".into())))
        .collect();
    if let Err(why) = started {
        Back::stop(sched, &stop, &mut EngineReport::default());
        return Err(EngineError::Shard(why));
    }
    let fronts = front_ends
        .into_iter()
        .zip(hosted)
        .map(|((links, doorbell), hosted)| Front {
            ring: Ring { links, layout, bells: bells.clone() },
            doorbell,
            hosted,
        })
        .collect();
    let cores = (0..layout.shards()).map(core).collect();
    Ok(Back { sched, table, clock, stop, progress, fronts, cores, node, cfg: cfg.clone() })
}

/// Where CPU compute threads go: as configured, or for a CPU executor
/// without a choice, the placed cores beyond the first `shards` (those the
/// shards are pinned to), if any; empty: not pinned.
fn compute_cores(cfg: &EngineConfig, placed: &[usize], shards: usize) -> Vec<usize> {
    match (&cfg.executor, cfg.compute_cores.is_empty()) {
        (ExecutorChoice::Cpu(_), true) => placed.iter().skip(shards).copied().collect(),
        _ => cfg.compute_cores.clone(),
    }
}

/// Starts serving `scenario`'s models under `policy` on its
/// `[cluster] gpus` GPUs: emulated, or CUDA devices 0.. with
/// `ExecutorChoice::Cuda`.
pub fn start(scenario: &Scenario, policy: PolicyKind, cfg: &EngineConfig) -> Result<Engine, EngineError> {
    let back = start_back(scenario, policy, cfg)?;
    let Back { sched, table, clock, stop, progress, fronts, cores, node, cfg } = back;
    let (plain, scenario) = (table.clone(), scenario.clone());
    let table = Arc::new(Published::new(table));
    let mut engine = Engine {
        addr: cfg.listen,
        http: None,
        grpc: None,
        gateway: None,
        cores,
        compute_cores: cfg.compute_cores.clone(),
        progress,
        stop,
        frontends: Vec::new(),
        sched,
    };
    let mut bridge = None;
    for (index, front) in fronts.into_iter().enumerate() {
        // The gateway's door leads to the first frontend shard.
        let (door, inbox) = match index {
            0 => gateway_parts(&cfg, front.doorbell.bell(), &table),
            _ => (None, None),
        };
        bridge = bridge.or(door);
        let store = match cfg.input_store() {
            Ok(s) => s,
            Err(e) => {
                engine.shutdown();
                return Err(e);
            }
        };
        let (addr_tx, addr_rx) = mpsc::channel();
        let setup = frontend_shard::Setup {
            index: index as u32,
            slot: index,
            store,
            // The first shard binds the address asked for; the others bind
            // the one it got (its port, where any was asked for). Frontend
            // listeners share the port (glommio sets SO_REUSEPORT), and the
            // kernel spreads new connections over them.
            listen: engine.addr,
            addr_tx,
            table: Arc::clone(&table),
            capacity: cfg.frontend_capacity,
            max_waiting: cfg.max_waiting,
            shed_when_behind: cfg.shed_when_behind,
            max_connections: cfg.max_connections,
            max_unread: cfg.max_unread,
            reserve_floor: cfg.reserve_floor,
            clock: clock.clone(),
            stop: Arc::clone(&engine.stop),
            progress: Arc::clone(&engine.progress),
            doorbell: front.doorbell,
            poll: cfg.poll,
            gateway: inbox,
        };
        let (hosted, ring, hosting, plain, scenario) =
            (front.hosted, front.ring, cfg.clone(), plain.clone(), scenario.clone());
        let spawned = shard_executor(Placement::Fixed(engine.cores[index]), &format!("baton-frontend-{index}")).spawn(
            move || async move {
                // Memory stays where placement asked; a failure to bind it
                // was reported by the scheduler shards, which bind first.
                let _ = topology::bind_memory(node);
                match build_hosted(hosted, &scenario, &plain, &hosting, &setup.clock, node) {
                    Ok(shards) => frontend_shard::run(setup, Link::Ring(ring), None, shards).await,
                    Err(e) => {
                        let _ = setup.addr_tx.send(Err(std::io::Error::other(e.to_string())));
                        frontend_shard::Report::default()
                    }
                }
            },
        );
        match spawned {
            Ok(h) => engine.frontends.push(h),
            Err(e) => {
                engine.shutdown();
                return Err(EngineError::Shard(e.to_string()));
            }
        }
        match addr_rx.recv() {
            Ok(Ok(addr)) => engine.addr = addr,
            Ok(Err(e)) => {
                engine.shutdown();
                return Err(EngineError::Listen(e));
            }
            Err(_) => {
                engine.shutdown();
                return Err(EngineError::Shard("a frontend shard exited while starting".into()));
            }
        }
    }
    match start_gateway(bridge, &cfg) {
        Ok(gateway) => {
            let (http, grpc) = (gateway.as_ref().and_then(|g| g.http), gateway.as_ref().and_then(|g| g.grpc));
            Ok(Engine { http, grpc, gateway, ..engine })
        }
        Err(e) => {
            engine.shutdown();
            Err(e)
        }
    }
}

impl Engine {
    /// What it has done so far (`Progress`), while it runs.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Stops every shard and reports. Requests still held are answered
    /// `dropped` before the connections close.
    pub fn shutdown(self) -> EngineReport {
        self.stop.store(true, Ordering::Release);
        let mut report = EngineReport::default();
        for h in self.frontends {
            let fe = h.join().expect("a frontend shard does not panic");
            report.frontend.add(&fe.stats);
            report.connections += fe.connections;
            report.refused_connections += fe.refused_connections;
            report.unread_closed += fe.unread_closed;
            report.accept_failures += fe.accept_failures;
            report.bad_frames += fe.bad_frames;
            report.held_at_stop += fe.held_at_stop;
            fe.hosted.into_iter().for_each(|r| report.add_shard(r));
        }
        // The frontends have answered what they held, gateway calls
        // included: the gateway writes those answers, then stops.
        if let Some(g) = self.gateway {
            g.stop();
        }
        Back::stop(self.sched, &self.stop, &mut report);
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_gpu::reference::CpuConfig;

    #[test]
    fn cpu_compute_threads_take_the_cores_no_shard_uses_unless_told() {
        let cpu = EngineConfig { executor: ExecutorChoice::Cpu(CpuConfig::small()), ..Default::default() };
        assert_eq!(compute_cores(&cpu, &[0, 1, 2, 3], 2), vec![2, 3]);
        assert_eq!(compute_cores(&cpu, &[0, 1], 2), Vec::<usize>::new());
        let told = EngineConfig { compute_cores: vec![1], ..cpu };
        assert_eq!(compute_cores(&told, &[0, 1, 2, 3], 2), vec![1]);
        // Emulated GPUs compute nothing on threads of their own.
        assert_eq!(compute_cores(&EngineConfig::default(), &[0, 1, 2, 3], 2), Vec::<usize>::new());
    }
}
