//! Heads on a shared trunk on the CPU (Nexus's prefix batching made real):
//! variants of one network that share all but their last layer — a trunk
//! of `depth` fully connected ReLU layers — each with a classifier head of
//! its own. The executor serves the trunk with its heads as one model
//! (`ModelInfo::heads`): a batch mixing variants runs the trunk once over
//! all its inputs and each head over its own rows. Beside it, each variant
//! whole (trunk then its head, an ordinary model), which a mixed batch
//! must match bit for bit: `ops::gemm` sums every output element in the
//! same order whatever the rows around it, so a row's trunk activations do
//! not depend on its batch mates.
//!
//! Models: 0 is the trunk with `heads` heads (named `name`), 1..=heads the
//! whole variants (`{name}-{h}`).

use std::time::{Duration, Instant};

use super::ops::{gemm, relu};
use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo};
use crate::weights::Gen;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedShape {
    pub input: usize,
    pub hidden: usize,
    /// Trunk layers (the first from `input` to `hidden`).
    pub depth: usize,
    pub classes: usize,
    pub heads: u16,
}

/// A fully connected layer: weights `[in x out]` and a bias.
struct Dense {
    w: Vec<f32>,
    b: Vec<f32>,
    fan_in: usize,
    out: usize,
}

impl Dense {
    fn new(g: &mut Gen, fan_in: usize, out: usize) -> Self {
        let scale = 1.0 / (fan_in as f32).sqrt();
        Self { w: g.fill(fan_in * out, scale), b: g.fill(out, 0.1), fan_in, out }
    }

    /// `rows` rows of `x` through the layer into `y`.
    fn forward(&self, x: &[f32], rows: usize, y: &mut Vec<f32>) {
        y.resize(rows * self.out, 0.0);
        gemm(x, &self.w, Some(&self.b), rows, self.fan_in, self.out, y);
    }
}

pub struct SharedTrunk {
    trunk: Vec<Dense>,
    heads: Vec<Dense>,
    infos: Vec<ModelInfo>,
}

impl SharedTrunk {
    pub fn new(name: &str, shape: SharedShape, max_batch: u32, seed: u64) -> Self {
        assert!(shape.depth >= 1 && shape.heads >= 1, "a trunk of at least one layer and one head");
        let mut g = Gen(seed);
        let trunk = (0..shape.depth)
            .map(|l| Dense::new(&mut g, if l == 0 { shape.input } else { shape.hidden }, shape.hidden))
            .collect();
        let heads = (0..shape.heads).map(|_| Dense::new(&mut g, shape.hidden, shape.classes)).collect();
        Self { trunk, heads, infos: Self::infos(name, shape, max_batch) }
    }

    /// What `new` serves: model 0 the trunk with its heads (`name`), then
    /// each variant whole (`{name}-{h}`).
    pub fn infos(name: &str, shape: SharedShape, max_batch: u32) -> Vec<ModelInfo> {
        let plain = |name: String| ModelInfo::fixed(&name, shape.input, shape.classes, max_batch);
        let mut infos = vec![ModelInfo { heads: shape.heads, ..plain(name.into()) }];
        infos.extend((0..shape.heads).map(|h| plain(format!("{name}-{h}"))));
        infos
    }

    /// What `b` inputs take through the trunk alone and through one head
    /// alone, the median of `reps` runs each: a prefix group's profile
    /// (`baton profile --executor cpu`).
    pub fn time_parts(&self, b: usize, reps: usize) -> (Duration, Duration) {
        let input = self.trunk[0].fan_in;
        let xs: Vec<Vec<f32>> =
            (0..b).map(|i| (0..input).map(|k| ((i * input + k) as f32 * 0.37).sin()).collect()).collect();
        let inputs: Vec<&[f32]> = xs.iter().map(|x| x.as_slice()).collect();
        let hidden = self.trunk(&inputs);
        let trunk = median(reps, &mut || drop(std::hint::black_box(self.trunk(&inputs))));
        let mut y = Vec::new();
        let head = median(reps, &mut || self.heads[0].forward(std::hint::black_box(&hidden), b, &mut y));
        (trunk, head)
    }

