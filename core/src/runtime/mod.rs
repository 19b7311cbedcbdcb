//! The thread-per-core runtime of `baton serve`: every role in one
//! process, on two shards, each a glommio executor pinned to its own core.
//!
//! - The *frontend shard* owns the TCP listener and every client
//!   connection (io_uring through glommio) and the frontend role.
//! - The *scheduler shard* owns the scheduler role (the `baton-sched`
//!   policy) and the emulated backends, with one timer wheel for both.
//!
//! The shards share nothing mutable: they exchange `Envelope`s through a
//! pair of bounded SPSC rings (`baton_net::mesh`); a full ring keeps the
//! sender's messages in its own queue (backpressure) rather than dropping
//! them. The model table is read through crossbeam-epoch (`Published`).
//! Each shard runs one pump task that drains its link, fires due timers
//! and flushes what it produced, yielding to the reactor between rounds
//! (`pause`) so sockets are served.
//!
//! The same two shard programs run the roles as separate processes
//! (`process.rs`): there the link is a `Router` of TCP peers (`router.rs`)
//! instead of a ring (`link.rs`).
//!
//! Reduced, and said so: one frontend shard and one scheduler shard (the
//! policy's model shards run inside the scheduler shard); emulated GPUs
//! only; pinning uses core_affinity's list of cores (hwloc needs a system
//! library this build does not assume).

mod alarms;
mod conn;
mod frontend_shard;
mod link;
mod process;
mod router;
mod sched_shard;

pub use process::{start_role, RoleProcess, RoleSpec};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use baton_net::mesh::mesh;
use baton_sched::scenario::Scenario;
use baton_sched::PolicyKind;
use glommio::{LocalExecutorBuilder, Placement};

use crate::clock::Clock;
use crate::models::{ModelTable, Unsupported};
use crate::publish::Published;
use crate::roles::backend::BackendStats;
use crate::roles::frontend::FrontendStats;
use crate::roles::scheduler::SchedulerStats;
use crate::roles::Envelope;

/// How long an idle shard sleeps before looking at its ring again.
pub const IDLE: Duration = Duration::from_micros(50);
/// The shortest sleep of an idle round.
const MIN_SLEEP: Duration = Duration::from_micros(1);

/// Waits between two rounds of a shard's pump. After a busy round it only
/// yields its task queue: the reactor reaps socket completions without
/// blocking and the connection tasks run, with no timer armed (arming and
/// cancelling an io_uring timeout per round was the largest single cost in
/// the profile). An idle round sleeps until the shard's next timer, at
/// most `IDLE`: the pump never spins idle, because on a machine with fewer
/// cores than threads (the load generator beside the server) a spinning
/// shard holds its core for whole scheduler time slices and everyone
/// else's latency grows by milliseconds.
async fn pause(busy: bool, next_timer: Option<Duration>) {
    if busy {
        return glommio::executor().yield_task_queue_now().await;
    }
    glommio::timer::sleep(next_timer.map_or(IDLE, |d| d.clamp(MIN_SLEEP, IDLE))).await;
}

const FRONTEND_SHARD: usize = 0;
const SCHED_SHARD: usize = 1;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub listen: SocketAddr,
    /// Floats in each request's input tensor.
    pub input_floats: usize,
    /// Requests the frontend holds at most; more are refused as overloaded.
    pub frontend_capacity: usize,
    /// Relative jitter of the emulated GPUs' batch times.
    pub jitter: f64,
    /// Slots of each ring between the shards.
    pub ring_capacity: usize,
    /// The aggregate rate static planners (Nexus) plan for; 0: the
    /// scenario's `rate_rps`.
    pub plan_rate_rps: f64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:7700".parse().expect("valid address"),
            input_floats: crate::models::DEFAULT_INPUT_FLOATS,
            frontend_capacity: 1 << 20,
            jitter: 0.0,
            ring_capacity: 1 << 16,
            plan_rate_rps: 0.0,
        }
    }
}

#[derive(Debug)]
pub enum EngineError {
    Unsupported(Unsupported),
    /// A shard could not start (executor, pinning, locked memory).
    Shard(String),
    Listen(std::io::Error),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unsupported(u) => write!(f, "{u}"),
            Self::Shard(why) => write!(f, "cannot start a shard: {why}"),
            Self::Listen(e) => write!(f, "cannot listen: {e}"),
        }
    }
}

impl std::error::Error for EngineError {}

/// What the engine did, read when it stops.
#[derive(Clone, Debug, Default)]
pub struct EngineReport {
    pub frontend: FrontendStats,
    pub scheduler: SchedulerStats,
    pub backends: Vec<BackendStats>,
    /// Client connections accepted, and those closed for a bad frame.
    pub connections: u64,
    pub bad_frames: u64,
    /// Requests still held by the frontend at shutdown (they were
    /// answered `dropped` then; 0 after a drained run).
    pub held_at_stop: u64,
}

