//! The roles as separate processes over TCP (`baton frontend | scheduler |
//! backend`). Each process runs one glommio executor — the same shard code
//! as `baton serve`, with a `Router` of TCP peers where `serve` has a ring.
//!
//! Start the scheduler first; backends and frontends connect to it (and
//! wait for it up to `PATIENCE`), learn the cluster clock's origin from its
//! `Hello`, and backends connect to every frontend's peer listener (apart
//! from its clients') to fetch inputs and return results. Frontend `i`'s
//! peer address must be the i-th in the backends' `--frontends` list:
//! request ids carry their frontend's index. Every connection between
//! roles is authenticated with the cluster secret (`baton_net::tcp::auth`).
//!
//! A cluster partitioned into sub-clusters (`routes.rs`) has a scheduler
//! per sub-cluster, all on one clock: each backend process reports to its
//! sub-cluster's, and a frontend connects to every one and routes each
//! model's requests by its routing table.
//!
//! Processes are not pinned (several share one host in tests; `serve` is
//! the pinned, thread-per-core deployment).

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use baton_sched::scenario::Scenario;
use baton_sched::PolicyKind;
use baton_wire::{fb, Message};
use glommio::net::TcpListener;
use glommio::Placement;

use super::gateway::Inbox;
use super::link::Link;
use super::park::{doorbell, Doorbell, Rhythm};
use super::part::SchedulerPart;
use super::router::Router;
use super::{
    frontend_shard, gateway_parts, raise_memlock, sched_shard, servable, start_gateway, EngineConfig, EngineError,
    EngineReport, Progress,
};
use crate::clock::Clock;
use crate::models::{ModelTable, Unsupported};
use crate::publish::Published;
use crate::roles::{Addr, Envelope, FRONTEND_SHIFT};
use crate::routes::{RouteError, Routes};
use baton_net::kserve::Gateway;
use baton_net::tcp::auth::{ClusterKey, KeyError};
use baton_net::tcp::greeting::connect;

/// How long a role waits for the peers it connects to.
const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub enum RoleSpec {
    Scheduler {
        listen: SocketAddr,
    },
    Frontend {
        index: u32,
        /// Where clients connect.
        listen: SocketAddr,
        /// Where backends connect.
        peers: SocketAddr,
        /// The scheduler of each sub-cluster, sub-cluster 0's first (one
        /// where the cluster is not partitioned; `cfg.routes` says which
        /// takes each model's requests).
        schedulers: Vec<SocketAddr>,
    },
    /// Backends `first .. first + count` of the scenario's cluster.
    Backends {
        first: u32,
        count: u32,
        scheduler: SocketAddr,
        frontends: Vec<SocketAddr>,
    },
}

pub struct RoleProcess {
    /// Where it listens (scheduler and frontend).
    pub addr: Option<SocketAddr>,
    /// Where a frontend listens for backends.
    pub peer_addr: Option<SocketAddr>,
    /// A frontend's KServe gateway, when asked for.
    pub http: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    gateway: Option<Gateway>,
    /// The model table a frontend reads per request (`reroute`), and the
    /// schedulers a frontend connects to (one per sub-cluster).
    table: Arc<Published<ModelTable>>,
    schedulers: Option<usize>,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    /// Set with `stop` by `kill`: backends stop without leaving.
    killed: Arc<AtomicBool>,
    handle: glommio::ExecutorJoinHandle<EngineReport>,
}

impl RoleProcess {
    /// What it has done so far (`Progress`), while it runs.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// A frontend routes each model's requests by `routes` from now on
    /// (`routes.rs`): requests it holds stay with the scheduler they were
    /// sent to. (Other roles read no routes.)
    pub fn reroute(&self, scenario: &Scenario, routes: &Routes) -> Result<(), RouteError> {
        routes.check(scenario)?;
        if let Some(n) = self.schedulers.filter(|&n| n != routes.subclusters.len()) {
            let why = format!("{} sub-clusters for a frontend connected to {n} schedulers", routes.subclusters.len());
            return Err(RouteError(why));
        }
        let mut table = self.table.read(ModelTable::clone);
        table.route(routes);
        self.table.publish(table);
        Ok(())
    }

