//! `baton sim FILE (--rate R | --find-goodput) [--policy P] [--seed N] [--json]`

use std::path::PathBuf;

use baton_sched::sim::{find_goodput, run as simulate};
use baton_sched::PolicyKind;
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
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<(), String> {
    let mut scenario = load_scenario(&a.file)?;
    if let Some(s) = a.seed {
        scenario.seed = s;
    }
    let policy = match &a.policy {
        Some(p) => PolicyKind::parse(p).map_err(|e| format!("--policy: {e}"))?,
        None => scenario.policy,
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
        let g = find_goodput(&scenario, policy, a.tolerance);
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
    let r = simulate(&scenario, policy, rate);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
    } else {
        print_report(&r);
    }
    Ok(())
}
