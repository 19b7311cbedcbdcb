//! The emulated executor: a batch of b takes the model's l(b) — of the
//! variant it names, for a supernet — or, for a dynamic model, g(b, its
//! longest member's solo time), which each input carries (`BatchTime`);
//! times an optional jitter from a seeded generator; outputs are a deterministic
//! function of the inputs (a checksum per request), so results can be told
//! apart and checked end to end.
//!
//! Two pacings. `Spin` spends l(b) busy-waiting on the calling thread, so
//! timing is as a synchronous device call would give it (benchmarks of one
//! backend). `Deferred` returns at once with the time the batch takes, like
//! an asynchronous GPU launch: the caller (the engine's backend role) holds
//! the results until that much time has passed on its own clock. That is how
//! one core emulates many GPUs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo, Work};

pub struct EmulatedModel {
    /// Its `variants` and `max_batch` follow `time`; `work` is set for a
    /// dynamic model.
    pub info: ModelInfo,
    pub time: BatchTime,
}

/// How long an emulated batch takes.
#[derive(Clone, Debug, PartialEq)]
pub enum BatchTime {
    /// l(b) for b = 1..=max_batch, one table per variant (a supernet's
    /// subnets by index; the default variant is the last, the most
    /// accurate).
    Profile(Vec<Vec<Duration>>),
    /// Input-dependent (Orloj): each input's first float is its solo time
    /// in µs (`Work::Micros`), and a batch of b runs `g(b, x) = x (1 +
    /// kappa (b - 1))`, x its longest member's solo time — the simulator's
    /// rule (`baton_sched::types::DynamicExec`).
    Dynamic { kappa: f64 },
    /// Heads on a shared trunk (Nexus's prefix batching): a batch of b runs
    /// the trunk's l(b) once, then each head's l(n) over its n inputs —
    /// the simulator's prefix-batch time.
    Shared { trunk: Vec<Duration>, heads: Vec<Vec<Duration>> },
}

impl EmulatedModel {
    /// An ordinary model of profile `latency` (l(b), b = 1..).
    pub fn fixed(info: ModelInfo, latency: Vec<Duration>) -> Self {
        Self::variants(info, vec![latency])
    }

    /// A model with one profile per variant (a supernet's subnets).
    pub fn variants(info: ModelInfo, tables: Vec<Vec<Duration>>) -> Self {
        assert!(!tables.is_empty() && tables.len() <= u16::MAX as usize, "{}: 1 to 65535 variants", info.name);
        assert!(tables.iter().all(|t| !t.is_empty()), "{}: every variant has l(1)", info.name);
        let max_batch = tables.iter().map(|t| t.len() as u32).max().expect("non-empty");
        let info = ModelInfo { variants: tables.len() as u16, max_batch, work: None, ..info };
        Self { info, time: BatchTime::Profile(tables) }
    }

    /// A dynamic model: solo times up to `max_us` µs, batches padded to
    /// their longest member with `kappa`.
    pub fn dynamic(info: ModelInfo, kappa: f64, max_us: f32) -> Self {
        assert!(kappa.is_finite() && kappa >= 0.0, "{}: kappa {kappa}", info.name);
        assert!(max_us > 0.0, "{}: solo times up to {max_us} µs", info.name);
        let info = ModelInfo { variants: 1, work: Some(Work::Micros { max_us }), ..info };
        Self { info, time: BatchTime::Dynamic { kappa } }
    }

    /// Heads on a shared trunk: `trunk` and each head's l(b), b = 1..
    pub fn shared(info: ModelInfo, trunk: Vec<Duration>, heads: Vec<Vec<Duration>>) -> Self {
        assert!(!heads.is_empty() && heads.len() <= u16::MAX as usize, "{}: 1 to 65535 heads", info.name);
        assert!(!trunk.is_empty() && heads.iter().all(|h| !h.is_empty()), "{}: every part has l(1)", info.name);
        let info =
            ModelInfo { variants: 1, work: None, heads: heads.len() as u16, max_batch: trunk.len() as u32, ..info };
        Self { info, time: BatchTime::Shared { trunk, heads } }
    }

