//! The engine's commands:
//! - `baton serve [--scenario FILE] [--listen ADDR]`: every role in one
//!   process, serving the scenario's models on emulated GPUs (or with
//!   `--executor cuda` on real ones) under its policy, until SIGINT/SIGTERM
//!   or `--duration`;
//! - `baton load FILE --target ADDR --rate R [--duration S] [--json]`: the
//!   open-loop load generator (`baton_tools::load`);
//! - `baton demo [--scenario FILE] [--rate R]`: starts a server in process,
//!   drives it with the load generator, and prints what it measured next to
//!   what `baton sim` predicts for the same file, rate and seed.
//!
//! Servers and role processes say when they are ready, on one stderr line
//! printed after the signal handlers are installed: `baton serve: ... on
//! ADDR`, `baton scheduler: ... on ADDR`, `baton frontend: ... on ADDR` —
//! ADDR being the bound address, so `--listen 127.0.0.1:0` works (a
//! frontend's line ends `... on ADDR, backends on PEER_ADDR`, where its
//! backends connect) — and `baton backend: ... connected`, once the scheduler has registered the
//! backends (it answers their `Hello` after registering them) and every
//! frontend's connection is open. Whoever drives them (tests, scripts)
//! waits for that line, and stops them with SIGINT or SIGTERM; the final
//! report follows on stdout.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::models::{ExecutorChoice, ModelTable, DEFAULT_INPUT_FLOATS};
use baton_core::roles::autoscaling::{Advice, AdviceSink};
use baton_core::routes::Routes;
use baton_core::runtime::auth::{ClusterKey, KeyError};
use baton_core::runtime::topology::Near;
use baton_core::runtime::{
    start, start_role, Engine, EngineConfig, EngineReport, RoleProcess, RoleSpec, DEFAULT_RESERVE_FLOOR,
};
use baton_gpu::cuda::CudaConfig;
use baton_gpu::reference::CpuConfig;
use baton_net::kserve::GatewayConfig;
use baton_net::rdma::{Fabric, OpenError};
use baton_sched::autoscale::{AutoscaleConfig, PeakSizing};
use baton_sched::time::NANOS_PER_S;
use baton_sched::{PolicyKind, Scenario};
use baton_tools::load::{self, LoadConfig};
use baton_tools::scenarios::{load_scenario, SERVE_SCENARIO};
use baton_tools::{gap, goodput};

#[derive(clap::Args)]
pub(crate) struct EngineArgs {
    /// Scenario TOML file (default: built-in, three models on 4 GPUs).
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Policy, overriding the file's [policy].
    #[arg(long)]
    policy: Option<String>,
    /// Floats in each request's input tensor.
    #[arg(long, default_value_t = DEFAULT_INPUT_FLOATS)]
    input_floats: usize,
    /// Relative jitter of the emulated GPUs' batch times.
    #[arg(long, default_value_t = 0.0)]
    jitter: f64,
    /// Run Symphony's model shards on shards (cores) of their own, this
    /// many; 0 runs the policy whole on the scheduler shard.
    #[arg(long, default_value_t = 0)]
    model_shards: usize,
    /// Run the backends on shards (cores) of their own, this many, each a
    /// contiguous range of them; 0 keeps every backend on the scheduler
    /// shard. Their batches' host work then leaves the scheduler's core.
    /// [default: 1 with `--executor cuda`, whose staging of each batch's
    /// inputs would hold up the policy's rounds (on an H200, cuda-glet at
    /// the simulator's goodput: 34% bad with 1, 51% with 0,
    /// perf/results/cuda_glet_h200.txt); else 0]
    #[arg(long)]
    backend_shards: Option<usize>,
    /// Frontend shards (cores) listening on the one address, connections
    /// spread over them by the kernel; each holds its own requests, up to
    /// the capacities below. A role process runs one.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    frontend_shards: u16,
    /// Pin the engine's shards to the cores of this NUMA node, their memory
    /// bound to it.
    #[arg(long, group = "near")]
    numa_node: Option<usize>,
    /// Place the shards on the NUMA node GPU I hangs off (CUDA's PCI bus
    /// order).
    #[arg(long, group = "near", value_name = "I")]
    near_gpu: Option<usize>,
    /// Place the shards on the NUMA node network interface NAME hangs off.
    #[arg(long, group = "near", value_name = "NAME")]
    near_nic: Option<String>,
    /// Pin the shards to these cores only (comma-separated; of those the
    /// placement allows), leaving the rest to a client on the same machine.
    #[arg(long, value_delimiter = ',')]
    cores: Vec<usize>,
    /// What runs the batches.
    #[arg(long, value_enum, default_value_t = ExecutorKind::Emulated)]
    executor: ExecutorKind,
    /// Pin the CPU executor's compute threads to these cores, backend b's
    /// to the (b mod n)-th (comma-separated; default: the cores the shards
    /// leave of those placed, if any, else not pinned, so the kernel may
    /// run one on a shard's core). `baton demo --executor cpu` gives them
    /// cores of their own unless told.
    #[arg(long, value_delimiter = ',')]
    executor_cores: Vec<usize>,
    /// Microseconds a shard keeps polling after its last work before it
    /// parks (0: park at once; a core is spent only while work flows).
    #[arg(long, default_value_t = 0)]
    poll_us: u64,
    /// The least each frontend keeps back of every SLO for the client's
    /// network path, microseconds: more for a client that says its path is
    /// longer (`InferRequest.path_ns`, as `baton load` does); it adds what
    /// it measures around batches.
    #[arg(long, default_value_t = DEFAULT_RESERVE_FLOOR / 1_000)]
    reserve_us: u64,
    /// Connections the frontend keeps open at most (clients and peer
    /// roles); more are answered `Overloaded` and closed.
    #[arg(long, default_value_t = EngineConfig::default().max_connections)]
    max_connections: u64,
    /// Bytes of answers a client may leave unread before the frontend
    /// aborts its connection (it is not reading; others are unaffected).
    #[arg(long, default_value_t = EngineConfig::default().max_unread)]
    max_unread_bytes: usize,
    /// Messages a frontend lets wait to reach its scheduler before it
    /// sheds new requests `Overloaded`.
    #[arg(long, default_value_t = EngineConfig::default().max_waiting)]
    max_waiting: usize,
    /// Turn a share of arrivals away (`Overloaded`) while the engine runs
    /// behind its plans: past capacity, part of the load is served in time
    /// instead of almost none; near capacity, some requests are turned
    /// away that would have been served.
    #[arg(long)]
    shed_when_behind: bool,
    /// Bytes a role process lets a peer role leave unread before it cuts
    /// that connection (the peer is treated as gone).
    #[arg(long, default_value_t = EngineConfig::default().max_peer_unread)]
    max_peer_unread_bytes: usize,
    /// How backends fetch inputs: `tcp` (they ask the frontends), or
    /// `rdma` (frontends keep inputs in registered memory and backends
    /// READ them, one-sided). Without an RDMA device, rdma says so and
    /// fetches over TCP.
    #[arg(long, value_enum, default_value_t = Transport::Tcp)]
    transport: Transport,
    /// The RDMA device to use (default: the first); `loopback` is the
    /// stand-in fabric for roles in one process (`baton serve`), no NIC.
    #[arg(long)]
    rdma_device: Option<String>,
    /// Registered memory per frontend for inputs, MiB (an input that does
    /// not fit is fetched over TCP).
    #[arg(long, default_value_t = baton_core::runtime::DEFAULT_RDMA_REGION >> 20)]
    rdma_region_mib: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Tcp,
    Rdma,
}

