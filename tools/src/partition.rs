//! `baton partition FILE --schedulers K [--rate R] [--json]`: the scenario's
//! models split over K sub-clusters, each for a scheduler of its own, and
//! the cluster's GPUs shared among them (`baton_sched::partition`, which
//! says what the search is and what it is not yet). `--solver highs`
//! (a build with the `highs` feature) solves the MILP on HiGHS under
//! `--time-limit`; `--current ROUTES --moves N` re-plans from a routing
//! table in force, moving at most N models.

use std::path::PathBuf;

use baton_core::routes::Routes;
use baton_sched::partition::{plan_with, Options, Solver, MILP_NODES};
use baton_sched::partition_milp::Solver as Milp;
use baton_tools::scenarios::load_scenario;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario TOML file.
    file: PathBuf,
    /// Sub-clusters, one scheduler each.
    #[arg(long)]
    schedulers: usize,
    /// Aggregate request rate in requests/s (default: the file's `rate_rps`).
    #[arg(long)]
    rate: Option<f64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// The MILP's solver: `microlp` (pure Rust, deterministic within
    /// `--nodes`) or `highs` (under `--time-limit`; needs a build with the
    /// `highs` feature).
    #[arg(long, default_value = "microlp")]
    solver: String,
    /// Branch-and-bound nodes microlp may explore.
    #[arg(long, default_value_t = MILP_NODES)]
    nodes: u64,
    /// Seconds HiGHS may take.
    #[arg(long, default_value_t = 10.0)]
    time_limit: f64,
    /// Re-plan from this routing table (`--json`'s format, as a frontend's
    /// `--routes` reads it) instead of from scratch.
    #[arg(long)]
    current: Option<PathBuf>,
    /// With `--current`: at most this many models change sub-cluster.
    #[arg(long, default_value_t = 1, requires = "current")]
    moves: usize,
}

/// The solver `--solver` names, or why not.
fn solver(a: &Args) -> Result<Milp, String> {
    match a.solver.as_str() {
        "microlp" => Ok(Milp::Microlp { nodes: a.nodes }),
        #[cfg(feature = "highs")]
        "highs" if a.time_limit.is_finite() && a.time_limit > 0.0 => Ok(Milp::Highs { time_limit_s: a.time_limit }),
        #[cfg(feature = "highs")]
        "highs" => Err(format!("--time-limit: must be a positive number of seconds, got {}", a.time_limit)),
        #[cfg(not(feature = "highs"))]
        "highs" => Err("--solver highs: this baton was built without the `highs` feature \
                        (cargo build --release --features highs; it needs cmake)"
            .into()),
        other => Err(format!("--solver: `microlp` or `highs`, got `{other}`")),
    }
}

pub fn run(a: Args) -> Result<(), String> {
    let s = load_scenario(&a.file)?;
    let rate = a.rate.or(s.rate_rps).ok_or("give --rate R (the scenario has no rate_rps)")?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("--rate: must be a positive number, got {rate}"));
    }
    // What a partitioned cluster refuses gets no plan either.
    if let Some(what) = baton_sched::partitioned::refuses(&s) {
        return Err(format!("{}: a partitioned cluster cannot serve {what}", a.file.display()));
    }
    let mut opts = Options { solver: solver(&a)?, current: None };
    if let Some(path) = &a.current {
        let text = std::fs::read_to_string(path).map_err(|e| format!("--current {}: {e}", path.display()))?;
        let routes = Routes::from_json(&s, &text).map_err(|e| format!("--current {}: {e}", path.display()))?;
        if routes.subclusters.len() != a.schedulers {
            let n = routes.subclusters.len();
            return Err(format!("--current has {n} sub-clusters, --schedulers {}", a.schedulers));
        }
        opts.current = Some((routes.assignment(), a.moves));
    }
    let p = plan_with(&s, a.schedulers, &s.direct_rates(rate), &opts).map_err(|e| e.to_string())?;
    let names = |models: &[usize]| -> Vec<String> { models.iter().map(|&i| s.models[i].spec.name.clone()).collect() };
    let solver = match &p.solver {
        Solver::Milp { by, gap, optimal } => {
            serde_json::json!({ "solver": "milp", "by": by, "gap": gap, "optimal": optimal })
        }
        Solver::Greedy { why } => serde_json::json!({ "solver": "greedy", "why": why }),
    };
    if a.json {
        let subclusters: Vec<serde_json::Value> = p
            .subclusters
            .iter()
            .map(|c| serde_json::json!({ "models": names(&c.models), "gpus": c.gpus, "demand_gpus": c.demand_gpus }))
            .collect();
        let v = serde_json::json!({
            "scenario": s.name, "rate_rps": rate, "schedulers": a.schedulers,
            "subclusters": subclusters, "objective": p.objective, "imbalance": p.imbalance, "solver": solver,
        });
        println!("{v}");
        return Ok(());
    }
    let how = match &p.solver {
        Solver::Milp { by, optimal: true, .. } => format!("MILP ({by}), proven optimal"),
        Solver::Milp { by, gap, .. } => {
            format!("MILP ({by}), gap {}", gap.map_or("unknown".into(), |g| format!("{g:.4}")))
        }
        Solver::Greedy { why } => format!("greedy: {why}"),
    };
    println!(
        "{} at {rate:.1} r/s over {} schedulers (imbalance {:.3}, objective {:.4}, {how}):",
        s.name, a.schedulers, p.imbalance, p.objective
    );
    for (i, c) in p.subclusters.iter().enumerate() {
        println!(
            "  sub-cluster {i}: {} GPUs for {:.2} GPUs of demand: {}",
            c.gpus,
            c.demand_gpus,
            names(&c.models).join(", ")
        );
    }
    Ok(())
}