    /// The trunk's activations of `inputs`, stacked.
    fn trunk(&self, inputs: &[&[f32]]) -> Vec<f32> {
        let (mut x, mut y) = (inputs.concat(), Vec::new());
        for layer in &self.trunk {
            layer.forward(&x, inputs.len(), &mut y);
            relu(&mut y);
            std::mem::swap(&mut x, &mut y);
        }
        x
    }

    /// Each input's classes, input i through head `head(i)`.
    fn forward(&self, inputs: &[&[f32]], head: impl Fn(usize) -> usize, outputs: &mut Vec<Vec<f32>>) {
        let hidden = self.trunk(inputs);
        let width = self.trunk.last().expect("a layer").out;
        outputs.clear();
        outputs.resize(inputs.len(), Vec::new());
        let (mut rows, mut y) = (Vec::new(), Vec::new());
        for (h, dense) in self.heads.iter().enumerate() {
            let mine: Vec<usize> = (0..inputs.len()).filter(|&i| head(i) == h).collect();
            if mine.is_empty() {
                continue;
            }
            rows.clear();
            mine.iter().for_each(|&i| rows.extend_from_slice(&hidden[i * width..(i + 1) * width]));
            dense.forward(&rows, mine.len(), &mut y);
            for (k, &i) in mine.iter().enumerate() {
                outputs[i] = y[k * dense.out..(k + 1) * dense.out].to_vec();
            }
        }
    }
}

/// The median time of `reps` (at least one) calls of `f`.
fn median(reps: usize, f: &mut dyn FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    t.sort_unstable();
    t[t.len() / 2]
}

impl Executor for SharedTrunk {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.infos, batch)?;
        let start = Instant::now();
        match (batch.model, batch.heads) {
            (0, Some(heads)) => self.forward(batch.inputs, |i| usize::from(heads[i]), outputs),
            (m, _) => self.forward(batch.inputs, |_| m as usize - 1, outputs),
        }
        Ok(start.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> SharedTrunk {
        let shape = SharedShape { input: 12, hidden: 16, depth: 2, classes: 5, heads: 3 };
        SharedTrunk::new("trunk", shape, 8, 7)
    }

    #[test]
    fn the_shared_trunk_conforms() {
        crate::conformance::check(&mut small(), "cpu-shared-trunk");
    }

    /// A batch mixing variants on the trunk answers each input exactly as
    /// its variant run whole does, bit for bit.
    #[test]
    fn a_mixed_batch_matches_each_variant_run_whole() {
        let mut e = small();
        let xs: Vec<Vec<f32>> = (0..7).map(|i| (0..12).map(|k| ((i * 12 + k) as f32 * 0.13).sin()).collect()).collect();
        let inputs: Vec<&[f32]> = xs.iter().map(|x| x.as_slice()).collect();
        let heads = [2u16, 0, 1, 1, 2, 0, 2];
        let mut mixed = Vec::new();
        e.run(&Batch { model: 0, variant: None, heads: Some(&heads), inputs: &inputs }, &mut mixed).expect("runs");
        for (i, x) in inputs.iter().enumerate() {
            let mut whole = Vec::new();
            let model = 1 + u32::from(heads[i]);
            e.run(&Batch { model, variant: None, heads: None, inputs: &[x] }, &mut whole).expect("runs");
            assert_eq!(mixed[i], whole[0], "input {i} on head {}", heads[i]);
        }
        // The heads differ: a variant's answer is its own.
        assert_ne!(mixed[1], {
            let mut other = Vec::new();
            e.run(&Batch { model: 3, variant: None, heads: None, inputs: &[inputs[1]] }, &mut other).expect("runs");
            other.remove(0)
        });
    }
}
