//! glet's third table, `mem_util.csv`: each model's DRAM and L2
//! utilisation when it runs alone on a partition at a batch — the features
//! of glet's interference model (`baton_sched::glet::interference`). Only
//! hardware counters give them, which a process cannot read of itself, so
//! they are measured in two steps:
//!
//! 1. `run_marked` runs every (partition, model, batch) of `configs` once,
//!    its kernels launched one by one (eager), each configuration after a
//!    `marker` kernel, under Nsight Compute:
//!    `ncu --csv --print-units base --metrics METRICS baton profile
//!    --partitions DIR --util-run > ncu.csv`.
//! 2. `from_ncu` splits ncu's per-kernel rows at the markers and gives
//!    each configuration the duration-weighted mean of its kernels' DRAM
//!    throughput and L2 sector throughput (percent of peak), the rows of
//!    `mem_util.csv`.
//!
//! `--util-shares` names the shares run under ncu. On the H200 lent here
//! ncu profiles kernels inside green contexts when it leaves the clocks
//! alone (`--clock-control none`; with its default clock control it failed:
//! "Failed to profile sm80_xmma_gemm..."). Where a share was not measured,
//! its utilisation is estimated from the whole device's (`scaled`): a batch
//! moves about the same bytes through DRAM and L2 on fewer SMs, over its
//! longer time L(b, p), so
//!
//!   util(b, p) = util(b, 100) * L(b, 100) / L(b, p)    (at most 100%).
//!
//! Checked against measurements: on glet's own (`perf/data/partition-profiles`,
//! 350 points below 100%) the estimate is off by 12% of the measured value
//! at the median (mean 21%), the whole device's number copied by 40% (mean
//! 73%); on the H200 (`perf/data/partition-profiles-h200`, 105 points, ncu
//! in green contexts) by 4.9% (mean 8.1%) against 24% (mean 42%) for DRAM.
//! The bytes a batch moves shrink somewhat on small shares (on glet's data
//! util x L at 20% is 0.77 of the whole device's at the median, 0.95 at
//! 80%), which the estimate ignores.

use std::collections::BTreeMap;

use super::check::inputs;
use super::partition::{device_sms, split};
use super::{CudaConfig, CudaExecutor, LaunchMode};
use crate::executor::{Batch, ExecError, Executor};

/// The counters `from_ncu` reads, for ncu's `--metrics`.
pub const METRICS: &str =
    "dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum";

/// One measured configuration: model `m` (named `model`) at `batch` on
/// `partition` percent of the SMs.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub model: String,
    pub m: usize,
    pub batch: usize,
    pub partition: u32,
}

/// Every (share, static model, batch), in the order `run_marked` runs them.
pub fn configs(cfg: &CudaConfig, shares: &[u32], batches: &[usize]) -> Vec<Config> {
    let infos = CudaConfig { varlen: None, ..*cfg }.model_infos();
    let mut out = Vec::new();
    for &partition in shares {
        for (m, info) in infos.iter().enumerate() {
            for &batch in batches.iter().filter(|&&b| b <= cfg.max_batch as usize) {
                out.push(Config { model: info.name.clone(), m, batch, partition });
            }
        }
    }
    out
}

/// Runs each of `configs` once, eagerly, each after a marker kernel
/// (tagged with its index), on a partition of its share (the whole device
/// at 100).
pub fn run_marked(cfg: &CudaConfig, configs: &[Config]) -> Result<(), ExecError> {
    let cfg = CudaConfig { varlen: None, launch: LaunchMode::Eager, ..*cfg };
    let total = device_sms(cfg.ordinal)?;
    let mut k = 0;
    while k < configs.len() {
        let share = configs[k].partition;
        let mut exec = if share >= 100 {
            CudaExecutor::new(&cfg)?
        } else {
            CudaExecutor::on_partition(&cfg, &split(cfg.ordinal, (total * share).div_ceil(100))?.0)?
        };
        while k < configs.len() && configs[k].partition == share {
            let c = &configs[k];
            let xs = inputs(c.batch, exec.models()[c.m].input_len, 5);
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            exec.mark(k)?;
            exec.run(&Batch { model: c.m as u32, variant: None, heads: None, inputs: &refs }, &mut Vec::new())?;
            k += 1;
        }
    }
    Ok(())
}

