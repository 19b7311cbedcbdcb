//! A transformer encoder block (pre-norm) on a sequence `x[s x d]`:
//! `x1 = x + Wo · attention(LN(x))`, `out = x1 + W2 · gelu(W1 · LN(x1))`,
//! with `heads` attention heads of `d / heads` dimensions each. The
//! matrix products are GEMMs (cuBLAS on the GPU); layer norm, softmax and
//! GELU are the elementwise kernels the GPU executor compiles with NVRTC.

use super::ops::{attention, gelu, gemm, layernorm};
use crate::weights::Gen;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EncoderShape {
    pub seq: usize,
    pub dim: usize,
    pub heads: usize,
    /// Hidden width of the feed-forward layer.
    pub ffn: usize,
}

pub struct Encoder {
    pub shape: EncoderShape,
    pub(crate) wqkv: Vec<f32>,
    pub(crate) bqkv: Vec<f32>,
    pub(crate) wo: Vec<f32>,
    pub(crate) bo: Vec<f32>,
    pub(crate) w1: Vec<f32>,
    pub(crate) b1: Vec<f32>,
    pub(crate) w2: Vec<f32>,
    pub(crate) b2: Vec<f32>,
}

impl Encoder {
    pub fn new(shape: EncoderShape, seed: u64) -> Self {
        assert!(shape.heads > 0 && shape.dim.is_multiple_of(shape.heads), "dim divides into heads");
        let (d, f) = (shape.dim, shape.ffn);
        let mut g = Gen(seed);
        let s = |n: usize| 1.0 / (n as f32).sqrt();
        Self {
            shape,
            wqkv: g.fill(d * 3 * d, s(d)),
            bqkv: g.fill(3 * d, 0.02),
            wo: g.fill(d * d, s(d)),
            bo: g.fill(d, 0.02),
            w1: g.fill(d * f, s(d)),
            b1: g.fill(f, 0.02),
            w2: g.fill(f * d, s(f)),
            b2: g.fill(d, 0.02),
        }
    }

    /// Floats in (and out): the sequence times the model dimension.
    pub fn io_len(&self) -> usize {
        self.shape.seq * self.shape.dim
    }

    /// Multi-head self-attention of `h[s x d]` into `out[s x d]`: the
    /// projection `qkv = h · Wqkv + bqkv` as one GEMM, then `attend` (as
    /// `block` does; the tests check it against the definition).
    #[cfg(test)]
    fn attention(&self, h: &[f32], out: &mut [f32]) {
        let EncoderShape { seq: s, dim: d, .. } = self.shape;
        let mut qkv = vec![0.0; s * 3 * d];
        gemm(h, &self.wqkv, Some(&self.bqkv), s, d, 3 * d, &mut qkv);
        self.attend(&qkv, s, out);
    }

    /// Attention of `rows` positions that see only each other: from their
    /// projections `qkv[rows x 3d]` (each row `q | k | v`), per head
    /// `softmax(Q Kᵀ / sqrt(dh)) V` as GEMMs on the head's slices, into
    /// `out[rows x d]`.
    pub(crate) fn attend(&self, qkv: &[f32], rows: usize, out: &mut [f32]) {
        attention(qkv, rows, self.shape.dim, self.shape.heads, out)
    }

