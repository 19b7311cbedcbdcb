//! The CUDA executor on a GPU machine (perf/README.md, "The CUDA executor
//! on an H100", items 1 and 2): each model's outputs against the CPU
//! reference, and per batch the host
//! time to enqueue it — one graph launch vs the kernels and GEMMs one by
//! one — with the device time it took. Without a GPU it reports the typed
//! "no CUDA device" and measures nothing.

use std::time::Duration;

use baton_gpu::cuda::check::{compare, compare_varlen, inputs, token_inputs, Agreement, ATOL, RTOL};
use baton_gpu::cuda::{CudaConfig, CudaExecutor, LaunchMode};
use baton_gpu::supernet::default_subnets;
use baton_gpu::{ExecError, Executor, Work};

pub struct Correctness {
    pub model: String,
    pub variant: u16,
    pub batch: usize,
    pub agreement: Agreement,
}

pub struct Launch {
    pub model: String,
    pub batch: usize,
    /// Median and 99th percentile host time to enqueue, graph then eager.
    pub host_graph: (Duration, Duration),
    pub host_eager: (Duration, Duration),
    /// Median device time of the compute, graph then eager.
    pub gpu_graph: Duration,
    pub gpu_eager: Duration,
}

/// SubNetAct on the GPU: one subnet of the supernet, served in place.
pub struct Subnet {
    pub variant: u16,
    pub depth: usize,
    pub width: usize,
    /// Median device time at each of the timed batch sizes.
    pub gpu: Vec<(usize, Duration)>,
}

/// The dynamic model: its solo time per length bucket (the executor's
/// table) and batches of mixed lengths.
pub struct Dynamic {
    pub name: String,
    /// (longest length of the bucket, solo time).
    pub solo: Vec<(usize, Duration)>,
    /// (batch size, longest member, median time of the batch).
    pub batches: Vec<(usize, usize, Duration)>,
}

pub struct Report {
    pub device: String,
    pub dynamic: Option<Dynamic>,
    pub correctness: Vec<Correctness>,
    pub launches: Vec<Launch>,
    pub subnets: Vec<Subnet>,
}

