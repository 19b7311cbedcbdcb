//! The one interface every executor implements: run a batch of one model
//! (optionally one variant of it, such as a supernet's subnet) over
//! row-major f32 inputs, write its outputs, and say how long it took.
//! Bad requests are typed errors, the same from every executor; the
//! conformance suite (`conformance.rs`) holds them to it.

use std::sync::Arc;
use std::time::Duration;

/// Called by an executor, from any thread, when a launched batch is done
/// (`Executor::set_waker`).
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// One batch to run.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub model: u32,
    /// A variant of the model (a supernet's subnet); None: its default.
    pub variant: Option<u16>,
    /// One input per request, each `input_len(model)` floats.
    pub inputs: &'a [&'a [f32]],
    /// For a model of heads on a shared trunk (`ModelInfo::heads`), each
    /// input's head: the trunk runs once over the whole batch, each head
    /// over its own inputs (Nexus's prefix batching). None for any other
    /// model.
    pub heads: Option<&'a [u16]>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    pub name: String,
    pub input_len: usize,
    pub output_len: usize,
    pub max_batch: u32,
    /// Variants the model can run (1 for an ordinary model).
    pub variants: u16,
    /// How an input says how much work it is, for a model whose time
    /// depends on its input (None: every input costs the same).
    pub work: Option<Work>,
    /// Heads on a shared trunk (a prefix group's members): every batch
    /// names each input's head (`Batch::heads`); 0 for another model.
    pub heads: u16,
}

impl ModelInfo {
    /// An ordinary model: one variant, every input the same work.
    pub fn fixed(name: &str, input_len: usize, output_len: usize, max_batch: u32) -> Self {
        Self { name: name.into(), input_len, output_len, max_batch, variants: 1, work: None, heads: 0 }
    }
}

/// A dynamic model's inputs (Orloj): the first float of an input says how
/// much work it is, and a batch is padded to its longest member, so it runs
/// for `g(b, x)`, x the longest member's solo time. The frontend refuses an
/// input whose work is out of range (`check`), and the backend reports each
/// member's solo time (`solo_time`), which the scheduler's policy learns
/// its execution-time distributions from.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// The first float is the input's solo time in microseconds, in
    /// `(0, max_us]` (the emulated executor's dynamic models).
    Micros { max_us: f32 },
    /// The first float is a length `1..=solo.len()` (a sequence length, say)
    /// and `solo[len - 1]` is what an input of that length takes alone, as
    /// measured.
    Levels { solo: Vec<Duration> },
}

impl Work {
    /// Whether `input`'s work is in range; why not if it is not.
    pub fn check(&self, input: &[f32]) -> Result<(), String> {
        let Some(&x) = input.first() else { return Err("an empty input carries no work".into()) };
        match self {
            Self::Micros { max_us } if x.is_finite() && x > 0.0 && x <= *max_us => Ok(()),
            Self::Micros { max_us } => Err(format!("solo time {x} µs is not in (0, {max_us}]")),
            Self::Levels { solo } if x >= 1.0 && x <= solo.len() as f32 && x.fract() == 0.0 => Ok(()),
            Self::Levels { solo } => Err(format!("length {x} is not a whole number in 1..={}", solo.len())),
        }
    }

    /// What `input` takes alone; None when its work is out of range.
    pub fn solo_time(&self, input: &[f32]) -> Option<Duration> {
        self.check(input).ok()?;
        let x = input[0];
        match self {
            Self::Micros { .. } => Some(Duration::from_nanos((f64::from(x) * 1e3).round() as u64)),
            Self::Levels { solo } => Some(solo[x as usize - 1]),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExecError {
    UnknownModel {
        model: u32,
    },
    UnknownVariant {
        model: u32,
        variant: u16,
    },
    EmptyBatch,
    BatchTooLarge {
        batch: usize,
        max: u32,
    },
    InputSize {
        request: usize,
        got: usize,
        want: usize,
    },
    /// A batch's heads do not fit its model (`Batch::heads`).
    Heads(String),
    /// A dynamic model's input whose work is out of range (`Work::check`).
    Work {
        request: usize,
        why: String,
    },
    /// An input the model cannot take (a token id outside its vocabulary,
    /// a length out of range), and why.
    Input {
        request: usize,
        why: String,
    },
    /// No device to run on, and why (the text names the device kind, e.g.
    /// "no CUDA device: ...").
    NoDevice(String),
    /// The device failed while running a batch (a driver or library
    /// error, or too little device memory for the configured models).
    Device(String),
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownModel { model } => write!(f, "unknown model {model}"),
            Self::UnknownVariant { model, variant } => write!(f, "model {model} has no variant {variant}"),
            Self::EmptyBatch => write!(f, "empty batch"),
            Self::BatchTooLarge { batch, max } => write!(f, "batch of {batch} exceeds the maximum {max}"),
            Self::InputSize { request, got, want } => write!(f, "request {request}: {got} floats, want {want}"),
            Self::Work { request, why } | Self::Input { request, why } => write!(f, "request {request}: {why}"),
            Self::Heads(why) => write!(f, "{why}"),
            Self::NoDevice(why) => write!(f, "{why}"),
            Self::Device(why) => write!(f, "device error: {why}"),
        }
    }
}

impl std::error::Error for ExecError {}

/// How `launch` left a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launched {
    /// Finished (or its device time is known): outputs are written.
    Done(Duration),
    /// Running on the device: `poll` says when it is done.
    InFlight,
}

