//! A partitioned cluster (Symphony's sub-clusters) as role processes in
//! this one (`Cluster`: what `baton cluster` serves clients with, and
//! `run`: the same under `baton load`): one scheduler per sub-cluster, all on one
//! clock (a shared `--clock-origin-file`), frontends routing each model's
//! requests by the routing table, and backend processes reporting to
//! their sub-cluster's scheduler: one per run of consecutive GPUs of a
//! sub-cluster, and one of its own for each GPU a move names — so a GPU
//! moves between sub-clusters by its process leaving one scheduler and a
//! new one joining the other. Moves run while it serves: scripted
//! (`Move`: a model and, optionally, a GPU change sub-cluster at a given
//! time), or decided at every epoch boundary by the re-partitioning
//! controller (`repartition.rs`, from the frontends' `/metrics`; every GPU
//! then has a process of its own, since any may move). Nothing is lost or
//! answered twice (`routes.rs` says why). However a run ends, it leaves no
//! role process running: a cluster dropped before it is stopped (an
//! error, a panic) kills and waits for every process it started
//! (`role_guard.rs`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use baton_core::routes::{Change, RouteError, Routes};
use baton_core::runtime::{start_role, EngineConfig, EngineError, EngineReport, RoleSpec};
use baton_sched::Scenario;

use crate::load::{LoadConfig, LoadError, LoadReport};
use crate::repartition::{answered_by_model, scrape, Controller, Epochs};
use crate::role_guard::RoleGuard;

/// A model (by index) moved to sub-cluster `to` at `at` into the run,
/// with the GPU `gpu` when given (its process leaves its scheduler first,
/// then one for the new sub-cluster joins, then the frontends reroute).
#[derive(Clone, Copy, Debug)]
pub struct Move {
    pub at: Duration,
    pub model: usize,
    pub to: u32,
    pub gpu: Option<u32>,
}

/// What a partitioned cluster did while it served, once stopped.
pub struct ClusterReport {
    /// Each sub-cluster's scheduler report, sub-cluster 0 first.
    pub schedulers: Vec<EngineReport>,
    pub frontends: Vec<EngineReport>,
    /// Every backend process's report, those that left for a move too.
    pub backends: Vec<EngineReport>,
    /// When each move was done, from the start.
    pub moved_at: Vec<Duration>,
    /// How long each GPU that moved served no one: from its process
    /// starting to leave its scheduler to the new one joining the other.
    pub gpu_moves: Vec<Duration>,
    /// Each re-plan that changed the table: when, and its steps.
    pub replans: Vec<(Duration, Vec<Change>)>,
    /// The routing table in force at the end.
    pub routes: Routes,
}

impl ClusterReport {
    /// Requests the frontends held when they stopped (0: nothing leaked).
    pub fn held_at_stop(&self) -> u64 {
        self.frontends.iter().map(|r| r.held_at_stop).sum()
    }

    /// Scheduling decisions (batches) of each scheduler.
    pub fn batches(&self) -> Vec<u64> {
        self.schedulers.iter().map(|r| r.scheduler.batches).collect()
    }
}

/// What a partitioned run under load gave.
pub struct PartitionedRun {
    /// The load as the client saw it (all frontends' connections).
    pub load: LoadReport,
    pub cluster: ClusterReport,
}

/// Why a partitioned run failed.
#[derive(Debug)]
pub enum PartitionedError {
    /// A table that does not fit the scenario: the one given, one a move
    /// made, or one a frontend refused.
    Routes(RouteError),
    /// A run asked for no frontend.
    NoFrontend,
    /// A role process did not start.
    Start(EngineError),
    /// A frontend's `/metrics` could not be read (`repartition::scrape`).
    Scrape(String),
    /// The controller could not re-plan (`Controller::step`).
    Replan(String),
    /// The load generator failed, or panicked.
    Load(LoadError),
    LoadPanicked,
}

