//! SubNetAct on the CPU: one weight-shared supernet (an MLP of residual-free
//! blocks) that serves every subnet in place, with SuperServe's three
//! operators (seeds/004, section 3):
//!
//! - **LayerSelect**: a subnet of depth d runs the first d blocks and skips
//!   the rest;
//! - **WeightSlice**: a subnet of width w uses the first w output channels
//!   (and, after the first block, the first w input channels) of each block's
//!   weights, read in place from the full matrices — no copy;
//! - **SubnetNorm**: each subnet keeps its own per-channel normalisation
//!   statistics for every block it runs (a few floats per channel), because
//!   a sliced block's activations have a different distribution.
//!
//! Weights are deterministic random (a seeded generator); statistics are
//! calibrated per subnet on a fixed synthetic batch. `extract` copies a
//! subnet out as a standalone dense network: its outputs must equal the
//! supernet's running that subnet, bit for bit.

mod net;

pub use net::{Mlp, SubnetConfig, Supernet, SupernetConfig};

use std::time::{Duration, Instant};

use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo};

/// The supernet behind the `Executor` trait: one model whose variants are
/// its subnets.
pub struct SupernetExecutor {
    net: Supernet,
    subnets: Vec<SubnetConfig>,
    info: Vec<ModelInfo>,
    scratch: Vec<f32>,
}

impl SupernetExecutor {
    /// `subnets` ordered from least to most accurate; the default variant
    /// is the last.
    pub fn new(net: Supernet, subnets: Vec<SubnetConfig>, max_batch: u32) -> Self {
        assert!(!subnets.is_empty() && subnets.len() <= u16::MAX as usize);
        for s in &subnets {
            net.check(s);
        }
        let info = vec![ModelInfo {
            name: "supernet".into(),
            input_len: net.config().input,
            output_len: net.config().classes,
            max_batch,
            variants: subnets.len() as u16,
            work: None,
            heads: 0,
        }];
        Self { net, subnets, info, scratch: Vec::new() }
    }

    pub fn net(&self) -> &Supernet {
        &self.net
    }

    pub fn subnets(&self) -> &[SubnetConfig] {
        &self.subnets
    }
}

impl Executor for SupernetExecutor {
    fn models(&self) -> &[ModelInfo] {
        &self.info
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.info, batch)?;
        let start = Instant::now();
        let s = &self.subnets[batch.variant.map_or(self.subnets.len() - 1, |v| v as usize)];
        outputs.clear();
        for x in batch.inputs {
            let mut y = vec![0.0; self.net.config().classes];
            self.net.forward(s, x, &mut y, &mut self.scratch);
            outputs.push(y);
        }
        Ok(start.elapsed())
    }
}

/// A spread of subnets from shallow and narrow to the full network.
pub fn default_subnets(cfg: &SupernetConfig) -> Vec<SubnetConfig> {
    let mut v = Vec::new();
    for depth in (cfg.max_depth.div_ceil(2))..=cfg.max_depth {
        for width in [cfg.max_width / 4, cfg.max_width / 2, cfg.max_width] {
            v.push(SubnetConfig { depth, width });
        }
    }
    v.sort_by_key(|s| s.depth * s.width * s.width);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance;

    fn small() -> (Supernet, Vec<SubnetConfig>) {
        let cfg = SupernetConfig { input: 32, max_depth: 4, max_width: 64, classes: 10, seed: 7 };
        let subnets = default_subnets(&cfg);
        (Supernet::new(cfg, &subnets), subnets)
    }

    #[test]
    fn conforms_to_the_executor_suite() {
        let (net, subnets) = small();
        let mut e = SupernetExecutor::new(net, subnets, 16);
        conformance::check(&mut e, "supernet");
    }

    #[test]
    fn every_subnet_equals_its_extracted_network() {
        let (net, subnets) = small();
        let mut scratch = Vec::new();
        for s in &subnets {
            let mlp = net.extract(s);
            for k in 0..5 {
                let x: Vec<f32> = (0..32).map(|i| ((i * 7 + k * 13) as f32 * 0.1).sin()).collect();
                let (mut a, mut b) = (vec![0.0; 10], vec![0.0; 10]);
                net.forward(s, &x, &mut a, &mut scratch);
                mlp.forward(&x, &mut b);
                assert_eq!(a, b, "subnet {s:?} differs from its extraction");
            }
        }
    }

    #[test]
    fn subnets_share_weights_and_differ_in_output() {
        let (net, subnets) = small();
        let separate: usize = subnets.iter().map(|s| net.extract(s).parameters()).sum();
        assert!(net.parameters() < separate, "{} shared vs {separate} separate", net.parameters());
        let x: Vec<f32> = (0..32).map(|i| (i as f32).cos()).collect();
        let mut scratch = Vec::new();
        let outs: Vec<Vec<f32>> = subnets
            .iter()
            .map(|s| {
                let mut y = vec![0.0; 10];
                net.forward(s, &x, &mut y, &mut scratch);
                y
            })
            .collect();
        assert!(outs.windows(2).all(|w| w[0] != w[1]), "subnets must compute different functions");
    }
}
