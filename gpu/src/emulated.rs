//! The emulated executor: a batch of b takes the model's l(b) (times an
//! optional jitter, from a seeded generator); outputs are a deterministic
//! function of the inputs (a checksum per request), so results can be told
//! apart and checked end to end.
//!
//! Two pacings. `Spin` spends l(b) busy-waiting on the calling thread, so
//! timing is as a synchronous device call would give it (benchmarks of one
//! backend). `Deferred` returns at once with the time the batch takes, like
//! an asynchronous GPU launch: the caller (the engine's backend role) holds
//! the results until that much time has passed on its own clock. That is how
//! one core emulates many GPUs.

use std::time::{Duration, Instant};

use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo};

pub struct EmulatedModel {
    pub info: ModelInfo,
    /// l(b) for b = 1..=max_batch.
    pub latency: Vec<Duration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// Busy-wait l(b) inside `run`.
    Spin,
    /// Return at once; the returned duration is the device time to wait out.
    Deferred,
}

pub struct Emulated {
    models: Vec<EmulatedModel>,
    infos: Vec<ModelInfo>,
    jitter: f64,
    state: u64,
    pacing: Pacing,
}

impl Emulated {
    /// `jitter` in [0, 1): each batch runs `l(b)*(1+u)`, u uniform in ±jitter.
    pub fn new(models: Vec<EmulatedModel>, jitter: f64, seed: u64) -> Self {
        assert!((0.0..1.0).contains(&jitter));
        for m in &models {
            assert_eq!(m.latency.len(), m.info.max_batch as usize, "{}: one latency per batch size", m.info.name);
        }
        let infos = models.iter().map(|m| m.info.clone()).collect();
        Self { models, infos, jitter, state: seed | 1, pacing: Pacing::Spin }
    }

    pub fn with_pacing(mut self, pacing: Pacing) -> Self {
        self.pacing = pacing;
        self
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
        if self.pacing == Pacing::Deferred {
            return Ok(run);
        }
        while start.elapsed() < run {
            std::hint::spin_loop();
        }
        Ok(start.elapsed())
    }
}
