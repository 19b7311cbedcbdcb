//! `baton profile --executor cpu --nets`: l(b) of the whole networks on
//! the CPU (`baton_gpu::nets`: ResNet-50 on 224x224 images, BERT-base on
//! `--tokens` tokens, the ResNet-50-shaped supernet's whole network;
//! `--scaled` for their narrow test configurations),
//! on one thread (pinned with `--core`), each size the median of `reps`
//! runs after as many warm-ups, fitted to `l(b) = alpha b + beta` and
//! written as a scenario (`scenario_text`). It reports each network's
//! weights, multiply-accumulates per input and the arithmetic rate it
//! reached at the largest batch (2 MACs per multiply-accumulate).

use std::time::Duration;

use baton_gpu::cuda::profile::{median_of, profile_with, ModelProfile};
use baton_gpu::nets::NetsConfig;
use baton_gpu::{Batch, ExecError, Executor, Threaded};

use super::ms;

pub struct Options {
    pub max_batch: u32,
    pub reps: usize,
    pub core: Option<usize>,
    pub tokens: usize,
    pub scaled: bool,
}

/// Per model: its weights and multiply-accumulates per input.
pub type Sizes = Vec<(usize, u64)>;

/// The measured profiles and each model's sizes.
pub fn measure(o: &Options) -> Result<(Vec<ModelProfile>, Sizes), ExecError> {
    let base = if o.scaled { NetsConfig::SMALL } else { NetsConfig::FULL };
    let cfg = NetsConfig { max_batch: o.max_batch, ..base };
    cfg.check()?;
    let tokens = o.tokens.clamp(1, cfg.bert.seq);
    let sizes = cfg.sizes(tokens);
    let mut exec = Threaded::spawn("baton-nets", o.core, move || cfg.build())?;
    let reps = o.reps;
    let latency = |e: &mut dyn Executor, m: usize, b: usize| -> Result<Duration, ExecError> {
        let xs: Vec<Vec<f32>> = (0..b).map(|i| cfg.input(m as u32, tokens, i as u64)).collect();
        let inputs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        median_of(e, &Batch { model: m as u32, variant: None, heads: None, inputs: &inputs }, reps, reps)
    };
    let profiles = profile_with(&mut exec, o.max_batch, &latency)?;
    Ok((profiles, sizes))
}

/// One line per network: size, l(b), the fit, the rate reached.
pub fn report(profiles: &[ModelProfile], sizes: &[(usize, u64)]) {
    for (p, &(weights, macs)) in profiles.iter().zip(sizes) {
        let top = *p.latency.last().expect("at least one size");
        let b = p.latency.len() as f64;
        let gflops = 2.0 * macs as f64 * b / top.as_secs_f64() / 1e9;
        let row: Vec<String> = p.latency.iter().map(|l| format!("{:.1}", ms(*l))).collect();
        eprintln!(
            "{}: {weights} weights, {macs} multiply-accumulates per input; l(b) ms = {}; alpha {:.2} ms, beta {:.2} ms (fit within {:.1}%); {gflops:.1} GFLOP/s at b = {b}",
            p.name,
            row.join(" "),
            ms(p.alpha),
            ms(p.beta),
            p.max_fit_error * 100.0,
        );
    }
}
