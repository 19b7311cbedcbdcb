//! A variable-length transformer encoder: the encoder block of
//! `transformer.rs` (same weights, same operators) over sequences of
//! 1..=seq positions, a real dynamic model for Orloj — its time depends on
//! the input.
//!
//! An input is `1 + seq * dim` floats: `input[0]` is the length `L` (a whole
//! number in `1..=seq`), then `seq` rows of `dim` floats of which only the
//! first `L` are read. The output is `seq * dim` floats: the block's first
//! `L` rows, then zeros.
//!
//! A batch is padded to its longest member `Lmax`: the members' `Lmax` rows
//! are stacked (rows past a member's own length are zeros), so the
//! projections and the feed-forward layer are single GEMMs over `b * Lmax`
//! rows, and attention runs per member over its own `L` rows only. A GEMM's
//! output row depends on its input row alone and attention never crosses
//! members, so each member's output equals running it alone, bit for bit,
//! and the batch costs about `b` times a solo run of length `Lmax`:
//! `T(b, Lmax) ≈ g(b, solo(Lmax)) = solo(Lmax) (1 + kappa (b - 1))`.

use std::time::{Duration, Instant};

use super::transformer::{Encoder, EncoderShape};
use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo, Work};

/// The model's name in `ModelInfo`.
pub const NAME: &str = "encoder-varlen";

pub struct Varlen {
    enc: Encoder,
    info: Vec<ModelInfo>,
}

impl Varlen {
    /// The encoder of `shape` with weights from `seed`, and its solo table:
    /// for each length `L`, the median of `reps` timed runs of one input of
    /// length `L` alone (after one untimed run). Costs about `reps` times
    /// `Σ_L solo(L)`.
    pub fn new(shape: EncoderShape, max_batch: u32, seed: u64, reps: usize) -> Self {
        let enc = Encoder::new(shape, seed);
        let mut me = Self { enc, info: Vec::new() };
        let solo = me.measure_solo(reps.max(1));
        let io = shape.seq * shape.dim;
        let info = ModelInfo { work: Some(Work::Levels { solo }), ..ModelInfo::fixed(NAME, 1 + io, io, max_batch) };
        me.info = vec![info];
        me
    }

    pub fn shape(&self) -> EncoderShape {
        self.enc.shape
    }

    /// The measured solo time of each length, `solo[L - 1]`.
    pub fn solo(&self) -> &[Duration] {
        match &self.info[0].work {
            Some(Work::Levels { solo }) => solo,
            _ => &[],
        }
    }

    /// A deterministic input of length `len` (rows past it are zeros);
    /// `salt` varies its values.
    pub fn input(shape: EncoderShape, len: usize, salt: u64) -> Vec<f32> {
        let mut x = vec![0.0; 1 + shape.seq * shape.dim];
        x[0] = len as f32;
        let k = salt as f32 * 0.013 + 0.29;
        for (i, v) in x[1..].iter_mut().take(len.min(shape.seq) * shape.dim).enumerate() {
            *v = (i as f32 * k).sin();
        }
        x
    }

    /// Runs `inputs` (already validated: each length in `1..=seq`) as one
    /// padded batch, one output per input.
    pub fn forward_batch(&self, inputs: &[&[f32]], outputs: &mut Vec<Vec<f32>>) {
        let EncoderShape { seq, dim: d, .. } = self.enc.shape;
        let lens: Vec<usize> = inputs.iter().map(|x| x[0] as usize).collect();
        let rows: Vec<&[f32]> = inputs.iter().map(|x| &x[1..]).collect();
        let (lmax, y) = forward_padded(&self.enc, &lens, &rows);
        outputs.clear();
        outputs.extend(lens.iter().enumerate().map(|(i, &l)| {
            let mut out = vec![0.0; seq * d];
            out[..l * d].copy_from_slice(&y[i * lmax * d..][..l * d]);
            out
        }));
    }

    fn measure_solo(&self, reps: usize) -> Vec<Duration> {
        let shape = self.enc.shape;
        let mut outputs = Vec::new();
        (1..=shape.seq)
            .map(|len| {
                let x = Self::input(shape, len, len as u64);
                let time = |outputs: &mut Vec<Vec<f32>>| {
                    let start = Instant::now();
                    self.forward_batch(&[&x], outputs);
                    start.elapsed()
                };
                time(&mut outputs);
                let mut runs: Vec<Duration> = (0..reps).map(|_| time(&mut outputs)).collect();
                runs.sort_unstable();
                runs[runs.len() / 2]
            })
            .collect()
    }
}

