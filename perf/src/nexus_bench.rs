//! Nexus's batch-policy experiment (its Figures 5 and 9): one GPU, SLO
//! 100 ms, the optimal throughput fixed at 500 r/s (a batch of 25 takes
//! 50 ms: `beta = 50 - 25*alpha`), alpha varied; the highest Poisson rate
//! at which 99% of requests finish in SLO, early drop against lazy drop.

use serde::Serialize;

use baton_sched::sim::find_goodput;
use baton_sched::{PolicyKind, Scenario};

pub const ALPHAS_MS: [f64; 6] = [0.2, 0.5, 0.8, 1.2, 1.6, 1.9];

#[derive(Clone, Debug, Serialize)]
pub struct DropRow {
    pub alpha_ms: f64,
    pub beta_ms: f64,
    pub early_rps: f64,
    pub lazy_rps: f64,
    pub early_over_lazy: f64,
}

pub fn early_vs_lazy(duration_s: f64, rel_tolerance: f64) -> Vec<DropRow> {
    ALPHAS_MS
        .iter()
        .map(|&alpha| {
            let beta = 50.0 - 25.0 * alpha;
            let s = Scenario::parse(&format!(
                "name = \"nexus-drop-a{alpha}\"\nseed = 5\nduration_s = {duration_s}\nwarmup_s = 1\n[cluster]\ngpus = 1\n\
                 [[models]]\nname = \"m\"\nalpha_ms = {alpha}\nbeta_ms = {beta}\nslo_ms = 100.0\narrival = \"poisson\"\n"
            ))
            .expect("valid scenario");
            let early = find_goodput(&s, PolicyKind::Nexus, rel_tolerance).goodput_rps;
            let lazy = find_goodput(&s, PolicyKind::NexusLazy, rel_tolerance).goodput_rps;
            DropRow { alpha_ms: alpha, beta_ms: beta, early_rps: early, lazy_rps: lazy, early_over_lazy: early / lazy }
        })
        .collect()
}
