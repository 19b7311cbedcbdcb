//! `baton profile [--out FILE]`: measures l(b) of the CUDA executor's models
//! on the GPU for b = 1..B, fits Symphony's `l(b) = alpha b + beta`, and
//! writes a scenario file holding the measured tables (`latency_ms`, what
//! the simulator and `baton serve --executor cuda` take) with the fit
//! beside them. With `--partitions DIR` it measures L(b, p) on GPU
//! partitions (green contexts) instead, alone and beside each co-runner,
//! into `DIR/inference.csv` and `DIR/interference.csv` in the format of
//! the shipped partition profiles. Without a GPU: the typed "no CUDA
//! device", exit 2.
//!
//! With `--executor cpu` it measures the CPU executor instead (`cpu.rs`):
//! l(b) of its static models and subnets, and the variable-length
//! encoder's solo times per app and kappa, into an Orloj scenario
//! (`dynamic_scenario.rs`), with `--csv` every solo time and `--svg` their
//! histogram (`svg.rs`). With `--nets` it measures the whole networks on
//! the CPU instead (`nets.rs`: ResNet-50, BERT-base) into a scenario of
//! their l(b). With `--dynamic` the CUDA executor is measured the same
//! way (`cuda.rs`: its dynamic model is the token encoder, `encoder-tokens`).
//! `--supernet-out` writes one more scenario: the supernet alone under
//! SlackFit with bursty arrivals.

mod cpu;
mod cuda;
mod dynamic_scenario;
mod fit;
mod measure;
mod nets;
mod svg;

use std::path::PathBuf;
use std::time::Duration;

use baton_gpu::cuda::mem_util;
use baton_gpu::cuda::partition_profile::measure;
use baton_gpu::cuda::profile::{profile, ModelProfile};
use baton_gpu::cuda::{CudaConfig, CudaExecutor};
use baton_sched::glet::PARTITIONS;
use baton_sched::Scenario;
use dynamic_scenario::DynamicProfile;

/// Which executor `baton profile` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorKind {
    /// The CUDA executor on a GPU.
    Cuda,
    /// The CPU executor (`CpuConfig::serving`) on one thread.
    Cpu,
}

#[derive(clap::Args)]
pub struct Args {
    /// The executor to measure.
    #[arg(long, value_enum, default_value_t = ExecutorKind::Cuda)]
    executor: ExecutorKind,
    /// Where to write the scenario (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Largest batch size measured (and captured as a graph) [default: 32 on
    /// CUDA, 8 on the CPU].
    #[arg(long)]
    max_batch: Option<u32>,
    /// Timed runs per batch size (the median is kept), after as many
    /// warm-ups [default: 50; 3 with --nets].
    #[arg(long)]
    reps: Option<usize>,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Each model's SLO in the written scenario, as a multiple of l(max_batch).
    #[arg(long, default_value_t = 2.0)]
    slo_factor: f64,
    /// Measure GPU partitions (green contexts) into this folder instead.
    #[arg(long)]
    partitions: Option<PathBuf>,
    /// With --partitions: run each (share, model, batch) once after a
    /// marker kernel, for Nsight Compute to read its counters (`ncu --csv
    /// --print-units base --metrics M baton profile --partitions DIR
    /// --util-run > ncu.csv`, M as `baton_gpu::cuda::mem_util::METRICS`).
    #[arg(long)]
    util_run: bool,
    /// With --partitions: write DIR/mem_util.csv from that ncu output
    /// (shares not measured estimated from the whole device's by
    /// DIR/inference.csv's solo times: `baton_gpu::cuda::mem_util::scaled`).
    #[arg(long)]
    util_from: Option<PathBuf>,
    /// With --util-run / --util-from: the shares (percent of the SMs) run
    /// under Nsight Compute, 100 the whole device.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    util_shares: Vec<u32>,
    /// CUDA: measure the dynamic model and the supernet's subnets too, into
    /// an Orloj scenario as `--executor cpu` writes it.
    #[arg(long)]
    dynamic: bool,
    /// CPU: the core the executor's thread is pinned to.
    #[arg(long)]
    core: Option<usize>,
    /// CPU or --dynamic: solo inputs measured per app of the dynamic model.
    #[arg(long, default_value_t = 400)]
    samples: usize,
    /// CPU or --dynamic: mixed batches per batch size behind kappa.
    #[arg(long, default_value_t = 20)]
    batches: usize,
    /// CPU or --dynamic: the dynamic model's SLO as a multiple of its P99 solo time.
    #[arg(long, default_value_t = 1.5)]
    slo_p99_multiple: f64,
    /// CPU or --dynamic: write every measured solo time here (app,length,solo_ms).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// CPU or --dynamic: write a histogram of the solo times by app here (SVG).
    #[arg(long)]
    svg: Option<PathBuf>,
    /// CPU or --dynamic: write the supernet alone under SlackFit here.
    #[arg(long)]
    supernet_out: Option<PathBuf>,
    /// CPU: write a second scenario here, of the shared trunk's variants
    /// served as a prefix group under Nexus (`cpu-prefix`).
    #[arg(long)]
    prefix_out: Option<PathBuf>,
    /// CPU: measure the whole networks (ResNet-50, BERT-base) instead.
    #[arg(long)]
    nets: bool,
    /// CPU, --nets: BERT's input length in tokens.
    #[arg(long, default_value_t = 128)]
    tokens: usize,
    /// CPU, --nets: the networks' narrow test configurations (seconds, not minutes).
    #[arg(long)]
    scaled: bool,
}