/// The fields of one line of ncu's CSV (every field quoted).
fn fields(line: &str) -> Vec<&str> {
    line.trim().trim_start_matches('"').trim_end_matches('"').split("\",\"").collect()
}

/// One kernel's counters.
#[derive(Clone, Copy, Debug, Default)]
struct Kernel {
    marker: bool,
    dram: f64,
    l2: f64,
    ns: f64,
}

/// One configuration's measured utilisation, percent of peak.
#[derive(Clone, Debug, PartialEq)]
pub struct Util {
    pub config: Config,
    pub dram: f64,
    pub l2: f64,
}

/// The rows of `mem_util.csv`, one per measurement.
pub fn csv(utils: &[Util]) -> String {
    let mut out = String::new();
    for u in utils {
        let c = &u.config;
        out += &format!("{},{},{},mem_util,{:.2},l2_util,{:.2},0\n", c.model, c.batch, c.partition, u.dram, u.l2);
    }
    out
}

/// `measured` and, for each of `shares` a (model, batch) was not measured
/// on, its utilisation estimated from the whole device's by the solo times
/// (module doc; `solo(model, batch, share)`, any unit). A share without a
/// solo time for that batch gets no row.
pub fn scaled(measured: &[Util], shares: &[u32], solo: impl Fn(&str, usize, u32) -> Option<f64>) -> Vec<Util> {
    let mut out = measured.to_vec();
    let has = |c: &Config, p: u32| {
        measured.iter().any(|u| (&u.config.model, u.config.batch, u.config.partition) == (&c.model, c.batch, p))
    };
    for whole in measured.iter().filter(|u| u.config.partition == 100) {
        let c = &whole.config;
        let Some(l100) = solo(&c.model, c.batch, 100) else { continue };
        for &p in shares.iter().filter(|&&p| p < 100 && !has(c, p)) {
            let Some(lp) = solo(&c.model, c.batch, p).filter(|&l| l > 0.0) else { continue };
            let k = l100 / lp;
            let config = Config { partition: p, ..c.clone() };
            out.push(Util { config, dram: (whole.dram * k).min(100.0), l2: (whole.l2 * k).min(100.0) });
        }
    }
    out.sort_by(|a, b| {
        (&a.config.model, a.config.batch, a.config.partition).cmp(&(
            &b.config.model,
            b.config.batch,
            b.config.partition,
        ))
    });
    out
}

/// Each (model, batch, share)'s solo latency from an `inference.csv`
/// (`model,batch,share,throughput,<r/s>,latency,<s>,1`).
pub fn solo_latencies(inference_csv: &str) -> Result<BTreeMap<(String, usize, u32), f64>, String> {
    let mut out = BTreeMap::new();
    for (i, line) in inference_csv.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = || format!("inference.csv line {}: `{line}`", i + 1);
        if f.len() < 7 || f[5] != "latency" {
            return Err(bad());
        }
        let (batch, share, latency) =
            (f[1].parse().map_err(|_| bad())?, f[2].parse().map_err(|_| bad())?, f[6].parse().map_err(|_| bad())?);
        out.insert((f[0].to_string(), batch, share), latency);
    }
    Ok(out)
}