/// The fabric `--transport rdma` asks for: opened, or (no device) None
/// after saying so; a build without verbs is an error.
fn fabric(a: &EngineArgs) -> Result<Option<Fabric>, String> {
    match (a.transport, a.rdma_device.as_deref()) {
        (Transport::Tcp, Some(_)) => Err("--rdma-device: give it with --transport rdma".into()),
        (Transport::Tcp, None) => Ok(None),
        (Transport::Rdma, device) => match Fabric::open(device) {
            Ok(f) => Ok(Some(f)),
            Err(OpenError::Rdma(e)) => {
                eprintln!("baton: {e}: inputs are fetched over TCP");
                Ok(None)
            }
            Err(e) => Err(format!("--transport rdma: {e}")),
        },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorKind {
    /// Each batch takes its profile's l(b), waited out on the engine's clock.
    Emulated,
    /// The CUDA executor's models on the GPUs (backend b on device b); the
    /// scenario names them (resnet-block, encoder-block) with profiles from
    /// `baton profile`, and each request carries that model's input size.
    Cuda,
    /// The CPU reference models (resnet-block, encoder-block, supernet,
    /// encoder-varlen), each backend computing them on a thread of its
    /// own; the scenario names them with profiles from `baton profile
    /// --executor cpu`.
    Cpu,
}

impl ExecutorKind {
    fn noun(self) -> &'static str {
        match self {
            Self::Emulated => "emulated",
            Self::Cuda => "CUDA",
            Self::Cpu => "CPU",
        }
    }

    fn choice(self) -> ExecutorChoice {
        match self {
            Self::Emulated => ExecutorChoice::Emulated,
            Self::Cuda => ExecutorChoice::Cuda(CudaConfig::serving()),
            Self::Cpu => ExecutorChoice::Cpu(CpuConfig::serving()),
        }
    }
}

/// The KServe v2 gateway beside the binary protocol.
#[derive(clap::Args)]
pub struct GatewayArgs {
    /// KServe v2 over HTTP/REST, with Prometheus's /metrics, on ADDR.
    #[arg(long)]
    http_listen: Option<SocketAddr>,
    /// KServe v2 over gRPC on ADDR.
    #[arg(long)]
    grpc_listen: Option<SocketAddr>,
    /// The largest HTTP body or gRPC message the gateway takes, in bytes.
    #[arg(long, default_value_t = GatewayConfig::default().max_body)]
    max_body: usize,
}

impl GatewayArgs {
    /// The gateway's configuration; its HTTP listener takes at most
    /// `max_connections` (the binary listener's `--max-connections`).
    fn config(&self, max_connections: u64) -> GatewayConfig {
        let max_connections = usize::try_from(max_connections).unwrap_or(usize::MAX);
        GatewayConfig { http: self.http_listen, grpc: self.grpc_listen, max_body: self.max_body, max_connections }
    }
}

/// Says where the gateway listens, before the readiness line: `baton
/// gateway: http on ADDR`, `baton gateway: grpc on ADDR`.
fn print_gateway(http: Option<SocketAddr>, grpc: Option<SocketAddr>) {
    for (kind, addr) in [("http", http), ("grpc", grpc)] {
        if let Some(addr) = addr {
            eprintln!("baton gateway: {kind} on {addr}");
        }
    }
}

#[derive(clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    engine: EngineArgs,
    #[command(flatten)]
    gateway: GatewayArgs,
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Rate static planners (nexus) plan for (default: the file's rate_rps).
    #[arg(long)]
    plan_rate: Option<f64>,
    /// Stop after this many seconds (default: at SIGINT or SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
    /// Print the final report as JSON.
    #[arg(long)]
    json: bool,
}

/// Options every separate role process takes.
#[derive(clap::Args)]
pub struct RoleArgs {
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
    /// The file holding the secret every role of the cluster proves it
    /// holds (default: the BATON_CLUSTER_SECRET variable; 16 bytes or more).
    #[arg(long)]
    pub(crate) cluster_secret_file: Option<PathBuf>,
    /// Stop after this many seconds (default: at SIGINT or SIGTERM).
    #[arg(long)]
    pub(crate) duration: Option<f64>,
    /// Print the final report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(clap::Args)]
pub struct SchedulerArgs {
    #[command(flatten)]
    role: RoleArgs,
    #[arg(long, default_value = "127.0.0.1:7701")]
    listen: SocketAddr,
    /// Rate static planners (nexus) plan for (default: the file's rate_rps).
    #[arg(long)]
    plan_rate: Option<f64>,
    /// Keep the cluster clock's origin in this file (read if there, else
    /// written): a scheduler restarted with the same file keeps the clock
    /// that running frontends and backends use, and they take it back.
    #[arg(long)]
    clock_origin_file: Option<PathBuf>,
    /// Symphony's autoscaler: every this many seconds, log the period's
    /// signals and the GPUs to serve next (`baton scheduler: autoscale:
    /// ...` on stderr); start or stop backend processes to follow it.
    #[arg(long)]
    autoscale_period: Option<f64>,
    /// Size for the busiest second of this many periods (peak sizing; 0:
    /// Symphony's flat-top rule alone).
    #[arg(long, default_value_t = 0)]
    autoscale_memory: usize,
    /// Idle share kept when advising fewer GPUs.
    #[arg(long, default_value_t = 0.1)]
    autoscale_headroom: f64,
    /// In a cluster partitioned into sub-clusters (`baton partition`),
    /// the one this scheduler plans for: its backends are started with the
    /// same number, and frontends list it at this place in --scheduler.
    #[arg(long, default_value_t = 0)]
    subcluster: u32,
}

#[derive(clap::Args)]
pub struct FrontendArgs {
    #[command(flatten)]
    role: RoleArgs,
    #[arg(long, default_value = "127.0.0.1:7700")]
    listen: SocketAddr,
    /// Where backends connect (apart from clients).
    #[arg(long, default_value = "127.0.0.1:7702")]
    peer_listen: SocketAddr,
    /// The scheduler, or in a partitioned cluster each sub-cluster's
    /// scheduler in order, comma-separated (with --routes).
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:7701")]
    scheduler: Vec<SocketAddr>,
    /// The routing table of a partitioned cluster: `baton partition
    /// --json`'s output (each sub-cluster's models and GPUs). Read again
    /// whenever the file changes: a model moved there takes its new
    /// requests to its new sub-cluster's scheduler.
    #[arg(long)]
    routes: Option<PathBuf>,
    #[command(flatten)]
    gateway: GatewayArgs,
    /// This frontend's place in the backends' --frontends list.
    #[arg(long, default_value_t = 0)]
    index: u32,
}

#[derive(clap::Args)]
pub struct BackendArgs {
    #[command(flatten)]
    role: RoleArgs,
    #[arg(long, default_value = "127.0.0.1:7701")]
    scheduler: SocketAddr,
    /// The sub-cluster of that scheduler (its --subcluster).
    #[arg(long, default_value_t = 0)]
    subcluster: u32,
    /// Every frontend's address for backends (its --peer-listen), in
    /// index order, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:7702")]
    frontends: Vec<SocketAddr>,
    /// The first of the GPUs this process emulates.
    #[arg(long, default_value_t = 0)]
    first: u32,
    /// How many (default: the rest of the scenario's cluster).
    #[arg(long)]
    count: Option<u32>,
}

#[derive(clap::Args)]
pub struct LoadArgs {
    /// Scenario TOML file: models, weights, arrival laws and seed.
    file: PathBuf,
    /// The frontend, or several, comma-separated: connections are spread
    /// over them round-robin.
    #[arg(long, value_delimiter = ',', required = true)]
    target: Vec<SocketAddr>,
    /// Aggregate offered rate, requests/s (default: the file's rate_rps).
    #[arg(long)]
    rate: Option<f64>,
    /// Seconds of sending that count.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of sending first that do not count, as `baton sim` skips
    /// them (default: the file's warmup_s); every request is still
    /// answered exactly once.
    #[arg(long)]
    warmup: Option<f64>,
    /// Seconds to wait for the last answers after the last send (beyond
    /// the longest SLO); the run ends as soon as every request is answered.
    #[arg(long, default_value_t = 2.0)]
    drain: f64,
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Floats in each request's input: one size for every model, or one
    /// per model of the scenario, comma-separated (the CUDA executor's
    /// models take 9408 and 49152).
    #[arg(long, value_delimiter = ',', default_value = "16")]
    input_floats: Vec<usize>,
    /// Size each model's requests as this executor's models take them
    /// (what `baton serve --executor` checks), instead of --input-floats.
    #[arg(long, value_enum, conflicts_with = "input_floats")]
    executor: Option<ExecutorKind>,
    /// Cores to pin the generator's threads to, comma-separated (default:
    /// not pinned); give it cores the server does not use where the
    /// machine has them.
    #[arg(long, value_delimiter = ',')]
    cores: Vec<usize>,
    /// Busy-poll the sockets instead of sleeping between sends and answers
    /// (for a generator on cores of its own: a client that sleeps adds its
    /// wake-up to what it measures as egress).
    #[arg(long, requires = "cores")]
    spin: bool,
    /// The generator threads' nice value: the default yields to a server
    /// on the same cores; give 0 where the generator has cores of its own.
    #[arg(long, default_value_t = load::SHARING_NICE, allow_negative_numbers = true)]
    nice: i32,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct DemoArgs {
    #[command(flatten)]
    engine: EngineArgs,
    /// Aggregate offered rate (default: the file's rate_rps).
    #[arg(long, conflicts_with = "find_goodput")]
    rate: Option<f64>,
    /// Find the engine's goodput by search (the highest rate at which each
    /// model's and query's requests are at most 1% bad as the client sees
    /// them; a fresh engine and a run of `--duration` per probe) beside the
    /// simulator's on the same file and seed, then run at the simulator's.
    #[arg(long)]
    find_goodput: bool,
    /// Probes the engine's goodput search runs at most.
    #[arg(long, default_value_t = 8)]
    probes: usize,
    /// Set the run beside the simulator's request by request: which
    /// requests are bad in the engine only, and for those late, the part
    /// of the engine's path that ran furthest over the simulator's
    /// (`tools/src/gap.rs`).
    #[arg(long)]
    gap: bool,
    /// Seconds of load that count.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Seconds of load first that do not count, in the engine's run and
    /// the simulator's alike (default: the file's warmup_s).
    #[arg(long)]
    warmup: Option<f64>,
    /// Cores to pin the load generator's threads to (default: the last
    /// quarter of the machine's, at least one, the engine on the others,
    /// unless `--cores` places the engine).
    #[arg(long, value_delimiter = ',')]
    load_cores: Vec<usize>,
    #[arg(long)]
    json: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Release);
}

/// Checks the executor can run here before anything starts: a GPU for the
/// CUDA executor, and a scenario naming its models.
fn check_executor(a: &EngineArgs, s: &Scenario) -> Result<(), String> {
    if a.executor == ExecutorKind::Cuda {
        baton_gpu::cuda::open_context(0).map_err(|e| format!("--executor cuda: {e}"))?;
    }
    if !a.executor_cores.is_empty() && a.executor != ExecutorKind::Cpu {
        return Err("--executor-cores: only the CPU executor (--executor cpu) has compute threads to pin".into());
    }
    request_sizes(a, s).map(drop)
}

/// Floats in each of the scenario's models' requests, as the server expects.
fn request_sizes(a: &EngineArgs, s: &Scenario) -> Result<Vec<usize>, String> {
    executor_sizes(a.executor, s, a.input_floats)
}

/// Floats in each of the scenario's models' requests as `kind`'s models
/// take them (`floats` for the models an emulated executor serves).
fn executor_sizes(kind: ExecutorKind, s: &Scenario, floats: usize) -> Result<Vec<usize>, String> {
    let table = ModelTable::for_executor(s, &kind.choice(), floats).map_err(|e| e.to_string())?;
    Ok(table.models.iter().map(|m| m.input_floats).collect())
}

pub(crate) fn scenario(a: &EngineArgs) -> Result<(Scenario, PolicyKind), String> {
    let s = match &a.scenario {
        Some(f) => load_scenario(f)?,
        None => Scenario::parse(SERVE_SCENARIO).map_err(|e| format!("built-in scenario: {e}"))?,
    };
    check_executor(a, &s)?;
    let policy = match &a.policy {
        Some(p) => PolicyKind::parse(p).map_err(|e| format!("--policy: {e}"))?,
        None => s.policy,
    };
    if !(0.0..1.0).contains(&a.jitter) {
        return Err(format!("--jitter: must be in [0, 1), got {}", a.jitter));
    }
    Ok((s, policy))
}

/// What a server serves, for its start-up line.
fn serving(s: &Scenario, policy: PolicyKind, a: &EngineArgs, engine: &Engine) -> String {
    let (models, gpus, kind) = (s.models.len(), s.cluster.backends, a.executor.noun());
    let list = |cores: &[usize]| cores.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    let (cores, compute) = (&engine.cores, engine.compute_cores.as_slice());
    let compute = match (a.executor, compute) {
        (ExecutorKind::Cpu, []) => ", compute threads not pinned".to_string(),
        (ExecutorKind::Cpu, c) => format!(", compute threads on cores {}", list(c)),
        _ => String::new(),
    };
    format!(
        "{} ({models} models, {gpus} {kind} GPUs, policy {}, shards on cores {}{compute})",
        s.name,
        policy.as_str(),
        list(cores)
    )
}

fn positive(name: &str, x: f64) -> Result<f64, String> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("{name}: must be positive, got {x}"))
    }
}

