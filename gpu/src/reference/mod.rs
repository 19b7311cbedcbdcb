//! The reference models on the CPU: a ResNet-style CNN (`cnn.rs`) and a
//! transformer encoder block (`transformer.rs`), with deterministic random
//! weights, written as the GEMMs and elementwise kernels the CUDA executor
//! will run. They are the CPU side of issue 8's correctness check (the GPU
//! outputs are compared with these within a stated tolerance) and, behind
//! the `Executor` trait, a CPU executor that does real compute.

pub mod cnn;
pub mod ops;
pub mod transformer;

use std::time::{Duration, Instant};

use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo};
use cnn::{Cnn, CnnShape};
use transformer::{Encoder, EncoderShape};

enum Model {
    Cnn(Cnn),
    Encoder(Encoder),
}

/// The two reference models behind the `Executor` trait: model 0 the CNN,
/// model 1 the encoder block. A batch runs its requests one by one.
pub struct ReferenceModels {
    models: Vec<Model>,
    infos: Vec<ModelInfo>,
}

impl ReferenceModels {
    pub fn new(cnn: CnnShape, encoder: EncoderShape, max_batch: u32, seed: u64) -> Self {
        let c = Cnn::new(cnn, seed);
        let e = Encoder::new(encoder, Self::encoder_seed(seed));
        Self { models: vec![Model::Cnn(c), Model::Encoder(e)], infos: Self::infos(cnn, encoder, max_batch) }
    }

    /// What `new` with these shapes serves, without building its weights.
    pub fn infos(cnn: CnnShape, encoder: EncoderShape, max_batch: u32) -> Vec<ModelInfo> {
        let info = |name: &str, input_len, output_len| ModelInfo {
            name: name.into(),
            input_len,
            output_len,
            max_batch,
            variants: 1,
        };
        let io = encoder.seq * encoder.dim;
        vec![info("resnet-block", cnn.in_channels * cnn.height * cnn.width, cnn.classes), info("encoder-block", io, io)]
    }

    /// The encoder's weights seed, given the models' seed.
    pub fn encoder_seed(seed: u64) -> u64 {
        seed ^ 0x5eed
    }

    /// Small shapes, for tests and the CPU.
    pub fn small_shapes() -> (CnnShape, EncoderShape) {
        let cnn = CnnShape { in_channels: 3, channels: 8, height: 8, width: 8, classes: 10 };
        (cnn, EncoderShape { seq: 8, dim: 32, heads: 4, ffn: 64 })
    }

    pub fn small(seed: u64) -> Self {
        let (cnn, enc) = Self::small_shapes();
        Self::new(cnn, enc, 8, seed)
    }
}

impl Executor for ReferenceModels {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.infos, batch)?;
        let start = Instant::now();
        let out_len = self.infos[batch.model as usize].output_len;
        outputs.clear();
        for x in batch.inputs {
            let mut y = vec![0.0; out_len];
            match &self.models[batch.model as usize] {
                Model::Cnn(m) => m.forward(x, &mut y),
                Model::Encoder(m) => m.forward(x, &mut y),
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