    /// Stops the role; a backend process leaves the cluster first (runs
    /// what it was sent: `sched_shard::State::leaves`).
    pub fn shutdown(self) -> EngineReport {
        self.stop.store(true, Ordering::Release);
        let report = self.handle.join().expect("a role's shard does not panic");
        if let Some(g) = self.gateway {
            g.stop();
        }
        report
    }

    /// Stops the role as if its process died: backends do not leave first
    /// (what they hold is lost, and dropped by the scheduler).
    pub fn kill(self) -> EngineReport {
        self.killed.store(true, Ordering::Release);
        self.shutdown()
    }
}

/// Where a role listens: for clients (or roles, the scheduler), and for
/// roles (a frontend).
type Bound = (Option<SocketAddr>, Option<SocketAddr>);
type Ready = mpsc::Sender<Result<Bound, String>>;

/// Tells whoever starts the role why it could not; the role's (empty)
/// report.
fn failed(ready: &Ready, why: String) -> EngineReport {
    let _ = ready.send(Err(why));
    EngineReport::default()
}

/// The role's stop flag, where it publishes its `Progress`, and the
/// cluster secret.
type Control = (Arc<AtomicBool>, Arc<Progress>, ClusterKey);

/// Starts one role of `scenario`'s cluster in this process.
pub fn start_role(
    scenario: &Scenario,
    policy: PolicyKind,
    cfg: &EngineConfig,
    spec: RoleSpec,
) -> Result<RoleProcess, EngineError> {
    let mut table = servable(scenario, policy, cfg)?;
    let frontend_of = match &spec {
        RoleSpec::Frontend { schedulers, .. } => Some(schedulers.len()),
        _ => None,
    };
    if let RoleSpec::Frontend { index, schedulers, .. } = &spec {
        if u64::from(*index) >= 1 << (64 - FRONTEND_SHIFT) {
            return Err(EngineError::Shard(format!("frontend index {index}: request ids hold at most 16 bits of it")));
        }
        let routed = cfg.routes.as_ref().map_or(1, |r| r.subclusters.len());
        if schedulers.len() != routed {
            let why = format!("{} schedulers for a routing table of {routed} sub-clusters", schedulers.len());
            return Err(EngineError::Shard(why));
        }
        if let Some(routes) = &cfg.routes {
            routes.check(scenario).map_err(|e| EngineError::Shard(e.to_string()))?;
            table.route(routes);
        }
    }
    if table.partitions.is_some() {
        // Sibling partitions see each other's batches in one process only.
        let why =
            format!("{}'s GPU partitions in separate processes (serve it in one: `baton serve`)", policy.as_str());
        return Err(EngineError::Unsupported(Unsupported(why)));
    }
    if let RoleSpec::Backends { first, count, .. } = &spec {
        if first.checked_add(*count).is_none_or(|end| end > scenario.cluster.backends || *count == 0) {
            let n = scenario.cluster.backends;
            return Err(EngineError::Shard(format!("backends {first}..{first}+{count} of a cluster of {n}")));
        }
    }
    let key = cfg.cluster_key.clone().ok_or(EngineError::Key(KeyError::Missing))?;
    raise_memlock();
    let stop = Arc::new(AtomicBool::new(false));
    // Every role's gauges have room for the whole cluster: a frontend's
    // `/metrics` shows the totals other processes send it, each
    // sub-cluster's scheduler in a slot of its own.
    let schedulers = match &spec {
        RoleSpec::Frontend { schedulers, .. } => schedulers.len().max(1),
        _ => 1,
    };
    let gauges = crate::metrics::Gauges::new(scenario.cluster.backends as usize, schedulers);
    let progress = Arc::new(Progress::new(1, gauges));
    let (ready, ready_rx) = mpsc::channel();
    // A frontend's table and doorbell are made here, for its gateway's door.
    let doorbell = doorbell().map_err(|e| EngineError::Shard(format!("cannot make a doorbell: {e}")))?;
    let table = Arc::new(Published::new(table));
    let frontend_table = Arc::clone(&table);
    let (bridge, inbox) = match &spec {
        RoleSpec::Frontend { .. } => gateway_parts(cfg, doorbell.bell(), &table),
        _ => (None, None),
    };
    let (scenario, cfg2, stop2, progress2) = (scenario.clone(), cfg.clone(), Arc::clone(&stop), Arc::clone(&progress));
    let killed = Arc::new(AtomicBool::new(false));
    let killed2 = Arc::clone(&killed);
    // A placed role process runs on its node's (or its listed) first core,
    // its memory there.
    let placed = match (&cfg.near, &cfg.cores) {
        (None, None) => None,
        (near, only) => Some(super::topology::place_on(near.as_ref(), only.as_deref()).map_err(EngineError::Shard)?),
    };
    let node = placed.as_ref().and_then(|p| p.node);
    let pin = placed.map_or(Placement::Unbound, |p| Placement::Fixed(p.cores[0]));
    let handle = super::shard_executor(pin, "baton-role")
        .spawn(move || async move {
            if let Err(why) = super::topology::bind_memory(node) {
                return failed(&ready, why);
            }
            match spec {
                RoleSpec::Scheduler { listen } => {
                    let table = table.read(ModelTable::clone);
                    scheduler(listen, scenario, policy, table, cfg2, (stop2, progress2, key), ready).await
                }
                RoleSpec::Frontend { index, listen, peers, schedulers } => {
                    let shard = (table, doorbell, inbox);
                    let at = (listen, peers, schedulers);
                    frontend(index, at, shard, cfg2, (stop2, progress2, key), ready).await
                }
                RoleSpec::Backends { first, count, scheduler, frontends } => {
                    let (local, table) = (first..first + count, table.read(ModelTable::clone));
                    let control = (stop2, progress2, key);
                    backends(local, scheduler, frontends, scenario, table, cfg2, control, killed2, ready).await
                }
            }
        })
        .map_err(|e| EngineError::Shard(e.to_string()))?;
    match ready_rx.recv() {
        Ok(Ok((addr, peer_addr))) => {
            let (http, grpc, gateway, table) = (None, None, None, frontend_table);
            let schedulers = frontend_of;
            let role =
                RoleProcess { addr, peer_addr, http, grpc, gateway, table, schedulers, progress, stop, killed, handle };
            match start_gateway(bridge, cfg) {
                Ok(gateway) => {
                    let (http, grpc) = (gateway.as_ref().and_then(|g| g.http), gateway.as_ref().and_then(|g| g.grpc));
                    Ok(RoleProcess { http, grpc, gateway, ..role })
                }
                Err(e) => {
                    role.shutdown();
                    Err(e)
                }
            }
        }
        Ok(Err(why)) => {
            let _ = handle.join();
            Err(EngineError::Shard(why))
        }
        Err(_) => Err(EngineError::Shard("the role's shard exited while starting".into())),
    }
}

