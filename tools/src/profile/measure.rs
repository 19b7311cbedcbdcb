//! What `baton profile` measures of an executor's models, for any
//! executor (the CPU one, `cpu.rs`; the CUDA one, `cuda.rs`):
//!
//! - l(b), b = 1..B, of static models and of every subnet of a supernet:
//!   the median of `reps` runs after as many warm-ups;
//! - a dynamic model: the solo time of `samples` inputs per app ("short":
//!   lengths uniform over the lowest quarter of 1..=seq, "long": over the
//!   highest), each run alone; and kappa, fitted to batches of b = 2..=B
//!   members of mixed lengths (each member's app drawn by weight) against
//!   the median solo time of their longest length (each batch's time the
//!   median of 3 runs, after 3 warm-ups).

use std::time::Duration;

use super::ms;
use baton_gpu::cuda::profile::median_of;
use baton_gpu::supernet::{default_subnets, SubnetConfig, SupernetConfig};
use baton_gpu::{Batch, ExecError, Executor};
use baton_sched::rng::Rng;

use super::dynamic_scenario::{AppProfile, DynamicProfile, FixedTable, SubnetTable};
use super::fit::{fit_kappa, BatchPoint, KappaFit};

/// Where a profile was measured: the scenario's name, what ran the models,
/// and the scenario's dispatch delay (`DynamicProfile`'s fields).
pub struct Site {
    pub name: &'static str,
    pub device: String,
    pub ctrl_delay_us: u64,
}

/// A dynamic model to measure: its name, its lengths `1..=seq`, and its
/// inputs, `input(len, salt)`.
pub struct DynamicModel<'a> {
    pub name: &'static str,
    pub seq: usize,
    pub input: &'a dyn Fn(usize, u64) -> Vec<f32>,
}

/// An executor's profile: its static models resnet-block and encoder-block,
/// its supernet's subnets (`supernet`'s `default_subnets`), and `dynamic`;
/// no prefix group (the caller adds one it measured).
pub fn profile(
    exec: &mut dyn Executor,
    site: Site,
    supernet: &SupernetConfig,
    dynamic_model: DynamicModel<'_>,
    o: &Options,
) -> Result<DynamicProfile, ExecError> {
    let fixed = fixed(exec, &["resnet-block", "encoder-block"], o)?;
    let subnets = subnets(exec, &default_subnets(supernet), o)?;
    let vm = model(exec, dynamic_model.name)?;
    let (apps, kappa) = dynamic(exec, vm, dynamic_model.seq, dynamic_model.input, o)?;
    Ok(DynamicProfile {
        name: site.name.into(),
        device: site.device,
        ctrl_delay_us: site.ctrl_delay_us,
        command: o.command.clone(),
        reps: o.reps,
        max_batch: o.max_batch,
        fixed,
        subnets,
        dynamic: dynamic_model.name.into(),
        kappa,
        apps,
        prefix: None,
    })
}

pub struct Options {
    pub max_batch: u32,
    pub reps: usize,
    pub core: Option<usize>,
    /// Solo inputs per app.
    pub samples: usize,
    /// Mixed batches per batch size for kappa.
    pub batches: usize,
    pub seed: u64,
    pub command: String,
}

fn model(exec: &dyn Executor, name: &str) -> Result<u32, ExecError> {
    let m = exec.models().iter().position(|m| m.name == name);
    m.map(|m| m as u32).ok_or_else(|| ExecError::Device(format!("the executor serves no `{name}`")))
}

/// The median time of `reps` runs of `inputs` after `reps` warm-ups.
fn median(
    exec: &mut dyn Executor,
    model: u32,
    variant: Option<u16>,
    inputs: &[&[f32]],
    reps: usize,
) -> Result<Duration, ExecError> {
    median_of(exec, &Batch { model, variant, heads: None, inputs }, reps, reps)
}

/// l(b) for b = 1..=max_batch of one model (variant).
fn table(exec: &mut dyn Executor, model: u32, variant: Option<u16>, o: &Options) -> Result<Vec<Duration>, ExecError> {
    let len = exec.models()[model as usize].input_len;
    let x: Vec<f32> = (0..len).map(|k| (k as f32 * 0.37).sin()).collect();
    (1..=o.max_batch as usize).map(|b| median(exec, model, variant, &vec![&x[..]; b], o.reps)).collect()
}

