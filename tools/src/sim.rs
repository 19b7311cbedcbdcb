//! `baton sim FILE (--rate R | --find-goodput) [--policy P] [--seed N]
//! [--gpus N] [--stall AT_S,FOR_MS].. [--schedulers K [--epoch-s S
//! [--moves M]]] [--json]`. With
//! `--schedulers K` the cluster is partitioned (`baton partition`'s plan)
//! and each sub-cluster runs a scheduler of its own
//! (`baton_sched::partitioned`) on the same arrivals; with `--epoch-s` it
//! is re-planned every S seconds from the rates it measured, at most M
//! models moving (`baton_sched::repartitioned`), as `baton cluster
//! --epoch-s` re-plans the engine's.

use std::path::PathBuf;

use baton_sched::partition::plan;
use baton_sched::partitioned::Partitioned;
use baton_sched::repartitioned::{Epochs, Repartitioned};
use baton_sched::sim::{find_goodput_with, run_with};
use baton_sched::types::Scheduler;
use baton_sched::{build, PolicyKind, Scenario};
use baton_tools::scenarios::{load_scenario, print_report};

#[derive(clap::Args)]
pub struct Args {
    /// Scenario TOML file.
    file: PathBuf,
    /// Aggregate offered rate in requests/s (default: the file's `rate_rps`).
    #[arg(long)]
    rate: Option<f64>,
    /// Bisect on the rate for the highest one meeting every model's SLO.
    #[arg(long, conflicts_with = "rate")]
    find_goodput: bool,
    /// Policy, overriding the file's [policy].
    #[arg(long)]
    policy: Option<String>,
    /// Seed, overriding the file's.
    #[arg(long)]
    seed: Option<u64>,
    /// Relative precision of the goodput search.
    #[arg(long, default_value_t = 0.01)]
    tolerance: f64,
    /// GPUs, overriding the file's `[cluster] gpus`.
    #[arg(long)]
    gpus: Option<u32>,
    /// Partition the models and GPUs into this many sub-clusters, each
    /// with a scheduler of its own (1: one scheduler, as without it).
    #[arg(long)]
    schedulers: Option<usize>,
    /// With --schedulers: re-plan the sub-clusters every this many seconds.
    #[arg(long, requires = "schedulers")]
    epoch_s: Option<f64>,
    /// Models one re-plan may move.
    #[arg(long, default_value_t = 1)]
    moves: usize,
    /// A stall of the engine's host, `AT_S,FOR_MS` (repeatable), in place
    /// of the file's `[[stalls]]`: the clock held from AT_S for FOR_MS ms.
    #[arg(long = "stall", value_parser = stall)]
    stalls: Vec<(f64, f64)>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// `AT_S,FOR_MS`.
fn stall(s: &str) -> Result<(f64, f64), String> {
    let (at, len) = s.split_once(',').ok_or("AT_S,FOR_MS: two numbers and a comma")?;
    let num = |x: &str| x.trim().parse::<f64>().map_err(|e| format!("`{x}`: {e}"));
    Ok((num(at)?, num(len)?))
}

/// A fresh scheduler per run: the policy whole, or over `k` sub-clusters.
type Build = Box<dyn Fn(f64) -> Box<dyn Scheduler>>;

fn builder(s: &Scenario, policy: PolicyKind, k: Option<usize>, epochs: Option<Epochs>) -> Result<Build, String> {
    let Some(k) = k else {
        let s = s.clone();
        return Ok(Box::new(move |rate| build::scheduler(policy, &s, rate)));
    };
    // Each run is partitioned for its rate, as an operator plans for the
    // load (`partition.rs`: demand depends on the rate).
    let each = move |sub: &Scenario, rate: f64| build::scheduler(policy, sub, rate);
    let split = move |s: &Scenario, rate: f64| -> Result<Box<dyn Scheduler>, String> {
        let p = plan(s, k, rate).map_err(|e| format!("--schedulers: {e}"))?;
        let split: Box<dyn Scheduler> = match epochs {
            None => Box::new(Partitioned::new(s, &p, rate, &each).map_err(|e| format!("--schedulers: {e}"))?),
            Some(e) => Box::new(Repartitioned::new(s, &p, rate, e, &each).map_err(|e| format!("--epoch-s: {e}"))?),
        };
        Ok(split)
    };
    split(s, s.rate_rps.unwrap_or(1.0))?;
    let s = s.clone();
    Ok(Box::new(move |rate| split(&s, rate).expect("a plan for one rate is a plan for any")))
}

/// `--epoch-s` and `--moves`, as `baton cluster` takes them.
fn epochs(every_s: f64, moves: usize) -> Result<Epochs, String> {
    let e = crate::cluster::epochs(every_s, moves)?;
    Ok(Epochs { every: e.every.as_nanos() as u64, moves: e.moves })
}

pub fn run(a: Args) -> Result<(), String> {
    let mut scenario = load_scenario(&a.file)?;
    if let Some(s) = a.seed {
        scenario.seed = s;
    }
    if let Some(g) = a.gpus {
        if g == 0 {
            return Err("--gpus: at least one".into());
        }
        scenario.cluster.backends = g;
    }
    if !a.stalls.is_empty() {
        scenario.set_stalls(&a.stalls).map_err(|e| format!("--stall: {e}"))?;
    }
    let policy = match &a.policy {
        Some(p) => PolicyKind::parse(p).map_err(|e| format!("--policy: {e}"))?,
        None => scenario.policy,
    };
    let epochs = a.epoch_s.map(|e| epochs(e, a.moves)).transpose()?;
    let build = builder(&scenario, policy, a.schedulers, epochs)?;
    let name = match (a.schedulers, epochs) {
        (Some(k), None) => format!("{}/{k}-schedulers", policy.as_str()),
        (Some(k), Some(_)) => format!("{}/{k}-schedulers/epochs", policy.as_str()),
        (None, _) => policy.as_str().to_owned(),
    };
    scenario.supports(policy).map_err(|e| format!("--policy: {e}"))?;
    if !(a.tolerance > 0.0 && a.tolerance < 0.5) {
        return Err(format!("--tolerance: must be in (0, 0.5), got {}", a.tolerance));
    }
    eprintln!(
        "baton sim: scenario {} policy {} seed {} (the same seed reproduces this run bit for bit)",
        scenario.name,
        policy.as_str(),
        scenario.seed
    );
    if a.find_goodput {
        let g = find_goodput_with(&scenario, &name, &*build, a.tolerance);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&g).map_err(|e| e.to_string())?);
        } else {
            println!("goodput {:.1} r/s ({} probes)", g.goodput_rps, g.probes.len());
            if let Some(r) = &g.at_goodput {
                print_report(r);
            }
        }
        return Ok(());
    }
    let rate = match (a.rate, scenario.rate_rps) {
        (Some(r), _) | (None, Some(r)) => r,
        (None, None) => return Err("give --rate R or --find-goodput (the scenario has no rate_rps)".into()),
    };
    if !(rate.is_finite() && rate > 0.0 && rate <= baton_sched::sim::MAX_RATE_RPS) {
        return Err(format!("--rate: must be a number in (0, {}], got {rate}", baton_sched::sim::MAX_RATE_RPS));
    }
    let r = run_with(&scenario, &name, build(rate).as_mut(), rate);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
    } else {
        print_report(&r);
    }
    Ok(())
}