fn hello(role: fb::Role, index: u32, origin_unix_ns: u64) -> fb::Hello {
    fb::Hello { role, index, origin_unix_ns, nonce: None, proof: None }
}

async fn scheduler(
    listen: SocketAddr,
    scenario: Scenario,
    policy: PolicyKind,
    table: ModelTable,
    cfg: EngineConfig,
    (stop, progress, key): Control,
    ready: Ready,
) -> EngineReport {
    let clock = match cfg.clock_origin_file.as_deref().map(kept_origin).transpose() {
        Ok(origin) => origin.map_or_else(Clock::new, Clock::with_origin),
        Err(why) => return failed(&ready, why),
    };
    let origin = clock.origin_unix_ns();
    let state = match sched_shard::State::new(&scenario, SchedulerPart::Whole(policy), 0..0, &table, &cfg, clock.now())
    {
        Ok(s) => s,
        Err(why) => return failed(&ready, why),
    };
    let doorbell = match doorbell() {
        Ok(d) => d,
        Err(e) => return failed(&ready, format!("cannot make a doorbell: {e}")),
    };
    let sub = cfg.subcluster;
    let router = match Router::new(Some(sub), cfg.max_peer_unread) {
        Ok(r) => Rc::new(r),
        Err(e) => return failed(&ready, format!("the peers' io_uring: {e}")),
    };
    let mut rhythm = Rhythm::with_sockets(doorbell.on_shard(), cfg.poll);
    if let Err(e) = rhythm.woken_by(router.wake_fd()) {
        return failed(&ready, format!("the peers' eventfd: {e}"));
    }
    let listener = match TcpListener::bind(listen) {
        Ok(l) => l,
        Err(e) => return failed(&ready, format!("cannot listen on {listen}: {e}")),
    };
    let _ = ready.send(Ok((listener.local_addr().ok(), None)));
    // No backend is up until its process connects (a scheduler restarted
    // under a running cluster must not plan on one that is not there): the
    // policy starts with every backend failed, and each connection brings
    // its backends back (`Router::register`).
    for backend in 0..scenario.cluster.backends {
        let status = fb::BackendStatus { backend, healthy: false, ..Default::default() };
        router.inbox.borrow_mut().push(Envelope { to: Addr::Scheduler(sub), msg: Message::BackendStatus(status) });
    }
    let me = hello(fb::Role::Scheduler, sub, origin);
    let accepting = glommio::spawn_local(Rc::clone(&router).accept_peers(listener, key, me));
    let report = sched_shard::run(state, Link::Tcp(Rc::clone(&router)), clock, stop, rhythm, progress).await;
    stop_accepting(accepting).await;
    router.close_all().await;
    EngineReport { scheduler: report.scheduler, ..router.report() }
}