pub trait Executor {
    fn models(&self) -> &[ModelInfo];

    /// Runs `batch`, replacing `outputs` with one output per request, and
    /// returns its device time. `outputs` may hold an earlier batch's
    /// buffers, for an executor to reuse (the conformance suite checks
    /// that nothing of them is left).
    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError>;

    /// Starts `batch` without waiting for it, as a GPU launch does. An
    /// executor that cannot returns `Done` from `run`. Up to
    /// `pipeline_depth` batches may be in flight at once; the device runs
    /// them in launch order.
    fn launch(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Launched, ExecError> {
        self.run(batch, outputs).map(Launched::Done)
    }

    /// For the oldest batch `launch` left in flight: `None` while it runs;
    /// once it is done, its outputs in `outputs` and its device time.
    fn poll(&mut self, _outputs: &mut Vec<Vec<f32>>) -> Option<Result<Duration, ExecError>> {
        None
    }

    /// How many launched batches may be in flight at once (1: each is
    /// polled to completion before the next launch).
    fn pipeline_depth(&self) -> usize {
        1
    }

    /// Asks the executor to call `wake` whenever a launched batch is done,
    /// so its owner can sleep until then instead of polling. Returns false
    /// (the default) if it cannot: its owner polls.
    fn set_waker(&mut self, _wake: Waker) -> bool {
        false
    }
}

/// The checks every executor makes before running, in one place so that
/// all of them reject the same inputs with the same errors.
pub fn validate(models: &[ModelInfo], batch: &Batch<'_>) -> Result<(), ExecError> {
    let m = models.get(batch.model as usize).ok_or(ExecError::UnknownModel { model: batch.model })?;
    if let Some(v) = batch.variant {
        if v >= m.variants {
            return Err(ExecError::UnknownVariant { model: batch.model, variant: v });
        }
    }
    if batch.inputs.is_empty() {
        return Err(ExecError::EmptyBatch);
    }
    match (batch.heads, m.heads) {
        (None, 0) => {}
        (Some(_), 0) => return Err(ExecError::Heads(format!("model {} has no heads", batch.model))),
        (None, _) => return Err(ExecError::Heads(format!("model {}'s batches name each input's head", batch.model))),
        (Some(h), n) if h.len() != batch.inputs.len() => {
            return Err(ExecError::Heads(format!(
                "{} heads for {} inputs of a model of {n}",
                h.len(),
                batch.inputs.len()
            )))
        }
        (Some(h), n) => {
            if let Some((request, head)) = h.iter().enumerate().find(|(_, &x)| x >= n) {
                return Err(ExecError::Heads(format!("request {request}: head {head} of a model of {n}")));
            }
        }
    }
    if batch.inputs.len() > m.max_batch as usize {
        return Err(ExecError::BatchTooLarge { batch: batch.inputs.len(), max: m.max_batch });
    }
    if let Some((request, x)) = batch.inputs.iter().enumerate().find(|(_, x)| x.len() != m.input_len) {
        return Err(ExecError::InputSize { request, got: x.len(), want: m.input_len });
    }
    if let Some(work) = &m.work {
        for (request, x) in batch.inputs.iter().enumerate() {
            work.check(x).map_err(|why| ExecError::Work { request, why })?;
        }
    }
    Ok(())
}