pub fn run(a: Args) -> Result<(), String> {
    let max_batch = a.max_batch.unwrap_or(if a.executor == ExecutorKind::Cpu { 8 } else { 32 });
    let reps = a.reps.unwrap_or(if a.nets { 3 } else { 50 });
    if max_batch == 0 || reps == 0 || a.slo_factor.is_nan() || a.slo_factor < 1.0 || a.tokens == 0 {
        return Err("--max-batch, --reps and --tokens must be positive, --slo-factor at least 1".into());
    }
    if (a.util_run || a.util_from.is_some()) && a.partitions.is_none() {
        return Err("--util-run and --util-from go with --partitions DIR".into());
    }
    if a.dynamic && (a.executor != ExecutorKind::Cuda || a.partitions.is_some()) {
        return Err(
            "--dynamic measures the CUDA executor (the CPU one always measures its dynamic model), not its partitions"
                .into(),
        );
    }
    if (a.nets && a.executor != ExecutorKind::Cpu) || (a.scaled && !a.nets) {
        return Err(
            "--nets needs --executor cpu (the GPU's whole networks are not built yet); --scaled needs --nets".into()
        );
    }
    if a.nets {
        return nets_profile(&a, max_batch, reps);
    }
    if a.executor == ExecutorKind::Cpu {
        return cpu_profile(&a, max_batch, reps);
    }
    let cfg = CudaConfig { ordinal: a.device, max_batch, ..CudaConfig::serving() };
    if let Some(dir) = &a.partitions {
        return partitions(&a, &cfg, dir, reps);
    }
    if a.dynamic {
        return cuda_dynamic_profile(&a, &cfg, reps);
    }
    let mut exec = CudaExecutor::new(&cfg).map_err(|e| format!("profile: {e}"))?;
    let device = exec.device().name.clone();
    let profiles = profile(&mut exec, max_batch, reps, reps).map_err(|e| format!("profile: {e}"))?;
    for p in &profiles {
        eprintln!(
            "{}: alpha {:.4} ms, beta {:.4} ms (fit within {:.1}%), l(1) {:.3} ms, l({}) {:.3} ms",
            p.name,
            ms(p.alpha),
            ms(p.beta),
            p.max_fit_error * 100.0,
            ms(p.latency[0]),
            p.latency.len(),
            ms(*p.latency.last().expect("at least one size"))
        );
    }
    let timed = "device time of the input copy, the CUDA graph and the output copy";
    write_scenario(&a, &scenario_text(("cuda-profile", &device, timed), &profiles, a.slo_factor, reps))
}

