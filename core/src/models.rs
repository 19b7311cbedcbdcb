//! The model table the engine serves: names clients use, the ids `sched`
//! uses, input and output sizes, and each model's profile for the emulated
//! executors. Built once from a scenario and published read-mostly (see
//! `publish.rs`).

use std::time::Duration;

use baton_gpu::emulated::{Emulated, EmulatedModel, Pacing};
use baton_gpu::ModelInfo;
use baton_sched::scenario::Scenario;
use baton_sched::time::Nanos;

/// Floats in each request's input and output when the engine emulates its
/// GPUs: the content is checksummed, not computed on, so a small tensor
/// keeps loopback traffic honest without testing memcpy bandwidth.
pub const DEFAULT_INPUT_FLOATS: usize = 16;
pub const DEFAULT_OUTPUT_FLOATS: usize = 4;

#[derive(Clone, Debug)]
pub struct ModelEntry {
    pub name: String,
    pub slo: Nanos,
    pub input_floats: usize,
    pub output_floats: usize,
    /// l(b) for b = 1..=max_batch.
    pub latency: Vec<Nanos>,
}

#[derive(Clone, Debug)]
pub struct ModelTable {
    pub models: Vec<ModelEntry>,
}

/// A scenario the engine cannot serve (yet), with what is missing.
#[derive(Clone, Debug, PartialEq)]
pub struct Unsupported(pub String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the engine cannot serve this scenario: {}", self.0)
    }
}

impl std::error::Error for Unsupported {}

impl ModelTable {
    /// The scenario's models. Features whose execution the engine does not
    /// emulate yet are refused rather than served wrongly.
    pub fn from_scenario(s: &Scenario, input_floats: usize) -> Result<Self, Unsupported> {
        if !s.queries.is_empty() {
            return Err(Unsupported("multi-model queries (run them in `baton sim`)".into()));
        }
        if !s.cluster.prefixes.is_empty() {
            return Err(Unsupported("prefix batching (run it in `baton sim`)".into()));
        }
        let mut models = Vec::with_capacity(s.models.len());
        for m in &s.models {
            let spec = &m.spec;
            if spec.dynamic.is_some() {
                return Err(Unsupported(format!("`{}` has input-dependent execution times", spec.name)));
            }
            if !spec.subnets.is_empty() {
                return Err(Unsupported(format!("`{}` is a supernet", spec.name)));
            }
            let latency = (1..=spec.profile.max_batch()).map(|b| spec.profile.latency(b)).collect();
            models.push(ModelEntry {
                name: spec.name.clone(),
                slo: spec.slo,
                input_floats,
                output_floats: DEFAULT_OUTPUT_FLOATS,
                latency,
            });
        }
        Ok(Self { models })
    }

    pub fn find(&self, name: &str) -> Option<u32> {
        self.models.iter().position(|m| m.name == name).map(|i| i as u32)
    }

    /// An emulated GPU for these models that returns each batch's time
    /// instead of spending it (the backend role waits it out on its clock).
    pub fn emulated_executor(&self, jitter: f64, seed: u64) -> Emulated {
        let models = self
            .models
            .iter()
            .map(|m| EmulatedModel {
                info: ModelInfo {
                    name: m.name.clone(),
                    input_len: m.input_floats,
                    output_len: m.output_floats,
                    max_batch: m.latency.len() as u32,
                    variants: 1,
                },
                latency: m.latency.iter().map(|&ns| Duration::from_nanos(ns)).collect(),
            })
            .collect();
        Emulated::new(models, jitter, seed).with_pacing(Pacing::Deferred)
    }
}
