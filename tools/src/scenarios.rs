//! Scenario files as the `baton` commands read them (a file and the trace
//! and profile files it names), the built-in scenarios, and the
//! simulator's report as a table.

use std::path::Path;

use baton_sched::sim::Report;
use baton_sched::Scenario;

/// The built-in default scenario: Symphony's Table 4 ResNet50 setup.
pub const BUILTIN_SCENARIO: &str = include_str!("../scenarios/table4-resnet50.toml");
/// What `baton serve` and `baton demo` serve when given no scenario.
pub const SERVE_SCENARIO: &str = include_str!("../scenarios/serve-default.toml");

/// Reads and parses a scenario file and the trace and profile files it names (paths
/// relative to the scenario's folder); every error names the file.
pub fn load_scenario(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let read =
        |name: &str| std::fs::read_to_string(dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()));
    let mut s = Scenario::parse_with(&text, &read).map_err(|e| format!("{}: {e}", path.display()))?;
    s.attach_traces(&read).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(s)
}

pub fn print_report(r: &Report) {
    println!(
        "{} / {} seed {}: offered {:.1} r/s, goodput {:.1} r/s, bad rate {:.4}, GPU idle {:.3}, mean batch {:.2}",
        r.scenario, r.policy, r.seed, r.offered_rps, r.goodput_rps, r.bad_rate, r.gpu_idle_fraction, r.mean_batch
    );
    if let Some(a) = r.mean_accuracy {
        println!("mean accuracy served in SLO: {a:.2}%");
    }
    for q in &r.queries {
        println!(
            "query {}: offered {:.1} q/s, sent {}, in SLO {}, bad rate {:.4}",
            q.name, q.offered_rps, q.sent, q.ok, q.bad_rate
        );
    }
    println!(
        "answers: sent {} = ok {} + late {} + dropped {} (unanswered {}, infeasible plans {})",
        r.sent, r.ok, r.late, r.dropped, r.checks.unanswered, r.checks.infeasible_plans
    );
    println!(
        "{:<20} {:>10} {:>9} {:>8} {:>8} {:>8} {:>9} {:>11}",
        "model", "offered", "bad", "p50 ms", "p99 ms", "batch", "qd p99", "drops"
    );
    for m in &r.models {
        let drops: Vec<String> = m.drop_reasons.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "{:<20} {:>10.1} {:>9.4} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>11}",
            m.name,
            m.offered_rps,
            m.bad_rate,
            m.p50_ms,
            m.p99_ms,
            m.mean_batch,
            m.queue_delay_p99_ms,
            drops.join(",")
        );
    }
}