    /// The block over `rows` stacked positions `x[rows x d]` into
    /// `out[rows x d]`: every projection and the feed-forward layer are one
    /// GEMM over all rows (row i of a GEMM's output depends on row i of its
    /// input alone), and `attend(qkv[rows x 3d], att[rows x d])` says which
    /// rows attend to which (all of them for one sequence; each member's own
    /// for a padded batch, `varlen.rs`).
    pub(crate) fn block(&self, x: &[f32], rows: usize, out: &mut [f32], attend: impl FnOnce(&[f32], &mut [f32])) {
        let EncoderShape { dim: d, ffn: f, .. } = self.shape;
        assert_eq!((x.len(), out.len()), (rows * d, rows * d));
        let mut h = x.to_vec();
        layernorm(&mut h, d);
        let mut qkv = vec![0.0; rows * 3 * d];
        gemm(&h, &self.wqkv, Some(&self.bqkv), rows, d, 3 * d, &mut qkv);
        let mut att = vec![0.0; rows * d];
        attend(&qkv, &mut att);
        let mut proj = vec![0.0; rows * d];
        gemm(&att, &self.wo, Some(&self.bo), rows, d, d, &mut proj);
        let x1: Vec<f32> = x.iter().zip(&proj).map(|(a, b)| a + b).collect();
        let mut h2 = x1.clone();
        layernorm(&mut h2, d);
        let mut hidden = vec![0.0; rows * f];
        gemm(&h2, &self.w1, Some(&self.b1), rows, d, f, &mut hidden);
        gelu(&mut hidden);
        gemm(&hidden, &self.w2, Some(&self.b2), rows, f, d, out);
        out.iter_mut().zip(&x1).for_each(|(o, r)| *o += r);
    }

    /// One sequence of `seq` positions, all attending to all.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        let s = self.shape.seq;
        self.block(x, s, out, |qkv, att| self.attend(qkv, s, att));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention by its definition, one output element at a time.
    fn naive_attention(e: &Encoder, h: &[f32]) -> Vec<f32> {
        let EncoderShape { seq: s, dim: d, heads, .. } = e.shape;
        let dh = d / heads;
        let proj = |i: usize, col: usize| -> f32 {
            e.bqkv[col] + (0..d).map(|p| h[i * d + p] * e.wqkv[p * 3 * d + col]).sum::<f32>()
        };
        let mut out = vec![0.0; s * d];
        for hd in 0..heads {
            for i in 0..s {
                let logits: Vec<f32> = (0..s)
                    .map(|j| (0..dh).map(|c| proj(i, hd * dh + c) * proj(j, d + hd * dh + c)).sum::<f32>())
                    .map(|x| x / (dh as f32).sqrt())
                    .collect();
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let z: f32 = logits.iter().map(|l| (l - max).exp()).sum();
                for c in 0..dh {
                    out[i * d + hd * dh + c] =
                        (0..s).map(|j| (logits[j] - max).exp() / z * proj(j, 2 * d + hd * dh + c)).sum();
                }
            }
        }
        out
    }

    #[test]
    fn gemm_attention_equals_the_definition() {
        for (seq, dim, heads) in [(1, 4, 1), (5, 8, 2), (8, 32, 4)] {
            let e = Encoder::new(EncoderShape { seq, dim, heads, ffn: 2 * dim }, 9);
            let h: Vec<f32> = (0..seq * dim).map(|i| (i as f32 * 0.37).cos()).collect();
            let mut got = vec![0.0; seq * dim];
            e.attention(&h, &mut got);
            let want = naive_attention(&e, &h);
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(err < 1e-4, "seq {seq} dim {dim} heads {heads}: max error {err}");
        }
    }

    #[test]
    fn the_block_is_deterministic_finite_and_mixes_positions() {
        let shape = EncoderShape { seq: 8, dim: 32, heads: 4, ffn: 64 };
        let e = Encoder::new(shape, 3);
        let x: Vec<f32> = (0..e.io_len()).map(|i| (i as f32 * 0.11).sin()).collect();
        let (mut a, mut b) = (vec![0.0; e.io_len()], vec![0.0; e.io_len()]);
        e.forward(&x, &mut a);
        e.forward(&x, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().all(|v| v.is_finite()));
        // Attention mixes positions: changing the last token moves the first.
        let mut x2 = x.clone();
        x2[e.io_len() - 1] += 1.0;
        e.forward(&x2, &mut b);
        assert!((0..32).any(|c| (a[c] - b[c]).abs() > 1e-6));
    }
}
