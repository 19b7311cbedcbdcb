//! A cluster partitioned into sub-clusters (Symphony's), served by role
//! processes: one scheduler per sub-cluster, frontends routing by a
//! published table, and a model and a GPU moved from one sub-cluster to
//! the other while a load runs — every request answered exactly once,
//! each by the scheduler its model was routed to when it arrived.

use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use baton_core::routes::{Change, Routes, Subcluster};
use baton_core::runtime::auth::ClusterKey;
use baton_core::runtime::{start_role, EngineConfig, RoleSpec};
use baton_sched::Scenario;
use baton_tools::load::LoadConfig;
use baton_tools::partitioned::{self, Cluster, Control, Move, PartitionedError};
use baton_tools::repartition::Epochs;

const FLOATS: usize = 4;

/// Alike models of these names under Symphony on 4 GPUs.
fn scenario_of(names: &[&str]) -> Scenario {
    let mut text = "name = \"subclusters\"\nseed = 11\nduration_s = 3\nwarmup_s = 0\n".to_string();
    text += "[cluster]\ngpus = 4\n[policy]\nname = \"symphony\"\n";
    for name in names {
        text += &format!("[[models]]\nname = \"{name}\"\nalpha_ms = 1.0\nbeta_ms = 2.0\nslo_ms = 100.0\n");
    }
    Scenario::parse(&text).expect("the scenario parses")
}

fn scenario() -> Scenario {
    scenario_of(&["a", "b"])
}

fn config() -> EngineConfig {
    let key = ClusterKey::new(b"the sub-cluster tests' secret").expect("long enough");
    EngineConfig { input_floats: FLOATS, cluster_key: Some(key), ..EngineConfig::default() }
}

/// `a` on GPUs 0 and 1 under scheduler 0, `b` on 2 and 3 under scheduler 1.
fn halves() -> Routes {
    Routes {
        subclusters: vec![
            Subcluster { models: vec![0], backends: vec![0, 1] },
            Subcluster { models: vec![1], backends: vec![2, 3] },
        ],
    }
}

/// A fresh file for one test's cluster clock origin, in a folder of its
/// own that goes when this is dropped.
struct Origin {
    dir: PathBuf,
    file: PathBuf,
}