/// `--warmup`, or the file's `warmup_s`.
fn warmup_of(s: &Scenario, given: Option<f64>) -> Result<Duration, String> {
    match given {
        None => Ok(Duration::from_nanos(s.warmup)),
        Some(w) => Duration::try_from_secs_f64(w).map_err(|_| format!("--warmup: must be at least 0, got {w}")),
    }
}

fn rate_of(s: &Scenario, given: Option<f64>, flag: &str) -> Result<f64, String> {
    let r = given.or(s.rate_rps).ok_or_else(|| format!("{flag}: the scenario has no rate_rps; give one"))?;
    positive(flag, r)
}

/// Role processes (and `baton cluster`'s roles) run one frontend shard
/// each: more frontends are more `baton frontend` processes (`--listen`).
pub(crate) fn one_frontend_shard(a: &EngineArgs) -> Result<(), String> {
    match a.frontend_shards {
        1 => Ok(()),
        _ => Err("--frontend-shards: a role process runs one frontend shard; run more frontends instead".into()),
    }
}

pub(crate) fn config(a: &EngineArgs, listen: SocketAddr, plan_rate: f64) -> Result<EngineConfig, String> {
    Ok(EngineConfig {
        listen,
        fabric: fabric(a)?,
        rdma_region_bytes: a.rdma_region_mib << 20,
        input_floats: a.input_floats,
        jitter: a.jitter,
        plan_rate_rps: plan_rate,
        model_shards: a.model_shards,
        backend_shards: a.backend_shards.unwrap_or(usize::from(matches!(a.executor, ExecutorKind::Cuda))),
        frontend_shards: a.frontend_shards.into(),
        near: match (a.numa_node, a.near_gpu, &a.near_nic) {
            (Some(n), _, _) => Some(Near::Node(n)),
            (_, Some(g), _) => Some(Near::Gpu(g)),
            (_, _, Some(nic)) => Some(Near::Nic(nic.clone())),
            _ => None,
        },
        cores: (!a.cores.is_empty()).then(|| a.cores.clone()),
        executor: a.executor.choice(),
        compute_cores: a.executor_cores.clone(),
        poll: Duration::from_micros(a.poll_us),
        reserve_floor: a.reserve_us * 1_000,
        max_connections: a.max_connections,
        max_unread: a.max_unread_bytes,
        max_waiting: a.max_waiting,
        shed_when_behind: a.shed_when_behind,
        max_peer_unread: a.max_peer_unread_bytes,
        ..Default::default()
    })
}

