//! The CUDA executor: the reference models (a ResNet-style CNN, a
//! transformer encoder block, SubNetAct's supernet with one variant per
//! subnet, and a dynamic model: the encoder over variable-length token
//! sequences, `varlen.rs`) on one NVIDIA GPU, with cuBLAS GEMMs and
//! NVRTC-compiled elementwise kernels (`kernels.rs`), weights uploaded from
//! the very CPU reference objects the outputs are checked against
//! (`check.rs`).
//!
//! At start-up everything is allocated from the configured limits: device
//! buffers for each model's largest batch, pinned host buffers for inputs
//! and outputs, and one CUDA graph captured per (model, variant, batch
//! size) — for the dynamic model, per (length bucket, batch size). A batch
//! is then one host-to-device copy, one graph launch and one
//! device-to-host copy on the one stream, bracketed by two events whose
//! difference is the batch's device time. `PIPELINE` staging slots (pinned
//! buffers and events) let that many batches be in flight: the stream runs
//! them in order, so a batch's copy-in waits for the previous batch's graph
//! and the device buffers can be shared. `LaunchMode::Eager` enqueues the
//! same kernels one by one instead (the comparison the benchmark makes).

pub mod blas;
pub mod check;
pub mod cnn;
pub mod device;
pub mod encoder;
pub mod kernels;
pub mod mem_util;
pub mod partition;
pub mod partition_profile;
pub mod profile;
pub mod supernet;
pub mod varlen;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, PinnedHostSlice};