/// A stopping role accepts no more peers before it closes their
/// connections: one accepted while it closes would stay open with no one
/// reading it (a backend leaving would wait on it for an answer).
async fn stop_accepting(accepting: glommio::Task<()>) {
    accepting.cancel().await;
}

/// The cluster clock's origin kept in `path`: read, or now, written there.
fn kept_origin(path: &std::path::Path) -> Result<u64, String> {
    let shown = path.display();
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map_err(|e| format!("{shown}: not a clock origin in Unix nanoseconds: {e}")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let now = crate::clock::unix_ns();
            std::fs::write(path, format!("{now}\n"))
                .map_err(|e| format!("cannot keep the clock origin in {shown}: {e}"))?;
            Ok(now)
        }
        Err(e) => Err(format!("cannot read the clock origin from {shown}: {e}")),
    }
}

async fn frontend(
    index: u32,
    (listen, peers, schedulers): (SocketAddr, SocketAddr, Vec<SocketAddr>),
    (table, doorbell, gateway): (Arc<Published<ModelTable>>, Doorbell, Option<Inbox>),
    cfg: EngineConfig,
    (stop, progress, key): Control,
    ready: Ready,
) -> EngineReport {
    // Registered memory first: nothing to undo if it cannot be had.
    let store = match cfg.input_store() {
        Ok(s) => s,
        Err(e) => return failed(&ready, e.to_string()),
    };
    let me = hello(fb::Role::Frontend, index, 0);
    let router = match Router::new(None, cfg.max_peer_unread) {
        Ok(r) => Rc::new(r),
        Err(e) => return failed(&ready, format!("the peers' io_uring: {e}")),
    };
    let origin = match reach_schedulers(&router, &schedulers, &key, &me).await {
        Ok(origin) => origin,
        Err(why) => {
            router.close_all().await;
            return failed(&ready, why);
        }
    };
    let peer_listener = match TcpListener::bind(peers) {
        Ok(l) => l,
        Err(e) => {
            router.close_all().await;
            return failed(&ready, format!("cannot listen for backends on {peers}: {e}"));
        }
    };
    let peer_addr = peer_listener.local_addr().ok();
    let clock = Clock::with_origin(origin);
    let accepting = glommio::spawn_local(Rc::clone(&router).accept_peers(peer_listener, key.clone(), me.clone()));
    for (k, &addr) in schedulers.iter().enumerate() {
        let to = Peer { addr, role: Addr::Scheduler(k as u32), origin: Some(origin) };
        let again = reconnect(Rc::clone(&router), to, key.clone(), vec![me.clone()], Arc::clone(&stop));
        glommio::spawn_local(again).detach();
    }
    let (addr_tx, addr_rx) = mpsc::channel();
    let setup = frontend_shard::Setup {
        index,
        slot: 0,
        store,
        listen,
        addr_tx,
        table,
        capacity: cfg.frontend_capacity,
        max_waiting: cfg.max_waiting,
        shed_when_behind: cfg.shed_when_behind,
        max_connections: cfg.max_connections,
        max_unread: cfg.max_unread,
        reserve_floor: cfg.reserve_floor,
        clock,
        stop,
        progress,
        doorbell,
        poll: cfg.poll,
        gateway,
    };
    // The shard binds its listener first thing and says so on `addr_tx`.
    let shard = glommio::spawn_local(frontend_shard::run(
        setup,
        Link::Tcp(Rc::clone(&router)),
        Some(Rc::clone(&router)),
        Vec::new(),
    ));
    let mut bound = None;
    while bound.is_none() {
        match addr_rx.try_recv() {
            Ok(r) => bound = Some(r),
            Err(mpsc::TryRecvError::Empty) => glommio::timer::sleep(Duration::from_millis(1)).await,
            Err(mpsc::TryRecvError::Disconnected) => break,
        }
    }
    let _ = ready.send(match bound {
        Some(Ok(addr)) => Ok((Some(addr), peer_addr)),
        Some(Err(e)) => Err(format!("cannot listen on {listen}: {e}")),
        None => Err("the frontend shard stopped while starting".into()),
    });
    let r = shard.await;
    stop_accepting(accepting).await;
    router.close_all().await;
    let peers = router.report();
    EngineReport {
        frontend: r.stats,
        connections: r.connections,
        refused_connections: r.refused_connections,
        unread_closed: r.unread_closed,
        accept_failures: r.accept_failures + peers.accept_failures,
        bad_frames: r.bad_frames + peers.bad_frames,
        held_at_stop: r.held_at_stop,
        ..peers
    }
}

