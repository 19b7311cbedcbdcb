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
//! Reduced: on the H200 machine lent here, Nsight Compute could not profile
//! a kernel in a green context ("Failed to profile sm80_xmma_gemm..."), so
//! `baton profile --util-run` measures the whole device only and
//! `csv` gives every partition share the whole device's utilisation.

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

/// The rows of `mem_util.csv`: each measurement for its own share, and
/// for each of `shares` too (the whole device's numbers standing for a
/// partition's, where only the whole device could be measured).
pub fn csv(utils: &[Util], shares: &[u32]) -> String {
    let mut out = String::new();
    for u in utils {
        let c = &u.config;
        for p in std::iter::once(c.partition).chain(shares.iter().copied().filter(|&p| p != c.partition)) {
            out += &format!("{},{},{p},mem_util,{:.2},l2_util,{:.2},0\n", c.model, c.batch, u.dram, u.l2);
        }
    }
    out
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
        let out = csv(&from_ncu(&text, &configs).unwrap(), &[50, 100]);
        assert_eq!(
            out,
            "a,1,50,mem_util,20.00,l2_util,30.00,0\na,1,100,mem_util,20.00,l2_util,30.00,0\n\
             b,4,50,mem_util,20.00,l2_util,30.00,0\nb,4,100,mem_util,20.00,l2_util,30.00,0\n"
        );
        assert!(from_ncu(&text, &configs[..1]).unwrap_err().contains("2 markers"));
        assert!(from_ncu(&(header.to_string() + &kernel(0, "gemm", "1", "1", "1")), &configs).is_err());
    }
}
