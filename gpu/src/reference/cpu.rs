//! The CPU executor's configuration, as `CudaConfig` is the GPU's: the
//! reference models (`ReferenceModels`: resnet-block, encoder-block,
//! supernet with its subnets), the variable-length encoder (`varlen.rs`, a
//! dynamic model) and variants with heads of their own on a shared trunk
//! (`shared.rs`: `mlp` and its variants `mlp-0`.., Nexus's prefix
//! batching), served by `CpuModels` on one dedicated
//! thread (`Threaded`), optionally pinned to a core, so that its compute
//! never blocks the engine's shards.

use std::time::Duration;

use super::cnn::CnnShape;
use super::shared::{SharedShape, SharedTrunk};
use super::transformer::EncoderShape;
use super::varlen::Varlen;
use super::{ReferenceModels, Shapes};
use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo};
use crate::supernet::SupernetConfig;
use crate::threaded::Threaded;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuConfig {
    pub max_batch: u32,
    /// Seed of the deterministic weights.
    pub seed: u64,
    /// The core the executor's thread is pinned to (None: not pinned).
    pub core: Option<usize>,
    /// The reference models' shapes.
    pub shapes: Shapes,
    /// The variable-length encoder's shape (`seq` is its longest length).
    pub varlen: EncoderShape,
    /// Timed runs per length behind the varlen's solo table (the median).
    pub solo_reps: usize,
    /// The shared trunk's shape: its variants are a prefix group.
    pub shared: SharedShape,
}

/// The shared trunk's name: its variants are `mlp-0`, `mlp-1`, ...
pub const SHARED_TRUNK: &str = "mlp";

impl CpuConfig {
    /// The models `baton profile --executor cpu` measures, small enough for
    /// one core: a batch takes about 0.05 to 5 ms. A 16-channel residual
    /// stage on 16x16 images, an encoder layer of d 64 (4 heads, FFN 256)
    /// on 16 tokens, the supernet at 4 blocks of 256 (9 subnets), and the
    /// variable-length encoder of d 128 (4 heads, FFN 256) on up to 128
    /// tokens — about 0.1 to 4 ms alone, so that an SLO a few times its
    /// solo times is milliseconds, as a GPU model's is; ten variants of a
    /// classifier sharing a trunk of four 1024-wide layers over 128 inputs
    /// (about 0.25 ms an input).
    pub fn serving() -> Self {
        Self {
            max_batch: 8,
            seed: 1,
            core: None,
            shapes: Shapes {
                cnn: CnnShape { in_channels: 3, channels: 16, height: 16, width: 16, classes: 10 },
                encoder: EncoderShape { seq: 16, dim: 64, heads: 4, ffn: 256 },
                supernet: SupernetConfig { input: 128, max_depth: 4, max_width: 256, classes: 10, seed: 11 },
            },
            varlen: EncoderShape { seq: 128, dim: 128, heads: 4, ffn: 256 },
            solo_reps: 3,
            shared: SharedShape { input: 128, hidden: 1024, depth: 4, classes: 10, heads: 10 },
        }
    }

    /// Tiny shapes, for tests.
    pub fn small() -> Self {
        Self {
            max_batch: 4,
            shapes: ReferenceModels::small_shapes(),
            varlen: EncoderShape { seq: 8, dim: 16, heads: 2, ffn: 32 },
            solo_reps: 1,
            shared: SharedShape { input: 12, hidden: 16, depth: 2, classes: 5, heads: 3 },
            ..Self::serving()
        }
    }

    /// What the executor serves: the reference models (0 resnet-block, 1
    /// encoder-block, 2 supernet), then 3 encoder-varlen with its solo
    /// table, measured here on the calling thread (a few tens of
    /// milliseconds at the serving shape; the executor's own `models()`
    /// carry the table measured on its thread), then 4 the shared trunk
    /// `mlp` with its heads and 5.. its variants whole (`mlp-0`, ...).
    pub fn model_infos(&self) -> Result<Vec<ModelInfo>, ExecError> {
        self.check()?;
        let mut infos = ReferenceModels::infos(self.shapes, self.max_batch);
        infos.push(self.build_varlen().models()[0].clone());
        infos.extend(SharedTrunk::infos(SHARED_TRUNK, self.shared, self.max_batch));
        Ok(infos)
    }

    /// The models on the calling thread.
    pub fn models(&self) -> Result<CpuModels, ExecError> {
        self.check()?;
        let reference = ReferenceModels::new(self.shapes, self.max_batch, self.seed);
        let varlen = self.build_varlen();
        let shared = self.build_shared();
        let mut infos = reference.models().to_vec();
        infos.extend_from_slice(varlen.models());
        infos.extend_from_slice(shared.models());
        Ok(CpuModels { reference, varlen, shared, infos })
    }