fn percentile(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// `cfg`'s models checked at `check_batches` and timed at `time_batches`
/// (`reps` runs each, after as many warm-ups).
pub fn run(
    cfg: &CudaConfig,
    check_batches: &[usize],
    time_batches: &[usize],
    reps: usize,
) -> Result<Report, ExecError> {
    let mut graph = CudaExecutor::new(cfg)?;
    let mut eager = CudaExecutor::new(&CudaConfig { launch: LaunchMode::Eager, ..*cfg })?;
    let d = graph.device();
    let device = format!("{} (device {}, sm_{}{})", d.name, d.ordinal, d.compute_capability.0, d.compute_capability.1);
    let mut cpu = cfg.reference();
    let models = graph.models().to_vec();
    let mut correctness = Vec::new();
    let statics = || models.iter().enumerate().filter(|(_, i)| i.work.is_none());
    for (m, info) in statics() {
        for &b in check_batches {
            let xs = inputs(b, info.input_len, 7 + m as u64);
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            for variant in 0..info.variants {
                let agreement = compare(&mut graph, &mut cpu, (m as u32, Some(variant)), &refs)?;
                correctness.push(Correctness { model: info.name.clone(), variant, batch: b, agreement });
            }
        }
    }
    let mut launches = Vec::new();
    for (m, info) in statics() {
        for &b in time_batches {
            let sample = |e: &mut CudaExecutor| -> Result<((Duration, Duration), Duration), ExecError> {
                for _ in 0..reps {
                    e.time_compute(m, None, b)?;
                }
                let runs = (0..reps).map(|_| e.time_compute(m, None, b)).collect::<Result<Vec<_>, _>>()?;
                let host: Vec<Duration> = runs.iter().map(|r| r.0).collect();
                let gpu: Vec<Duration> = runs.iter().map(|r| r.1).collect();
                Ok(((percentile(host.clone(), 0.5), percentile(host, 0.99)), percentile(gpu, 0.5)))
            };
            let (host_graph, gpu_graph) = sample(&mut graph)?;
            let (host_eager, gpu_eager) = sample(&mut eager)?;
            launches.push(Launch { model: info.name.clone(), batch: b, host_graph, host_eager, gpu_graph, gpu_eager });
        }
    }
    // Every subnet of the supernet from the one copy of its weights.
    let supernet = models.iter().position(|i| i.name == "supernet").expect("the executor serves the supernet");
    let mut subnets = Vec::new();
    for (variant, s) in default_subnets(&cfg.shapes.supernet).into_iter().enumerate() {
        let variant = variant as u16;
        let mut gpu = Vec::new();
        for &b in time_batches {
            let runs =
                (0..reps).map(|_| graph.time_compute(supernet, Some(variant), b)).collect::<Result<Vec<_>, _>>()?;
            gpu.push((b, percentile(runs.into_iter().map(|r| r.1).collect(), 0.5)));
        }
        subnets.push(Subnet { variant, depth: s.depth, width: s.width, gpu });
    }
    let dynamic = match (models.iter().position(|i| i.work.is_some()), cfg.varlen_reference()) {
        (Some(m), Some(cpu)) => Some(dynamic(&mut graph, m, &cpu, check_batches, reps, &mut correctness)?),
        _ => None,
    };
    Ok(Report { device, dynamic, correctness, launches, subnets })
}

/// The dynamic model `m`: checked against its CPU reference at
/// `check_batches` (lengths spread over its range), its solo table, and
/// the median of `reps` runs of batches of each size in `check_batches`
/// whose longest member is the longest, a quarter and a sixteenth of the
/// range.
fn dynamic(
    exec: &mut CudaExecutor,
    m: usize,
    cpu: &baton_gpu::reference::tokens::TokenEncoder,
    check_batches: &[usize],
    reps: usize,
    correctness: &mut Vec<Correctness>,
) -> Result<Dynamic, ExecError> {
    let info = exec.models()[m].clone();
    let Some(Work::Levels { solo }) = &info.work else { unreachable!("a dynamic model has a solo table") };
    let mut table: Vec<(usize, Duration)> = Vec::new();
    for (i, t) in solo.iter().enumerate() {
        match table.last_mut() {
            Some(last) if last.1 == *t => last.0 = i + 1,
            _ => table.push((i + 1, *t)),
        }
    }
    let seq = solo.len();
    let mut batches = Vec::new();
    for &b in check_batches {
        let xs = token_inputs(cpu.shape, b, 1);
        let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let agreement = compare_varlen(exec, cpu, m as u32, &refs)?;
        correctness.push(Correctness { model: info.name.clone(), variant: 0, batch: b, agreement });
        for longest in [seq, seq / 4, seq / 16].into_iter().filter(|&l| l > 0) {
            let xs: Vec<Vec<f32>> = (0..b)
                .map(|i| {
                    baton_gpu::reference::tokens::TokenEncoder::input(
                        cpu.shape,
                        longest.saturating_sub(i).max(1),
                        i as u64,
                    )
                })
                .collect();
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            let batch = baton_gpu::Batch { model: m as u32, variant: None, heads: None, inputs: &refs };
            let t = baton_gpu::cuda::profile::median_of(exec, &batch, reps.min(20), reps.min(20))?;
            batches.push((b, longest, t));
        }
    }
    Ok(Dynamic { name: info.name, solo: table, batches })
}

pub fn print(r: &Report) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("device: {}", r.device);
    println!("\ncorrectness against the CPU reference (tolerance |gpu - cpu| <= {ATOL} + {RTOL} |cpu|):");
    println!(
        "{:>14} {:>7} {:>6} {:>9} {:>12} {:>12} {:>6}",
        "model", "variant", "batch", "elements", "max |err|", "worst/tol", "ok"
    );
    for c in &r.correctness {
        let a = c.agreement;
        println!(
            "{:>14} {:>7} {:>6} {:>9} {:>12.3e} {:>12.4} {:>6}",
            c.model,
            c.variant,
            c.batch,
            a.elements,
            a.max_abs,
            a.worst_ratio,
            a.within_tolerance()
        );
    }
    println!("\nper batch: host time to enqueue the compute (median / p99, µs) and its device time (median, µs):");
    println!(
        "{:>14} {:>6} {:>18} {:>18} {:>8} {:>11} {:>11}",
        "model", "batch", "graph host", "eager host", "ratio", "graph gpu", "eager gpu"
    );
    for l in &r.launches {
        println!(
            "{:>14} {:>6} {:>8.1} / {:>7.1} {:>8.1} / {:>7.1} {:>7.1}x {:>11.1} {:>11.1}",
            l.model,
            l.batch,
            us(l.host_graph.0),
            us(l.host_graph.1),
            us(l.host_eager.0),
            us(l.host_eager.1),
            us(l.host_eager.0) / us(l.host_graph.0),
            us(l.gpu_graph),
            us(l.gpu_eager)
        );
    }
    println!(
        "\nSubNetAct on the GPU: each subnet from the one copy of the supernet's weights (device time, median, µs):"
    );
    for s in &r.subnets {
        let times: Vec<String> = s.gpu.iter().map(|(b, d)| format!("b={b}: {:.1}", us(*d))).collect();
        println!("  subnet {} (depth {}, width {}): {}", s.variant, s.depth, s.width, times.join("  "));
    }
    if let Some(d) = &r.dynamic {
        println!(
            "\n{}: solo time of one input by length (device time of copy-in, graph, copy-out, median, µs):",
            d.name
        );
        let mut from = 1;
        let rows: Vec<String> = d
            .solo
            .iter()
            .map(|&(to, t)| {
                let row = format!("{from}..={to}: {:.1}", us(t));
                from = to + 1;
                row
            })
            .collect();
        println!("  {}", rows.join("  "));
        println!("{}: batches padded to their longest member (median, µs):", d.name);
        for (b, longest, t) in &d.batches {
            println!("  batch {b:>2}, longest {longest:>4} tokens: {:>9.1}", us(*t));
        }
    }
}
