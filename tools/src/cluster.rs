//! `baton cluster --schedulers K`: Symphony's control plane on one host, for
//! operators. Serves the scenario partitioned into K sub-clusters — a
//! scheduler per sub-cluster, frontends routing each model's requests to
//! its sub-cluster's scheduler, backend processes reporting to theirs
//! (`baton_tools::partitioned::Cluster`) — from the partitioner's plan at
//! start (or the table `--routes` gives), until SIGINT/SIGTERM or
//! `--duration`. With `--epoch-s S` the controller re-plans every S
//! seconds from the rates the frontends' `/metrics` show, moving models
//! and their GPUs between sub-clusters while clients are served (at most
//! `--moves` models per re-plan; nothing lost or answered twice); each
//! re-plan that changes the table is logged on stderr.
//!
//! Across hosts an operator runs the same roles as `baton scheduler
//! --subcluster k`, `baton frontend --routes FILE` and `baton backend
//! --subcluster k` on each machine, and publishes a new table by writing
//! the routes file (`baton partition --current FILE --json` re-plans it).
//!
//! Readiness: `baton cluster: NAME in K sub-clusters (...) on ADDR[,ADDR]`
//! on stderr, after the signal handlers are installed (with `--epoch-s`,
//! `baton gateway: http on ADDR` lines first, one per frontend's
//! `/metrics`). The final report follows on stdout when it stops.

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton_core::routes::{Change, Routes};
use baton_core::runtime::auth::{ClusterKey, KeyError};
use baton_core::runtime::EngineConfig;
use baton_sched::partition::plan;
use baton_sched::Scenario;
use baton_tools::partitioned::{Cluster, ClusterReport, Control};
use baton_tools::repartition::Epochs;

use crate::serve::{config, install_signals, one_frontend_shard, scenario, stopped, RoleArgs};

/// The roles' options (`--cluster-secret-file`: without one, nor the
/// variable, the cluster makes a fresh secret: every role is in this
/// process), and the cluster's.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    role: RoleArgs,
    /// Sub-clusters, each with a scheduler of its own.
    #[arg(long)]
    schedulers: usize,
    /// The routing table to start from: `baton partition --json`'s output
    /// (default: the partitioner's plan for --plan-rate).
    #[arg(long)]
    routes: Option<PathBuf>,
    /// The rate the first plan is made for (default: the file's rate_rps).
    #[arg(long)]
    plan_rate: Option<f64>,
    /// Where clients connect: one frontend per address, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "127.0.0.1:7700")]
    listen: Vec<SocketAddr>,
    /// Re-plan every this many seconds from the rates the frontends saw
    /// (default: the table stays as it started).
    #[arg(long)]
    epoch_s: Option<f64>,
    /// Models one re-plan may move.
    #[arg(long, default_value_t = 1)]
    moves: usize,
}

pub fn run(a: Args) -> Result<(), String> {
    let (mut s, policy) = scenario(&a.role.engine)?;
    s.policy = policy;
    if let Some(what) = baton_sched::partitioned::refuses(&s) {
        return Err(format!("{}: a partitioned cluster cannot serve {what}", s.name));
    }
    let plan_rate = a.plan_rate.or(s.rate_rps).ok_or("give --plan-rate R (the scenario has no rate_rps)")?;
    if !(plan_rate.is_finite() && plan_rate > 0.0) {
        return Err(format!("--plan-rate: must be a positive number, got {plan_rate}"));
    }
    let routes = first_table(&a, &s, plan_rate)?;
    let epochs = a.epoch_s.map(|e| epochs(e, a.moves)).transpose()?;
    let control = epochs.map_or(Control::Moves(&[]), Control::Epochs);
    one_frontend_shard(&a.role.engine)?;
    let cfg = EngineConfig { cluster_key: Some(cluster_key(&a)?), ..config(&a.role.engine, a.listen[0], plan_rate)? };
    let origin = std::env::temp_dir().join(format!("baton-cluster-clock-{}", std::process::id()));
    let _ = std::fs::remove_file(&origin);
    let mut cluster = Cluster::start(&s, &cfg, &routes, &a.listen, control, &origin).map_err(|e| e.to_string())?;
    install_signals();
    for http in cluster.metrics() {
        eprintln!("baton gateway: http on {http}");
    }
    let clients: Vec<String> = cluster.clients().iter().map(SocketAddr::to_string).collect();
    eprintln!(
        "baton cluster: {} in {} sub-clusters ({}), policy {}, on {}",
        s.name,
        routes.subclusters.len(),
        table(&s, &routes),
        s.policy.as_str(),
        clients.join(",")
    );
    let started = Instant::now();
    let limit = a.role.duration.map(Duration::from_secs_f64);
    let done = || stopped() || limit.is_some_and(|l| started.elapsed() >= l);
    let log = |at: Duration, changes: &[Change]| {
        let steps: Vec<String> = changes.iter().map(|c| step(&s, c)).collect();
        eprintln!("baton cluster: re-planned at {:.1} s: {}", at.as_secs_f64(), steps.join("; "));
    };
    let driven = cluster.drive(control, done, log);
    let report = cluster.stop();
    let _ = std::fs::remove_file(&origin);
    driven.map_err(|e| e.to_string())?;
    print_report(&s, &report, a.role.json);
    Ok(())
}

