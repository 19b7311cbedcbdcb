//! A variable-length encoder over token ids, as a BERT-style server takes
//! its inputs: the CPU reference of the CUDA executor's dynamic model
//! (`cuda/varlen.rs`).
//!
//! An input is `1 + seq` floats: `input[0]` is the length `L` (a whole
//! number in `1..=seq`), then `seq` token ids of which the first `L` are
//! read. Token `t` is embedded as `emb[id] + pos[t]`, the sequence goes
//! through the encoder block of `transformer.rs` with attention over its
//! own `L` rows (`varlen::forward_padded`), and the output is its first
//! row (`d` floats: the pooled position a classifier head reads).
//!
//! Out-of-range values are clamped the way the GPU kernel clamps them
//! (`index`): a length to `[1, seq]`, an id to `[0, vocab)`, NaN to the
//! low end. The frontend refuses a bad length before it gets here
//! (`Work::check`); an id is any float, so every input has an answer.

use super::transformer::{Encoder, EncoderShape};
use super::varlen::forward_padded;
use crate::weights::Gen;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenShape {
    pub enc: EncoderShape,
    pub vocab: usize,
}

impl TokenShape {
    /// Floats in an input: the length, then `seq` ids.
    pub fn input_len(&self) -> usize {
        1 + self.enc.seq
    }

    /// The length an input says, clamped into `1..=max`.
    pub fn length(x: &[f32], max: usize) -> usize {
        index(x[0], 1, max)
    }
}

/// `x` as a whole number in `[lo, hi]`: truncated when inside, `lo` when
/// outside or NaN (the GPU kernel's `clamp_index`).
pub fn index(x: f32, lo: usize, hi: usize) -> usize {
    if x >= lo as f32 && x <= hi as f32 {
        x as usize
    } else {
        lo
    }
}

pub struct TokenEncoder {
    pub shape: TokenShape,
    pub enc: Encoder,
    /// `vocab x d` token embeddings and `seq x d` position embeddings.
    pub emb: Vec<f32>,
    pub pos: Vec<f32>,
}

impl TokenEncoder {
    pub fn new(shape: TokenShape, seed: u64) -> Self {
        let d = shape.enc.dim;
        let mut g = Gen(seed ^ 0x0070_cee5);
        let emb = g.fill(shape.vocab * d, 1.0);
        let pos = g.fill(shape.enc.seq * d, 0.1);
        Self { shape, enc: Encoder::new(shape.enc, seed), emb, pos }
    }

    /// A deterministic input of length `len`; `salt` varies its ids.
    pub fn input(shape: TokenShape, len: usize, salt: u64) -> Vec<f32> {
        let mut x = vec![0.0; shape.input_len()];
        x[0] = len as f32;
        for (t, v) in x[1..].iter_mut().take(len).enumerate() {
            *v = ((t as u64 * 7919 + salt * 104_729) % shape.vocab as u64) as f32;
        }
        x
    }

    /// One output (`d` floats) per input, the batch padded to its longest.
    pub fn forward_batch(&self, inputs: &[&[f32]], outputs: &mut Vec<Vec<f32>>) {
        let (seq, d) = (self.shape.enc.seq, self.shape.enc.dim);
        let lens: Vec<usize> = inputs.iter().map(|x| TokenShape::length(x, seq)).collect();
        let rows: Vec<Vec<f32>> = inputs.iter().zip(&lens).map(|(x, &l)| self.embed(&x[1..][..l])).collect();
        let refs: Vec<&[f32]> = rows.iter().map(Vec::as_slice).collect();
        let (lmax, y) = forward_padded(&self.enc, &lens, &refs);
        outputs.clear();
        outputs.extend((0..inputs.len()).map(|i| y[i * lmax * d..][..d].to_vec()));
    }

    /// `emb[id] + pos[t]` for each of `ids`.
    fn embed(&self, ids: &[f32]) -> Vec<f32> {
        let d = self.shape.enc.dim;
        let mut rows = Vec::with_capacity(ids.len() * d);
        for (t, &id) in ids.iter().enumerate() {
            let id = index(id, 0, self.shape.vocab - 1);
            rows.extend(self.emb[id * d..][..d].iter().zip(&self.pos[t * d..][..d]).map(|(e, p)| e + p));
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: TokenShape = TokenShape { enc: EncoderShape { seq: 8, dim: 16, heads: 2, ffn: 32 }, vocab: 50 };

    #[test]
    fn a_padded_batch_gives_each_member_its_solo_output_and_ids_are_clamped() {
        let m = TokenEncoder::new(SHAPE, 3);
        let xs: Vec<Vec<f32>> =
            [3, 8, 1, 5].iter().enumerate().map(|(i, &l)| TokenEncoder::input(SHAPE, l, i as u64)).collect();
        let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let mut batched = Vec::new();
        m.forward_batch(&refs, &mut batched);
        let mut solo = Vec::new();
        for (x, y) in xs.iter().zip(&batched) {
            m.forward_batch(&[x], &mut solo);
            assert_eq!(y, &solo[0], "length {}", x[0]);
            assert_eq!(y.len(), SHAPE.enc.dim);
            assert!(y.iter().all(|v| v.is_finite()) && y.iter().any(|&v| v != 0.0));
        }
        // Ids past the length are not read; out-of-range ids are token 0.
        let mut noisy = xs[0].clone();
        noisy[4..].iter_mut().for_each(|v| *v = 1e9);
        m.forward_batch(&[&noisy], &mut solo);
        assert_eq!(solo[0], batched[0]);
        let base = TokenEncoder::input(SHAPE, 3, 1);
        assert_eq!(base[1], 29.0);
        let (mut zeroed, mut wild) = (base.clone(), base.clone());
        zeroed[1] = 0.0;
        wild[1] = f32::NAN;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        m.forward_batch(&[&zeroed], &mut a);
        m.forward_batch(&[&wild], &mut b);
        assert_eq!(a, b);
        m.forward_batch(&[&base], &mut b);
        assert_ne!(a, b, "the first id matters");
    }

    #[test]
    fn an_index_is_clamped_as_the_kernel_clamps_it() {
        assert_eq!(index(3.7, 1, 8), 3);
        assert_eq!(index(0.0, 1, 8), 1);
        assert_eq!(index(9.0, 1, 8), 1);
        assert_eq!(index(f32::NAN, 0, 8), 0);
        assert_eq!(index(-0.5, 0, 8), 0);
    }
}