use crate::executor::{validate, Batch, ExecError, Executor, Launched, ModelInfo, Work};
use crate::reference::cnn::{Cnn, CnnShape};
use crate::reference::tokens::{TokenEncoder, TokenShape};
use crate::reference::transformer::{Encoder, EncoderShape};
use crate::reference::{ReferenceModels, Shapes};
use crate::supernet::{default_subnets, Supernet, SupernetConfig};
use cnn::GpuCnn;
pub use device::{open_context, CudaError, DevPtr, DeviceInfo, Gpu};
use encoder::GpuEncoder;
use supernet::GpuSupernet;
use varlen::{GpuVarlen, VarlenShape};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchMode {
    /// One captured graph per (model, batch size).
    Graph,
    /// The kernels and GEMMs enqueued one by one for every batch.
    Eager,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CudaConfig {
    pub ordinal: usize,
    pub max_batch: u32,
    /// Device memory the executor may take, in MiB.
    pub memory_limit_mib: usize,
    pub launch: LaunchMode,
    pub shapes: Shapes,
    /// Seed of the deterministic weights (the CPU reference uses the same).
    pub seed: u64,
    /// The dynamic model (`varlen::NAME`), served after the others; None:
    /// not built (the partition profiles measure the static models).
    pub varlen: Option<VarlenShape>,
    /// Timed runs per length bucket behind the dynamic model's solo table
    /// (the median, after one untimed run).
    pub solo_reps: usize,
}

impl CudaConfig {
    /// The models `baton serve --executor cuda` and `baton profile` run: a
    /// 128-channel residual stage on 56x56 images (ResNet's second stage),
    /// a BERT-base encoder layer (d 768, 12 heads, FFN 3072) on 64 tokens,
    /// the SubNetAct benchmark's supernet (8 blocks of 512, 15 subnets:
    /// `supernet::default_subnets`, depths 4..=8 x widths 128, 256, 512),
    /// and the BERT-base layer over 1..=1,024 tokens of an 8,192-token
    /// vocabulary, batches padded to multiples of 64 tokens.
    pub fn serving() -> Self {
        Self {
            ordinal: 0,
            // glet's partition profiles measure batches up to 64.
            max_batch: 64,
            memory_limit_mib: 8 << 10,
            launch: LaunchMode::Graph,
            shapes: Shapes {
                cnn: CnnShape { in_channels: 3, channels: 128, height: 56, width: 56, classes: 1000 },
                encoder: EncoderShape { seq: 64, dim: 768, heads: 12, ffn: 3072 },
                supernet: SupernetConfig { input: 256, max_depth: 8, max_width: 512, classes: 100, seed: 11 },
            },
            seed: 1,
            varlen: Some(VarlenShape {
                tokens: TokenShape { enc: EncoderShape { seq: 1024, dim: 768, heads: 12, ffn: 3072 }, vocab: 8192 },
                bucket: 64,
            }),
            solo_reps: 9,
        }
    }

    /// Shapes small enough for the CPU reference to check every batch size.
    pub fn small() -> Self {
        let tokens = TokenShape { enc: EncoderShape { seq: 12, dim: 16, heads: 2, ffn: 32 }, vocab: 50 };
        Self {
            max_batch: 8,
            memory_limit_mib: 512,
            shapes: ReferenceModels::small_shapes(),
            varlen: Some(VarlenShape { tokens, bucket: 4 }),
            solo_reps: 1,
            ..Self::serving()
        }
    }

    /// The models the executor serves (no device needed). The dynamic
    /// model's solo table is measured when the executor is built: here its
    /// lengths are known and its times are zero (what a frontend checks an
    /// input's work against); the executor's own `models()` carry the
    /// measured table, which its backend reports.
    pub fn model_infos(&self) -> Vec<ModelInfo> {
        let mut infos = ReferenceModels::infos(self.shapes, self.max_batch);
        if let Some(v) = self.varlen {
            let info = ModelInfo::fixed(varlen::NAME, v.tokens.input_len(), v.tokens.enc.dim, self.max_batch);
            infos.push(ModelInfo { work: Some(Work::Levels { solo: vec![Duration::ZERO; v.tokens.enc.seq] }), ..info });
        }
        infos
    }

    /// The dynamic model's CPU reference, same shapes and weights.
    pub fn varlen_reference(&self) -> Option<TokenEncoder> {
        self.varlen.map(|v| TokenEncoder::new(v.tokens, ReferenceModels::encoder_seed(self.seed) ^ 0x5eed))
    }

    /// The CPU reference with the same shapes and weights.
    pub fn reference(&self) -> ReferenceModels {
        ReferenceModels::new(self.shapes, self.max_batch, self.seed)
    }
}

enum GpuModel {
    Cnn(GpuCnn),
    Encoder(GpuEncoder),
    Supernet(GpuSupernet),
    Varlen(GpuVarlen),
}

impl GpuModel {
    fn input(&self) -> DevPtr {
        match self {
            Self::Cnn(m) => m.input,
            Self::Encoder(m) => m.input,
            Self::Supernet(m) => m.input,
            Self::Varlen(m) => m.input,
        }
    }

    fn output(&self) -> DevPtr {
        match self {
            Self::Cnn(m) => m.output,
            Self::Encoder(m) => m.output,
            Self::Supernet(m) => m.output,
            Self::Varlen(m) => m.output,
        }
    }

    /// `graph`: the supernet's subnet, the dynamic model's length bucket.
    fn enqueue(&self, gpu: &Gpu, graph: usize, b: usize) -> Result<(), CudaError> {
        match self {
            Self::Cnn(m) => m.enqueue(gpu, b),
            Self::Encoder(m) => m.enqueue(gpu, b),
            Self::Supernet(m) => m.enqueue(gpu, graph, b),
            Self::Varlen(m) => m.enqueue(gpu, graph, b),
        }
    }

    /// Graphs per batch size: one per subnet, or per length bucket.
    fn graphs(&self, info: &ModelInfo) -> usize {
        match self {
            Self::Varlen(m) => m.shape().buckets(),
            _ => usize::from(info.variants),
        }
    }

    /// The graph a batch runs: its subnet (the most accurate when it names
    /// none), or the bucket of its longest member.
    fn graph_of(&self, info: &ModelInfo, batch: &Batch<'_>) -> usize {
        match self {
            Self::Varlen(m) => {
                let seq = m.shape().tokens.enc.seq;
                let lmax = batch.inputs.iter().map(|x| TokenShape::length(x, seq)).max().unwrap_or(1);
                m.shape().bucket_of(lmax)
            }
            _ => variant_of(info, batch.variant),
        }
    }
}

/// Batches that may be in flight at once (staging slots).
pub const PIPELINE: usize = 2;

/// One batch's host side: pinned inputs and outputs, and the events
/// around its copies and graph.
struct Slot {
    pinned_in: PinnedHostSlice<f32>,
    pinned_out: PinnedHostSlice<f32>,
    start: CudaEvent,
    end: CudaEvent,
}

impl Slot {
    fn new(gpu: &Gpu, in_floats: usize, out_floats: usize) -> Result<Self, CudaError> {
        let event = || gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT));
        // SAFETY: page-locked host memory of the given lengths; the copies
        // that read or write a slot are waited for (`poll`) before the slot
        // is reused. Outputs are read by the host: plain (not
        // write-combined) pinned memory for them.
        let (pinned_in, pinned_out) = unsafe {
            (
                gpu.ctx.alloc_pinned::<f32>(in_floats.max(1))?,
                gpu.ctx.alloc_pinned_with_flags::<f32>(out_floats.max(1), 0)?,
            )
        };
        Ok(Self { pinned_in, pinned_out, start: event()?, end: event()? })
    }

    /// The device time between the slot's events (both completed).
    fn elapsed(&self) -> Result<Duration, CudaError> {
        Ok(ms(self.start.elapsed_ms(&self.end)?))
    }
}

