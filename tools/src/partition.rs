//! `baton partition FILE --schedulers K [--rate R] [--json]`: the scenario's
//! models split over K sub-clusters, each for a scheduler of its own, and
//! the cluster's GPUs shared among them (`baton_sched::partition`, which
//! says what the search is and what it is not yet).

use std::path::PathBuf;

use baton_sched::partition::{plan, Solver};
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
}

pub fn run(a: Args) -> Result<(), String> {
    let s = load_scenario(&a.file)?;
    let rate = a.rate.or(s.rate_rps).ok_or("give --rate R (the scenario has no rate_rps)")?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("--rate: must be a positive number, got {rate}"));
    }
    let p = plan(&s, a.schedulers, rate).map_err(|e| e.to_string())?;
    let names = |models: &[usize]| -> Vec<String> { models.iter().map(|&i| s.models[i].spec.name.clone()).collect() };
    let solver = match &p.solver {
        Solver::Milp { gap, optimal } => serde_json::json!({ "solver": "milp", "gap": gap, "optimal": optimal }),
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
        Solver::Milp { optimal: true, .. } => "MILP, proven optimal".to_string(),
        Solver::Milp { gap, .. } => format!("MILP, gap {}", gap.map_or("unknown".into(), |g| format!("{g:.4}"))),
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