/// The block over sequences of `lens[i]` rows (`rows[i]`, at least
/// `lens[i] * d` floats) padded to the longest, `Lmax`: the stacked output
/// (`b * Lmax` rows of d; sequence i's first `lens[i]` rows are its own,
/// the rest are padding) and `Lmax`.
pub fn forward_padded(enc: &Encoder, lens: &[usize], rows: &[&[f32]]) -> (usize, Vec<f32>) {
    let d = enc.shape.dim;
    let lmax = lens.iter().copied().max().unwrap_or(0);
    let n = lens.len() * lmax;
    let mut stacked = vec![0.0; n * d];
    for (i, (x, &l)) in rows.iter().zip(lens).enumerate() {
        stacked[i * lmax * d..][..l * d].copy_from_slice(&x[..l * d]);
    }
    let mut y = vec![0.0; n * d];
    enc.block(&stacked, n, &mut y, |qkv, att| {
        for (i, &l) in lens.iter().enumerate() {
            enc.attend(&qkv[i * lmax * 3 * d..][..l * 3 * d], l, &mut att[i * lmax * d..][..l * d]);
        }
    });
    (lmax, y)
}

impl Executor for Varlen {
    fn models(&self) -> &[ModelInfo] {
        &self.info
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.info, batch)?;
        let start = Instant::now();
        self.forward_batch(batch.inputs, outputs);
        Ok(start.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: EncoderShape = EncoderShape { seq: 8, dim: 16, heads: 2, ffn: 32 };

    fn model() -> Varlen {
        Varlen::new(SHAPE, 6, 3, 1)
    }

    fn run(v: &mut Varlen, inputs: &[&[f32]]) -> Result<Vec<Vec<f32>>, ExecError> {
        let mut out = Vec::new();
        v.run(&Batch { model: 0, variant: None, heads: None, inputs }, &mut out).map(|_| out)
    }

    #[test]
    fn a_padded_batch_gives_each_member_its_solo_output() {
        let mut v = model();
        let d = SHAPE.dim;
        let xs: Vec<Vec<f32>> =
            [3, 8, 1, 5].iter().enumerate().map(|(i, &l)| Varlen::input(SHAPE, l, i as u64)).collect();
        let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let batched = run(&mut v, &refs).unwrap();
        for (x, y) in xs.iter().zip(&batched) {
            let l = x[0] as usize;
            let solo = run(&mut v, &[x]).unwrap();
            assert_eq!(y[..l * d], solo[0][..l * d], "length {l}");
            assert!(y[l * d..].iter().all(|&v| v == 0.0), "length {l}: rows past it are not zero");
            assert!(y[..l * d].iter().all(|v| v.is_finite()) && y[..l * d].iter().any(|&v| v != 0.0));
        }
        // A member's rows past its length are ignored.
        let mut noisy = xs[0].clone();
        noisy[1 + 3 * d..].iter_mut().for_each(|v| *v = 9.0);
        assert_eq!(run(&mut v, &[&noisy, &xs[1]]).unwrap()[0], batched[0]);
    }

    #[test]
    fn the_full_length_equals_the_encoder_block() {
        let mut v = model();
        let x = Varlen::input(SHAPE, SHAPE.seq, 1);
        let mut want = vec![0.0; SHAPE.seq * SHAPE.dim];
        Encoder::new(SHAPE, 3).forward(&x[1..], &mut want);
        assert_eq!(run(&mut v, &[&x]).unwrap()[0], want);
    }

    #[test]
    fn it_conforms_and_refuses_bad_lengths() {
        let mut v = model();
        assert_eq!(v.solo().len(), SHAPE.seq);
        assert!(v.solo().iter().all(|t| *t > Duration::ZERO));
        crate::conformance::check(&mut v, "encoder-varlen");
        let good = Varlen::input(SHAPE, 2, 0);
        for bad in [0.0, 1.5, (SHAPE.seq + 1) as f32, f32::NAN, -1.0] {
            let mut x = good.clone();
            x[0] = bad;
            let r = run(&mut v, &[&good, &x]);
            assert!(matches!(r, Err(ExecError::Work { request: 1, .. })), "{bad}: {r:?}");
        }
    }
}