/// A length uniform over the app's range.
fn draw(rng: &mut Rng, a: &AppProfile) -> usize {
    a.lengths.start() + rng.below(a.lengths.clone().count() as u64) as usize
}

/// l(b) of the static models named.
fn fixed(exec: &mut dyn Executor, names: &[&str], o: &Options) -> Result<Vec<FixedTable>, ExecError> {
    let mut fixed = Vec::new();
    for &name in names {
        let m = model(exec, name)?;
        fixed.push(FixedTable { name: name.into(), latency: table(exec, m, None, o)? });
    }
    Ok(fixed)
}

/// l(b) of each of the supernet's subnets (`configs`, in order of
/// compute), with stand-in accuracies spread over 73%..=80%.
fn subnets(exec: &mut dyn Executor, configs: &[SubnetConfig], o: &Options) -> Result<Vec<SubnetTable>, ExecError> {
    let sn = model(exec, "supernet")?;
    let mut subnets = Vec::new();
    for (v, s) in configs.iter().enumerate() {
        let accuracy = 73.0 + 7.0 * v as f64 / (configs.len().max(2) - 1) as f64;
        let latency = table(exec, sn, Some(v as u16), o)?;
        subnets.push(SubnetTable { name: format!("d{}-w{}", s.depth, s.width), accuracy, latency });
    }
    Ok(subnets)
}

/// The dynamic model `vm` (inputs of lengths `1..=seq` made by `input(len,
/// salt)`): two apps, "short" over the lowest quarter of the lengths and
/// "long" over the highest, `samples` solo times each; and kappa.
fn dynamic(
    exec: &mut dyn Executor,
    vm: u32,
    seq: usize,
    input: &dyn Fn(usize, u64) -> Vec<f32>,
    o: &Options,
) -> Result<(Vec<AppProfile>, KappaFit), ExecError> {
    let quarter = (seq / 4).max(1);
    let mut apps = vec![
        AppProfile { name: "short".into(), weight: 0.5, lengths: 1..=quarter, samples: Vec::new() },
        AppProfile { name: "long".into(), weight: 0.5, lengths: seq + 1 - quarter..=seq, samples: Vec::new() },
    ];
    let mut rng = Rng::new(o.seed);
    let mut out = Vec::new();
    let mut run = |exec: &mut dyn Executor, inputs: &[&[f32]]| {
        exec.run(&Batch { model: vm, variant: None, heads: None, inputs }, &mut out)
    };
    // Solo times, the apps interleaved so that drift hits both alike.
    run(exec, &[&input(seq, 0)])?;
    for i in 0..o.samples {
        for a in apps.iter_mut() {
            let len = draw(&mut rng, a);
            let t = run(exec, &[&input(len, i as u64)])?;
            a.samples.push((len, ms(t)));
        }
    }
    // kappa: each length's median solo time, then mixed batches.
    let solo: Vec<f64> = (1..=seq)
        .map(|len| median(exec, vm, None, &[&input(len, 1)], o.reps.min(20)).map(ms))
        .collect::<Result<_, _>>()?;
    let mut points = Vec::new();
    for b in 2..=o.max_batch as usize {
        for k in 0..o.batches {
            let lens: Vec<usize> = (0..b)
                .map(|_| {
                    let app = rng.below(apps.len() as u64) as usize;
                    draw(&mut rng, &apps[app])
                })
                .collect();
            let xs: Vec<Vec<f32>> = lens.iter().map(|&l| input(l, k as u64)).collect();
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            let t = median(exec, vm, None, &refs, 3)?;
            let longest = lens.iter().copied().max().unwrap_or(1);
            points.push(BatchPoint { b, solo_ms: solo[longest - 1], batch_ms: ms(t) });
        }
    }
    let kappa =
        fit_kappa(&points).ok_or_else(|| ExecError::Device("no mixed batch to fit kappa to (max batch 1?)".into()))?;
    Ok((apps, kappa))
}
