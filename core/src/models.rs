//! The model table the engine serves: names clients use, the ids `sched`
//! uses, input and output sizes, each model's apps (Orloj) and subnets
//! (SuperServe), and each model's profile for the emulated executors.
//! Built once from a scenario at start-up and read by the frontend per
//! request through `publish::Published` (nothing republishes it yet: the
//! engine serves a fixed set of models).

use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::time::Duration;

use baton_gpu::cuda::{CudaConfig, CudaExecutor};
use baton_gpu::emulated::{Emulated, EmulatedModel, EmulatedModels, Pacing};
use baton_gpu::reference::CpuConfig;
use baton_gpu::{Batch, ExecError, Executor, Launched, ModelInfo, Work};
use baton_sched::query::QuerySpec;
use baton_sched::query_run::{joins_of, Join};
use baton_sched::scenario::Scenario;
use baton_sched::time::Nanos;
use baton_sched::types::{DynamicExec, ModelSpec};

use crate::partitions::Partitioned;

/// Floats in each request's input and output when the engine emulates its
/// GPUs: the content is checksummed, not computed on, so a small tensor
/// keeps loopback traffic honest without testing memcpy bandwidth.
pub const DEFAULT_INPUT_FLOATS: usize = 16;
pub const DEFAULT_OUTPUT_FLOATS: usize = 4;

/// The longest solo time an emulated dynamic model's input may say it
/// takes (`Work::Micros`): a minute.
pub const MAX_SOLO_US: f32 = 60e6;

#[derive(Clone, Debug)]
pub struct ModelEntry {
    pub name: String,
    pub slo: Nanos,
    pub input_floats: usize,
    pub output_floats: usize,
    /// l(b) for b = 1..=max_batch: the model's own profile (for a
    /// supernet, its most accurate subnet's).
    pub latency: Vec<Nanos>,
    /// Application classes (Orloj) by name: a request's `app` indexes
    /// them. A model without apps has one, "default".
    pub apps: Vec<String>,
    /// A supernet's subnets, least accurate first; empty for another model.
    pub subnets: Vec<SubnetEntry>,
    /// Input-dependent execution (Orloj): how an input says its work
    /// (which the frontend checks at admission) and, for the emulated
    /// executor, the scenario's kappa.
    pub dynamic: Option<Dynamic>,
    /// A prefix group member's own part after the shared prefix: l(b) of
    /// its suffix (`latency` is the whole model's, prefix included).
    pub suffix: Option<Vec<Nanos>>,
    /// Served now: a model unloaded at run time is refused (`Unloaded`)
    /// until it is loaded again.
    pub loaded: bool,
    /// The sub-cluster whose scheduler takes its requests (0 unless the
    /// cluster is partitioned: `routes.rs`).
    pub subcluster: u32,
}