fn print_engine(r: &EngineReport) {
    let f = &r.frontend;
    println!(
        "engine: received {}  ok {} (late {})  dropped {}  errors {} (turned away {})  orphaned {}  duplicates {}  held at stop {}  kept back of each SLO for the path, mean {:.0} µs",
        f.received,
        f.ok,
        f.late,
        f.dropped,
        f.errors,
        f.turned_away,
        f.orphaned,
        f.duplicates,
        r.held_at_stop,
        f.reserved_ns as f64 / f.received.max(1) as f64 / 1e3
    );
    let batches: u64 = r.backends.iter().map(|b| b.batches).sum();
    let reqs: u64 = r.backends.iter().map(|b| b.requests).sum();
    let (reads, fallbacks) = rdma_counts(r);
    if reads + fallbacks + f.unregistered > 0 {
        println!("        rdma reads {reads}  fell back to tcp {fallbacks}  inputs not registered {}", f.unregistered);
    }
    let lag: u64 = r.backends.iter().map(|b| b.start_lag_ns).sum();
    let max_lag = r.backends.iter().map(|b| b.max_start_lag_ns).max().unwrap_or(0);
    println!(
        "        connections {} (refused {})  peers refused {}  bad frames {}  batches {}  mean batch {:.2}  start lag mean {:.1} µs max {:.1} µs",
        r.connections,
        r.refused_connections,
        r.refused_peers,
        r.bad_frames,
        batches,
        if batches == 0 { 0.0 } else { reqs as f64 / batches as f64 },
        if batches == 0 { 0.0 } else { lag as f64 / batches as f64 / 1e3 },
        max_lag as f64 / 1e3
    );
    if r.scheduler.relayouts > 0 {
        println!("        re-partitionings {}", r.scheduler.relayouts);
    }
}

