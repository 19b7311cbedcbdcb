//! The CUDA executor's dynamic model (Orloj): the token encoder of
//! `reference/tokens.rs` on the GPU — its time depends on the input.
//!
//! A batch is padded to a *bucket*: its longest member's length rounded up
//! to a multiple of `bucket` tokens, so that one CUDA graph per (bucket,
//! batch size) covers every batch (`seq / bucket` buckets). The graph
//! embeds the ids into `b x S` rows (`S` the bucket's length, rows past a
//! member's own length zero), runs the encoder block over them with each
//! member's attention masked to its own length (`GpuEncoder::forward`),
//! and gathers each member's first row into the output. The lengths are
//! read on the device from the inputs themselves, so a graph needs no
//! per-batch argument.
//!
//! A batch of `b` at bucket `S` costs about `g(b, solo(S))`: the dense
//! layers are GEMMs over `b S` rows. Each length's solo time is measured
//! when the executor is built (`measure_solo`: a batch of one at that
//! length's bucket), the table a backend reports to Orloj per member.

use super::device::{CudaError, DevPtr, Gpu};
use super::encoder::GpuEncoder;
use super::kernels::Tokens;
use crate::reference::tokens::{TokenEncoder, TokenShape};

/// The CUDA model's name in `ModelInfo`.
pub const NAME: &str = "encoder-tokens";

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VarlenShape {
    pub tokens: TokenShape,
    /// Batches are padded to a multiple of this many tokens.
    pub bucket: usize,
}

impl VarlenShape {
    /// How many buckets (graphs per batch size).
    pub fn buckets(&self) -> usize {
        self.tokens.enc.seq.div_ceil(self.bucket)
    }

    /// The bucket (0-based) of a batch whose longest member has `lmax` tokens.
    pub fn bucket_of(&self, lmax: usize) -> usize {
        lmax.max(1).div_ceil(self.bucket) - 1
    }

    /// Rows per sequence at bucket `k`.
    pub fn rows(&self, k: usize) -> usize {
        ((k + 1) * self.bucket).min(self.tokens.enc.seq)
    }
}

pub struct GpuVarlen {
    shape: VarlenShape,
    enc: GpuEncoder,
    emb: DevPtr,
    pos: DevPtr,
    /// `max_batch` inputs of `1 + seq` floats.
    pub input: DevPtr,
    /// `max_batch` outputs of `d` floats.
    pub output: DevPtr,
}

impl GpuVarlen {
    pub fn new(gpu: &mut Gpu, cpu: &TokenEncoder, bucket: usize, max_batch: usize) -> Result<Self, CudaError> {
        let shape = VarlenShape { tokens: cpu.shape, bucket };
        assert!(bucket > 0 && cpu.shape.vocab > 0, "{shape:?}");
        Ok(Self {
            shape,
            enc: GpuEncoder::new(gpu, &cpu.enc, max_batch)?,
            emb: gpu.upload(&cpu.emb)?,
            pos: gpu.upload(&cpu.pos)?,
            input: gpu.alloc(max_batch * cpu.shape.input_len())?,
            output: gpu.alloc(max_batch * cpu.shape.enc.dim)?,
        })
    }

    pub fn shape(&self) -> VarlenShape {
        self.shape
    }

    /// Enqueues `b` inputs at bucket `k` (every member's length at most
    /// the bucket's; a longer one is cut to it by the kernels' clamp).
    pub fn enqueue(&self, gpu: &Gpu, k: usize, b: usize) -> Result<(), CudaError> {
        let (s, d) = (self.shape.rows(k), self.shape.tokens.enc.dim);
        let tokens = Tokens { ptr: self.input, b, seq: self.shape.tokens.enc.seq };
        let st = &gpu.stream;
        gpu.kernels.embed(st, tokens, (self.emb, self.pos, self.shape.tokens.vocab), self.enc.input, (s, d))?;
        self.enc.forward(gpu, b, s, Some(tokens))?;
        gpu.kernels.take_rows(st, self.enc.output, self.output, (b, s * d, d))
    }
}
