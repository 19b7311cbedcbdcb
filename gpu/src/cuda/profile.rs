//! Measuring l(b), a model's batch latency, on the device, and fitting
//! Symphony's linear model `l(b) = alpha * b + beta` to it by least
//! squares over b = 1..B:
//!
//! `alpha = Σ (b - b̄)(l_b - l̄) / Σ (b - b̄)²`, `beta = l̄ - alpha · b̄`.
//!
//! A batch's time is what the executor reports: the device time between
//! the events around the input copy, the graph and the output copy. Each
//! size is run `reps` times after `warmup` runs, and the median is kept.

use std::time::Duration;

use super::check::inputs;
use crate::executor::{Batch, ExecError, Executor};

#[derive(Clone, Debug, PartialEq)]
pub struct ModelProfile {
    pub name: String,
    pub input_len: usize,
    pub output_len: usize,
    /// Median l(b) for b = 1..=max_batch.
    pub latency: Vec<Duration>,
    pub alpha: Duration,
    pub beta: Duration,
    /// Largest |l(b) - (alpha b + beta)| / l(b): how linear the model is.
    pub max_fit_error: f64,
}

/// Least squares `(alpha, beta)` of `l[b - 1]` against b, in the unit of `l`.
pub fn fit(l: &[f64]) -> (f64, f64) {
    assert!(!l.is_empty());
    let n = l.len() as f64;
    let mean_b = (n + 1.0) / 2.0;
    let mean_l = l.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, &y) in l.iter().enumerate() {
        let dx = (i + 1) as f64 - mean_b;
        sxy += dx * (y - mean_l);
        sxx += dx * dx;
    }
    let alpha = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (alpha, mean_l - alpha * mean_b)
}

/// The median device time of `reps` batches of `b` deterministic inputs
/// of model `m` (its default variant), after `warmup` untimed ones.
pub fn median_latency(
    exec: &mut dyn Executor,
    m: usize,
    b: usize,
    warmup: usize,
    reps: usize,
) -> Result<Duration, ExecError> {
    let xs = inputs(b, exec.models()[m].input_len, m as u64);
    let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
    median_of(exec, &Batch { model: m as u32, variant: None, heads: None, inputs: &refs }, warmup, reps)
}

/// The median device time of `reps` runs of `batch`, after `warmup`
/// untimed ones.
pub fn median_of(
    exec: &mut dyn Executor,
    batch: &Batch<'_>,
    warmup: usize,
    reps: usize,
) -> Result<Duration, ExecError> {
    assert!(reps > 0);
    let mut outputs = Vec::new();
    for _ in 0..warmup {
        exec.run(batch, &mut outputs)?;
    }
    let mut runs = (0..reps).map(|_| exec.run(batch, &mut outputs)).collect::<Result<Vec<_>, _>>()?;
    runs.sort_unstable();
    Ok(runs[runs.len() / 2])
}

/// Profiles every static model of `exec` (any executor; the CUDA one for `baton
/// profile`) up to `max_batch`.
pub fn profile(
    exec: &mut dyn Executor,
    max_batch: u32,
    warmup: usize,
    reps: usize,
) -> Result<Vec<ModelProfile>, ExecError> {
    profile_with(exec, max_batch, &|e, m, b| median_latency(e, m, b, warmup, reps))
}

/// Measures l(b) of one model: `(executor, model, b)`.
pub type Measure<'a> = dyn Fn(&mut dyn Executor, usize, usize) -> Result<Duration, ExecError> + 'a;

/// As `profile`, each l(b) measured by `latency(exec, model, b)` (for
/// models whose inputs must be well formed).
pub fn profile_with(
    exec: &mut dyn Executor,
    max_batch: u32,
    latency: &Measure<'_>,
) -> Result<Vec<ModelProfile>, ExecError> {
    let mut out = Vec::new();
    // A dynamic model's time depends on its inputs: no l(b) of its own.
    for (m, info) in exec.models().to_vec().into_iter().enumerate().filter(|(_, i)| i.work.is_none()) {
        let top = max_batch.min(info.max_batch) as usize;
        let latency = (1..=top).map(|b| latency(exec, m, b)).collect::<Result<Vec<_>, _>>()?;
        let ms: Vec<f64> = latency.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        let (alpha, beta) = fit(&ms);
        let max_fit_error =
            ms.iter().enumerate().map(|(i, &l)| (l - (alpha * (i + 1) as f64 + beta)).abs() / l).fold(0.0, f64::max);
        let dur = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1e3);
        out.push(ModelProfile {
            name: info.name,
            input_len: info.input_len,
            output_len: info.output_len,
            latency,
            alpha: dur(alpha),
            beta: dur(beta),
            max_fit_error,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::{Emulated, EmulatedModel};
    use crate::executor::ModelInfo;

    #[test]
    fn the_fit_recovers_a_line_and_the_profile_measures_the_executor() {
        let (a, b) = fit(&[3.0, 5.0, 7.0, 9.0]);
        assert!((a - 2.0).abs() < 1e-12 && (b - 1.0).abs() < 1e-12, "{a} {b}");
        // An emulated device of l(b) = 0.2 b + 1 ms is profiled as such.
        let info = ModelInfo::fixed("m", 4, 2, 4);
        let latency = (1..=4).map(|b| Duration::from_micros(200 * b + 1000)).collect();
        let mut e = Emulated::new(vec![EmulatedModel::fixed(info, latency)], 0.0, 1)
            .with_pacing(crate::emulated::Pacing::Deferred);
        let p = profile(&mut e, 8, 1, 3).unwrap();
        assert_eq!(p[0].latency.len(), 4);
        assert!((p[0].alpha.as_secs_f64() - 2e-4).abs() < 1e-9 && (p[0].beta.as_secs_f64() - 1e-3).abs() < 1e-9);
        assert!(p[0].max_fit_error < 1e-9);
    }
}
