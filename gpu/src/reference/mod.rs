//! The reference models on the CPU: a ResNet-style CNN (`cnn.rs`), a
//! transformer encoder block (`transformer.rs`) and SubNetAct's supernet
//! (`crate::supernet`, one variant per subnet), with deterministic random
//! weights, written as the GEMMs and elementwise kernels the CUDA executor
//! runs. They are the CPU side of the CUDA executor's correctness check
//! (the GPU outputs are compared with these within a stated tolerance,
//! `cuda/tests.rs` and `baton-perf`'s `cuda_bench`) and, behind
//! the `Executor` trait, a CPU executor that does real compute. Beside
//! them, a variable-length encoder (`varlen.rs`, a dynamic model), variants
//! with their own heads on a shared trunk (`shared.rs`, prefix batching), and the
//! CPU executor's configuration (`cpu.rs`), which serves all four on a
//! dedicated thread.

pub mod cnn;
pub mod cpu;
pub mod ops;
pub mod shared;
pub mod tokens;
pub mod transformer;
pub mod varlen;

pub use cpu::{CpuConfig, CpuModels};

use std::time::{Duration, Instant};

use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo};
use crate::supernet::{default_subnets, SubnetConfig, Supernet, SupernetConfig};
use cnn::{Cnn, CnnShape};
use transformer::{Encoder, EncoderShape};

enum Model {
    Cnn(Cnn),
    Encoder(Encoder),
    Supernet(Supernet, Vec<SubnetConfig>),
}

/// The shapes of the three models.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shapes {
    pub cnn: CnnShape,
    pub encoder: EncoderShape,
    pub supernet: SupernetConfig,
}

/// The two reference models behind the `Executor` trait: model 0 the CNN,
/// model 1 the encoder block. A batch runs its requests one by one.
pub struct ReferenceModels {
    models: Vec<Model>,
    infos: Vec<ModelInfo>,
}

impl ReferenceModels {
    pub fn new(shapes: Shapes, max_batch: u32, seed: u64) -> Self {
        let c = Cnn::new(shapes.cnn, seed);
        let e = Encoder::new(shapes.encoder, Self::encoder_seed(seed));
        let subnets = default_subnets(&shapes.supernet);
        let net = Supernet::new(shapes.supernet, &subnets);
        let models = vec![Model::Cnn(c), Model::Encoder(e), Model::Supernet(net, subnets)];
        Self { models, infos: Self::infos(shapes, max_batch) }
    }

    /// What `new` with these shapes serves, without building its weights.
    pub fn infos(shapes: Shapes, max_batch: u32) -> Vec<ModelInfo> {
        let Shapes { cnn, encoder, supernet } = shapes;
        let info = |name: &str, input_len, output_len, variants: usize| ModelInfo {
            name: name.into(),
            input_len,
            output_len,
            max_batch,
            variants: variants as u16,
            work: None,
            heads: 0,
        };
        let io = encoder.seq * encoder.dim;
        vec![
            info("resnet-block", cnn.in_channels * cnn.height * cnn.width, cnn.classes, 1),
            info("encoder-block", io, io, 1),
            info("supernet", supernet.input, supernet.classes, default_subnets(&supernet).len()),
        ]
    }

    /// The encoder's weights seed, given the models' seed.
    pub fn encoder_seed(seed: u64) -> u64 {
        seed ^ 0x5eed
    }

    /// Small shapes, for tests and the CPU.
    pub fn small_shapes() -> Shapes {
        Shapes {
            cnn: CnnShape { in_channels: 3, channels: 8, height: 8, width: 8, classes: 10 },
            encoder: EncoderShape { seq: 8, dim: 32, heads: 4, ffn: 64 },
            supernet: SupernetConfig { input: 32, max_depth: 4, max_width: 64, classes: 10, seed: 7 },
        }
    }

    pub fn small(seed: u64) -> Self {
        Self::new(Self::small_shapes(), 8, seed)
    }
}

impl Executor for ReferenceModels {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.infos, batch)?;
        let start = Instant::now();
        let info = &self.infos[batch.model as usize];
        let variant = batch.variant.map_or(info.variants - 1, |v| v) as usize;
        outputs.clear();
        let mut scratch = Vec::new();
        for x in batch.inputs {
            let mut y = vec![0.0; info.output_len];
            match &self.models[batch.model as usize] {
                Model::Cnn(m) => m.forward(x, &mut y),
                Model::Encoder(m) => m.forward(x, &mut y),
                Model::Supernet(net, subnets) => net.forward(&subnets[variant], x, &mut y, &mut scratch),
            }
            outputs.push(y);
        }
        Ok(start.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_models_conform() {
        crate::conformance::check(&mut ReferenceModels::small(7), "reference");
    }
}
