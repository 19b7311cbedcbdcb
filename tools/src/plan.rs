//! `baton plan FILE --rate R [--policy P] [--json]`: Nexus's squishy bin
//! packing of the scenario's models at aggregate rate R (split by their
//! weights), or with a partition policy (glet, glet-noint, sbp,
//! greedy-part) its GPU partitions and what each runs.

use std::path::PathBuf;

use baton_sched::build;
use baton_sched::glet::Planner;
use baton_sched::nexus::plan_report;
use baton_sched::{PolicyKind, Scenario};
use baton_tools::scenarios::load_scenario;

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
    /// A partition policy (glet, glet-noint, sbp, greedy-part) instead of Nexus's plan.
    #[arg(long)]
    policy: Option<String>,
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
    if let Some(p) = &a.policy {
        let policy = PolicyKind::parse(p).map_err(|e| format!("--policy: {e}"))?;
        if !policy.needs_partition_profiles() {
            return Err(format!("--policy: {p} is not a partition policy; without --policy, plan prints Nexus's plan"));
        }
        scenario.supports(policy).map_err(|e| format!("--policy: {e}"))?;
        return print_partitions(&scenario, policy, rate, a.json);
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

/// A partition policy's plan: each GPU's partitions and their sessions.
fn print_partitions(scenario: &Scenario, policy: PolicyKind, rate: f64, json: bool) -> Result<(), String> {
    let planner = Planner::of(policy).expect("partition policy");
    let plan = build::serving(planner, scenario, rate)?.plan();
    let name = |m: usize| scenario.models[m].spec.name.clone();
    if json {
        let parts: Vec<serde_json::Value> = plan
            .iter()
            .flat_map(|p| &p.parts)
            .map(|p| {
                let sessions: Vec<serde_json::Value> = p
                    .node
                    .iter()
                    .flat_map(|n| &n.sessions)
                    .map(|s| {
                        let model = name(s.model.index());
                        serde_json::json!({"model": model, "batch": s.batch, "rate_rps": s.rate_rps})
                    })
                    .collect();
                let duty_ms = p.node.as_ref().map(|n| n.duty_cycle as f64 / 1e6);
                serde_json::json!({"gpu": p.gpu, "percent": p.percent, "duty_cycle_ms": duty_ms, "sessions": sessions})
            })
            .collect();
        let v = serde_json::json!({
            "scenario": scenario.name, "policy": policy.as_str(), "rate_rps": rate,
            "rate_scale": plan.as_ref().map(|p| p.rate_scale), "partitions": parts,
        });
        println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let Some(plan) = plan else {
        println!(
            "{} / {} at {rate:.1} r/s: no plan fits {} GPUs",
            scenario.name,
            policy.as_str(),
            scenario.cluster.backends
        );
        return Ok(());
    };
    let verdict = if plan.rate_scale >= 1.0 { "schedulable" } else { "NOT schedulable" };
    println!(
        "{} / {} at {rate:.1} r/s: {verdict}; planned for {:.3}x the rate to fill {} GPUs",
        scenario.name,
        policy.as_str(),
        plan.rate_scale,
        scenario.cluster.backends
    );
    for p in &plan.parts {
        let what = match &p.node {
            None => "idle".to_string(),
            Some(n) => {
                let s: Vec<String> = n
                    .sessions
                    .iter()
                    .map(|s| format!("{} b={} {:.1} r/s", name(s.model.index()), s.batch, s.rate_rps))
                    .collect();
                format!("duty {:.2} ms: {}", n.duty_cycle as f64 / 1e6, s.join("; "))
            }
        };
        println!("GPU {} {:>3}%: {what}", p.gpu, p.percent);
    }
    Ok(())
}
