//! `baton plan FILE --rate R [--json]`: Nexus's squishy bin packing of the
//! scenario's models at aggregate rate R (split by their weights).

use std::path::PathBuf;

use baton_perf::load_scenario;
use baton_sched::nexus::plan_report;

#[derive(clap::Args)]
pub struct Args {
    /// Scenario TOML file.
    file: PathBuf,
    /// Aggregate request rate in requests/s (default: the file's `rate_rps`).
    #[arg(long)]
    rate: Option<f64>,
    /// Plan every model as its own session, even those sharing a prefix.
    #[arg(long)]
    no_prefix_batching: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<(), String> {
    let scenario = load_scenario(&a.file)?;
    let rate = match (a.rate, scenario.rate_rps) {
        (Some(r), _) | (None, Some(r)) => r,
        (None, None) => return Err("give --rate R (the scenario has no rate_rps)".into()),
    };
    if !(rate.is_finite() && rate > 0.0 && rate <= baton_sched::sim::MAX_RATE_RPS) {
        return Err(format!("--rate: must be a number in (0, {}], got {rate}", baton_sched::sim::MAX_RATE_RPS));
    }
    let r = plan_report(&scenario.cluster, &scenario.model_rates(rate), !a.no_prefix_batching);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!(
        "{} at {rate:.1} r/s: {} GPUs (lower bound {:.2} -> {}, batch-oblivious {}); the cluster has {}",
        scenario.name,
        r.gpus,
        r.lower_bound_gpus_exact,
        r.lower_bound_gpus,
        r.batch_oblivious_gpus,
        scenario.cluster.backends
    );
    for b in &r.backends {
        let sessions: Vec<String> =
            b.sessions.iter().map(|s| format!("{} b={} {:.1} r/s", s.model, s.batch, s.rate_rps)).collect();
        println!(
            "backend {:>3}: duty {:>7.2} ms, occupancy {:.2}: {}",
            b.backend,
            b.duty_cycle_ms,
            b.occupancy,
            sessions.join("; ")
        );
    }
    for q in &scenario.queries {
        let name = |s: usize| scenario.models[q.stages[s].model.index()].spec.name.as_str();
        let budgets: Vec<String> = (0..q.stages.len())
            .map(|s| {
                let st = &q.stages[s];
                let join = if st.is_join() {
                    let parents: Vec<&str> = st.parents.iter().map(|&p| name(p)).collect();
                    format!(" (joins {})", parents.join("+"))
                } else {
                    String::new()
                };
                format!(
                    "{}{join} {:.1} ms due +{:.1}",
                    name(s),
                    st.budget as f64 / 1e6,
                    st.deadline_offset as f64 / 1e6
                )
            })
            .collect();
        println!("query {} (SLO {:.1} ms, {:?} split): {}", q.name, q.slo as f64 / 1e6, q.split, budgets.join(", "));
    }
    println!("routing:");
    for (model, routes) in &r.routing {
        let rs: Vec<String> = routes.iter().map(|x| format!("{}:{:.1}%", x.backend, 100.0 * x.share)).collect();
        println!("  {model}: {}", rs.join(" "));
    }
    Ok(())
}