/// A batch on the device: its model, size, and its slot.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    model: usize,
    batch: usize,
    slot: usize,
}

/// A model's variant (a supernet's subnet; 0 for an ordinary model).
fn variant_of(info: &ModelInfo, v: Option<u16>) -> usize {
    usize::from(v.unwrap_or(info.variants - 1))
}

pub struct CudaExecutor {
    models: Vec<GpuModel>,
    infos: Vec<ModelInfo>,
    /// `graphs[model][graph][b - 1]` (`GpuModel::graph_of`); empty in
    /// eager mode.
    graphs: Vec<Vec<Vec<CudaGraph>>>,
    mode: LaunchMode,
    slots: Vec<Slot>,
    /// Oldest first; slots are used round robin.
    in_flight: VecDeque<InFlight>,
    next_slot: usize,
    /// Declared last: the buffers the models and graphs address are freed
    /// after them.
    gpu: Gpu,
}

impl CudaExecutor {
    /// Opens the device, uploads the models, allocates every buffer and
    /// captures the graphs. No device: `ExecError::NoDevice`.
    pub fn new(cfg: &CudaConfig) -> Result<Self, ExecError> {
        Ok(Self::build(Gpu::open(cfg.ordinal, cfg.memory_limit_mib << 20)?, cfg)?)
    }

    /// The executor on a GPU partition (`partition::split`), on the SMs it
    /// was granted.
    pub fn on_partition(cfg: &CudaConfig, part: &partition::Partition) -> Result<Self, ExecError> {
        let (_, info) = open_context(cfg.ordinal)?;
        let gpu = Gpu::on_context(Arc::clone(&part.ctx), info, cfg.memory_limit_mib << 20)?;
        Ok(Self::build(gpu, cfg)?)
    }