/// Connects a frontend to the scheduler of each sub-cluster (`schedulers`,
/// sub-cluster 0's first), each registered as its sub-cluster's: each
/// must say it plans for that sub-cluster, and all must keep one clock
/// (started with one `--clock-origin-file`). The cluster clock's origin.
async fn reach_schedulers(
    router: &Rc<Router>,
    schedulers: &[SocketAddr],
    key: &ClusterKey,
    me: &fb::Hello,
) -> Result<u64, String> {
    let mut origin = None;
    for (k, &at) in schedulers.iter().enumerate() {
        let (fd, buf, reply) = connect(at, key, std::slice::from_ref(me), PATIENCE)
            .await
            .map_err(|e| format!("cannot reach the scheduler at {at}: {e}"))?;
        let why = if reply.index != k as u32 {
            Some(format!("the scheduler at {at} plans for sub-cluster {}, not {k} (its --subcluster)", reply.index))
        } else if origin.is_some_and(|o| o != reply.origin_unix_ns) {
            Some(format!(
                "the scheduler at {at} keeps another clock than sub-cluster 0's: give them one --clock-origin-file"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(why);
        }
        origin = Some(reply.origin_unix_ns);
        router.attach(Addr::Scheduler(k as u32), fd, buf).map_err(|e| format!("the scheduler at {at}: {e}"))?;
    }
    origin.ok_or_else(|| "a frontend needs a scheduler".to_string())
}

/// How often a role that lost a peer it connects to tries to reach it again.
const RECONNECT: Duration = Duration::from_millis(50);

/// A peer a role connects to (rather than accepts).
struct Peer {
    addr: SocketAddr,
    role: Addr,
    /// The clock origin its greeting must carry (the scheduler's).
    origin: Option<u64>,
}

/// Keeps a role connected to `to`, greeting it as `hellos`: while the
/// connection is down (a frontend refuses requests `Unavailable`
/// meanwhile; a backend's batches for a frontend it cannot reach drop),
/// it tries again every `RECONNECT`. A scheduler is taken back if its
/// clock is this role's: the same run, or one restarted with the same
/// `--clock-origin-file`; one with a clock of its own, which this role's
/// held times do not share, is refused, and the role stays cut off until
/// restarted itself.
async fn reconnect(router: Rc<Router>, to: Peer, key: ClusterKey, hellos: Vec<fb::Hello>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Acquire) {
        glommio::timer::sleep(RECONNECT).await;
        // A process stopping closes its connections: not to be reopened
        // (a backend that left would join again).
        if router.reaches(to.role) || stop.load(Ordering::Acquire) {
            continue;
        }
        match connect(to.addr, &key, &hellos, RECONNECT).await {
            Ok((fd, buf, h)) if to.origin.is_none_or(|o| o == h.origin_unix_ns) => {
                // Not adopted (out of descriptors): tried again.
                let _ = router.attach(to.role, fd, buf);
            }
            Ok(_) => {
                eprintln!(
                    "baton: the scheduler at {} restarted with another clock (give it --clock-origin-file to \
                     keep one); restart this process",
                    to.addr
                );
                return;
            }
            Err(_) => {}
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn backends(
    local: std::ops::Range<u32>,
    sched_addr: SocketAddr,
    frontends: Vec<SocketAddr>,
    scenario: Scenario,
    table: ModelTable,
    cfg: EngineConfig,
    (stop, progress, key): Control,
    killed: Arc<AtomicBool>,
    ready: Ready,
) -> EngineReport {
    let hellos: Vec<fb::Hello> = local.clone().map(|b| hello(fb::Role::Backend, b, 0)).collect();
    let (fd, buf, reply) = match connect(sched_addr, &key, &hellos, PATIENCE).await {
        Ok(x) => x,
        Err(e) => return failed(&ready, format!("cannot reach the scheduler at {sched_addr}: {e}")),
    };
    if reply.index != cfg.subcluster {
        let why =
            format!("the scheduler at {sched_addr} plans for sub-cluster {}, not {}", reply.index, cfg.subcluster);
        return failed(&ready, why);
    }
    let (origin, scheduler) = (reply.origin_unix_ns, Addr::Scheduler(cfg.subcluster));
    let clock = Clock::with_origin(origin);
    let router = match Router::new(None, cfg.max_peer_unread) {
        Ok(r) => Rc::new(r),
        Err(e) => return failed(&ready, format!("the peers' io_uring: {e}")),
    };
    if let Err(e) = router.attach(scheduler, fd, buf) {
        return failed(&ready, format!("the scheduler at {sched_addr}: {e}"));
    }
    let mut peers = vec![Peer { addr: sched_addr, role: scheduler, origin: Some(origin) }];
    for (i, &fe) in frontends.iter().enumerate() {
        let attached = connect(fe, &key, &hellos, PATIENCE)
            .await
            .and_then(|(fd, buf, _)| router.attach(Addr::Frontend(i as u32), fd, buf));
        if let Err(e) = attached {
            return failed(&ready, format!("cannot reach frontend {i} at {fe}: {e}"));
        }
        peers.push(Peer { addr: fe, role: Addr::Frontend(i as u32), origin: None });
    }
    for to in peers {
        let again = reconnect(Rc::clone(&router), to, key.clone(), hellos.clone(), Arc::clone(&stop));
        glommio::spawn_local(again).detach();
    }
    // A stop makes its backends leave the cluster first (scaling in),
    // unless they are killed.
    let state = match sched_shard::State::new(&scenario, SchedulerPart::None, local, &table, &cfg, clock.now()) {
        Ok(mut s) => {
            s.leaves = Some(killed);
            s
        }
        Err(why) => return failed(&ready, why),
    };
    let doorbell = match doorbell() {
        Ok(d) => d,
        Err(e) => return failed(&ready, format!("cannot make a doorbell: {e}")),
    };
    let mut rhythm = Rhythm::with_sockets(doorbell.on_shard(), cfg.poll);
    if let Err(e) = rhythm.woken_by(router.wake_fd()) {
        return failed(&ready, format!("the peers' eventfd: {e}"));
    }
    let _ = ready.send(Ok((None, None)));
    let report = sched_shard::run(state, Link::Tcp(Rc::clone(&router)), clock, stop, rhythm, progress).await;
    router.close_all().await;
    EngineReport { backends: report.backends, ..router.report() }
}