impl std::fmt::Display for PartitionedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Routes(e) => write!(f, "{e}"),
            Self::NoFrontend => write!(f, "a partitioned cluster needs a frontend"),
            Self::Start(e) => write!(f, "{e}"),
            Self::Scrape(why) | Self::Replan(why) => write!(f, "{why}"),
            Self::Load(e) => write!(f, "{e}"),
            Self::LoadPanicked => write!(f, "the load generator panicked"),
        }
    }
}

impl std::error::Error for PartitionedError {}

/// What changes the table while the cluster serves.
#[derive(Clone, Copy, Debug)]
pub enum Control<'a> {
    /// These moves, in time order.
    Moves(&'a [Move]),
    /// Re-planned at every epoch boundary.
    Epochs(Epochs),
}

/// A partitioned cluster while it serves: its role processes, each held
/// by a guard until it is shut down (an early return kills it), and the
/// routing table in force.
pub struct Cluster<'a> {
    s: &'a Scenario,
    cfg: EngineConfig,
    schedulers: Vec<RoleGuard>,
    frontends: Vec<RoleGuard>,
    /// Backend processes serving: their first GPU, how many, the process.
    serving: Vec<(u32, u32, RoleGuard)>,
    /// The reports of backend processes that left for a move.
    left: Vec<EngineReport>,
    table: Routes,
    started: Instant,
    moved_at: Vec<Duration>,
    gpu_moves: Vec<Duration>,
    replans: Vec<(Duration, Vec<Change>)>,
}

impl<'a> Cluster<'a> {
    /// Starts `s` partitioned by `routes` (checked): a scheduler per
    /// sub-cluster, a frontend for clients at each of `listen` (port 0: any
    /// free one), and backend processes, one per run of consecutive GPUs of
    /// a sub-cluster and one of its own for each GPU `control` may move.
    /// With `Control::Epochs` the frontends serve `/metrics` for the
    /// controller. `cfg` must hold a cluster key; `origin_file` is where
    /// the schedulers keep their one clock (a fresh path: it is written).
    pub fn start(
        s: &'a Scenario,
        cfg: &EngineConfig,
        routes: &Routes,
        listen: &[SocketAddr],
        control: Control<'_>,
        origin_file: &std::path::Path,
    ) -> Result<Self, PartitionedError> {
        routes.check(s).map_err(PartitionedError::Routes)?;
        if listen.is_empty() {
            return Err(PartitionedError::NoFrontend);
        }
        let role = |cfg: &EngineConfig, spec| {
            start_role(s, s.policy, cfg, spec).map(RoleGuard::new).map_err(PartitionedError::Start)
        };
        let mut schedulers = Vec::with_capacity(routes.subclusters.len());
        for k in 0..routes.subclusters.len() as u32 {
            let cfg = EngineConfig { subcluster: k, clock_origin_file: Some(origin_file.to_path_buf()), ..cfg.clone() };
            schedulers.push(role(&cfg, RoleSpec::Scheduler { listen: ANY })?);
        }
        let sched_addrs: Vec<SocketAddr> = schedulers.iter().map(|p| p.addr.expect("a scheduler listens")).collect();
        let mut fe_cfg = EngineConfig { routes: Some(routes.clone()), ..cfg.clone() };
        if let Control::Epochs(_) = control {
            // The controller reads each frontend's `/metrics`.
            fe_cfg.gateway.http = Some(ANY);
        }
        let frontends = (0..listen.len() as u32)
            .map(|index| {
                let schedulers = sched_addrs.clone();
                role(&fe_cfg, RoleSpec::Frontend { index, listen: listen[index as usize], peers: ANY, schedulers })
            })
            .collect::<Result<Vec<RoleGuard>, PartitionedError>>()?;
        let mut cluster = Self {
            s,
            cfg: cfg.clone(),
            schedulers,
            frontends,
            serving: Vec::new(),
            left: Vec::new(),
            table: routes.clone(),
            started: Instant::now(),
            moved_at: Vec::new(),
            gpu_moves: Vec::new(),
            replans: Vec::new(),
        };
        let moving = |b: u32| match control {
            Control::Moves(moves) => moves.iter().any(|m| m.gpu == Some(b)),
            Control::Epochs(_) => true,
        };
        for (k, c) in routes.subclusters.iter().enumerate() {
            for (first, count) in runs(&c.backends, moving) {
                let p = cluster.gpus(first, count, k as u32)?;
                cluster.serving.push((first, count, p));
            }
        }
        cluster.started = Instant::now();
        Ok(cluster)
    }

