//! Output correctness of the GPU models against the CPU reference, which
//! holds the same weights (both are built from one seed).
//!
//! Tolerance: every output element must satisfy
//! `|gpu - cpu| <= ATOL + RTOL * |cpu|`. Both sides compute in f32, but
//! cuBLAS sums its dot products in a different order than the reference's
//! loops (and the GPU's tanh, exp and sqrt differ in the last bits), so
//! results differ by rounding: a relative 1e-3 is far above that (a few
//! 1e-6 over the K <= 3072 terms of the largest GEMM) and far below any
//! real defect (a wrong stride or a missing bias moves outputs by O(1)).

use crate::executor::{Batch, ExecError, Executor};
use crate::reference::tokens::TokenEncoder;

pub const ATOL: f32 = 1e-3;
pub const RTOL: f32 = 1e-3;

/// How far one batch's outputs were from the reference.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Agreement {
    pub elements: usize,
    pub max_abs: f32,
    /// Largest `|gpu - cpu| / (ATOL + RTOL * |cpu|)`: at most 1 within
    /// tolerance.
    pub worst_ratio: f32,
}

impl Agreement {
    pub fn within_tolerance(&self) -> bool {
        self.worst_ratio <= 1.0
    }

    fn add(&mut self, gpu: &[f32], cpu: &[f32]) {
        assert_eq!(gpu.len(), cpu.len(), "output lengths");
        for (&g, &c) in gpu.iter().zip(cpu) {
            let err = (g - c).abs();
            self.elements += 1;
            self.max_abs = self.max_abs.max(err);
            // A NaN anywhere is infinitely wrong.
            let ratio = if err.is_nan() { f32::INFINITY } else { err / (ATOL + RTOL * c.abs()) };
            self.worst_ratio = self.worst_ratio.max(ratio);
        }
    }
}

/// Runs `inputs` as one batch of `model` (its `variant`) on both
/// executors and compares.
pub fn compare(
    gpu: &mut dyn Executor,
    cpu: &mut dyn Executor,
    (model, variant): (u32, Option<u16>),
    inputs: &[&[f32]],
) -> Result<Agreement, ExecError> {
    let batch = Batch { model, variant, heads: None, inputs };
    let (mut g, mut c) = (Vec::new(), Vec::new());
    gpu.run(&batch, &mut g)?;
    cpu.run(&batch, &mut c)?;
    Ok(agreement(&g, &c))
}

/// How far the GPU's outputs `g` are from the reference's `c`.
pub fn agreement(g: &[Vec<f32>], c: &[Vec<f32>]) -> Agreement {
    assert_eq!(g.len(), c.len(), "one output per input on both sides");
    let mut a = Agreement::default();
    for (g, c) in g.iter().zip(c) {
        a.add(g, c);
    }
    a
}

/// Runs `inputs` as one batch of the dynamic model `model` on the GPU and
/// through its CPU reference, and compares.
pub fn compare_varlen(
    gpu: &mut dyn Executor,
    cpu: &TokenEncoder,
    model: u32,
    inputs: &[&[f32]],
) -> Result<Agreement, ExecError> {
    let (mut g, mut c) = (Vec::new(), Vec::new());
    gpu.run(&Batch { model, variant: None, heads: None, inputs }, &mut g)?;
    cpu.forward_batch(inputs, &mut c);
    Ok(agreement(&g, &c))
}

/// `n` token inputs of `shape` with lengths spread over `1..=seq`,
/// different per `seed`.
pub fn token_inputs(shape: crate::reference::tokens::TokenShape, n: usize, seed: u64) -> Vec<Vec<f32>> {
    let seq = shape.enc.seq;
    (0..n).map(|i| TokenEncoder::input(shape, seq - (i * 7 + seed as usize) % seq, seed + i as u64)).collect()
}

/// `n` deterministic inputs of `len` floats, different per request.
pub fn inputs(n: usize, len: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut g = crate::weights::Gen(seed);
    (0..n).map(|_| g.fill(len, 1.0)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tolerance_accepts_rounding_and_refuses_defects() {
        let mut a = Agreement::default();
        a.add(&[1.0 + 1e-6, -2.0, 1e-7], &[1.0, -2.0 - 2e-6, 0.0]);
        assert!(a.within_tolerance(), "{a:?}");
        a.add(&[1.1], &[1.0]);
        assert!(!a.within_tolerance(), "a 10% error is a defect");
        let mut n = Agreement::default();
        n.add(&[f32::NAN], &[0.0]);
        assert!(!n.within_tolerance());
    }
}
