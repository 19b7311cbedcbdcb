//! The vocabulary every scheduler speaks: requests in, decisions out.

use crate::dist::ExecDist;
use crate::offload::{Offload, Offloaded};
use crate::profile::{Profile, ProfileError};
use crate::time::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ModelId(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendId(pub u32);

/// An application of a model: requests of one app share an execution-time
/// distribution (Orloj). Models without apps have one, `AppId(0)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct AppId(pub u32);

impl ModelId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl BackendId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What the scheduler knows of a request: never its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: RequestId,
    pub model: ModelId,
    pub app: AppId,
    pub arrival: Nanos,
    /// Absolute time by which the result must be back: arrival + SLO.
    pub deadline: Nanos,
}

/// Why a request was dropped instead of served. Every dropped request gets
/// exactly one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Even alone, on a backend free right now, it would finish after its
    /// deadline.
    DeadlineUnreachable,
    /// Shed under overload: it could still run, but only in a batch smaller
    /// than the one dropping it makes possible (`queue.rs`, best_window).
    Shed,
    /// Its model's queue was at its configured capacity when it arrived.
    QueueFull,
    /// No backend serves its model (for example, a static plan gave it none).
    NoBackend,
    /// The backend running (or sent) its batch failed.
    BackendFailed,
}

impl DropReason {
    pub const ALL: [DropReason; 5] =
        [Self::DeadlineUnreachable, Self::Shed, Self::QueueFull, Self::NoBackend, Self::BackendFailed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::DeadlineUnreachable => "deadline_unreachable",
            Self::Shed => "shed",
            Self::QueueFull => "queue_full",
            Self::NoBackend => "no_backend",
            Self::BackendFailed => "backend_failed",
        }
    }
}

/// A decision: run these requests of `model` on `backend`, starting at
/// `exec_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchPlan {
    pub model: ModelId,
    pub backend: BackendId,
    pub exec_at: Nanos,
    pub requests: Vec<RequestId>,
    /// Prefix batching (Nexus): the batch runs this group's shared prefix
    /// once for all its requests, which may belong to any of the group's
    /// models, then each model's suffix on its sub-batch. `model` is then
    /// one of the members.
    pub prefix: Option<PrefixId>,
    /// The subnet of a supernet model the batch runs (index into
    /// `ModelSpec::subnets`); None runs the model's own profile.
    pub subnet: Option<u16>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PrefixId(pub u32);

/// Models that share all but their last layers (Nexus's prefix batching):
/// the shared part's profile; each member's own profile is its suffix's.
#[derive(Clone, Debug)]
pub struct PrefixGroup {
    pub name: String,
    pub prefix: Profile,
    pub members: Vec<ModelId>,
}

/// Everything a scheduler can decide.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Output {
    Dispatch(BatchPlan),
    Dropped {
        request: RequestId,
        reason: DropReason,
    },
    /// From now on backend i runs on partition `slots[i]` (a policy that
    /// splits GPUs re-partitioned some): same length and GPU per backend as
    /// `Scheduler::partitions`, a `percent` of 0 for a backend with no
    /// partition (nothing is dispatched to it). Every backend of a GPU
    /// whose partitions change runs nothing at this instant.
    Layout(Vec<Partition>),
}

/// One model as the scheduler sees it.
#[derive(Clone, Debug)]
pub struct ModelSpec {
    pub name: String,
    /// l(b). For a model with input-dependent execution times this is the
    /// single estimate from the mean solo time, `mean*(1 + kappa*(b-1))`,
    /// which is what policies that know no better plan with.
    pub profile: Profile,
    pub slo: Nanos,
    /// Input-dependent execution, if the model has it.
    pub dynamic: Option<DynamicExec>,
    /// GPU memory the model's weights take (0: not tracked).
    pub memory_mb: f64,
    /// The prefix group this model belongs to and its suffix's profile;
    /// `profile` is then prefix plus suffix, the model run alone.
    pub prefix: Option<(PrefixId, Profile)>,
    /// A supernet's pareto-optimal subnets (SuperServe), by accuracy
    /// ascending; empty for an ordinary model. `profile` is then the most
    /// accurate subnet's.
    pub subnets: Vec<Subnet>,
}

/// One subnet of a weight-shared supernet: its accuracy and latency l(b).
#[derive(Clone, Debug, PartialEq)]
pub struct Subnet {
    pub name: String,
    /// Top-1 accuracy, percent.
    pub accuracy: f64,
    pub profile: Profile,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AppSpec {
    pub name: String,
    /// Share of the model's requests.
    pub weight: f64,
    pub exec: ExecDist,
    /// For a real dynamic model whose inputs say their work as a length
    /// (a sequence length, say): the distribution of the length a client
    /// of this app sends, rounded to a whole number of at least 1. None:
    /// a client sends the solo time it drew from `exec`, in µs (what the
    /// emulated executor reads). The simulator draws from `exec` either way.
    pub work: Option<ExecDist>,
}

/// Input-dependent execution times (Orloj, `../shared/design/orloj.md`):
/// each request has a solo time X drawn from its app's distribution, and a
/// batch of b runs for `g(b, x) = x*(1 + kappa*(b-1))`, x its longest
/// member's solo time.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicExec {
    pub kappa: f64,
    pub apps: Vec<AppSpec>,
}

impl DynamicExec {
    /// g(b, x).
    pub fn batch_time(&self, b: u32, longest_solo: Nanos) -> Nanos {
        assert!(b >= 1);
        (longest_solo as f64 * (1.0 + self.kappa * (b - 1) as f64)).round() as Nanos
    }

