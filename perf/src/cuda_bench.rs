//! The CUDA executor on a GPU machine (perf/README.md, "The CUDA executor
//! on an H100", items 1 and 2): each model's outputs against the CPU
//! reference, and per batch the host
//! time to enqueue it — one graph launch vs the kernels and GEMMs one by
//! one — with the device time it took. Without a GPU it reports the typed
//! "no CUDA device" and measures nothing.

use std::time::Duration;

use baton_gpu::cuda::check::{compare, inputs, Agreement, ATOL, RTOL};
use baton_gpu::cuda::{CudaConfig, CudaExecutor, LaunchMode};
use baton_gpu::supernet::default_subnets;
use baton_gpu::{ExecError, Executor};

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

pub struct Report {
    pub device: String,
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
    for (m, info) in models.iter().enumerate() {
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
    for (m, info) in models.iter().enumerate() {
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
    Ok(Report { device, correctness, launches, subnets })
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
}
