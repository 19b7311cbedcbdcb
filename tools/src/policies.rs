//! Goodput of several policies on one scenario and seed, side by side.

use serde::Serialize;

use baton_sched::sim::find_goodput;
use baton_sched::{PolicyKind, Scenario};

#[derive(Clone, Debug, Serialize)]
pub struct ComparisonRow {
    pub scenario: String,
    pub policy: String,
    pub goodput_rps: f64,
    pub mean_batch: f64,
    pub gpu_idle_fraction: f64,
    pub queue_delay_p99_ms: f64,
    /// Mean accuracy served at the goodput (supernet models only).
    pub mean_accuracy: Option<f64>,
    pub probes: usize,
}

/// The comparison a scenario calls for: SuperServe's when a model is a
/// supernet, Orloj's when one has input-dependent execution times,
/// Symphony's otherwise.
pub fn default_policies(scenario: &Scenario) -> &'static [PolicyKind] {
    if scenario.models.iter().any(|m| !m.spec.subnets.is_empty()) {
        &PolicyKind::SUPERSERVE_SET
    } else if scenario.models.iter().any(|m| m.spec.dynamic.is_some()) {
        &PolicyKind::ORLOJ_SET
    } else {
        &PolicyKind::SYMPHONY_SET
    }
}

/// One goodput search per policy, in the order given.
pub fn compare_policies(scenario: &Scenario, policies: &[PolicyKind], rel_tolerance: f64) -> Vec<ComparisonRow> {
    policies
        .iter()
        .map(|&p| {
            let g = find_goodput(scenario, p, rel_tolerance);
            let at = g.at_goodput.as_ref();
            ComparisonRow {
                scenario: scenario.name.clone(),
                policy: p.as_str().to_string(),
                goodput_rps: g.goodput_rps,
                mean_batch: at.map_or(0.0, |r| r.mean_batch),
                gpu_idle_fraction: at.map_or(1.0, |r| r.gpu_idle_fraction),
                queue_delay_p99_ms: at
                    .map_or(0.0, |r| r.models.iter().map(|m| m.queue_delay_p99_ms).fold(0.0, f64::max)),
                mean_accuracy: at.and_then(|r| r.mean_accuracy),
                probes: g.probes.len(),
            }
        })
        .collect()
}

/// Symphony's analytic staggered-execution bound for a one-model scenario
/// with a static profile (section 4.2, Table 4): the largest b with
/// `(1 + 1/N)*l(b) <= SLO`, then `N*b/l(b)`. None for other scenarios.
pub fn staggered_bound_rps(scenario: &Scenario) -> Option<f64> {
    let [m] = scenario.models.as_slice() else { return None };
    if m.spec.dynamic.is_some() || !m.spec.subnets.is_empty() || !scenario.queries.is_empty() {
        return None;
    }
    let n = scenario.cluster.backends as f64;
    let p = &m.spec.profile;
    let b = (1..=p.max_batch()).filter(|&b| (1.0 + 1.0 / n) * p.latency(b) as f64 <= m.spec.slo as f64).max()?;
    Some(n * p.throughput_rps(b))
}

/// The rows as a table; ratios are against the first row.
pub fn format_comparison(scenario: &Scenario, rows: &[ComparisonRow]) -> String {
    let mut s = format!(
        "{} ({} models, {} GPUs, seed {})\n{:<18} {:>12} {:>9} {:>10} {:>9} {:>12}\n",
        scenario.name,
        scenario.models.len(),
        scenario.cluster.backends,
        scenario.seed,
        "policy",
        "goodput r/s",
        "ratio",
        "mean batch",
        "GPU idle",
        "qd p99 ms"
    );
    if let Some(bound) = staggered_bound_rps(scenario) {
        s += &format!("{:<18} {:>12.1}   (analytic staggered bound)\n", "bound", bound);
    }
    let base = rows.first().map_or(0.0, |r| r.goodput_rps);
    for r in rows {
        let ratio = if base > 0.0 { r.goodput_rps / base } else { 0.0 };
        let acc = r.mean_accuracy.map_or(String::new(), |a| format!(" {a:>9.2}%"));
        s += &format!(
            "{:<18} {:>12.1} {:>9.3} {:>10.2} {:>9.3} {:>12.2}{acc}\n",
            r.policy, r.goodput_rps, ratio, r.mean_batch, r.gpu_idle_fraction, r.queue_delay_p99_ms
        );
    }
    s
}
