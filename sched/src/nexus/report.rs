//! A plan as `baton plan` prints it: backends with their sessions, batch
//! sizes and duty cycles, the routing table frontends receive, and the GPU
//! counts to judge it by.

use serde::Serialize;

use super::sessions::sessions;
use super::squishy::{batch_oblivious_gpus, lower_bound_gpus, squishy_bin_packing, Plan};
use crate::time::nanos_to_ms;
use crate::types::ClusterSpec;

#[derive(Clone, Debug, Serialize)]
pub struct SessionReport {
    pub model: String,
    pub batch: u32,
    pub rate_rps: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct BackendReport {
    pub backend: usize,
    pub duty_cycle_ms: f64,
    pub occupancy: f64,
    pub sessions: Vec<SessionReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Route {
    pub backend: usize,
    /// Share of the model's requests sent to this backend.
    pub share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PlanReport {
    pub gpus: usize,
    /// Fractional lower bound, and its ceiling.
    pub lower_bound_gpus_exact: f64,
    pub lower_bound_gpus: u32,
    pub batch_oblivious_gpus: u32,
    pub backends: Vec<BackendReport>,
    /// session (a model, or a prefix group) -> routes, in session order.
    pub routing: Vec<(String, Vec<Route>)>,
}

/// Plans the cluster's sessions (prefix groups as one session with
/// `prefix_batching`) at per-model rates `model_rates_rps`.
pub fn plan_report(cluster: &ClusterSpec, model_rates_rps: &[f64], prefix_batching: bool) -> PlanReport {
    let s = sessions(cluster, model_rates_rps, prefix_batching);
    let (models, rates_rps) = (&s.specs[..], &s.rates_rps[..]);
    let plan: Plan = squishy_bin_packing(models, rates_rps, cluster.gpu_memory_mb);
    let backends: Vec<BackendReport> = plan
        .backends
        .iter()
        .enumerate()
        .map(|(i, b)| BackendReport {
            backend: i,
            duty_cycle_ms: nanos_to_ms(b.duty_cycle),
            occupancy: b.occupancy(models),
            sessions: b
                .sessions
                .iter()
                .map(|s| SessionReport {
                    model: models[s.model.index()].name.clone(),
                    batch: s.batch,
                    rate_rps: s.rate_rps,
                })
                .collect(),
        })
        .collect();
    let routing = models
        .iter()
        .enumerate()
        .map(|(m, spec)| {
            let total = rates_rps[m];
            let routes = plan
                .backends
                .iter()
                .enumerate()
                .flat_map(|(i, b)| {
                    b.sessions.iter().filter(move |s| s.model.index() == m).map(move |s| (i, s.rate_rps))
                })
                .map(|(backend, r)| Route { backend, share: if total > 0.0 { r / total } else { 0.0 } })
                .collect();
            (spec.name.clone(), routes)
        })
        .collect();
    let lb = lower_bound_gpus(models, rates_rps);
    PlanReport {
        gpus: plan.backends.len(),
        lower_bound_gpus_exact: lb,
        lower_bound_gpus: lb.ceil() as u32,
        batch_oblivious_gpus: batch_oblivious_gpus(models, rates_rps),
        backends,
        routing,
    }
}
