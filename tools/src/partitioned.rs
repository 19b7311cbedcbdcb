//! A partitioned cluster (Symphony's sub-clusters) as role processes in
//! this one, under `baton load`: one scheduler per sub-cluster, all on one
//! clock (a shared `--clock-origin-file`), frontends routing each model's
//! requests by the routing table, and backend processes reporting to
//! their sub-cluster's scheduler: one per run of consecutive GPUs of a
//! sub-cluster, and one of its own for each GPU a move names — so a GPU
//! moves between sub-clusters by its process leaving one scheduler and a
//! new one joining the other. Moves run while the load does: scripted
//! (`Move`: a model and, optionally, a GPU change sub-cluster at a given
//! time), or decided at every epoch boundary by the re-partitioning
//! controller (`repartition.rs`, from the frontends' `/metrics`; every GPU
//! then has a process of its own, since any may move). Nothing is lost or
//! answered twice (`routes.rs` says why). However a run ends, it leaves no
//! role process running: one that fails kills and waits for every
//! process it started (`role_guard.rs`).

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

/// What a partitioned run gave.
pub struct PartitionedRun {
    /// The load as the client saw it (all frontends' connections).
    pub load: LoadReport,
    /// Each sub-cluster's scheduler report, sub-cluster 0 first.
    pub schedulers: Vec<EngineReport>,
    pub frontends: Vec<EngineReport>,
    /// Every backend process's report, those that left for a move too.
    pub backends: Vec<EngineReport>,
    /// When each move was done, from the start of the load.
    pub moved_at: Vec<Duration>,
    /// Each re-plan that changed the table: when, and its steps.
    pub replans: Vec<(Duration, Vec<Change>)>,
    /// The routing table in force at the end.
    pub routes: Routes,
}

impl PartitionedRun {
    /// Requests the frontends held when they stopped (0: nothing leaked).
    pub fn held_at_stop(&self) -> u64 {
        self.frontends.iter().map(|r| r.held_at_stop).sum()
    }