/// Models sharing all but their last layers (Nexus's prefix batching): a
/// batch of any of its members runs the shared trunk once, then each
/// member's head on its own requests. For the executor the group is one
/// more model, numbered after the table's models (`trunk_id`).
#[derive(Clone, Debug, PartialEq)]
pub struct PrefixEntry {
    pub name: String,
    /// l(b) of the shared prefix.
    pub trunk: Vec<Nanos>,
    /// Its members (table model ids); a member's head is its place here.
    pub members: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SubnetEntry {
    pub name: String,
    /// Top-1 accuracy, percent.
    pub accuracy: f64,
    /// l(b), b = 1..
    pub latency: Vec<Nanos>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Dynamic {
    pub work: Work,
    pub kappa: f64,
}

impl ModelEntry {
    /// l(b) of the subnet a plan names, or of the model's own profile.
    pub fn latency_of(&self, subnet: Option<u16>) -> &[Nanos] {
        match subnet.and_then(|s| self.subnets.get(usize::from(s))) {
            Some(s) => &s.latency,
            None => &self.latency,
        }
    }
}

/// What runs the batches: emulated GPUs (each batch takes its profile's
/// l(b)), the CUDA executor's models on real GPUs (backend b on CUDA
/// device b), or the CPU reference models (each backend a thread of its
/// own computing them, `baton_gpu::Threaded`) — which a scenario then
/// names and profiles (`baton profile [--executor cpu]`).
#[derive(Clone, Debug, Default)]
pub enum ExecutorChoice {
    #[default]
    Emulated,
    Cuda(CudaConfig),
    Cpu(CpuConfig),
}

impl ExecutorChoice {
    /// What the executor is called in messages, and the models it serves
    /// (None: emulated, it serves whatever the scenario says).
    fn served(&self) -> Result<Option<(&'static str, Vec<ModelInfo>)>, Unsupported> {
        match self {
            Self::Emulated => Ok(None),
            Self::Cuda(cfg) => Ok(Some(("CUDA", cfg.model_infos()))),
            Self::Cpu(cfg) => {
                let infos = cfg.model_infos().map_err(|e| Unsupported(format!("the CPU executor: {e}")))?;
                Ok(Some(("CPU", infos)))
            }
        }
    }
}

/// A multi-model query (Nexus) the frontend runs: its stages (each a
/// model of the table, with its deadline offset from the DP split for the
/// scenario's SLO) and its joins.
#[derive(Clone, Debug)]
pub struct QueryEntry {
    pub spec: QuerySpec,
    pub joins: Vec<Join>,
}

#[derive(Clone, Debug)]
pub struct ModelTable {
    pub models: Vec<ModelEntry>,
    /// Queries clients may name (`InferRequest.query`).
    pub queries: Vec<QueryEntry>,
    /// Prefix groups, by `PrefixId`.
    pub prefixes: Vec<PrefixEntry>,
    /// The GPU partitions the backends run on, for a policy that splits
    /// GPUs (None: one backend per whole GPU).
    pub partitions: Option<Arc<Partitioned>>,
    /// Models by name, for a client naming one (a hash and one compare,
    /// where comparing every name cost a scan of the table per request;
    /// FxHash: the names are the scenario's, a client only looks up).
    by_name: FxHashMap<String, u32>,
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

/// How an executor serves one of the scenario's models: its tensor sizes
/// and, for a dynamic model, how its inputs say their work.
struct Served {
    input_floats: usize,
    output_floats: usize,
    work: Option<Work>,
    variants: u16,
}

impl ModelTable {
    /// The scenario's models. Features whose execution the engine does not
    /// emulate yet are refused rather than served wrongly.
    pub fn from_scenario(s: &Scenario, input_floats: usize) -> Result<Self, Unsupported> {
        Self::build(s, |spec| {
            if spec.dynamic.is_some() && input_floats == 0 {
                return Err(Unsupported(format!("`{}` is dynamic: its inputs need a float for their work", spec.name)));
            }
            if spec.dynamic.as_ref().is_some_and(|d| d.apps.iter().any(|a| a.work.is_some())) {
                let why = format!(
                    "`{}`'s inputs carry lengths (its apps' `work`), which only the executor that measured them \
                     turns into times: serve it with that executor (`--executor cpu` or `cuda`)",
                    spec.name
                );
                return Err(Unsupported(why));
            }
            Ok(Served {
                input_floats,
                output_floats: DEFAULT_OUTPUT_FLOATS,
                work: spec.dynamic.as_ref().map(|_| Work::Micros { max_us: MAX_SOLO_US }),
                variants: spec.subnets.len().max(1) as u16,
            })
        })
    }

    /// The scenario's models as `choice` runs them: emulated with
    /// `input_floats` per request, or the CUDA or CPU executor's models of
    /// the same names, with their own tensor sizes (and, for a dynamic
    /// model, their own measure of an input's work).
    pub fn for_executor(s: &Scenario, choice: &ExecutorChoice, input_floats: usize) -> Result<Self, Unsupported> {
        let Some((kind, infos)) = choice.served()? else { return Self::from_scenario(s, input_floats) };
        for g in &s.cluster.prefixes {
            check_trunk(s, g, kind, &infos)?;
        }
        Self::build(s, |spec| {
            let names = || infos.iter().map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ");
            let info = infos.iter().find(|i| i.name == spec.name).ok_or_else(|| {
                Unsupported(format!("`{}` is not a model of the {kind} executor (it has {})", spec.name, names()))
            })?;
            if info.heads > 0 {
                let why = format!(
                    "`{0}` is a shared trunk of the {kind} executor: serve its variants (`{0}-0`, ...) as members \
                     of a [[prefixes]] group named `{0}`",
                    spec.name
                );
                return Err(Unsupported(why));
            }
            if spec.profile.max_batch() > info.max_batch {
                let why = format!(
                    "`{}` is profiled to batch {}, the {kind} executor runs at most {}",
                    spec.name,
                    spec.profile.max_batch(),
                    info.max_batch
                );
                return Err(Unsupported(why));
            }
            Ok(Served::of(info))
        })
    }

    /// The table, each model as `served` says an executor serves it.
    fn build(s: &Scenario, served: impl Fn(&ModelSpec) -> Result<Served, Unsupported>) -> Result<Self, Unsupported> {
        for q in &s.queries {
            if let Some(st) = q.stages.iter().find(|st| s.models[st.model.index()].spec.dynamic.is_some()) {
                let model = &s.models[st.model.index()].spec.name;
                let why = format!("query `{}`: stage `{model}` is dynamic (a spawned input carries no work)", q.name);
                return Err(Unsupported(why));
            }
        }
        let queries = s.queries.iter().map(|q| QueryEntry { spec: q.clone(), joins: joins_of(q) }).collect();
        s.models.iter().map(|m| ModelEntry::new(&m.spec, served(&m.spec)?)).collect::<Result<_, _>>().map(
            |models: Vec<ModelEntry>| {
                // Backwards: a name given twice is the first's, as a scan finds.
                let by_name = models.iter().enumerate().rev().map(|(i, m)| (m.name.clone(), i as u32)).collect();
                Self { models, queries, prefixes: prefixes_of(s), partitions: None, by_name }
            },
        )
    }

    /// How many backends serve a cluster of `gpus` GPUs: one per GPU, or
    /// one per partition of the plan.
    pub fn backends(&self, gpus: u32) -> u32 {
        self.partitions.as_ref().map_or(gpus, |p| p.backends())
    }

    pub fn find_query(&self, name: &str) -> Option<u32> {
        self.queries.iter().position(|q| q.spec.name == name).map(|i| i as u32)
    }

    /// The executor's id of prefix group `g`'s shared trunk.
    pub fn trunk_id(&self, g: usize) -> u32 {
        (self.models.len() + g) as u32
    }

    pub fn find(&self, name: &str) -> Option<u32> {
        let found = self.by_name.get(name).copied();
        debug_assert_eq!(found, self.models.iter().position(|m| m.name == name).map(|i| i as u32));
        found
    }

    /// Backend `backend`'s executor: built on the thread that will use it
    /// (a CUDA context and its graphs stay on their thread).
    /// `core`: where a CPU executor's compute thread is pinned (None: the
    /// configuration's own choice). `shared`: the emulated models every
    /// emulated backend of the shard runs (`emulated_models`), made once.
    pub fn executor(
        &self,
        choice: &ExecutorChoice,
        backend: u32,
        core: Option<usize>,
        jitter: f64,
        seed: u64,
        shared: &mut Option<Arc<EmulatedModels>>,
    ) -> Result<Box<dyn Executor>, ExecError> {
        match choice {
            ExecutorChoice::Emulated => {
                let models = Arc::clone(shared.get_or_insert_with(|| self.emulated_models()));
                let whole = Emulated::sharing(models, jitter, seed).with_pacing(Pacing::Deferred);
                match &self.partitions {
                    Some(p) => Ok(Box::new(p.executor(&self.models, whole, backend, jitter, seed))),
                    None => Ok(Box::new(whole)),
                }
            }
            ExecutorChoice::Cuda(cfg) => {
                let exec: Box<dyn Executor> = match &self.partitions {
                    Some(p) => Box::new(p.cuda_executor(cfg, backend)?),
                    None => Box::new(CudaExecutor::new(&CudaConfig { ordinal: backend as usize, ..*cfg })?),
                };
                Ok(Box::new(ByName::new(self, exec)))
            }
            ExecutorChoice::Cpu(cfg) => {
                let exec = CpuConfig { core: core.or(cfg.core), ..*cfg }.executor()?;
                Ok(Box::new(ByName::new(self, Box::new(exec))))
            }
        }
    }

    /// An emulated GPU for these models that returns each batch's time
    /// instead of spending it (the backend role waits it out on its clock):
    /// l(b) of the subnet a batch names, or g(b, longest solo time) for a
    /// dynamic model, as the simulator times them.
    pub fn emulated_executor(&self, jitter: f64, seed: u64) -> Emulated {
        Emulated::sharing(self.emulated_models(), jitter, seed).with_pacing(Pacing::Deferred)
    }

    /// What `emulated_executor` runs, for emulated GPUs to share.
    pub fn emulated_models(&self) -> Arc<EmulatedModels> {
        let durations = |l: &[Nanos]| l.iter().map(|&ns| Duration::from_nanos(ns)).collect::<Vec<_>>();
        let models = self
            .models
            .iter()
            .map(|m| {
                let info = ModelInfo::fixed(&m.name, m.input_floats, m.output_floats, m.latency.len() as u32);
                match (&m.dynamic, m.subnets.is_empty()) {
                    (Some(d), _) => EmulatedModel::dynamic(info, d.kappa, MAX_SOLO_US),
                    (None, true) => EmulatedModel::fixed(info, durations(&m.latency)),
                    (None, false) => {
                        EmulatedModel::variants(info, m.subnets.iter().map(|s| durations(&s.latency)).collect())
                    }
                }
            })
            .chain(self.prefixes.iter().map(|g| {
                // Members share the trunk's input; each head writes its model's output.
                let first = &self.models[g.members[0] as usize];
                let info = ModelInfo::fixed(&g.name, first.input_floats, first.output_floats, g.trunk.len() as u32);
                let heads =
                    g.members.iter().map(|&m| durations(self.models[m as usize].suffix.as_deref().unwrap_or(&[])));
                EmulatedModel::shared(info, durations(&g.trunk), heads.collect())
            }))
            .collect();
        EmulatedModels::new(models)
    }
}

impl Served {
    fn of(info: &ModelInfo) -> Self {
        let (input_floats, output_floats, work) = (info.input_len, info.output_len, info.work.clone());
        Self { input_floats, output_floats, work, variants: info.variants }
    }
}

impl ModelEntry {
    /// `spec` as an executor serves it; refused where the two disagree on
    /// what the model is (a supernet of another number of subnets, a
    /// dynamic model whose inputs carry no work, or the other way round).
    fn new(spec: &ModelSpec, served: Served) -> Result<Self, Unsupported> {
        let name = &spec.name;
        if !spec.subnets.is_empty() && usize::from(served.variants) != spec.subnets.len() {
            let why = format!("`{name}` has {} subnets, its executor runs {}", spec.subnets.len(), served.variants);
            return Err(Unsupported(why));
        }
        let dynamic = match (&spec.dynamic, served.work) {
            (Some(DynamicExec { kappa, .. }), Some(work)) => Some(Dynamic { work, kappa: *kappa }),
            (None, None) => None,
            (Some(_), None) => {
                return Err(Unsupported(format!("`{name}` is dynamic, its executor's inputs carry no work")))
            }
            (None, Some(_)) => {
                return Err(Unsupported(format!("`{name}` is dynamic on its executor, not in the scenario")))
            }
        };
        let apps = match &spec.dynamic {
            Some(d) => d.apps.iter().map(|a| a.name.clone()).collect(),
            None => vec!["default".to_string()],
        };
        let subnets = spec
            .subnets
            .iter()
            .map(|s| SubnetEntry { name: s.name.clone(), accuracy: s.accuracy, latency: table(&s.profile) })
            .collect();
        Ok(Self {
            name: name.clone(),
            slo: spec.slo,
            input_floats: served.input_floats,
            output_floats: served.output_floats,
            latency: table(&spec.profile),
            apps,
            subnets,
            dynamic,
            suffix: spec.prefix.as_ref().map(|(_, suffix)| table(suffix)),
            loaded: true,
            subcluster: 0,
        })
    }
}

/// l(b) for b = 1..=max_batch of a profile.
fn table(p: &baton_sched::profile::Profile) -> Vec<Nanos> {
    (1..=p.max_batch()).map(|b| p.latency(b)).collect()
}

/// A prefix group `g` on an executor's models (`infos`): `g` names one of
/// them with heads on a shared trunk, and its members are that trunk's
/// variants, `{g}-{head}`.
fn check_trunk(
    s: &Scenario,
    g: &baton_sched::types::PrefixGroup,
    kind: &str,
    infos: &[ModelInfo],
) -> Result<(), Unsupported> {
    let trunks = || infos.iter().filter(|i| i.heads > 0).map(|i| i.name.as_str()).collect::<Vec<_>>().join(", ");
    let Some(trunk) = infos.iter().find(|i| i.name == g.name && i.heads > 0) else {
        let why =
            format!("prefix group `{}` is not a shared trunk of the {kind} executor (it has {})", g.name, trunks());
        return Err(Unsupported(why));
    };
    for m in &g.members {
        let name = &s.models[m.index()].spec.name;
        if head_of(&g.name, name).is_none_or(|h| h >= trunk.heads) {
            let why = format!(
                "prefix group `{}`: `{name}` is not one of its trunk's variants (`{0}-0` to `{0}-{}`)",
                g.name,
                trunk.heads - 1
            );
            return Err(Unsupported(why));
        }
    }
    // A group's batches are capped by its members' (`nexus::sessions`),
    // each checked against the executor like any model.
    Ok(())
}

/// The head of a trunk's variant named `{trunk}-{head}`.
fn head_of(trunk: &str, variant: &str) -> Option<u16> {
    variant.strip_prefix(trunk)?.strip_prefix('-')?.parse().ok()
}

/// The scenario's prefix groups.
fn prefixes_of(s: &Scenario) -> Vec<PrefixEntry> {
    let groups = s.cluster.prefixes.iter();
    groups
        .map(|g| PrefixEntry {
            name: g.name.clone(),
            trunk: table(&g.prefix),
            members: g.members.iter().map(|m| m.0).collect(),
        })
        .collect()
}

/// An executor addressed by this table's model ids: the scenario's model
/// `i` is the executor's model of the same name, and prefix group `g`
/// (`ModelTable::trunk_id`) the executor's shared trunk of the group's
/// name, a batch's heads (members' places in the group) turned into the
/// trunk's (`{trunk}-{head}`). The table was checked to name only models
/// and trunks it has (`check_trunk`).
struct ByName {
    inner: Box<dyn Executor>,
    /// `ids[i]`: the executor's id of the table's model i, then of each
    /// group's trunk.
    ids: Vec<u32>,
    /// `heads[g][place]`: the trunk's head of group g's member at `place`.
    heads: Vec<Vec<u16>>,
    infos: Vec<ModelInfo>,
    /// A batch's heads as the trunk numbers them, reused.
    scratch: Vec<u16>,
}

impl ByName {
    fn new(table: &ModelTable, inner: Box<dyn Executor>) -> Self {
        let (mut ids, mut infos) = (Vec::new(), Vec::new());
        let names = table.models.iter().map(|m| &m.name).chain(table.prefixes.iter().map(|g| &g.name));
        for name in names {
            let id =
                inner.models().iter().position(|i| &i.name == name).expect("the table names the executor's models");
            ids.push(id as u32);
            infos.push(inner.models()[id].clone());
        }
        let heads = table
            .prefixes
            .iter()
            .map(|g| {
                let head = |&m: &u32| head_of(&g.name, &table.models[m as usize].name).expect("checked");
                g.members.iter().map(head).collect()
            })
            .collect();
        Self { inner, ids, heads, infos, scratch: Vec::new() }
    }

    /// `batch` in the executor's ids; a prefix batch's heads in `scratch`.
    fn translate<'a>(&self, batch: &Batch<'a>, scratch: &'a mut Vec<u16>) -> Result<Batch<'a>, ExecError> {
        let model = *self.ids.get(batch.model as usize).ok_or(ExecError::UnknownModel { model: batch.model })?;
        let group = (batch.model as usize).checked_sub(self.ids.len() - self.heads.len());
        let heads = match (batch.heads, group.and_then(|g| self.heads.get(g))) {
            (Some(places), Some(heads)) => {
                scratch.clear();
                for &p in places {
                    let h = heads.get(usize::from(p)).ok_or_else(|| ExecError::Heads(format!("no member at {p}")))?;
                    scratch.push(*h);
                }
                Some(&scratch[..])
            }
            (heads, _) => heads,
        };
        Ok(Batch { model, heads, ..*batch })
    }
}

impl Executor for ByName {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let ran = self.translate(batch, &mut scratch).and_then(|b| self.inner.run(&b, outputs));
        self.scratch = scratch;
        ran
    }

    fn launch(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Launched, ExecError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        let launched = self.translate(batch, &mut scratch).and_then(|b| self.inner.launch(&b, outputs));
        self.scratch = scratch;
        launched
    }

    fn poll(&mut self, outputs: &mut Vec<Vec<f32>>) -> Option<Result<Duration, ExecError>> {
        self.inner.poll(outputs)
    }

    fn pipeline_depth(&self) -> usize {
        self.inner.pipeline_depth()
    }
}
