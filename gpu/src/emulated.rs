//! The emulated executor: a batch of b takes the model's l(b) (times an
//! optional jitter, from a seeded generator), spent busy-waiting on the
//! calling thread so that timing is as a GPU would give it; outputs are a
//! deterministic function of the inputs (a checksum per request), so
//! results can be told apart and checked end to end.

use std::time::{Duration, Instant};

use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo};

pub struct EmulatedModel {
    pub info: ModelInfo,
    /// l(b) for b = 1..=max_batch.
    pub latency: Vec<Duration>,
}

pub struct Emulated {
    models: Vec<EmulatedModel>,
    infos: Vec<ModelInfo>,
    jitter: f64,
    state: u64,
}

impl Emulated {
    /// `jitter` in [0, 1): each batch runs `l(b)*(1+u)`, u uniform in ±jitter.
    pub fn new(models: Vec<EmulatedModel>, jitter: f64, seed: u64) -> Self {
        assert!((0.0..1.0).contains(&jitter));
        for m in &models {
            assert_eq!(m.latency.len(), m.info.max_batch as usize, "{}: one latency per batch size", m.info.name);
        }
        let infos = models.iter().map(|m| m.info.clone()).collect();
        Self { models, infos, jitter, state: seed | 1 }
    }

    fn unit(&mut self) -> f64 {
        // xorshift64*: a few bits of jitter need nothing stronger.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        (self.state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Executor for Emulated {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.infos, batch)?;
        let m = &self.models[batch.model as usize];
        let l = m.latency[batch.inputs.len() - 1];
        let out_len = m.info.output_len;
        let scale = if self.jitter > 0.0 { 1.0 + self.jitter * (2.0 * self.unit() - 1.0) } else { 1.0 };
        let run = l.mul_f64(scale);
        let start = Instant::now();
        outputs.clear();
        outputs.extend(batch.inputs.iter().map(|x| {
            let sum: f32 = x.iter().sum();
            vec![sum; out_len]
        }));
        while start.elapsed() < run {
            std::hint::spin_loop();
        }
        Ok(start.elapsed())
    }
}