    /// The shared trunk and its heads alone, on the calling thread.
    pub fn build_shared(&self) -> SharedTrunk {
        SharedTrunk::new(SHARED_TRUNK, self.shared, self.max_batch, self.seed ^ 0x7a11)
    }

    /// The models on a dedicated thread (pinned to `core` if given), built
    /// there.
    pub fn executor(&self) -> Result<Threaded, ExecError> {
        let cfg = *self;
        Threaded::spawn("baton-cpu-exec", self.core, move || cfg.models())
    }

    fn build_varlen(&self) -> Varlen {
        Varlen::new(self.varlen, self.max_batch, ReferenceModels::encoder_seed(self.seed), self.solo_reps)
    }

    /// Refuses what would make a model's construction fail.
    fn check(&self) -> Result<(), ExecError> {
        let bad = |why: String| Err(ExecError::Device(format!("CPU configuration: {why}")));
        let (s, e, v) = (&self.shapes.supernet, &self.shapes.encoder, &self.varlen);
        let c = &self.shapes.cnn;
        if self.max_batch == 0 {
            return bad("max_batch must be positive".into());
        }
        for (name, x) in [("encoder", e), ("varlen", v)] {
            if x.seq == 0 || x.ffn == 0 || x.heads == 0 || x.dim == 0 || x.dim % x.heads != 0 {
                return bad(format!("{name}: {x:?} needs positive sizes and heads dividing dim"));
            }
        }
        if [c.in_channels, c.channels, c.height, c.width, c.classes].contains(&0) {
            return bad(format!("cnn: {c:?} needs positive sizes"));
        }
        if [s.input, s.max_depth, s.max_width, s.classes].contains(&0) || s.max_width < 4 {
            return bad(format!("supernet: {s:?} needs positive sizes and a width of at least 4"));
        }
        let t = &self.shared;
        if [t.input, t.hidden, t.depth, t.classes, usize::from(t.heads)].contains(&0) {
            return bad(format!("shared trunk: {t:?} needs positive sizes, a layer and a head"));
        }
        Ok(())
    }
}

/// The reference models, the variable-length encoder and the shared trunk
/// behind one `Executor`: models 0..=2 the reference models, 3
/// encoder-varlen, 4.. the trunk with its heads and its variants whole.
pub struct CpuModels {
    reference: ReferenceModels,
    varlen: Varlen,
    shared: SharedTrunk,
    infos: Vec<ModelInfo>,
}

impl Executor for CpuModels {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.infos, batch)?;
        let n = self.reference.models().len() as u32;
        let v = n + self.varlen.models().len() as u32;
        if batch.model < n {
            self.reference.run(batch, outputs)
        } else if batch.model < v {
            self.varlen.run(&Batch { model: batch.model - n, ..*batch }, outputs)
        } else {
            self.shared.run(&Batch { model: batch.model - v, ..*batch }, outputs)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::Work;

    #[test]
    fn the_cpu_models_conform_on_their_thread() {
        let cfg = CpuConfig::small();
        let infos = cfg.model_infos().unwrap();
        let names: Vec<&str> = infos.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            ["resnet-block", "encoder-block", "supernet", "encoder-varlen", "mlp", "mlp-0", "mlp-1", "mlp-2"]
        );
        assert_eq!(infos[4].heads, 3);
        let mut exec = cfg.executor().unwrap();
        let solo = |m: &ModelInfo| match &m.work {
            Some(Work::Levels { solo }) => solo.len(),
            _ => 0,
        };
        assert_eq!(solo(&exec.models()[3]), cfg.varlen.seq);
        // The same models, solo times aside (measured on each thread).
        let strip =
            |v: &[ModelInfo]| -> Vec<ModelInfo> { v.iter().map(|m| ModelInfo { work: None, ..m.clone() }).collect() };
        assert_eq!(strip(exec.models()), strip(&infos));
        crate::conformance::check(&mut exec, "cpu");
    }

    #[test]
    fn a_bad_configuration_is_an_error() {
        let mut cfg = CpuConfig::small();
        cfg.varlen.heads = 3;
        assert!(matches!(cfg.model_infos(), Err(ExecError::Device(_))));
        assert!(matches!(cfg.executor().err(), Some(ExecError::Device(_))));
        let cfg = CpuConfig { max_batch: 0, ..CpuConfig::small() };
        assert!(cfg.models().is_err());
    }

    #[test]
    fn the_serving_shape_builds_with_a_solo_time_per_length() {
        let cfg = CpuConfig::serving();
        let infos = cfg.model_infos().unwrap();
        assert_eq!(infos.len(), 4 + 1 + usize::from(cfg.shared.heads));
        let Some(Work::Levels { solo }) = &infos[3].work else { panic!("encoder-varlen's work: {:?}", infos[3].work) };
        assert_eq!(solo.len(), cfg.varlen.seq);
        assert!(solo.iter().all(|t| *t > Duration::ZERO));
    }
}