    /// What `batch` (already validated) takes before jitter.
    fn batch_time(&self, batch: &Batch<'_>) -> Result<Duration, ExecError> {
        let b = batch.inputs.len();
        match &self.time {
            BatchTime::Profile(tables) => {
                let t = &tables[batch.variant.map_or(tables.len() - 1, usize::from)];
                t.get(b - 1).copied().ok_or(ExecError::BatchTooLarge { batch: b, max: t.len() as u32 })
            }
            BatchTime::Dynamic { kappa } => {
                let work = self.info.work.as_ref().expect("dynamic models have work");
                let longest = batch.inputs.iter().filter_map(|x| work.solo_time(x)).max().unwrap_or_default();
                Ok(longest.mul_f64(1.0 + kappa * (b - 1) as f64))
            }
            BatchTime::Shared { trunk, heads } => {
                let of = batch.heads.expect("validated: a shared trunk's batch names its heads");
                let mut t = trunk[b - 1];
                for (h, table) in heads.iter().enumerate() {
                    let n = of.iter().filter(|&&x| usize::from(x) == h).count();
                    if n > 0 {
                        let max = table.len() as u32;
                        t += *table.get(n - 1).ok_or(ExecError::BatchTooLarge { batch: n, max })?;
                    }
                }
                Ok(t)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pacing {
    /// Busy-wait l(b) inside `run`.
    Spin,
    /// Return at once; the returned duration is the device time to wait out.
    Deferred,
}

/// The models an emulated GPU runs, with their latency tables: read only,
/// so one copy serves every emulated GPU of a cluster (`Emulated::sharing`)
/// — a thousand GPUs do not hold a thousand copies of the tables.
pub struct EmulatedModels {
    models: Vec<EmulatedModel>,
    infos: Vec<ModelInfo>,
}

impl EmulatedModels {
    pub fn new(models: Vec<EmulatedModel>) -> Arc<Self> {
        let infos = models.iter().map(|m| m.info.clone()).collect();
        Arc::new(Self { models, infos })
    }
}

pub struct Emulated {
    models: Arc<EmulatedModels>,
    jitter: f64,
    state: u64,
    pacing: Pacing,
    /// Output buffers a smaller batch left over, for a larger one (at
    /// most a batch's worth of the model run last).
    stash: Vec<Vec<f32>>,
}

impl Emulated {
    /// `jitter` in [0, 1): each batch runs `l(b)*(1+u)`, u uniform in ±jitter.
    pub fn new(models: Vec<EmulatedModel>, jitter: f64, seed: u64) -> Self {
        Self::sharing(EmulatedModels::new(models), jitter, seed)
    }

    /// An emulated GPU running `models`, which others may share; its own
    /// jitter from `seed`.
    pub fn sharing(models: Arc<EmulatedModels>, jitter: f64, seed: u64) -> Self {
        assert!((0.0..1.0).contains(&jitter));
        Self { models, jitter, state: seed | 1, pacing: Pacing::Spin, stash: Vec::new() }
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
        &self.models.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.models.infos, batch)?;
        let m = &self.models.models[batch.model as usize];
        let l = m.batch_time(batch)?;
        // Buffers left over are kept for no more than the model's largest
        // batch (validated: this one is no larger).
        let (out_len, most) = (m.info.output_len, m.info.max_batch as usize);
        let scale = if self.jitter > 0.0 { 1.0 + self.jitter * (2.0 * self.unit() - 1.0) } else { 1.0 };
        let run = l.mul_f64(scale);
        let start = Instant::now();
        // A checksum of the input, plus its head on a shared trunk (so that
        // each member's answer is its own model's), written into the
        // buffers given or left over (the caller's, reused).
        let n = batch.inputs.len();
        for o in outputs.drain(n.min(outputs.len())..) {
            if self.stash.len() < most {
                self.stash.push(o);
            }
        }
        for (i, x) in batch.inputs.iter().enumerate() {
            let head = batch.heads.map_or(0.0, |h| f32::from(h[i]));
            let v = x.iter().sum::<f32>() + head;
            if i == outputs.len() {
                outputs.push(self.stash.pop().unwrap_or_default());
            }
            outputs[i].clear();
            outputs[i].resize(out_len, v);
        }
        if self.pacing == Pacing::Deferred {
            return Ok(run);
        }
        while start.elapsed() < run {
            std::hint::spin_loop();
        }
        Ok(start.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deferred(m: EmulatedModel) -> Emulated {
        Emulated::new(vec![m], 0.0, 1).with_pacing(Pacing::Deferred)
    }

    /// A prefix-batched batch runs the trunk once over all its inputs and
    /// each head over its own: the simulator's prefix-batch time; each
    /// input's output is its own head's.
    #[test]
    fn heads_on_a_shared_trunk_run_the_trunk_once_and_each_head_on_its_inputs() {
        let us = |x: u64| Duration::from_micros(x);
        let info = ModelInfo::fixed("trunk", 2, 1, 0);
        let heads = vec![vec![us(1), us(2), us(3)], vec![us(10), us(20), us(30)]];
        let mut e = deferred(EmulatedModel::shared(info, vec![us(100), us(150), us(200)], heads));
        assert_eq!((e.models()[0].heads, e.models()[0].max_batch), (2, 3));
        crate::conformance::check(&mut e, "emulated-shared-trunk");
        let x = [1.0f32, 2.0];
        let mut out = Vec::new();
        let batch = Batch { model: 0, variant: None, heads: Some(&[1, 0, 1]), inputs: &[&x, &x, &x] };
        assert_eq!(e.run(&batch, &mut out), Ok(us(200) + us(1) + us(20)));
        assert_eq!(out, vec![vec![4.0], vec![3.0], vec![4.0]]);
    }

    #[test]
    fn a_supernet_runs_the_variant_it_is_given_and_its_most_accurate_by_default() {
        let us = |x: u64| Duration::from_micros(x);
        let info = ModelInfo::fixed("s", 2, 1, 0);
        let mut e = deferred(EmulatedModel::variants(info, vec![vec![us(10), us(15)], vec![us(40), us(70)]]));
        assert_eq!((e.models()[0].variants, e.models()[0].max_batch), (2, 2));
        crate::conformance::check(&mut e, "emulated-supernet");
        let x = [1.0f32, 2.0];
        let mut out = Vec::new();
        let run = |e: &mut Emulated, variant, n, out: &mut Vec<Vec<f32>>| {
            let inputs = vec![&x[..]; n];
            e.run(&Batch { model: 0, variant, heads: None, inputs: &inputs }, out)
        };
        assert_eq!(run(&mut e, Some(0), 2, &mut out), Ok(us(15)));
        assert_eq!(run(&mut e, Some(1), 1, &mut out), Ok(us(40)));
        assert_eq!(run(&mut e, None, 2, &mut out), Ok(us(70)));
        assert_eq!(run(&mut e, Some(2), 1, &mut out), Err(ExecError::UnknownVariant { model: 0, variant: 2 }));
    }

    #[test]
    fn a_dynamic_batch_runs_for_g_of_its_longest_member() {
        let mut e = deferred(EmulatedModel::dynamic(ModelInfo::fixed("d", 3, 1, 8), 0.25, 1e6));
        let (short, long) = ([100.0f32, 0.0, 0.0], [400.0f32, 5.0, 5.0]);
        let mut out = Vec::new();
        let took = e.run(&Batch { model: 0, variant: None, heads: None, inputs: &[&short, &long, &short] }, &mut out);
        // g(3, 400 µs) = 400 (1 + 0.25 * 2) = 600 µs.
        assert_eq!(took, Ok(Duration::from_micros(600)));
        assert_eq!(e.models()[0].work.as_ref().and_then(|w| w.solo_time(&long)), Some(Duration::from_micros(400)));
        for bad in [[0.0f32, 0.0, 0.0], [-1.0, 0.0, 0.0], [f32::NAN, 0.0, 0.0], [2e6, 0.0, 0.0]] {
            let r = e.run(&Batch { model: 0, variant: None, heads: None, inputs: &[&short, &bad] }, &mut out);
            assert!(matches!(r, Err(ExecError::Work { request: 1, .. })), "{bad:?}: {r:?}");
        }
    }
}