    /// Where clients connect, one address per frontend.
    pub fn clients(&self) -> Vec<SocketAddr> {
        self.frontends.iter().map(|p| p.addr.expect("a frontend listens")).collect()
    }

    /// Each frontend's `/metrics` (with `Control::Epochs` only).
    pub fn metrics(&self) -> Vec<SocketAddr> {
        self.frontends.iter().filter_map(|p| p.http).collect()
    }

    /// The routing table in force.
    pub fn routes(&self) -> &Routes {
        &self.table
    }

    /// A backend process for GPUs `first..first + count` of sub-cluster `k`.
    fn gpus(&self, first: u32, count: u32, k: u32) -> Result<RoleGuard, PartitionedError> {
        let cfg = EngineConfig { subcluster: k, ..self.cfg.clone() };
        let scheduler = self.schedulers[k as usize].addr.expect("a scheduler listens");
        let frontends = self.frontends.iter().map(|p| p.peer_addr.expect("a frontend listens for backends")).collect();
        start_role(self.s, self.s.policy, &cfg, RoleSpec::Backends { first, count, scheduler, frontends })
            .map(RoleGuard::new)
            .map_err(PartitionedError::Start)
    }

    /// GPU `b` leaves its scheduler (its process drains and stops) and a
    /// process of its own joins sub-cluster `to`'s.
    fn move_gpu(&mut self, b: u32, to: u32) -> Result<(), PartitionedError> {
        let leaving = Instant::now();
        if let Some(i) = self.serving.iter().position(|&(first, count, _)| (first..first + count).contains(&b)) {
            self.left.push(self.serving.swap_remove(i).2.shutdown());
        }
        let p = self.gpus(b, 1, to)?;
        self.serving.push((b, 1, p));
        self.gpu_moves.push(leaving.elapsed());
        Ok(())
    }

    /// Every frontend routes by `table` from now on.
    fn publish(&mut self, table: Routes) -> Result<(), PartitionedError> {
        self.frontends.iter().try_for_each(|fe| fe.reroute(self.s, &table).map_err(PartitionedError::Routes))?;
        self.table = table;
        Ok(())
    }

    /// Moves `m`'s GPU, if it names one, then its model.
    pub fn apply(&mut self, m: &Move) -> Result<(), PartitionedError> {
        if let Some(b) = m.gpu {
            self.move_gpu(b, m.to)?;
        }
        let table = self.table.moved(m.model, m.to, m.gpu).map_err(PartitionedError::Routes)?;
        self.publish(table)?;
        self.moved_at.push(self.started.elapsed());
        Ok(())
    }

    /// One epoch boundary, `span` after the last: each model's answers
    /// from every frontend's `/metrics`, re-planned by `controller`; the
    /// GPUs the new table moves leave and join, then the frontends
    /// reroute. The steps, if the table changed.
    pub fn replan(
        &mut self,
        controller: &mut Controller,
        span: Duration,
    ) -> Result<Option<&[Change]>, PartitionedError> {
        let mut answered = vec![0; self.s.models.len()];
        for http in self.metrics() {
            let metrics = scrape(http).map_err(PartitionedError::Scrape)?;
            for (sum, n) in answered.iter_mut().zip(answered_by_model(self.s, &metrics)) {
                *sum += n;
            }
        }
        let Some((next, changes)) =
            controller.step(self.s, &self.table, answered, span).map_err(PartitionedError::Replan)?
        else {
            return Ok(None);
        };
        for c in &changes {
            if let Change::Gpu { gpu, to, .. } = *c {
                self.move_gpu(gpu, to)?;
            }
        }
        self.publish(next)?;
        self.replans.push((self.started.elapsed(), changes));
        Ok(self.replans.last().map(|(_, c)| &c[..]))
    }

