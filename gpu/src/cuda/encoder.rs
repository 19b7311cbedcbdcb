//! The transformer encoder block of `reference/transformer.rs` on the GPU,
//! for a batch of b sequences at once: the b*s token rows go through the
//! dense layers as one GEMM each; attention runs per head as two
//! strided-batched GEMMs over the b sequences — the head's slices are read
//! in place from the fused QKV rows through the leading dimension 3d — with
//! one softmax over every (sequence, head, query) row between them.
//!
//! Per head h (dh = d / heads), sequence i of the batch:
//! `S[i][h] = Q_h Kᵀ_h / sqrt(dh)` (`s x s`), `P = softmax(S)` by row,
//! `att[i][:, h*dh..] = P V_h`.
//!
//! `forward` runs the block on sequences padded to `s <= seq` rows, with
//! each sequence's softmax masked to its own length (`cuda/varlen.rs`):
//! a padded key gets probability 0, so a sequence's first `L` rows are
//! what the block gives it alone, up to the GEMMs' summation order.

use super::blas::{gemm, linear, Mat, B};
use super::device::{CudaError, DevPtr, Gpu};
use super::kernels::{Act, Tokens};
use crate::reference::transformer::{Encoder, EncoderShape};

pub struct GpuEncoder {
    pub shape: EncoderShape,
    wqkv: DevPtr,
    bqkv: DevPtr,
    wo: DevPtr,
    bo: DevPtr,
    w1: DevPtr,
    b1: DevPtr,
    w2: DevPtr,
    b2: DevPtr,
    pub input: DevPtr,
    h: DevPtr,
    qkv: DevPtr,
    scores: DevPtr,
    att: DevPtr,
    x1: DevPtr,
    hidden: DevPtr,
    pub output: DevPtr,
}

impl GpuEncoder {
    pub fn new(gpu: &mut Gpu, cpu: &Encoder, max_batch: usize) -> Result<Self, CudaError> {
        let s = cpu.shape;
        let rows = max_batch * s.seq;
        Ok(Self {
            shape: s,
            wqkv: gpu.upload(&cpu.wqkv)?,
            bqkv: gpu.upload(&cpu.bqkv)?,
            wo: gpu.upload(&cpu.wo)?,
            bo: gpu.upload(&cpu.bo)?,
            w1: gpu.upload(&cpu.w1)?,
            b1: gpu.upload(&cpu.b1)?,
            w2: gpu.upload(&cpu.w2)?,
            b2: gpu.upload(&cpu.b2)?,
            input: gpu.alloc(rows * s.dim)?,
            h: gpu.alloc(rows * s.dim)?,
            qkv: gpu.alloc(rows * 3 * s.dim)?,
            scores: gpu.alloc(max_batch * s.heads * s.seq * s.seq)?,
            att: gpu.alloc(rows * s.dim)?,
            x1: gpu.alloc(rows * s.dim)?,
            hidden: gpu.alloc(rows * s.ffn)?,
            output: gpu.alloc(rows * s.dim)?,
        })
    }

    /// Multi-head self-attention of the fused `qkv` rows (`b` sequences of
    /// `s` rows) into `att`, masked to `mask`'s lengths if given.
    fn attention(&self, gpu: &Gpu, b: usize, s: usize, mask: Option<Tokens>) -> Result<(), CudaError> {
        let EncoderShape { dim: d, heads, .. } = self.shape;
        let dh = d / heads;
        let rows_of = |ptr: DevPtr| Mat { ptr, ld: 3 * d, stride: s * 3 * d };
        let scores_of = |hd: usize| Mat { ptr: self.scores.at(hd * s * s), ld: s, stride: heads * s * s };
        let scale = 1.0 / (dh as f32).sqrt();
        for hd in 0..heads {
            let (q, k) = (rows_of(self.qkv.at(hd * dh)), rows_of(self.qkv.at(d + hd * dh)));
            gemm(gpu, (s, s, dh), scale, q, (k, B::Transposed), scores_of(hd), b)?;
        }
        match mask {
            Some(t) => gpu.kernels.softmax_masked(&gpu.stream, self.scores, (b * heads * s, s), t, heads * s)?,
            None => gpu.kernels.softmax(&gpu.stream, self.scores, b * heads * s, s)?,
        }
        for hd in 0..heads {
            let v = rows_of(self.qkv.at(2 * d + hd * dh));
            let out = Mat { ptr: self.att.at(hd * dh), ld: d, stride: s * d };
            gemm(gpu, (s, dh, s), 1.0, scores_of(hd), (v, B::Plain), out, b)?;
        }
        Ok(())
    }

    /// Enqueues the block over the first `b` sequences in `input`; the
    /// result lands in `output` (`[b*seq x d]`).
    pub fn enqueue(&self, gpu: &Gpu, b: usize) -> Result<(), CudaError> {
        self.forward(gpu, b, self.shape.seq, None)
    }

    /// The block over `b` sequences of `s <= seq` rows each in `input`
    /// (`[b*s x d]`), attention masked to `mask`'s lengths if given; the
    /// result lands in `output` (`[b*s x d]`).
    pub fn forward(&self, gpu: &Gpu, b: usize, s: usize, mask: Option<Tokens>) -> Result<(), CudaError> {
        assert!(s <= self.shape.seq, "{s} rows per sequence, buffers for {}", self.shape.seq);
        let EncoderShape { dim: d, ffn: f, .. } = self.shape;
        let (k, rows) = (&gpu.kernels, b * s);
        let st = &gpu.stream;
        k.layernorm(st, self.input, self.h, rows, d)?;
        linear(gpu, self.h, self.wqkv, self.qkv, (rows, d, 3 * d))?;
        k.bias_act(st, self.qkv, self.bqkv, DevPtr::NULL, (rows, 3 * d), Act::None)?;
        self.attention(gpu, b, s, mask)?;
        linear(gpu, self.att, self.wo, self.x1, (rows, d, d))?;
        k.bias_act(st, self.x1, self.bo, self.input, (rows, d), Act::None)?;
        k.layernorm(st, self.x1, self.h, rows, d)?;
        linear(gpu, self.h, self.w1, self.hidden, (rows, d, f))?;
        k.bias_act(st, self.hidden, self.b1, DevPtr::NULL, (rows, f), Act::Gelu)?;
        linear(gpu, self.hidden, self.w2, self.output, (rows, f, d))?;
        k.bias_act(st, self.output, self.b2, self.x1, (rows, d), Act::None)
    }
}
