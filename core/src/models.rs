//! The model table the engine serves: names clients use, the ids `sched`
//! uses, input and output sizes, and each model's profile for the emulated
//! executors. Built once from a scenario at start-up and read by the
//! frontend per request through `publish::Published` (nothing republishes
//! it yet: the engine serves a fixed set of models).

use std::time::Duration;

use baton_gpu::cuda::{CudaConfig, CudaExecutor};
use baton_gpu::emulated::{Emulated, EmulatedModel, Pacing};
use baton_gpu::{Batch, ExecError, Executor, Launched, ModelInfo};
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
    /// Application classes (Orloj) the model serves: a request's `app` is
    /// below this. Only models with input-dependent times have more than
    /// one, and the engine refuses those, so today it is 1 (app 0).
    pub apps: u32,
}

/// What runs the batches: emulated GPUs (each batch takes its profile's
/// l(b)), or the CUDA executor's models on real GPUs (backend b on CUDA
/// device b), which a scenario then names and profiles (`baton profile`).
#[derive(Clone, Debug, Default)]
pub enum ExecutorChoice {
    #[default]
    Emulated,
    Cuda(CudaConfig),
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
        Self::build(s, |_| Ok((input_floats, DEFAULT_OUTPUT_FLOATS)))
    }

    /// The scenario's models as `choice` runs them: emulated with
    /// `input_floats` per request, or the CUDA executor's models of the
    /// same names, with their own tensor sizes.
    pub fn for_executor(s: &Scenario, choice: &ExecutorChoice, input_floats: usize) -> Result<Self, Unsupported> {
        let ExecutorChoice::Cuda(cfg) = choice else { return Self::from_scenario(s, input_floats) };
        let infos = cfg.model_infos();
        Self::build(s, |spec| {
            let names = || infos.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ");
            let info = infos.iter().find(|i| i.name == spec.name).ok_or_else(|| {
                Unsupported(format!("`{}` is not a model of the CUDA executor (it has {})", spec.name, names()))
            })?;
            if spec.profile.max_batch() > info.max_batch {
                let why = format!(
                    "`{}` is profiled to batch {}, the CUDA executor runs at most {}",
                    spec.name,
                    spec.profile.max_batch(),
                    info.max_batch
                );
                return Err(Unsupported(why));
            }
            Ok((info.input_len, info.output_len))
        })
    }

    /// The table, each model's (input, output) floats from `sizes`.
    fn build(
        s: &Scenario,
        sizes: impl Fn(&baton_sched::types::ModelSpec) -> Result<(usize, usize), Unsupported>,
    ) -> Result<Self, Unsupported> {
        if !s.queries.is_empty() {
            return Err(Unsupported("multi-model queries (run them in `baton sim`)".into()));
        }
        if !s.cluster.prefixes.is_empty() {
            return Err(Unsupported("prefix batching (run it in `baton sim`)".into()));
        }
        if !s.faults.is_empty() {
            return Err(Unsupported("backend faults (`[[faults]]`; run them in `baton sim`)".into()));
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
            let (input_floats, output_floats) = sizes(spec)?;
            let (name, slo) = (spec.name.clone(), spec.slo);
            models.push(ModelEntry { name, slo, input_floats, output_floats, latency, apps: 1 });
        }
        Ok(Self { models })
    }

    pub fn find(&self, name: &str) -> Option<u32> {
        self.models.iter().position(|m| m.name == name).map(|i| i as u32)
    }

    /// Backend `backend`'s executor: built on the thread that will use it
    /// (a CUDA context and its graphs stay on their thread).
    pub fn executor(
        &self,
        choice: &ExecutorChoice,
        backend: u32,
        jitter: f64,
        seed: u64,
    ) -> Result<Box<dyn Executor>, ExecError> {
        match choice {
            ExecutorChoice::Emulated => Ok(Box::new(self.emulated_executor(jitter, seed))),
            ExecutorChoice::Cuda(cfg) => {
                let exec = CudaExecutor::new(&CudaConfig { ordinal: backend as usize, ..*cfg })?;
                Ok(Box::new(ByName::new(self, Box::new(exec))))
            }
        }
    }

    /// An emulated GPU for these models that returns each batch's time
    /// instead of spending it (the backend role waits it out on its clock).
    pub fn emulated_executor(&self, jitter: f64, seed: u64) -> Emulated {
        let models = self
            .models
            .iter()
            .map(|m| {
                let info = ModelInfo::fixed(&m.name, m.input_floats, m.output_floats, m.latency.len() as u32);
                EmulatedModel::fixed(info, m.latency.iter().map(|&ns| Duration::from_nanos(ns)).collect())
            })
            .collect();
        Emulated::new(models, jitter, seed).with_pacing(Pacing::Deferred)
    }
}

/// An executor addressed by this table's model ids: the scenario's model
/// `i` is the executor's model of the same name (the table was checked to
/// name only models it has).
struct ByName {
    inner: Box<dyn Executor>,
    /// `ids[i]`: the executor's id of the table's model i.
    ids: Vec<u32>,
    infos: Vec<ModelInfo>,
}

impl ByName {
    fn new(table: &ModelTable, inner: Box<dyn Executor>) -> Self {
        let (mut ids, mut infos) = (Vec::new(), Vec::new());
        for m in &table.models {
            let id =
                inner.models().iter().position(|i| i.name == m.name).expect("the table names the executor's models");
            ids.push(id as u32);
            infos.push(inner.models()[id].clone());
        }
        Self { inner, ids, infos }
    }

    fn translate<'a>(&self, batch: &Batch<'a>) -> Result<Batch<'a>, ExecError> {
        let model = *self.ids.get(batch.model as usize).ok_or(ExecError::UnknownModel { model: batch.model })?;
        Ok(Batch { model, ..*batch })
    }
}

impl Executor for ByName {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        let b = self.translate(batch)?;
        self.inner.run(&b, outputs)
    }

    fn launch(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Launched, ExecError> {
        let b = self.translate(batch)?;
        self.inner.launch(&b, outputs)
    }

    fn poll(&mut self, outputs: &mut Vec<Vec<f32>>) -> Option<Result<Duration, ExecError>> {
        self.inner.poll(outputs)
    }

    fn pipeline_depth(&self) -> usize {
        self.inner.pipeline_depth()
    }
}