    /// Changes the table as `control` says until `done()`: the moves at
    /// their times (from `start`), or a re-plan at every epoch boundary;
    /// `changed` hears of each re-plan that changed the table.
    pub fn drive(
        &mut self,
        control: Control<'_>,
        done: impl Fn() -> bool,
        mut changed: impl FnMut(Duration, &[Change]),
    ) -> Result<(), PartitionedError> {
        let wait_until = |at: Instant| {
            while !done() && Instant::now() < at {
                std::thread::sleep(at.saturating_duration_since(Instant::now()).min(POLL));
            }
        };
        match control {
            Control::Moves(moves) => {
                for m in moves {
                    wait_until(self.started + m.at);
                    if done() {
                        return Ok(());
                    }
                    self.apply(m)?;
                }
                while !done() {
                    std::thread::sleep(POLL);
                }
            }
            Control::Epochs(epochs) => {
                let mut controller = Controller::new(self.s, epochs);
                let mut last = Instant::now();
                loop {
                    wait_until(last + epochs.every);
                    if done() {
                        return Ok(());
                    }
                    let span = last.elapsed();
                    last = Instant::now();
                    let at = self.started.elapsed();
                    if let Some(changes) = self.replan(&mut controller, span)? {
                        changed(at, changes);
                    }
                }
            }
        }
        Ok(())
    }

    /// Stops every role in order — backends (they leave their schedulers
    /// first), frontends, schedulers — and gives their reports.
    pub fn stop(self) -> ClusterReport {
        let mut backends = self.left;
        backends.extend(self.serving.into_iter().map(|(.., p)| p.shutdown()));
        ClusterReport {
            frontends: self.frontends.into_iter().map(RoleGuard::shutdown).collect(),
            backends,
            schedulers: self.schedulers.into_iter().map(RoleGuard::shutdown).collect(),
            moved_at: self.moved_at,
            gpu_moves: self.gpu_moves,
            replans: self.replans,
            routes: self.table,
        }
    }
}

/// Serves `s` partitioned by `routes` with `frontends` frontends (`Cluster::start`),
/// under `load` spread over them (its targets are set here), changing the
/// table as `control` says while it runs. On an error the processes it
/// started are killed and waited for; the load generator, if it started,
/// runs out on its own against the stopped frontends.
pub fn run(
    s: &Scenario,
    cfg: &EngineConfig,
    routes: &Routes,
    frontends: u32,
    mut load: LoadConfig,
    control: Control<'_>,
    origin_file: &std::path::Path,
) -> Result<PartitionedRun, PartitionedError> {
    let listen = vec![ANY; frontends as usize];
    let mut cluster = Cluster::start(s, cfg, routes, &listen, control, origin_file)?;
    load.targets = cluster.clients();
    let run = {
        let s = s.clone();
        std::thread::spawn(move || crate::load::run(&s, &load))
    };
    cluster.drive(control, || run.is_finished(), |_, _| {})?;
    let load = run.join().map_err(|_| PartitionedError::LoadPanicked)?.map_err(PartitionedError::Load)?;
    Ok(PartitionedRun { load, cluster: cluster.stop() })
}

/// Any free port on the loopback interface.
const ANY: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0));

/// How often a driven cluster looks whether it is done.
const POLL: Duration = Duration::from_millis(50);

/// `backends` as runs of consecutive GPUs (first, count), in order, each
/// GPU `alone` picks a run of its own.
fn runs(backends: &[u32], alone: impl Fn(u32) -> bool) -> Vec<(u32, u32)> {
    let mut sorted = backends.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for b in sorted {
        match out.last_mut() {
            Some((first, count)) if *first + *count == b && !alone(b) && !alone(*first) => *count += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn consecutive_gpus_share_a_process_and_a_moving_one_has_its_own() {
        assert_eq!(super::runs(&[4, 0, 1, 2, 6, 7], |b| b == 1), vec![(0, 1), (1, 1), (2, 1), (4, 1), (6, 2)]);
        assert_eq!(super::runs(&[0, 1, 2, 3], |_| false), vec![(0, 4)]);
    }
}