    fn build(mut gpu: Gpu, cfg: &CudaConfig) -> Result<Self, CudaError> {
        let max = cfg.max_batch as usize;
        let Shapes { cnn, encoder, supernet } = cfg.shapes;
        let cpu_cnn = Cnn::new(cnn, cfg.seed);
        let cpu_enc = Encoder::new(encoder, ReferenceModels::encoder_seed(cfg.seed));
        let subnets = default_subnets(&supernet);
        let cpu_net = Supernet::new(supernet, &subnets);
        let mut models = vec![
            GpuModel::Cnn(GpuCnn::new(&mut gpu, &cpu_cnn, max)?),
            GpuModel::Encoder(GpuEncoder::new(&mut gpu, &cpu_enc, max)?),
            GpuModel::Supernet(GpuSupernet::new(&mut gpu, &cpu_net, &subnets, max)?),
        ];
        if let (Some(v), Some(cpu)) = (cfg.varlen, cfg.varlen_reference()) {
            models.push(GpuModel::Varlen(GpuVarlen::new(&mut gpu, &cpu, v.bucket, max)?));
        }
        let infos = cfg.model_infos();
        let most = |f: fn(&ModelInfo) -> usize| infos.iter().map(f).max().unwrap_or(0) * max;
        let slots = (0..PIPELINE)
            .map(|_| Slot::new(&gpu, most(|m| m.input_len), most(|m| m.output_len)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut graphs = Vec::new();
        if cfg.launch == LaunchMode::Graph {
            for (m, info) in models.iter().zip(&infos) {
                let per_graph = (0..m.graphs(info))
                    .map(|v| (1..=max).map(|b| capture(&gpu, m, v, b)).collect::<Result<Vec<_>, _>>())
                    .collect::<Result<Vec<_>, _>>()?;
                graphs.push(per_graph);
            }
        }
        let mut me =
            Self { models, infos, graphs, mode: cfg.launch, slots, in_flight: VecDeque::new(), next_slot: 0, gpu };
        me.measure_solo(cfg.solo_reps.max(1))?;
        Ok(me)
    }

    /// The dynamic model's solo table: for each length bucket, the median
    /// device time of `reps` batches of one input as long as the bucket
    /// (after one untimed run), the time of every length in the bucket.
    fn measure_solo(&mut self, reps: usize) -> Result<(), CudaError> {
        let Some(m) = self.models.iter().position(|m| matches!(m, GpuModel::Varlen(_))) else { return Ok(()) };
        let GpuModel::Varlen(v) = &self.models[m] else { unreachable!("found above") };
        let shape = v.shape();
        let mut solo = Vec::with_capacity(shape.tokens.enc.seq);
        let mut out = Vec::new();
        for k in 0..shape.buckets() {
            let x = TokenEncoder::input(shape.tokens, shape.rows(k), k as u64);
            let batch = Batch { model: m as u32, variant: None, heads: None, inputs: &[&x] };
            let mut runs = Vec::with_capacity(reps);
            for i in 0..=reps {
                self.launch_now(&batch)?;
                let t = self.wait(&mut out)?;
                if i > 0 {
                    runs.push(t);
                }
            }
            runs.sort_unstable();
            solo.resize(shape.rows(k), runs[runs.len() / 2]);
        }
        debug_assert_eq!(solo.len(), shape.tokens.enc.seq);
        self.infos[m].work = Some(Work::Levels { solo });
        Ok(())
    }

    /// Stages and enqueues `batch` (validated) in the next slot.
    fn launch_now(&mut self, batch: &Batch<'_>) -> Result<(), CudaError> {
        let slot = self.next_slot;
        self.start_batch(slot, batch)?;
        self.next_slot = (slot + 1) % PIPELINE;
        self.in_flight.push_back(InFlight { model: batch.model as usize, batch: batch.inputs.len(), slot });
        Ok(())
    }

    /// Waits for the oldest batch in flight and collects it.
    fn wait(&mut self, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, CudaError> {
        let f = self.in_flight.pop_front().expect("a batch in flight");
        self.slots[f.slot].end.synchronize()?;
        self.collect(f, outputs)
    }

    pub fn device(&self) -> &DeviceInfo {
        &self.gpu.info
    }

    /// Device memory taken by buffers, in bytes.
    pub fn device_bytes(&self) -> usize {
        self.gpu.used_bytes()
    }

    fn enqueue_compute(&self, model: usize, graph: usize, b: usize) -> Result<(), CudaError> {
        match self.mode {
            LaunchMode::Graph => Ok(self.graphs[model][graph][b - 1].launch()?),
            LaunchMode::Eager => self.models[model].enqueue(&self.gpu, graph, b),
        }
    }

    /// The compute of one batch of `b` alone (inputs as they are on the
    /// device): the host time spent enqueueing it and the device time it
    /// took. What the launch-overhead benchmark compares across modes.
    pub fn time_compute(
        &mut self,
        model: usize,
        variant: Option<u16>,
        b: usize,
    ) -> Result<(Duration, Duration), ExecError> {
        let info = self.infos.get(model).ok_or(ExecError::UnknownModel { model: model as u32 })?;
        if b == 0 || b > info.max_batch as usize {
            return Err(ExecError::BatchTooLarge { batch: b, max: info.max_batch });
        }
        if variant.is_some_and(|v| v >= info.variants) {
            return Err(ExecError::UnknownVariant { model: model as u32, variant: variant.unwrap_or(0) });
        }
        let variant = variant_of(info, variant);
        self.idle()?;
        let step = || -> Result<(Duration, Duration), CudaError> {
            let slot = &self.slots[0];
            slot.start.record(&self.gpu.stream)?;
            let host = Instant::now();
            self.enqueue_compute(model, variant, b)?;
            let host = host.elapsed();
            slot.end.record(&self.gpu.stream)?;
            slot.end.synchronize()?;
            Ok((host, slot.elapsed()?))
        };
        Ok(step()?)
    }

    /// Enqueues a `marker` kernel tagged `tag` (`mem_util.rs`).
    pub fn mark(&self, tag: usize) -> Result<(), ExecError> {
        Ok(self.gpu.kernels.marker(&self.gpu.stream, tag)?)
    }

    /// Refuses while batches are in flight (for the synchronous entry points).
    fn idle(&self) -> Result<(), ExecError> {
        match self.in_flight.len() {
            0 => Ok(()),
            n => Err(ExecError::Device(format!("{n} batches are in flight on this device; poll them first"))),
        }
    }

    /// Stages `batch` in slot `k` and enqueues its copies and graph.
    fn start_batch(&mut self, k: usize, batch: &Batch<'_>) -> Result<(), CudaError> {
        let (m, b) = (batch.model as usize, batch.inputs.len());
        let graph = self.models[m].graph_of(&self.infos[m], batch);
        let len = self.infos[m].input_len;
        let out_len = self.infos[m].output_len * b;
        let cu = self.gpu.stream.cu_stream();
        let (input, output) = (self.models[m].input(), self.models[m].output());
        let slot = &mut self.slots[k];
        let host = slot.pinned_in.as_mut_slice()?;
        for (row, x) in host.chunks_exact_mut(len).zip(batch.inputs) {
            row.copy_from_slice(x);
        }
        slot.start.record(&self.gpu.stream)?;
        // SAFETY: the slot's pinned buffers outlive the copies (a slot is
        // reused only after `poll` has seen its end event); the device
        // buffers hold the model's largest batch, which `validate` bounds
        // `b` by, and the stream orders this copy after the previous
        // batch's graph has read them.
        unsafe { cudarc::driver::result::memcpy_htod_async(input.0, &slot.pinned_in.as_slice()?[..len * b], cu) }?;
        self.enqueue_compute(m, graph, b)?;
        let slot = &mut self.slots[k];
        // SAFETY: as above.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut slot.pinned_out.as_mut_slice()?[..out_len], output.0, cu)
        }?;
        slot.end.record(&self.gpu.stream)?;
        Ok(())
    }

    fn collect(&mut self, f: InFlight, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, CudaError> {
        let len = self.infos[f.model].output_len;
        let slot = &self.slots[f.slot];
        let host = slot.pinned_out.as_slice()?;
        outputs.clear();
        outputs.extend(host[..len * f.batch].chunks_exact(len).map(<[f32]>::to_vec));
        slot.elapsed()
    }
}

fn ms(v: f32) -> Duration {
    Duration::from_secs_f64(f64::from(v.max(0.0)) / 1e3)
}

/// Captures model `m`'s forward pass (variant `v`) at batch `b` into a
/// graph, uploaded to the device so that its first launch costs no more
/// than the next.
fn capture(gpu: &Gpu, m: &GpuModel, v: usize, b: usize) -> Result<CudaGraph, CudaError> {
    gpu.stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let enqueued = m.enqueue(gpu, v, b);
    let graph = gpu.stream.end_capture(CUgraphInstantiate_flags(0));
    enqueued?;
    let graph = graph?.ok_or_else(|| CudaError::Driver(format!("capturing batch {b} gave an empty graph")))?;
    graph.upload()?;
    Ok(graph)
}

impl Executor for CudaExecutor {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.infos, batch)?;
        self.idle()?;
        self.launch_now(batch)?;
        Ok(self.wait(outputs)?)
    }

    fn launch(&mut self, batch: &Batch<'_>, _outputs: &mut Vec<Vec<f32>>) -> Result<Launched, ExecError> {
        validate(&self.infos, batch)?;
        if self.in_flight.len() == PIPELINE {
            return Err(ExecError::Device(format!("{PIPELINE} batches are already in flight on this device")));
        }
        self.launch_now(batch)?;
        Ok(Launched::InFlight)
    }

    fn poll(&mut self, outputs: &mut Vec<Vec<f32>>) -> Option<Result<Duration, ExecError>> {
        let f = *self.in_flight.front()?;
        let done = self.slots[f.slot].end.try_is_complete();
        if done == Ok(false) {
            return None;
        }
        self.in_flight.pop_front();
        Some(done.map_err(CudaError::from).and_then(|_| self.collect(f, outputs)).map_err(ExecError::from))
    }

    fn pipeline_depth(&self) -> usize {
        PIPELINE
    }
}

#[cfg(test)]
mod tests;
