//! The supernet's arithmetic: weights, per-subnet statistics, forward pass,
//! and extraction of a subnet as a standalone network.

use crate::weights::Gen;

/// Shape of the supernet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SupernetConfig {
    pub input: usize,
    pub max_depth: usize,
    pub max_width: usize,
    pub classes: usize,
    pub seed: u64,
}

/// One subnet: the first `depth` blocks, the first `width` channels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubnetConfig {
    pub depth: usize,
    pub width: usize,
}

const EPS: f32 = 1e-5;

/// A dense block: `rows x cols` weights (row-major), bias, then
/// normalisation `(z - mean) * inv_std`, then ReLU.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub(crate) weights: Vec<f32>,
    pub(crate) bias: Vec<f32>,
    pub(crate) cols: usize,
}

/// Per-subnet normalisation statistics of one block.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Norm {
    pub(crate) mean: Vec<f32>,
    pub(crate) inv_std: Vec<f32>,
}

pub struct Supernet {
    cfg: SupernetConfig,
    pub(crate) blocks: Vec<Block>,
    pub(crate) head: Block,
    /// SubnetNorm: statistics per subnet, per block it runs.
    norms: Vec<(SubnetConfig, Vec<Norm>)>,
}

/// A subnet copied out as its own dense network.
pub struct Mlp {
    blocks: Vec<(Block, Norm)>,
    head: Block,
}

fn random_block(g: &mut Gen, rows: usize, cols: usize) -> Block {
    let scale = (3.0 / cols as f32).sqrt();
    Block {
        weights: (0..rows * cols).map(|_| g.next() * scale).collect(),
        bias: (0..rows).map(|_| g.next() * 0.1).collect(),
        cols,
    }
}

/// z[r] = bias[r] + sum_c W[r][c] x[c], for the first `rows` rows and the
/// first `x.len()` columns of `b`, read in place (WeightSlice).
fn affine(b: &Block, rows: usize, x: &[f32], z: &mut [f32]) {
    for (r, out) in z.iter_mut().enumerate().take(rows) {
        let row = &b.weights[r * b.cols..r * b.cols + x.len()];
        let mut acc = b.bias[r];
        for (w, v) in row.iter().zip(x) {
            acc += w * v;
        }
        *out = acc;
    }
}

fn norm_relu(z: &mut [f32], n: &Norm) {
    for ((v, m), s) in z.iter_mut().zip(&n.mean).zip(&n.inv_std) {
        *v = ((*v - m) * s).max(0.0);
    }
}

impl Supernet {
    /// Random weights from the seed; statistics calibrated for `subnets`.
    pub fn new(cfg: SupernetConfig, subnets: &[SubnetConfig]) -> Self {
        assert!(cfg.input > 0 && cfg.max_depth > 0 && cfg.max_width > 0 && cfg.classes > 0);
        let mut g = Gen(cfg.seed);
        let blocks = (0..cfg.max_depth)
            .map(|k| random_block(&mut g, cfg.max_width, if k == 0 { cfg.input } else { cfg.max_width }))
            .collect();
        let head = random_block(&mut g, cfg.classes, cfg.max_width);
        let mut net = Self { cfg, blocks, head, norms: Vec::new() };
        // Calibration batch: fixed synthetic inputs.
        let calib: Vec<Vec<f32>> = (0..64).map(|_| (0..cfg.input).map(|_| g.next()).collect()).collect();
        for &s in subnets {
            net.check(&s);
            let norms = net.calibrate(&s, &calib);
            net.norms.push((s, norms));
        }
        net
    }

    pub fn config(&self) -> &SupernetConfig {
        &self.cfg
    }

    /// Asserts `s` fits the supernet.
    pub fn check(&self, s: &SubnetConfig) {
        assert!(s.depth >= 1 && s.depth <= self.cfg.max_depth, "depth {} of {}", s.depth, self.cfg.max_depth);
        assert!(s.width >= 1 && s.width <= self.cfg.max_width, "width {} of {}", s.width, self.cfg.max_width);
    }