    /// Scheduling decisions (batches) of each scheduler.
    pub fn batches(&self) -> Vec<u64> {
        self.schedulers.iter().map(|r| r.scheduler.batches).collect()
    }
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

/// What changes the table while the load runs.
#[derive(Clone, Copy, Debug)]
pub enum Control<'a> {
    /// These moves, in time order.
    Moves(&'a [Move]),
    /// Re-planned at every epoch boundary.
    Epochs(Epochs),
}

/// Serves `s` partitioned by `routes` (checked) with `frontends`
/// frontends, under `load` spread over them (its targets are set here),
/// changing the table as `control` says while it runs. `cfg` must hold a
/// cluster key; `origin_file` is where the schedulers keep their one
/// clock (a fresh path: it is written). On an error the processes it
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
    routes.check(s).map_err(PartitionedError::Routes)?;
    if frontends == 0 {
        return Err(PartitionedError::NoFrontend);
    }
    let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    // Every process started is held by a guard until it is shut down: an
    // early return kills it.
    let role = |cfg: &EngineConfig, spec| {
        start_role(s, s.policy, cfg, spec).map(RoleGuard::new).map_err(PartitionedError::Start)
    };
    let mut schedulers = Vec::with_capacity(routes.subclusters.len());
    for k in 0..routes.subclusters.len() as u32 {
        let cfg = EngineConfig { subcluster: k, clock_origin_file: Some(origin_file.to_path_buf()), ..cfg.clone() };
        schedulers.push(role(&cfg, RoleSpec::Scheduler { listen: any })?);
    }
    let sched_addrs: Vec<SocketAddr> = schedulers.iter().map(|p| p.addr.expect("a scheduler listens")).collect();
    let mut fe_cfg = EngineConfig { routes: Some(routes.clone()), ..cfg.clone() };
    if let Control::Epochs(_) = control {
        // The controller reads each frontend's `/metrics`.
        fe_cfg.gateway.http = Some(any);
    }
    let fes = (0..frontends)
        .map(|index| {
            let spec = RoleSpec::Frontend { index, listen: any, peers: any, schedulers: sched_addrs.clone() };
            role(&fe_cfg, spec)
        })
        .collect::<Result<Vec<RoleGuard>, PartitionedError>>()?;
    let fe_peers: Vec<SocketAddr> = fes.iter().map(|p| p.peer_addr.expect("a frontend listens for backends")).collect();
    let gpus = |first: u32, count: u32, k: u32| {
        let cfg = EngineConfig { subcluster: k, ..cfg.clone() };
        let (scheduler, frontends) = (sched_addrs[k as usize], fe_peers.clone());
        role(&cfg, RoleSpec::Backends { first, count, scheduler, frontends })
    };
    // Processes by their first GPU and how many they hold.
    let mut serving: Vec<(u32, u32, RoleGuard)> = Vec::new();
    let moving = |b: u32| match control {
        Control::Moves(moves) => moves.iter().any(|m| m.gpu == Some(b)),
        Control::Epochs(_) => true,
    };
    for (k, c) in routes.subclusters.iter().enumerate() {
        for (first, count) in runs(&c.backends, moving) {
            serving.push((first, count, gpus(first, count, k as u32)?));
        }
    }
    // The generator's connections spread over the frontends.
    load.targets = fes.iter().map(|p| p.addr.expect("a frontend listens")).collect();
    let started = Instant::now();
    let run = {
        let s = s.clone();
        std::thread::spawn(move || crate::load::run(&s, &load))
    };
    let (mut table, mut left, mut moved_at, mut replans) = (routes.clone(), Vec::new(), Vec::new(), Vec::new());
    // GPU `b` leaves its scheduler (its process drains and stops) and a
    // process of its own joins sub-cluster `to`'s.
    let mut move_gpu = |serving: &mut Vec<(u32, u32, RoleGuard)>, b: u32, to: u32| -> Result<(), PartitionedError> {
        if let Some(i) = serving.iter().position(|&(first, count, _)| (first..first + count).contains(&b)) {
            left.push(serving.swap_remove(i).2.shutdown());
        }
        serving.push((b, 1, gpus(b, 1, to)?));
        Ok(())
    };
    let publish = |table: &Routes| fes.iter().try_for_each(|fe| fe.reroute(s, table).map_err(PartitionedError::Routes));
    match control {
        Control::Moves(moves) => {
            for m in moves {
                std::thread::sleep(m.at.saturating_sub(started.elapsed()));
                if let Some(b) = m.gpu {
                    move_gpu(&mut serving, b, m.to)?;
                }
                table = table.moved(m.model, m.to, m.gpu).map_err(PartitionedError::Routes)?;
                publish(&table)?;
                moved_at.push(started.elapsed());
            }
        }
        Control::Epochs(epochs) => {
            let https: Vec<SocketAddr> = fes.iter().map(|p| p.http.expect("a frontend's /metrics")).collect();
            let mut controller = Controller::new(s, epochs);
            let mut last = Instant::now();
            while !run.is_finished() {
                std::thread::sleep((last + epochs.every).saturating_duration_since(Instant::now()).min(POLL));
                if last.elapsed() < epochs.every {
                    continue;
                }
                let mut answered = vec![0; s.models.len()];
                for &http in &https {
                    let metrics = scrape(http).map_err(PartitionedError::Scrape)?;
                    for (sum, n) in answered.iter_mut().zip(answered_by_model(s, &metrics)) {
                        *sum += n;
                    }
                }
                let span = last.elapsed();
                last = Instant::now();
                let step = controller.step(s, &table, answered, span).map_err(PartitionedError::Replan)?;
                if let Some((next, changes)) = step {
                    for c in &changes {
                        if let Change::Gpu { gpu, to, .. } = *c {
                            move_gpu(&mut serving, gpu, to)?;
                        }
                    }
                    table = next;
                    publish(&table)?;
                    replans.push((started.elapsed(), changes));
                }
            }
        }
    }
    let load = run.join().map_err(|_| PartitionedError::LoadPanicked)?.map_err(PartitionedError::Load)?;
    let frontends = fes.into_iter().map(RoleGuard::shutdown).collect();
    left.extend(serving.into_iter().map(|(.., p)| p.shutdown()));
    let schedulers = schedulers.into_iter().map(RoleGuard::shutdown).collect();
    Ok(PartitionedRun { load, schedulers, frontends, backends: left, moved_at, replans, routes: table })
}

/// How often the controller looks whether the load has finished.
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