pub struct Engine {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    frontend: glommio::ExecutorJoinHandle<frontend_shard::Report>,
    sched: glommio::ExecutorJoinHandle<sched_shard::Report>,
}

/// The model table of a scenario the engine can serve under `policy`.
fn servable(scenario: &Scenario, policy: PolicyKind, cfg: &EngineConfig) -> Result<ModelTable, EngineError> {
    if PolicyKind::GLET_SET.contains(&policy) {
        let why = format!("{} plans GPU partitions, which the engine does not emulate", policy.as_str());
        return Err(EngineError::Unsupported(Unsupported(why)));
    }
    ModelTable::from_scenario(scenario, cfg.input_floats).map_err(EngineError::Unsupported)
}

/// The cores to pin shards to: the first two the process may run on (one
/// core serves both shards on a single-core machine).
fn cores() -> Vec<usize> {
    let ids: Vec<usize> = core_affinity::get_core_ids().unwrap_or_default().into_iter().map(|c| c.id).collect();
    match ids.len() {
        0 => vec![0, 0],
        1 => vec![ids[0], ids[0]],
        _ => ids[..2].to_vec(),
    }
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

/// Starts serving `scenario`'s models under `policy` on its
/// `[cluster] gpus` emulated GPUs.
pub fn start(scenario: &Scenario, policy: PolicyKind, cfg: &EngineConfig) -> Result<Engine, EngineError> {
    let table = servable(scenario, policy, cfg)?;
    raise_memlock();
    let clock = Clock::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut links = mesh::<Envelope>(2, cfg.ring_capacity).into_iter();
    let (fe_links, sched_links) = (links.next().expect("two shards"), links.next().expect("two shards"));
    let cores = cores();
    let cfg = &EngineConfig {
        plan_rate_rps: if cfg.plan_rate_rps > 0.0 { cfg.plan_rate_rps } else { scenario.rate_rps.unwrap_or(0.0) },
        ..cfg.clone()
    };

    // The policy and the executors are built on the shard that owns them.
    let sched = {
        let (clock, stop) = (clock.clone(), Arc::clone(&stop));
        let (scenario, table, cfg) = (scenario.clone(), table.clone(), cfg.clone());
        LocalExecutorBuilder::new(Placement::Fixed(cores[SCHED_SHARD]))
            .name("baton-sched")
            .spawn(move || async move {
                let all = 0..scenario.cluster.backends;
                let state = sched_shard::State::new(&scenario, Some(policy), all, &table, &cfg, clock.now());
                let link = link::Link::Ring { links: sched_links, peer: FRONTEND_SHARD };
                sched_shard::run(state, link, clock, stop).await
            })
            .map_err(|e| EngineError::Shard(e.to_string()))?
    };

    let table = Arc::new(Published::new(table));
    let (addr_tx, addr_rx) = mpsc::channel();
    let frontend = {
        let setup = frontend_shard::Setup {
            index: 0,
            listen: cfg.listen,
            addr_tx,
            table,
            capacity: cfg.frontend_capacity,
            clock,
            stop: Arc::clone(&stop),
        };
        LocalExecutorBuilder::new(Placement::Fixed(cores[FRONTEND_SHARD]))
            .name("baton-frontend")
            .spawn(move || {
                let link = link::Link::Ring { links: fe_links, peer: SCHED_SHARD };
                frontend_shard::run(setup, link, None)
            })
            .map_err(|e| EngineError::Shard(e.to_string()))?
    };
    let addr = match addr_rx.recv() {
        Ok(Ok(addr)) => addr,
        Ok(Err(e)) => {
            stop.store(true, Ordering::Release);
            let _ = (frontend.join(), sched.join());
            return Err(EngineError::Listen(e));
        }
        Err(_) => {
            stop.store(true, Ordering::Release);
            let _ = sched.join();
            return Err(EngineError::Shard("the frontend shard exited while starting".into()));
        }
    };
    Ok(Engine { addr, stop, frontend, sched })
}

impl Engine {
    /// Stops both shards and reports. Requests still held are answered
    /// `dropped` before the connections close.
    pub fn shutdown(self) -> EngineReport {
        self.stop.store(true, Ordering::Release);
        let fe = self.frontend.join().expect("the frontend shard does not panic");
        let sc = self.sched.join().expect("the scheduler shard does not panic");
        EngineReport {
            frontend: fe.stats,
            scheduler: sc.scheduler,
            backends: sc.backends,
            connections: fe.connections,
            bad_frames: fe.bad_frames,
            held_at_stop: fe.held_at_stop,
        }
    }
}