/// Inputs the backends READ, and those that fell back to TCP fetch.
fn rdma_counts(r: &EngineReport) -> (u64, u64) {
    r.backends.iter().fold((0, 0), |(n, f), b| (n + b.fetch.reads, f + b.fetch.fallbacks))
}

fn engine_json(r: &EngineReport) -> serde_json::Value {
    let f = &r.frontend;
    let (rdma_reads, rdma_fallbacks) = rdma_counts(r);
    serde_json::json!({
        "received": f.received, "ok": f.ok, "late": f.late, "dropped": f.dropped, "errors": f.errors,
        "turned_away": f.turned_away, "orphaned": f.orphaned, "duplicates": f.duplicates, "held_at_stop": r.held_at_stop,
        "connections": r.connections, "refused_connections": r.refused_connections, "bad_frames": r.bad_frames,
        "unread_closed": r.unread_closed, "refused_peers": r.refused_peers, "cut_peers": r.cut_peers,
        "accept_failures": r.accept_failures,
        "batches": r.backends.iter().map(|b| b.batches).sum::<u64>(), "relayouts": r.scheduler.relayouts,
        "rdma_reads": rdma_reads, "rdma_fallbacks": rdma_fallbacks, "unregistered": f.unregistered,
    })
}

pub fn serve(a: ServeArgs) -> Result<(), String> {
    let (s, policy) = scenario(&a.engine)?;
    let plan_rate = a.plan_rate.or(s.rate_rps).unwrap_or(0.0);
    let gateway = a.gateway.config(a.engine.max_connections);
    let cfg = EngineConfig { gateway, ..config(&a.engine, a.listen, plan_rate)? };
    let engine = start(&s, policy, &cfg).map_err(|e| e.to_string())?;
    install_signals();
    print_gateway(engine.http, engine.grpc);
    eprintln!("baton serve: {} on {}", serving(&s, policy, &a.engine, &engine), engine.addr);
    run_until_stopped(a.duration);
    let report = engine.shutdown();
    if a.json {
        println!("{}", engine_json(&report));
    } else {
        print_engine(&report);
    }
    Ok(())
}

