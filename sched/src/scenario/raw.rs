//! The scenario file as serde reads it: every table and key, unknown keys
//! rejected. `mod.rs` turns these into a checked `Scenario`.

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub(super) name: String,
    pub(super) seed: Option<u64>,
    pub(super) duration_s: Option<f64>,
    pub(super) warmup_s: Option<f64>,
    pub(super) rate_rps: Option<f64>,
    pub(super) cluster: RawCluster,
    pub(super) prefixes: Option<Vec<RawPrefix>>,
    pub(super) models: Vec<RawModel>,
    pub(super) queries: Option<Vec<RawQuery>>,
    pub(super) faults: Option<Vec<RawFault>>,
    pub(super) stalls: Option<Vec<RawStall>>,
    pub(super) policy: Option<RawPolicy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub(super) gpus: i64,
    pub(super) ctrl_delay_us: Option<f64>,
    pub(super) data_delay_us: Option<f64>,
    pub(super) exec_jitter: Option<f64>,
    pub(super) model_shards: Option<i64>,
    pub(super) msg_delay_us: Option<f64>,
    pub(super) queue_capacity: Option<i64>,
    pub(super) gpu_memory_mb: Option<f64>,
    /// Folder of measured partition profiles (glet), relative to the scenario file.
    pub(super) partition_profiles: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub(super) name: String,
    /// A model of `cluster.partition_profiles`: its latencies are L(b, p).
    pub(super) profile: Option<String>,
    pub(super) alpha_ms: Option<f64>,
    pub(super) beta_ms: Option<f64>,
    pub(super) latency_ms: Option<Vec<f64>>,
    pub(super) max_batch: Option<i64>,
    pub(super) slo_ms: Option<f64>,
    pub(super) slo_p99_multiple: Option<f64>,
    pub(super) kappa: Option<f64>,
    pub(super) memory_mb: Option<f64>,
    /// The prefix this model shares; its alpha_ms/beta_ms are then its suffix's.
    pub(super) prefix_of: Option<String>,
    /// "default": the built-in supernet (`supernet.rs`).
    pub(super) supernet: Option<String>,
    pub(super) subnets: Option<Vec<RawSubnet>>,
    pub(super) weight: Option<f64>,
    pub(super) arrival: Option<String>,
    pub(super) apps: Option<Vec<RawApp>>,
}

/// A multi-model query (`query.rs`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuery {
    pub(super) name: String,
    pub(super) slo_ms: f64,
    pub(super) weight: Option<f64>,
    pub(super) arrival: Option<String>,
    /// "dp" (default) or "even".
    pub(super) split: Option<String>,
    pub(super) stages: Vec<RawStage>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStage {
    pub(super) model: String,
    /// The model of the parent stage; the root has none.
    pub(super) parent: Option<String>,
    /// The models of several parent stages: a join (`query.rs`).
    pub(super) parents: Option<Vec<String>>,
    pub(super) gamma: Option<f64>,
}

/// A backend that fails for good at a given time.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFault {
    pub(super) at_s: f64,
    pub(super) backend: i64,
}

/// A pause of the engine's host (the simulator's model of one).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStall {
    pub(super) at_s: f64,
    pub(super) for_ms: f64,
}

/// One subnet of a supernet model.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSubnet {
    pub(super) name: String,
    pub(super) accuracy: f64,
    pub(super) alpha_ms: Option<f64>,
    pub(super) beta_ms: Option<f64>,
    pub(super) latency_ms: Option<Vec<f64>>,
}

/// A prefix shared by several models (Nexus's prefix batching).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrefix {
    pub(super) name: String,
    pub(super) alpha_ms: f64,
    pub(super) beta_ms: f64,
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApp {
    pub(super) name: String,
    pub(super) weight: Option<f64>,
    pub(super) exec_ms: String,
    pub(super) work: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
    pub(super) name: String,
    /// Re-planning epoch of planning policies (Nexus), seconds.
    pub(super) epoch_s: Option<f64>,
}