/// Checks `text` parses as a scenario and writes it to `--out` (or
/// standard output).
fn write_scenario(a: &Args, text: &str) -> Result<(), String> {
    Scenario::parse(text).map_err(|e| format!("profile: the written scenario does not parse: {e}"))?;
    match &a.out {
        Some(path) => std::fs::write(path, text).map_err(|e| format!("--out {}: {e}", path.display())),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// `--executor cpu --nets`: ResNet-50 and BERT-base on the CPU.
fn nets_profile(a: &Args, max_batch: u32, reps: usize) -> Result<(), String> {
    let o = nets::Options { max_batch, reps, core: a.core, tokens: a.tokens, scaled: a.scaled };
    let (profiles, sizes) = nets::measure(&o).map_err(|e| format!("profile: {e}"))?;
    nets::report(&profiles, &sizes);
    let device = format!("the CPU (one thread{})", a.core.map_or(String::new(), |c| format!(", core {c}")));
    let timed = "wall time of the batch on the executor's thread";
    write_scenario(a, &scenario_text(("cpu-nets-profile", &device, timed), &profiles, a.slo_factor, reps))
}

/// `--executor cpu`: measures, reports, writes the scenario (checked by
/// the parser), the CSV and the SVG.
fn cpu_profile(a: &Args, max_batch: u32, reps: usize) -> Result<(), String> {
    if a.partitions.is_some() {
        return Err("no --partitions on the CPU".into());
    }
    let o = dynamic_options(a, max_batch, reps)?;
    let p = cpu::measure(&o).map_err(|e| format!("profile: {e}"))?;
    write_dynamic(a, &p)
}

/// `--executor cuda --dynamic`: the CUDA executor's static models, its
/// supernet's subnets and its dynamic model, written as `--executor cpu`
/// writes them.
fn cuda_dynamic_profile(a: &Args, cfg: &CudaConfig, reps: usize) -> Result<(), String> {
    let o = dynamic_options(a, cfg.max_batch, reps)?;
    let p = cuda::measure(cfg, &o).map_err(|e| format!("profile: {e}"))?;
    write_dynamic(a, &p)
}

fn dynamic_options(a: &Args, max_batch: u32, reps: usize) -> Result<measure::Options, String> {
    if a.samples == 0 || a.slo_p99_multiple.is_nan() || a.slo_p99_multiple < 1.0 {
        return Err("--samples must be positive and --slo-p99-multiple at least 1".into());
    }
    let command: Vec<String> = std::env::args().collect();
    Ok(measure::Options {
        max_batch,
        reps,
        core: a.core,
        samples: a.samples,
        batches: a.batches,
        seed: 1,
        command: command.join(" "),
    })
}

/// Reports a profile with a dynamic model and writes its scenarios (each
/// checked by the parser), the CSV and the SVG.
fn write_dynamic(a: &Args, p: &DynamicProfile) -> Result<(), String> {
    let row = |l: &[Duration]| l.iter().map(|l| format!("{:.3}", ms(*l))).collect::<Vec<_>>().join(" ");
    for f in &p.fixed {
        eprintln!("{}: l(b) ms = {}", f.name, row(&f.latency));
    }
    for s in &p.subnets {
        eprintln!("supernet {} ({:.1}%): l(b) ms = {}", s.name, s.accuracy, row(&s.latency));
    }
    for app in &p.apps {
        let (mean, sd) = fit::mean_sd(&app.solo_ms()).unwrap_or_default();
        let p99 = fit::quantile(&app.solo_ms(), 0.99).unwrap_or_default();
        eprintln!(
            "{} app {} (lengths {}..={}): solo mean {mean:.4} ms, sd {sd:.4} ms, p99 {p99:.4} ms over {} inputs",
            p.dynamic,
            app.name,
            app.lengths.start(),
            app.lengths.end(),
            app.samples.len()
        );
    }
    eprintln!("{}: kappa {:.4} (rms {:.3}, {} batches)", p.dynamic, p.kappa.kappa, p.kappa.rms, p.kappa.points);
    if let Some(pp) = &p.prefix {
        eprintln!("{} trunk: l(b) ms = {}", pp.trunk_name, row(&pp.trunk));
        eprintln!("{} head: l(b) ms = {}", pp.trunk_name, row(&pp.head));
    }
    write_scenario(a, &dynamic_scenario::scenario_text(p, a.slo_factor, a.slo_p99_multiple)?)?;
    let write = |flag: &str, path: &PathBuf, body: &str| {
        std::fs::write(path, body).map_err(|e| format!("{flag} {}: {e}", path.display()))
    };
    let checked = |what: &str, text: String| {
        Scenario::parse(&text).map_err(|e| format!("profile: the {what} scenario does not parse: {e}"))?;
        Ok::<_, String>(text)
    };
    if let Some(path) = &a.prefix_out {
        let pp = p.prefix.as_ref().ok_or("--prefix-out: this executor has no shared trunk")?;
        write("--prefix-out", path, &checked("prefix", dynamic_scenario::prefix_scenario_text(p, pp, a.slo_factor))?)?;
    }
    if let Some(path) = &a.supernet_out {
        write(
            "--supernet-out",
            path,
            &checked("supernet", dynamic_scenario::supernet_scenario_text(p, a.slo_factor)?)?,
        )?;
    }
    if let Some(path) = &a.csv {
        write("--csv", path, &dynamic_scenario::csv(p))?;
    }
    if let Some(path) = &a.svg {
        let title = format!("{}: solo latency per input, by app", p.dynamic);
        write("--svg", path, &svg::histogram(&title, &p.apps))?;
    }
    Ok(())
}

/// L(b, p) alone and beside a co-runner, in the partition profiles' format;
/// or, with `--util-run` / `--util-from`, the runs Nsight Compute reads
/// DRAM and L2 utilisation from, and `mem_util.csv` from its output.
fn partitions(a: &Args, cfg: &CudaConfig, dir: &std::path::Path, reps: usize) -> Result<(), String> {
    let batches: Vec<usize> = [1, 2, 4, 8, 16, 32, 64].into_iter().filter(|&b| b <= cfg.max_batch as usize).collect();
    if a.util_shares.iter().any(|&p| p == 0 || p > 100) {
        return Err("--util-shares: percents in 1..=100".into());
    }
    let configs = mem_util::configs(cfg, &a.util_shares, &batches);
    if a.util_run {
        mem_util::run_marked(cfg, &configs).map_err(|e| format!("profile: {e}"))?;
        eprintln!("{} configurations run, each after a marker kernel", configs.len());
        return Ok(());
    }
    if let Some(path) = &a.util_from {
        let csv = std::fs::read_to_string(path).map_err(|e| format!("--util-from {}: {e}", path.display()))?;
        let utils = mem_util::from_ncu(&csv, &configs).map_err(|e| format!("--util-from {}: {e}", path.display()))?;
        let inference = dir.join("inference.csv");
        let solo = std::fs::read_to_string(&inference)
            .map_err(|e| e.to_string())
            .and_then(|text| mem_util::solo_latencies(&text))
            .map_err(|e| format!("--partitions {}: {e}", inference.display()))?;
        let utils = mem_util::scaled(&utils, &PARTITIONS, |m, b, p| solo.get(&(m.to_string(), b, p)).copied());
        let out = dir.join("mem_util.csv");
        std::fs::write(&out, mem_util::csv(&utils)).map_err(|e| format!("--partitions {}: {e}", out.display()))?;
        eprintln!("{} rows in {} ({} measured)", utils.len(), out.display(), configs.len());
        return Ok(());
    }
    let co_batches: Vec<usize> = [4, 16].into_iter().filter(|&b| b <= cfg.max_batch as usize).collect();
    let p = measure(cfg, &PARTITIONS, &batches, &co_batches, reps).map_err(|e| format!("profile: {e}"))?;
    std::fs::create_dir_all(dir).map_err(|e| format!("--partitions {}: {e}", dir.display()))?;
    for (file, text) in [("inference.csv", p.inference_csv()), ("interference.csv", p.interference_csv())] {
        std::fs::write(dir.join(file), text).map_err(|e| format!("--partitions {}: {e}", dir.display()))?;
    }
    let mut shares: Vec<(u32, u32)> = p.solo.iter().map(|s| (s.partition, s.sms)).collect();
    shares.dedup();
    let granted: Vec<String> = shares.iter().map(|(p, sms)| format!("{p}% -> {sms} SMs")).collect();
    eprintln!(
        "{} SMs; {}; {} solo and {} co-run measurements in {}",
        p.device_sms,
        granted.join(", "),
        p.solo.len(),
        p.co_runs.len(),
        dir.display()
    );
    Ok(())
}

/// The running maximum of `l`: the least non-decreasing table above it.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The written scenario's dispatch delay (decision to batch start).
const CTRL_DELAY_US: u64 = 200;

/// A one-GPU scenario of the profiled models, equal shares, Symphony, at
/// half the rate the GPU sustains at its largest batches.
pub fn scenario_text(
    (name, device, timed): (&str, &str, &str),
    profiles: &[ModelProfile],
    slo_factor: f64,
    reps: usize,
) -> String {
    let mut t = format!(
        "# Measured by `baton profile` on {device}: l(b) for b = 1..B, the median of\n\
         # {reps} runs per size ({timed}).\n\
         # alpha/beta: the least-squares fit l(b) = alpha b + beta.\n\
         name = \"{name}\"\nseed = 1\nduration_s = 20\nwarmup_s = 2\n"
    );
    let share = 1.0 / profiles.len().max(1) as f64;
    // At aggregate rate R each model takes R·share / (B / l(B)) of the GPU.
    let gpu_per_rps: f64 = profiles
        .iter()
        .map(|p| share * p.latency.last().map_or(0.0, |l| l.as_secs_f64()) / p.latency.len() as f64)
        .sum();
    let capacity = 1.0 / gpu_per_rps;
    t += &format!(
        "rate_rps = {:.0}\n\n[cluster]\ngpus = 1\nctrl_delay_us = {CTRL_DELAY_US}\ndata_delay_us = 0\n",
        capacity / 2.0
    );
    for p in profiles {
        // Schedulers assume l(b) does not decrease with b; a measured table
        // may (noise, or the GEMM library's choice per size), so the
        // scenario gets its running maximum — never below what was measured
        // at b — and the raw table as a comment.
        let raw: Vec<String> = p.latency.iter().map(|l| format!("{:.4}", ms(*l))).collect();
        let table: Vec<String> = dynamic_scenario::monotone(std::slice::from_ref(&p.latency))[0]
            .iter()
            .map(|l| format!("{:.4}", ms(*l)))
            .collect();
        if raw != table {
            t += &format!("\n# `{}` measured (decreasing somewhere): [{}]", p.name, raw.join(", "));
        }
        // SLO: slo_factor x l(B), and never below slo_factor x the fastest
        // answer (l(1) plus the dispatch delay).
        let fastest = ms(p.latency[0]) + CTRL_DELAY_US as f64 / 1e3;
        let slo = ms(*p.latency.last().expect("at least one size")).max(fastest) * slo_factor;
        t += &format!(
            "\n[[models]]\nname = \"{}\"\n# alpha_ms = {:.4}, beta_ms = {:.4} (fit within {:.1}%); input {} floats, output {}\n\
             latency_ms = [{}]\nslo_ms = {:.3}\nweight = {share:.4}\n",
            p.name,
            ms(p.alpha),
            ms(p.beta),
            p.max_fit_error * 100.0,
            p.input_len,
            p.output_len,
            table.join(", "),
            slo
        );
    }
    t + "\n[policy]\nname = \"symphony\"\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_written_profile_is_a_scenario_with_the_measured_tables() {
        let p = |name: &str, a_us: u64, b_us: u64| ModelProfile {
            name: name.into(),
            input_len: 10,
            output_len: 2,
            latency: (1..=4).map(|b| Duration::from_micros(a_us * b + b_us)).collect(),
            alpha: Duration::from_micros(a_us),
            beta: Duration::from_micros(b_us),
            max_fit_error: 0.0,
        };
        let text = scenario_text(
            ("cuda-profile", "a GPU", "device time"),
            &[p("cnn", 500, 1000), p("enc", 250, 400)],
            2.0,
            10,
        );
        let s = Scenario::parse(&text).unwrap();
        assert_eq!(s.models.len(), 2);
        let cnn = &s.models[0].spec;
        assert_eq!(cnn.profile.max_batch(), 4);
        assert_eq!(cnn.profile.latency(4), 3_000_000);
        assert_eq!(cnn.slo, 6_000_000);
        // A model faster than the dispatch delay gets an SLO it can meet.
        let quick = scenario_text(("cuda-profile", "a GPU", "device time"), &[p("quick", 10, 40)], 2.0, 10);
        assert_eq!(Scenario::parse(&quick).unwrap().models[0].spec.slo, 500_000);
        // A table that dips is written as its running maximum.
        let mut dip = p("dip", 100, 100);
        dip.latency[2] = Duration::from_micros(150);
        let text = scenario_text(("cuda-profile", "a GPU", "device time"), &[dip], 2.0, 10);
        let s2 = Scenario::parse(&text).unwrap();
        let l: Vec<u64> = (1..=4).map(|b| s2.models[0].spec.profile.latency(b)).collect();
        assert_eq!(l, vec![200_000, 300_000, 300_000, 500_000]);
        assert!(text.contains("[0.2000, 0.3000, 0.1500, 0.5000]"), "{text}");
        // Half of what one GPU sustains with equal shares at batch 4:
        // 1 / (0.5 x 3 ms / 4 + 0.5 x 1.4 ms / 4) = 1818 r/s.
        assert_eq!(s.rate_rps.map(f64::round), Some(909.0));
    }
}