pub(crate) fn install_signals() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// Whether SIGINT or SIGTERM came (after `install_signals`).
pub(crate) fn stopped() -> bool {
    STOP.load(Ordering::Acquire)
}

/// Waits for a signal or `duration` seconds.
fn run_until_stopped(duration: Option<f64>) {
    let started = Instant::now();
    let limit = duration.map(Duration::from_secs_f64);
    while !stopped() && limit.is_none_or(|l| started.elapsed() < l) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What one role's command sets beyond the engine's options.
#[derive(Default)]
struct RoleOptions {
    plan_rate: Option<f64>,
    gateway: GatewayConfig,
    clock_origin_file: Option<PathBuf>,
    autoscale: Option<(AutoscaleConfig, AdviceSink)>,
    subcluster: u32,
    /// A frontend's routing table, followed while the role runs.
    routes: Option<PathBuf>,
}

/// The routing table in `path`, for `s`.
fn read_routes(s: &baton_sched::Scenario, path: &std::path::Path) -> Result<Routes, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Routes::from_json(s, &text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `baton scheduler | frontend | backend`: one role, over TCP.
fn role(a: &RoleArgs, name: &str, spec: RoleSpec, o: RoleOptions) -> Result<(), String> {
    let (s, policy) = scenario(&a.engine)?;
    let plan_rate = o.plan_rate.or(s.rate_rps).unwrap_or(0.0);
    // A missing secret is `start_role`'s to report, after what it checks first.
    let key = match ClusterKey::from_file_or_env(a.cluster_secret_file.as_deref()) {
        Ok(k) => Some(k),
        Err(KeyError::Missing) => None,
        Err(e) => return Err(e.to_string()),
    };
    let routes = o.routes.as_deref().map(|p| read_routes(&s, p)).transpose()?;
    let cfg = EngineConfig {
        gateway: o.gateway,
        cluster_key: key,
        clock_origin_file: o.clock_origin_file,
        autoscale: o.autoscale,
        subcluster: o.subcluster,
        routes,
        ..config(&a.engine, "127.0.0.1:0".parse().expect("valid"), plan_rate)?
    };
    one_frontend_shard(&a.engine)?;
    // The loopback fabric is memory of one process: roles in processes of
    // their own cannot READ each other's through it.
    if let Some(Fabric::Loopback(_)) = &cfg.fabric {
        return Err("--rdma-device loopback: the stand-in fabric joins roles in one process (baton serve); role processes need a device".into());
    }
    let p = start_role(&s, policy, &cfg, spec).map_err(|e| e.to_string())?;
    install_signals();
    print_gateway(p.http, p.grpc);
    // The readiness line (see the top of this file).
    match (p.addr, p.peer_addr) {
        (Some(addr), Some(peers)) => eprintln!("baton {name}: {} on {addr}, backends on {peers}", s.name),
        (Some(addr), None) => eprintln!("baton {name}: {} on {addr}", s.name),
        (None, _) => eprintln!("baton {name}: {} connected", s.name),
    }
    match &o.routes {
        Some(path) => follow_routes(&p, &s, path, a.duration),
        None => run_until_stopped(a.duration),
    }
    let report = p.shutdown();
    if a.json {
        let mut j = engine_json(&report);
        j["scheduler_batches"] = report.scheduler.batches.into();
        println!("{j}");
    } else {
        print_engine(&report);
    }
    Ok(())
}

/// Runs like `run_until_stopped`, publishing the routing table in `path`
/// to frontend `p` whenever the file changes (a table that does not fit
/// is reported and the last good one kept).
fn follow_routes(p: &RoleProcess, s: &baton_sched::Scenario, path: &std::path::Path, duration: Option<f64>) {
    let started = Instant::now();
    let limit = duration.map(Duration::from_secs_f64);
    let changed = || std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let mut seen = changed();
    while !stopped() && limit.is_none_or(|l| started.elapsed() < l) {
        std::thread::sleep(Duration::from_millis(50));
        let now = changed();
        if now == seen {
            continue;
        }
        seen = now;
        match read_routes(s, path).and_then(|r| p.reroute(s, &r).map_err(|e| e.to_string())) {
            Ok(()) => eprintln!("baton frontend: routes from {} published", path.display()),
            Err(why) => eprintln!("baton frontend: {why}; the last routes stay"),
        }
    }
}

pub fn scheduler(a: SchedulerArgs) -> Result<(), String> {
    let spec = RoleSpec::Scheduler { listen: a.listen };
    let (s, _) = scenario(&a.role.engine)?;
    let autoscale = a.autoscale_period.map(|p| autoscaling(&a, p, s.cluster.backends as usize)).transpose()?;
    let (plan_rate, clock_origin_file, subcluster) = (a.plan_rate, a.clock_origin_file.clone(), a.subcluster);
    let o = RoleOptions { plan_rate, clock_origin_file, autoscale, subcluster, ..RoleOptions::default() };
    role(&a.role, "scheduler", spec, o)
}

/// The autoscaler `baton scheduler --autoscale-period` runs, for a pool of
/// `pool` GPUs, logging each period's advice on stderr.
fn autoscaling(a: &SchedulerArgs, period_s: f64, pool: usize) -> Result<(AutoscaleConfig, AdviceSink), String> {
    if !(period_s.is_finite() && (0.001..=86_400.0).contains(&period_s)) {
        return Err(format!("--autoscale-period: seconds from 0.001 to 86400, got {period_s}"));
    }
    let period = (period_s * NANOS_PER_S as f64).round() as u64;
    // Peak windows of a second where they divide the period, else the period.
    let window = if period.is_multiple_of(NANOS_PER_S) { NANOS_PER_S } else { period };
    let sizing = (a.autoscale_memory > 0).then_some(PeakSizing { window, memory: a.autoscale_memory });
    let cfg = AutoscaleConfig {
        period,
        threshold: 0.01,
        headroom: a.autoscale_headroom,
        min_gpus: 1,
        max_gpus: pool,
        initial: pool,
        sizing,
    };
    cfg.check().map_err(|e| format!("--autoscale-*: {e}"))?;
    let sink = AdviceSink(Arc::new(|a: &Advice| {
        let s = &a.signals;
        eprintln!(
            "baton scheduler: autoscale: {} GPUs serving, {} arrived (busiest window {:.0} r/s), bad rate {:.4}, idle {:.3}: serve {} GPUs",
            s.gpus,
            s.arrived,
            s.peak_rps,
            s.bad_rate(),
            s.idle_fraction,
            a.gpus
        );
    }));
    Ok((cfg, sink))
}

pub fn frontend(a: FrontendArgs) -> Result<(), String> {
    let spec = RoleSpec::Frontend { index: a.index, listen: a.listen, peers: a.peer_listen, schedulers: a.scheduler };
    let gateway = a.gateway.config(a.role.engine.max_connections);
    role(&a.role, "frontend", spec, RoleOptions { gateway, routes: a.routes, ..RoleOptions::default() })
}

pub fn backend(a: BackendArgs) -> Result<(), String> {
    let (s, _) = scenario(&a.role.engine)?;
    let count = a.count.unwrap_or(s.cluster.backends.saturating_sub(a.first));
    let spec = RoleSpec::Backends { first: a.first, count, scheduler: a.scheduler, frontends: a.frontends.clone() };
    role(&a.role, "backend", spec, RoleOptions { subcluster: a.subcluster, ..RoleOptions::default() })
}

pub fn load(a: LoadArgs) -> Result<(), String> {
    let s = load_scenario(&a.file)?;
    let input_floats = match a.executor {
        Some(kind) => executor_sizes(kind, &s, DEFAULT_INPUT_FLOATS).map_err(|e| format!("--executor: {e}"))?,
        None if a.input_floats.len() != 1 && a.input_floats.len() != s.models.len() => {
            let (n, m) = (a.input_floats.len(), s.models.len());
            return Err(format!("--input-floats: give one size, or one per model ({m}), not {n}"));
        }
        None => a.input_floats,
    };
    let cfg = LoadConfig {
        targets: a.target.clone(),
        rate_rps: rate_of(&s, a.rate, "--rate")?,
        duration: Duration::from_secs_f64(positive("--duration", a.duration)?),
        warmup: warmup_of(&s, a.warmup)?,
        connections: a.connections.max(1),
        input_floats,
        drain: Duration::try_from_secs_f64(a.drain)
            .map_err(|_| format!("--drain: must be at least 0, got {}", a.drain))?,
        progress: !a.json,
        cores: a.cores.clone(),
        spin: a.spin,
        nice: a.nice,
    };
    let r = load::run(&s, &cfg).map_err(|e| e.to_string())?;
    if a.json {
        println!("{}", serde_json::to_string(&r).expect("serializable"));
    } else {
        load::print(&r);
    }
    Ok(())
}

/// Where `baton demo` runs: the engine's configuration and the load
/// generator's cores (each side on cores of its own unless told).
fn demo_placement(a: &DemoArgs, rate: f64, backends: u32) -> Result<(EngineConfig, Vec<usize>), String> {
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
    let mut engine_cfg = config(&a.engine, listen, rate)?;
    let mut load_cores = a.load_cores.clone();
    // Unless told where each side goes, the engine and the generator get
    // cores of their own (`load::split_cores`), and so do the CPU
    // executor's compute threads (`load::split_for_compute`).
    let placed = engine_cfg.near.is_some() || engine_cfg.cores.is_some() || !load_cores.is_empty();
    let cpu = a.engine.executor == ExecutorKind::Cpu;
    let machine = load::allowed_cores();
    let (rest, compute) = match (placed || !engine_cfg.compute_cores.is_empty(), cpu) {
        (false, true) => load::split_for_compute(&machine, backends as usize),
        _ => (machine, Vec::new()),
    };
    if !placed {
        match load::split_cores(&rest) {
            Some((server, generator)) => (engine_cfg.cores, load_cores) = (Some(server), generator),
            // One core beside the compute threads: server and generator share it.
            None if !compute.is_empty() => (engine_cfg.cores, load_cores) = (Some(rest.clone()), rest),
            None => {}
        }
    }
    if !compute.is_empty() {
        engine_cfg.compute_cores = compute;
    }
    Ok((engine_cfg, load_cores))
}

/// What one `baton demo` run measured: the generator's report, each model
/// request's end as it saw it (with `--gap`), the engine's counts, and
/// how the load was made.
type DemoRun = (load::LoadReport, Option<gap::Fates>, EngineReport, LoadConfig);

/// One `baton demo` run: a fresh engine serving `s` under `baton load` at
/// `rate` for `duration` after `warmup`: what the generator saw and what
/// the engine counted.
fn demo_run(
    s: &Scenario,
    policy: PolicyKind,
    a: &DemoArgs,
    rate: f64,
    (duration, warmup): (f64, Duration),
    (progress, keep_fates): (bool, bool),
) -> Result<DemoRun, String> {
    let (engine_cfg, load_cores) = demo_placement(a, rate, s.cluster.backends)?;
    let engine = start(s, policy, &engine_cfg).map_err(|e| e.to_string())?;
    if progress {
        eprintln!(
            "baton demo: serving {} on {}; {rate} r/s for {duration} s after {:.1} s of warm-up, generator on cores {load_cores:?} ...",
            serving(s, policy, &a.engine, &engine),
            engine.addr,
            warmup.as_secs_f64()
        );
    }
    let cfg = LoadConfig {
        targets: vec![engine.addr],
        rate_rps: rate,
        duration: Duration::from_secs_f64(duration),
        warmup,
        connections: 4,
        input_floats: request_sizes(&a.engine, s)?,
        drain: Duration::from_secs(2),
        progress,
        nice: load::nice_for(engine_cfg.cores.as_deref(), &engine_cfg.compute_cores, &load_cores),
        cores: load_cores,
        spin: false,
    };
    let measured = match keep_fates {
        true => load::run_with_fates(s, &cfg).map(|(r, f)| (r, Some(f))),
        false => load::run(s, &cfg).map(|r| (r, None)),
    };
    let report = engine.shutdown();
    let (measured, fates) = measured.map_err(|e| e.to_string())?;
    Ok((measured, fates, report, cfg))
}

pub fn demo(a: DemoArgs) -> Result<(), String> {
    let (s, policy) = scenario(&a.engine)?;
    let duration = positive("--duration", a.duration)?;
    let warmup = warmup_of(&s, a.warmup)?;
    if a.probes == 0 {
        return Err("--probes: at least 1".into());
    }
    // With --find-goodput: both goodputs by search on the same file and
    // seed, and the run below at the simulator's.
    let mut sim_s = s.clone();
    sim_s.warmup = warmup.as_nanos() as u64;
    sim_s.duration = (duration * 1e9) as u64;
    let goodputs = match a.find_goodput {
        false => None,
        true => {
            let sim = baton_sched::sim::find_goodput(&sim_s, policy, goodput::GOODPUT_TOLERANCE).goodput_rps;
            if sim <= 0.0 {
                return Err(format!("{}: the simulator finds no rate at <= 1% bad", s.name));
            }
            eprintln!("baton demo: the simulator's goodput {sim:.1} r/s; the engine's, by search:");
            let run = |rate: f64| match demo_run(&s, policy, &a, rate, (duration, warmup), (false, false)) {
                Ok((r, ..)) => r,
                Err(e) => {
                    eprintln!("  probe at {rate:.1} r/s: {e}");
                    load::LoadReport { bad_rate: 1.0, ..Default::default() }
                }
            };
            let (engine, probes) = goodput::engine_goodput(sim, a.probes, &run);
            Some((engine, sim, probes))
        }
    };
    let rate = match goodputs {
        Some((_, sim, _)) => sim,
        None => rate_of(&s, a.rate, "--rate")?,
    };
    let (measured, fates, report, cfg) = demo_run(&s, policy, &a, rate, (duration, warmup), (!a.json, a.gap))?;
    // The simulator's prediction: same file, rate, seed and policy.
    let (predicted, gap) = match fates {
        Some(engine) => {
            let (predicted, sim) = baton_sched::sim::run_fates(&sim_s, policy, rate);
            (predicted, Some(gap::compare(&sim, &engine, sim_s.warmup)))
        }
        None => (baton_sched::sim::run(&sim_s, policy, rate), None),
    };
    let goodput_json = goodputs.as_ref().map(|(engine, sim, probes)| {
        serde_json::json!({ "engine_rps": engine, "sim_rps": sim, "ratio": engine / sim, "probes": probes })
    });
    if a.json {
        let j = serde_json::json!({
            "load": measured, "engine": engine_json(&report),
            "sim": { "goodput_rps": predicted.goodput_rps, "bad_rate": predicted.bad_rate, "mean_batch": predicted.mean_batch,
                     "queries": predicted.queries },
            "goodput": goodput_json,
            "gap": gap,
        });
        println!("{j}");
    } else {
        load::print(&measured);
        print_engine(&report);
        println!(
            "baton sim, same file, rate and seed: in SLO {:.1} r/s  bad rate {:.4}  mean batch {:.2}",
            predicted.goodput_rps, predicted.bad_rate, predicted.mean_batch
        );
        // A query's client sees one answer per query, not its stage requests.
        for q in &predicted.queries {
            println!(
                "baton sim, query {}: sent {}  in SLO {:.1} q/s  bad rate {:.4}",
                q.name,
                q.sent,
                q.ok as f64 / cfg.duration.as_secs_f64(),
                q.bad_rate
            );
        }
        if let Some((engine, sim, probes)) = &goodputs {
            println!(
                "goodput (highest rate at <= 1% bad, by search): engine {engine:.1} r/s, sim {sim:.1} r/s, ratio {:.3} ({} probes; the run above at the sim's)",
                engine / sim,
                probes.len()
            );
        }
        if let Some(g) = &gap {
            gap::print(g, &s.models.iter().map(|m| m.spec.name.clone()).collect::<Vec<_>>());
        }
    }
    Ok(())
}
