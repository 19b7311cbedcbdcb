//! The one interface every executor implements: run a batch of one model
//! (optionally one variant of it, such as a supernet's subnet) over
//! row-major f32 inputs, write its outputs, and say how long it took.
//! Bad requests are typed errors, the same from every executor; the
//! conformance suite (`conformance.rs`) holds them to it.

use std::time::Duration;

/// One batch to run.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    pub model: u32,
    /// A variant of the model (a supernet's subnet); None: its default.
    pub variant: Option<u16>,
    /// One input per request, each `input_len(model)` floats.
    pub inputs: &'a [&'a [f32]],
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    pub name: String,
    pub input_len: usize,
    pub output_len: usize,
    pub max_batch: u32,
    /// Variants the model can run (1 for an ordinary model).
    pub variants: u16,
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
    /// returns its device time.
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
    if batch.inputs.len() > m.max_batch as usize {
        return Err(ExecError::BatchTooLarge { batch: batch.inputs.len(), max: m.max_batch });
    }
    if let Some((request, x)) = batch.inputs.iter().enumerate().find(|(_, x)| x.len() != m.input_len) {
        return Err(ExecError::InputSize { request, got: x.len(), want: m.input_len });
    }
    Ok(())
}