    pub(crate) fn norms_of(&self, s: &SubnetConfig) -> &[Norm] {
        &self.norms.iter().find(|(c, _)| c == s).unwrap_or_else(|| panic!("subnet {s:?} was not calibrated")).1
    }

    /// Per-channel mean and variance of every block's pre-activation over
    /// `calib`, block by block with the earlier blocks already normalised.
    fn calibrate(&self, s: &SubnetConfig, calib: &[Vec<f32>]) -> Vec<Norm> {
        let mut acts: Vec<Vec<f32>> = calib.to_vec();
        let mut norms = Vec::with_capacity(s.depth);
        for b in &self.blocks[..s.depth] {
            let mut zs: Vec<Vec<f32>> = acts
                .iter()
                .map(|x| {
                    let mut z = vec![0.0; s.width];
                    affine(b, s.width, x, &mut z);
                    z
                })
                .collect();
            let n = zs.len() as f32;
            let mean: Vec<f32> = (0..s.width).map(|c| zs.iter().map(|z| z[c]).sum::<f32>() / n).collect();
            let inv_std: Vec<f32> = (0..s.width)
                .map(|c| 1.0 / (zs.iter().map(|z| (z[c] - mean[c]).powi(2)).sum::<f32>() / n + EPS).sqrt())
                .collect();
            let norm = Norm { mean, inv_std };
            for z in &mut zs {
                norm_relu(z, &norm);
            }
            norms.push(norm);
            acts = zs;
        }
        norms
    }

    /// Runs subnet `s` on `x` into `y` (classes long); `scratch` is reused.
    pub fn forward(&self, s: &SubnetConfig, x: &[f32], y: &mut [f32], scratch: &mut Vec<f32>) {
        let norms = self.norms_of(s);
        scratch.clear();
        scratch.resize(2 * s.width, 0.0);
        let (a, b) = scratch.split_at_mut(s.width);
        affine(&self.blocks[0], s.width, x, a);
        norm_relu(a, &norms[0]);
        let (mut cur, mut next) = (a, b);
        for (blk, n) in self.blocks[1..s.depth].iter().zip(&norms[1..]) {
            affine(blk, s.width, cur, next);
            norm_relu(next, n);
            std::mem::swap(&mut cur, &mut next);
        }
        affine(&self.head, self.cfg.classes, cur, y);
    }

    /// Weights and biases of the whole supernet, plus every subnet's statistics.
    pub fn parameters(&self) -> usize {
        let dense = |b: &Block| b.weights.len() + b.bias.len();
        self.blocks.iter().map(dense).sum::<usize>()
            + dense(&self.head)
            + self.norms.iter().map(|(_, ns)| ns.iter().map(|n| 2 * n.mean.len()).sum::<usize>()).sum::<usize>()
    }

    /// Copies subnet `s` out as a standalone network (the copy WeightSlice avoids).
    pub fn extract(&self, s: &SubnetConfig) -> Mlp {
        let slice = |b: &Block, rows: usize, cols: usize| Block {
            weights: (0..rows).flat_map(|r| b.weights[r * b.cols..r * b.cols + cols].iter().copied()).collect(),
            bias: b.bias[..rows].to_vec(),
            cols,
        };
        let blocks = self.blocks[..s.depth]
            .iter()
            .zip(self.norms_of(s))
            .enumerate()
            .map(|(k, (b, n))| (slice(b, s.width, if k == 0 { self.cfg.input } else { s.width }), n.clone()))
            .collect();
        Mlp { blocks, head: slice(&self.head, self.cfg.classes, s.width) }
    }
}

impl Mlp {
    pub fn forward(&self, x: &[f32], y: &mut [f32]) {
        let mut h = x.to_vec();
        for (b, n) in &self.blocks {
            let mut z = vec![0.0; b.bias.len()];
            affine(b, b.bias.len(), &h, &mut z);
            norm_relu(&mut z, n);
            h = z;
        }
        affine(&self.head, self.head.bias.len(), &h, y);
    }

    pub fn parameters(&self) -> usize {
        let dense = |b: &Block| b.weights.len() + b.bias.len();
        self.blocks.iter().map(|(b, n)| dense(b) + 2 * n.mean.len()).sum::<usize>() + dense(&self.head)
    }
}