impl Origin {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("baton-subclusters-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let file = dir.join("clock-origin");
        let _ = std::fs::remove_file(&file);
        Self { dir, file }
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `baton load` at `rate` for `secs` over `connections`, 5 s to drain.
fn load(connections: usize, rate: f64, secs: u64) -> LoadConfig {
    LoadConfig {
        connections,
        input_floats: vec![FLOATS],
        drain: Duration::from_secs(5),
        ..LoadConfig::new("127.0.0.1:1".parse().unwrap(), rate, Duration::from_secs(secs))
    }
}

#[test]
fn a_model_and_a_gpu_moved_between_subclusters_under_load_lose_and_double_nothing() {
    let s = scenario();
    let origin = Origin::new("move");
    let moves = [Move { at: Duration::from_millis(1500), model: 0, to: 1, gpu: Some(1) }];
    let control = Control::Moves(&moves);
    let run = partitioned::run(&s, &config(), &halves(), 2, load(2, 300.0, 3), control, &origin.file)
        .expect("the cluster runs");
    let l = &run.load;
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    assert!(l.ok > 0, "{l:?}");
    assert_eq!(run.cluster.held_at_stop(), 0);
    let requests: Vec<u64> = run.cluster.schedulers.iter().map(|r| r.scheduler.requests).collect();
    let received: u64 = run.cluster.frontends.iter().map(|r| r.frontend.received).sum();
    assert_eq!(requests.iter().sum::<u64>(), received, "each request reached exactly one scheduler: {requests:?}");
    // Before the move each scheduler takes one model; after it, scheduler
    // 1 takes both: about a quarter and three quarters of the requests.
    assert!(requests[0] > 0 && requests[1] > 2 * requests[0], "{requests:?}");
    let dups: u64 = run.cluster.frontends.iter().map(|r| r.frontend.duplicates).sum();
    assert_eq!(dups, 0);
    assert_eq!(run.cluster.moved_at.len(), 1);
}

/// A run that fails midway — a move to a sub-cluster that is not there —
/// returns its typed error, having killed the roles it started on the way
/// out (`role_guard.rs`).
#[test]
fn a_run_that_fails_midway_returns_its_error() {
    let s = scenario();
    let moves = [Move { at: Duration::from_millis(200), model: 0, to: 7, gpu: None }];
    let origin = Origin::new("fails");
    let err = partitioned::run(&s, &config(), &halves(), 1, load(1, 100.0, 1), Control::Moves(&moves), &origin.file)
        .err()
        .expect("a move to sub-cluster 7 of 2 fails");
    assert!(matches!(err, PartitionedError::Routes(_)), "{err:?}");
    assert!(err.to_string().contains("sub-cluster 7: there are 2"), "{err}");
    // The cluster the failed move leaves behind serves no one once dropped.
    let origin = Origin::new("fails-dropped");
    let any = "127.0.0.1:0".parse().unwrap();
    let mut cluster =
        Cluster::start(&s, &config(), &halves(), &[any], Control::Moves(&moves), &origin.file).expect("starts");
    let clients = cluster.clients();
    assert!(TcpStream::connect(clients[0]).is_ok(), "the frontend serves");
    assert!(matches!(cluster.apply(&moves[0]), Err(PartitionedError::Routes(_))));
    drop(cluster);
    assert!(TcpStream::connect(clients[0]).is_err(), "the frontend of a failed cluster still listens");
}

#[test]
fn the_controller_re_partitions_a_lopsided_table_at_an_epoch_boundary() {
    // Four alike models at one rate: three of them on one GPU under
    // scheduler 0, the fourth on three under scheduler 1. Re-planned from
    // the measured rates, a model and a GPU move: two and two each.
    let s = scenario_of(&["a", "b", "c", "d"]);
    let lopsided = Routes {
        subclusters: vec![
            Subcluster { models: vec![0, 1, 2], backends: vec![0] },
            Subcluster { models: vec![3], backends: vec![1, 2, 3] },
        ],
    };
    let origin = Origin::new("epochs");
    let epochs = Control::Epochs(Epochs { every: Duration::from_millis(500), moves: 1 });
    let run = partitioned::run(&s, &config(), &lopsided, 1, load(2, 400.0, 3), epochs, &origin.file)
        .expect("the cluster runs");
    let l = &run.load;
    assert_eq!((l.unanswered, l.duplicates, l.errors), (0, 0, 0), "{l:?}");
    assert_eq!(run.cluster.held_at_stop(), 0);
    let requests: Vec<u64> = run.cluster.schedulers.iter().map(|r| r.scheduler.requests).collect();
    assert_eq!(requests.iter().sum::<u64>(), run.cluster.frontends[0].frontend.received, "{requests:?}");
    let (_, first) = run.cluster.replans.first().expect("a re-plan changed the table");
    assert!(first.iter().any(|c| matches!(c, Change::Model { from: 0, to: 1, .. })), "{first:?}");
    assert!(first.contains(&Change::Gpu { gpu: 3, from: 1, to: 0 }), "{first:?}");
    assert_eq!(run.cluster.replans.len(), 1, "a balanced table stays: {:?}", run.cluster.replans);
    let shape: Vec<(usize, usize)> =
        run.cluster.routes.subclusters.iter().map(|c| (c.models.len(), c.backends.len())).collect();
    assert_eq!(shape, vec![(2, 2), (2, 2)]);
}

#[test]
fn a_frontend_refuses_schedulers_that_do_not_fit_its_routing_table() {
    let s = scenario();
    let any = "127.0.0.1:0".parse().unwrap();
    let role = |cfg: &EngineConfig, spec| start_role(&s, s.policy, cfg, spec);
    let sched = role(&config(), RoleSpec::Scheduler { listen: any }).expect("a scheduler starts");
    let at = sched.addr.unwrap();
    // Two sub-clusters routed, one scheduler given.
    let routed = EngineConfig { routes: Some(halves()), ..config() };
    let spec = |schedulers| RoleSpec::Frontend { index: 0, listen: any, peers: any, schedulers };
    let err = role(&routed, spec(vec![at])).err().expect("refused").to_string();
    assert!(err.contains("1 schedulers for a routing table of 2 sub-clusters"), "{err}");
    // Sub-cluster 0's scheduler listed where sub-cluster 1's must be.
    let err = role(&routed, spec(vec![at, at])).err().expect("refused").to_string();
    assert!(err.contains("plans for sub-cluster 0, not 1"), "{err}");
    // Schedulers on clocks of their own.
    let other = role(&EngineConfig { subcluster: 1, ..config() }, RoleSpec::Scheduler { listen: any }).unwrap();
    let err = role(&routed, spec(vec![at, other.addr.unwrap()])).err().expect("refused").to_string();
    assert!(err.contains("keeps another clock"), "{err}");
    // A backend started for another sub-cluster than its scheduler's.
    let spec = RoleSpec::Backends { first: 0, count: 1, scheduler: at, frontends: vec![] };
    let err = role(&EngineConfig { subcluster: 1, ..config() }, spec).err().expect("refused").to_string();
    assert!(err.contains("plans for sub-cluster 0, not 1"), "{err}");
    other.shutdown();
    sched.shutdown();
}

#[test]
fn a_running_frontend_refuses_a_table_for_another_number_of_schedulers() {
    let s = scenario();
    let any = "127.0.0.1:0".parse().unwrap();
    let origin = Origin::new("reroute");
    let on_one_clock = EngineConfig { clock_origin_file: Some(origin.file.clone()), ..config() };
    let role = |cfg: &EngineConfig, spec| start_role(&s, s.policy, cfg, spec).expect("the role starts");
    let first = role(&on_one_clock, RoleSpec::Scheduler { listen: any });
    let second = role(&EngineConfig { subcluster: 1, ..on_one_clock.clone() }, RoleSpec::Scheduler { listen: any });
    let schedulers = vec![first.addr.unwrap(), second.addr.unwrap()];
    let routed = EngineConfig { routes: Some(halves()), ..config() };
    let fe = role(&routed, RoleSpec::Frontend { index: 0, listen: any, peers: any, schedulers });
    let whole = Routes { subclusters: vec![Subcluster { models: vec![0, 1], backends: vec![0, 1, 2, 3] }] };
    let err = fe.reroute(&s, &whole).expect_err("one sub-cluster for two schedulers").to_string();
    assert!(err.contains("1 sub-clusters for a frontend connected to 2 schedulers"), "{err}");
    // The table it had stays: the same halves are taken again.
    fe.reroute(&s, &halves()).expect("the table that fits");
    fe.shutdown();
    second.shutdown();
    first.shutdown();
}