/// `--routes`, or the partitioner's plan of `s` at `rate`.
fn first_table(a: &Args, s: &Scenario, rate: f64) -> Result<Routes, String> {
    let routes = match &a.routes {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--routes {}: {e}", path.display()))?;
            Routes::from_json(s, &text).map_err(|e| format!("--routes {}: {e}", path.display()))?
        }
        None => {
            // A planned sub-cluster holds at least a model and a GPU.
            let most = s.models.len().min(s.cluster.backends as usize);
            if a.schedulers > most {
                let (m, g) = (s.models.len(), s.cluster.backends);
                return Err(format!(
                    "--schedulers {}: {m} models on {g} GPUs make at most {most} sub-clusters",
                    a.schedulers
                ));
            }
            Routes::of_plan(&plan(s, a.schedulers, rate).map_err(|e| e.to_string())?)
        }
    };
    if routes.subclusters.len() != a.schedulers {
        let n = routes.subclusters.len();
        return Err(format!("--routes has {n} sub-clusters, --schedulers {}", a.schedulers));
    }
    Ok(routes)
}

pub(crate) fn epochs(every_s: f64, moves: usize) -> Result<Epochs, String> {
    if !(every_s.is_finite() && (0.1..=86_400.0).contains(&every_s)) {
        return Err(format!("--epoch-s: seconds from 0.1 to 86400, got {every_s}"));
    }
    if moves == 0 {
        return Err("--moves: a re-plan must be allowed to move a model (1 or more)".into());
    }
    Ok(Epochs { every: Duration::from_secs_f64(every_s), moves })
}

/// The secret from `--cluster-secret-file` or the environment, else 32
/// fresh random bytes: no role outside this process joins.
fn cluster_key(a: &Args) -> Result<ClusterKey, String> {
    match ClusterKey::from_file_or_env(a.role.cluster_secret_file.as_deref()) {
        Err(KeyError::Missing) => {
            let mut secret = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut secret))
                .map_err(|e| format!("a fresh cluster secret from /dev/urandom: {e}"))?;
            ClusterKey::new(&secret).map_err(|e| e.to_string())
        }
        key => key.map_err(|e| e.to_string()),
    }
}

/// Each sub-cluster's models and GPUs: `a,b: GPUs 0,1 | c: GPUs 2,3`.
fn table(s: &Scenario, routes: &Routes) -> String {
    let each = routes.subclusters.iter().map(|c| {
        let names: Vec<&str> = c.models.iter().map(|&m| s.models[m].spec.name.as_str()).collect();
        let gpus: Vec<String> = c.backends.iter().map(u32::to_string).collect();
        let names = if names.is_empty() { "no model".to_string() } else { names.join(",") };
        let gpus = if gpus.is_empty() { "no GPU".to_string() } else { format!("GPUs {}", gpus.join(",")) };
        format!("{names}: {gpus}")
    });
    each.collect::<Vec<_>>().join(" | ")
}

fn step(s: &Scenario, c: &Change) -> String {
    match *c {
        Change::Model { model, from, to } => format!("model {} {from} -> {to}", s.models[model].spec.name),
        Change::Gpu { gpu, from, to } => format!("GPU {gpu} {from} -> {to}"),
    }
}

fn print_report(s: &Scenario, r: &ClusterReport, json: bool) {
    let fe = |f: fn(&baton_core::roles::frontend::FrontendStats) -> u64| -> u64 {
        r.frontends.iter().map(|e| f(&e.frontend)).sum()
    };
    let (received, ok, late, dropped, errors) =
        (fe(|f| f.received), fe(|f| f.ok), fe(|f| f.late), fe(|f| f.dropped), fe(|f| f.errors));
    let batches = r.batches();
    if json {
        let j = serde_json::json!({
            "received": received, "ok": ok, "late": late, "dropped": dropped, "errors": errors,
            "duplicates": fe(|f| f.duplicates),
            "held_at_stop": r.held_at_stop(), "scheduler_batches": batches,
            "replans": r.replans.len(), "backend_processes": r.backends.len(),
            "subclusters": r.routes.subclusters.iter().map(|c| serde_json::json!({
                "models": c.models.iter().map(|&m| s.models[m].spec.name.as_str()).collect::<Vec<_>>(),
                "gpus": c.backends,
            })).collect::<Vec<_>>(),
        });
        println!("{j}");
    } else {
        println!(
            "cluster: received {received}  ok {ok} (late {late})  dropped {dropped}  errors {errors}  held at stop {}",
            r.held_at_stop()
        );
        println!(
            "         batches per scheduler {batches:?}  re-plans {}  backend processes {}  routes at the end: {}",
            r.replans.len(),
            r.backends.len(),
            table(s, &r.routes)
        );
    }
}