/// Each of `configs`' utilisation from ncu's CSV of a `run_marked` run.
pub fn from_ncu(csv: &str, configs: &[Config]) -> Result<Vec<Util>, String> {
    let mut lines = csv.lines().filter(|l| l.starts_with('"'));
    let header = fields(lines.next().ok_or("no CSV header in ncu's output")?);
    let col = |name: &str| header.iter().position(|h| *h == name).ok_or(format!("ncu's CSV has no `{name}` column"));
    let (id, kernel, metric, unit, value) =
        (col("ID")?, col("Kernel Name")?, col("Metric Name")?, col("Metric Unit")?, col("Metric Value")?);
    let mut kernels: BTreeMap<u64, Kernel> = BTreeMap::new();
    for (i, line) in lines.enumerate() {
        let f = fields(line);
        let get = |c: usize| f.get(c).copied().ok_or(format!("ncu CSV row {}: too few fields", i + 2));
        let key: u64 = get(id)?.parse().map_err(|_| format!("ncu CSV row {}: bad ID", i + 2))?;
        let v: f64 = get(value)?.replace(',', "").parse().map_err(|_| format!("ncu CSV row {}: bad value", i + 2))?;
        let k = kernels.entry(key).or_default();
        k.marker = get(kernel)?.starts_with("marker");
        match get(metric)? {
            "dram__throughput.avg.pct_of_peak_sustained_elapsed" => k.dram = v,
            "lts__t_sectors.avg.pct_of_peak_sustained_elapsed" => k.l2 = v,
            "gpu__time_duration.sum" => {
                let scale = match get(unit)? {
                    "ns" | "nsecond" => 1.0,
                    "us" | "usecond" => 1e3,
                    "ms" | "msecond" => 1e6,
                    "s" | "second" => 1e9,
                    u => return Err(format!("ncu CSV row {}: duration unit `{u}`", i + 2)),
                };
                k.ns = v * scale;
            }
            _ => {}
        }
    }
    // Kernels in launch order, split at the markers: run k is what
    // follows marker k.
    let mut runs: Vec<Vec<Kernel>> = Vec::new();
    for k in kernels.into_values() {
        match (k.marker, runs.last_mut()) {
            (true, _) => runs.push(Vec::new()),
            (false, Some(run)) => run.push(k),
            (false, None) => return Err("a kernel before the first marker: not a `--util-run` profile".into()),
        }
    }
    if runs.len() != configs.len() {
        return Err(format!("{} markers in ncu's output for {} configurations", runs.len(), configs.len()));
    }
    let mut out = Vec::new();
    for (c, run) in configs.iter().zip(&runs) {
        let ns: f64 = run.iter().map(|k| k.ns).sum();
        if run.is_empty() || ns.is_nan() || ns <= 0.0 {
            return Err(format!("{} at batch {} on {}%: no timed kernel", c.model, c.batch, c.partition));
        }
        let mean = |f: fn(&Kernel) -> f64| run.iter().map(|k| f(k) * k.ns).sum::<f64>() / ns;
        out.push(Util { config: c.clone(), dram: mean(|k| k.dram), l2: mean(|k| k.l2) });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u32, kernel: &str, metric: &str, unit: &str, value: &str) -> String {
        format!("\"{id}\",\"1\",\"baton\",\"h\",\"{kernel}\",\"1\",\"13\",\"(256, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"s\",\"{metric}\",\"{unit}\",\"{value}\"\n")
    }

    fn kernel(id: u32, name: &str, dram: &str, l2: &str, ns: &str) -> String {
        row(id, name, "dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", dram)
            + &row(id, name, "lts__t_sectors.avg.pct_of_peak_sustained_elapsed", "%", l2)
            + &row(id, name, "gpu__time_duration.sum", "ns", ns)
    }

    #[test]
    fn runs_are_split_at_the_markers_and_weighted_by_duration() {
        let header = "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\
                      \"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\
                      \"Metric Value\"\n";
        let text = String::from("==PROF== Connected\n")
            + header
            + &kernel(0, "marker", "0", "0", "1,000")
            + &kernel(1, "gemm", "10", "40", "3,000")
            + &kernel(2, "softmax", "50", "0", "1,000")
            + &kernel(3, "marker", "0", "0", "900")
            + &kernel(4, "gemm", "20", "30", "2,000");
        let c = |m: &str, batch| Config { model: m.into(), m: 0, batch, partition: 50 };
        let configs = [c("a", 1), c("b", 4)];
        let out = csv(&from_ncu(&text, &configs).unwrap());
        assert_eq!(out, "a,1,50,mem_util,20.00,l2_util,30.00,0\nb,4,50,mem_util,20.00,l2_util,30.00,0\n");
        assert!(from_ncu(&text, &configs[..1]).unwrap_err().contains("2 markers"));
        assert!(from_ncu(&(header.to_string() + &kernel(0, "gemm", "1", "1", "1")), &configs).is_err());
    }

    #[test]
    fn a_share_is_estimated_from_the_whole_device_by_its_solo_time() {
        let u = |p, dram, l2| Util { config: Config { model: "a".into(), m: 0, batch: 4, partition: p }, dram, l2 };
        let solo = |_: &str, b: usize, p: u32| match (b, p) {
            (4, 100) => Some(10.0),
            (4, 50) => Some(20.0),
            (4, 20) => Some(5.0),
            _ => None,
        };
        // 50% takes twice the whole device's time: half the utilisation;
        // 20% (timed faster than the whole, noise) would exceed 100% of L2
        // and is capped; 40% was measured; 60% has no solo time.
        let out = scaled(&[u(100, 30.0, 90.0), u(40, 1.0, 2.0)], &[20, 40, 50, 60], solo);
        assert_eq!(out, vec![u(20, 60.0, 100.0), u(40, 1.0, 2.0), u(50, 15.0, 45.0), u(100, 30.0, 90.0)]);
        let lat = solo_latencies("a,4,50,throughput,10.0,latency,0.004,1\n\n").unwrap();
        assert_eq!(lat.get(&("a".to_string(), 4, 50)), Some(&0.004));
        assert!(solo_latencies("a,4,50,throughput,10.0").is_err());
    }

    /// The estimate against per-partition measurements (the module doc's
    /// numbers: glet's own and the H200's): closer than copying the whole
    /// device's.
    #[test]
    fn the_estimate_beats_copying_on_measured_partitions() {
        for (data, points) in [("partition-profiles", 300), ("partition-profiles-h200", 100)] {
            let (s, c) = estimate_and_copy_errors(data, points);
            println!("{data}: median DRAM error of the estimate {s:.3}, of copying {c:.3}");
            assert!(s < 0.15 && s < c / 2.0, "{data}: estimate off by {s:.3} at the median, copying {c:.3}");
        }
    }

    /// Median relative DRAM-utilisation errors of `scaled` and of copying
    /// the whole device's, over the shares below 100% of
    /// `perf/data/<data>` (at least `points` of them).
    fn estimate_and_copy_errors(data: &str, points: usize) -> (f64, f64) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../perf/data").join(data);
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect("shipped");
        let lat = solo_latencies(&read("inference.csv")).unwrap();
        let mut measured = Vec::new();
        for line in read("mem_util.csv").lines().filter(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split(',').collect();
            let config =
                Config { model: f[0].into(), m: 0, batch: f[1].parse().unwrap(), partition: f[2].parse().unwrap() };
            measured.push(Util { config, dram: f[4].parse().unwrap(), l2: f[6].parse().unwrap() });
        }
        let whole: Vec<Util> = measured.iter().filter(|u| u.config.partition == 100).cloned().collect();
        let mut shares: Vec<u32> = measured.iter().map(|u| u.config.partition).collect();
        shares.sort_unstable();
        shares.dedup();
        let est = scaled(&whole, &shares, |m, b, p| lat.get(&(m.to_string(), b, p)).copied());
        let (mut scaled_err, mut copy_err) = (Vec::new(), Vec::new());
        for u in measured.iter().filter(|u| u.config.partition < 100 && u.dram > 0.0) {
            let key = |x: &Util| (x.config.model.clone(), x.config.batch, x.config.partition);
            let Some(e) = est.iter().find(|e| key(e) == key(u)) else { continue };
            let w = whole.iter().find(|w| (&w.config.model, w.config.batch) == (&u.config.model, u.config.batch));
            scaled_err.push((e.dram - u.dram).abs() / u.dram);
            copy_err.push((w.expect("whole measured").dram - u.dram).abs() / u.dram);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        assert!(scaled_err.len() >= points, "{data}: {} points", scaled_err.len());
        (median(&mut scaled_err), median(&mut copy_err))
    }
}