    /// The mean solo time over the app mix, in nanoseconds.
    pub fn mean_solo(&self) -> f64 {
        let total: f64 = self.apps.iter().map(|a| a.weight).sum();
        self.apps.iter().map(|a| a.weight * a.exec.mean_nanos()).sum::<f64>() / total
    }
}

impl ModelSpec {
    /// A model with a linear profile `alpha*b + beta` (ms) up to `max_batch`
    /// and nothing else: no apps, no prefix, no tracked memory.
    pub fn linear(name: &str, alpha_ms: f64, beta_ms: f64, max_batch: u32, slo_ms: f64) -> Result<Self, ProfileError> {
        Ok(ModelSpec {
            name: name.to_string(),
            profile: Profile::linear_ms(alpha_ms, beta_ms, max_batch)?,
            slo: crate::time::ms_to_nanos(slo_ms),
            dynamic: None,
            memory_mb: 0.0,
            prefix: None,
            subnets: vec![],
        })
    }

    /// The model seen as input-dependent: its own apps, or for a static
    /// profile one app that always takes l(1), with kappa from l(2)/l(1)
    /// (exact for linear profiles: kappa = alpha/(alpha + beta)).
    pub fn as_dynamic(&self) -> DynamicExec {
        if let Some(d) = &self.dynamic {
            return d.clone();
        }
        let l1 = self.profile.latency(1) as f64;
        let kappa = if self.profile.max_batch() >= 2 { self.profile.latency(2) as f64 / l1 - 1.0 } else { 0.0 };
        DynamicExec {
            kappa,
            apps: vec![AppSpec { name: "default".into(), weight: 1.0, exec: ExecDist::Const(l1 / 1e6), work: None }],
        }
    }
}

/// A request of a finished batch, as the backend reports it: its solo time
/// is what Orloj's histograms learn from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completed {
    pub request: RequestId,
    pub app: AppId,
    pub solo: Nanos,
}

/// A backend finished a batch.
#[derive(Clone, Copy, Debug)]
pub struct BatchDone<'a> {
    pub backend: BackendId,
    pub model: ModelId,
    pub started: Nanos,
    pub members: &'a [Completed],
}

/// Delay between a decision and the start of its batch: `ctrl + per_request*b`
/// (d_ctrl + d_data*b in the paper).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DispatchDelay {
    pub ctrl: Nanos,
    pub per_request: Nanos,
}

impl DispatchDelay {
    #[inline]
    pub fn of(&self, batch: u32) -> Nanos {
        self.ctrl + self.per_request * batch as Nanos
    }
}

/// The static description every scheduler is built from.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub models: Vec<ModelSpec>,
    pub backends: u32,
    pub delay: DispatchDelay,
    /// Pending requests a model may hold before arrivals are dropped with
    /// `QueueFull`.
    pub queue_capacity: usize,
    /// Memory of one backend, for placement (None: not a constraint).
    pub gpu_memory_mb: Option<f64>,
    /// Groups of models sharing a prefix.
    pub prefixes: Vec<PrefixGroup>,
}

/// Where a backend runs: a partition of `percent`% of GPU `gpu`'s SMs
/// (glet; MPS active-thread percentage, green contexts or MIG), or the
/// whole GPU at 100. Two partitions of one GPU run side by side and slow
/// each other down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition {
    pub gpu: u32,
    pub percent: u32,
}

/// The sans-IO interface the simulator and the engine drive. Time is
/// always an argument; decisions are drained with `poll_output`; the
/// scheduler says when it next needs to be woken.
pub trait Scheduler {
    /// A new request, already validated, arrives at `now`.
    fn on_request(&mut self, now: Nanos, req: Request);
    /// A backend finished the batch it was running, at `now`.
    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>);
    /// `backend` failed at `now` and never comes back. Batches already sent
    /// to it are lost (the simulator drops their requests with
    /// `BackendFailed`); the policy must not dispatch to it again, nor
    /// expect its completions. No default: every policy says what it does.
    fn on_backend_failed(&mut self, now: Nanos, backend: BackendId);
    /// `backend`, which had failed, is back at `now` (restarted, empty:
    /// nothing it held before failing will complete). The policy may
    /// dispatch to it again. For a backend that has not failed, nothing
    /// changes. No default, for the same reason.
    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId);
    /// Time has reached `now`: fire every timer due at or before it.
    fn on_timeout(&mut self, now: Nanos);
    /// The earliest time at which `on_timeout` has work to do.
    fn next_timeout(&self) -> Option<Nanos>;
    /// The next decision, if any.
    fn poll_output(&mut self) -> Option<Output>;
    /// The backends this scheduler dispatches to, if it splits GPUs into
    /// partitions: `BackendId(i)` runs on the i-th (a percent of 0: none
    /// yet). None (the default): one backend per whole GPU of
    /// `ClusterSpec::backends`. Asked once, before the first request; a
    /// policy that re-partitions later says so with `Output::Layout`.
    fn partitions(&self) -> Option<Vec<Partition>> {
        None
    }
    /// Asks the policy to hand its long computations out (`offload.rs`)
    /// instead of running them in the call that needs them. Not asked
    /// (the simulator never asks), it computes in place.
    fn offload(&mut self) {}
    /// A computation handed out since the last call, to be run and its
    /// result given back with `on_offloaded`; taken after every call into
    /// the policy.
    fn take_offload(&mut self) -> Option<Offload> {
        None
    }
    /// The result of the computation taken last comes back at `now`.
    fn on_offloaded(&mut self, _now: Nanos, _done: Offloaded) {
        unreachable!("a result for a policy that hands nothing out")
    }
}
