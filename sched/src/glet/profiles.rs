//! The measured partition profiles. Each CSV row is one measurement; the
//! files carry no header. Latencies are seconds in the files and
//! nanoseconds here.
//!
//! - `inference.csv`: `model,batch,partition,throughput,<req/s>,latency,<s>,1`
//! - `interference.csv`: `model,batch,partition,co_model,co_batch,throughput,<req/s>,latency,<s>,1`
//!   (the co-runner holds the rest of the GPU, `100 - partition`%)
//! - `mem_util.csv`: `model,batch,partition,mem_util,<%>,l2_util,<%>,0`

use std::collections::BTreeMap;

use crate::time::Nanos;

/// Batch sizes and partition sizes the data measures.
pub const BATCHES: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];
pub const PARTITIONS: [u32; 6] = [20, 40, 50, 60, 80, 100];

#[derive(Clone, Debug, PartialEq)]
pub struct ProfileError {
    pub file: &'static str,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} line {}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for ProfileError {}

/// One measured co-run: `model` at `batch` on `partition`% while `co_model`
/// at `co_batch` runs on the rest.
#[derive(Clone, Debug, PartialEq)]
pub struct CoRun {
    pub model: usize,
    pub batch: u32,
    pub partition: u32,
    pub co_model: usize,
    pub co_batch: u32,
    pub latency: Nanos,
}

#[derive(Clone, Debug, Default)]
pub struct PartitionProfiles {
    pub models: Vec<String>,
    /// (model, batch, partition) -> latency alone.
    solo: BTreeMap<(usize, u32, u32), Nanos>,
    /// (model, batch, partition) -> (DRAM %, L2 %).
    util: BTreeMap<(usize, u32, u32), (f64, f64)>,
    pub co_runs: Vec<CoRun>,
}

fn fields<'a>(file: &'static str, line: usize, text: &'a str, n: usize) -> Result<Vec<&'a str>, ProfileError> {
    let f: Vec<&str> = text.split(',').map(str::trim).collect();
    if f.len() != n {
        return Err(ProfileError { file, line, message: format!("{} fields, want {n}", f.len()) });
    }
    Ok(f)
}

fn number<T: std::str::FromStr>(file: &'static str, line: usize, s: &str) -> Result<T, ProfileError> {
    s.parse().map_err(|_| ProfileError { file, line, message: format!("`{s}` is not a number") })
}

fn seconds(file: &'static str, line: usize, s: &str) -> Result<Nanos, ProfileError> {
    let v: f64 = number(file, line, s)?;
    if !(v > 0.0 && v.is_finite()) {
        return Err(ProfileError { file, line, message: format!("latency `{s}` is not positive") });
    }
    Ok((v * 1e9).round() as Nanos)
}

impl PartitionProfiles {
    /// Parses the three files' contents.
    pub fn parse(inference: &str, interference: &str, mem_util: &str) -> Result<Self, ProfileError> {
        let mut p = Self::default();
        for (i, line) in inference.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let f = fields("inference.csv", i + 1, line, 8)?;
            let m = p.model_index(f[0]);
            let key = (m, number("inference.csv", i + 1, f[1])?, number("inference.csv", i + 1, f[2])?);
            p.solo.insert(key, seconds("inference.csv", i + 1, f[6])?);
        }
        for (i, line) in mem_util.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let f = fields("mem_util.csv", i + 1, line, 8)?;
            let m = p.model_index(f[0]);
            let key = (m, number("mem_util.csv", i + 1, f[1])?, number("mem_util.csv", i + 1, f[2])?);
            p.util.insert(key, (number("mem_util.csv", i + 1, f[4])?, number("mem_util.csv", i + 1, f[6])?));
        }
        for (i, line) in interference.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let f = fields("interference.csv", i + 1, line, 10)?;
            let (model, co_model) = (p.model_index(f[0]), p.model_index(f[3]));
            p.co_runs.push(CoRun {
                model,
                batch: number("interference.csv", i + 1, f[1])?,
                partition: number("interference.csv", i + 1, f[2])?,
                co_model,
                co_batch: number("interference.csv", i + 1, f[4])?,
                latency: seconds("interference.csv", i + 1, f[8])?,
            });
        }
        if p.solo.is_empty() {
            return Err(ProfileError { file: "inference.csv", line: 0, message: "no measurements".into() });
        }
        Ok(p)
    }

    fn model_index(&mut self, name: &str) -> usize {
        match self.models.iter().position(|m| m == name) {
            Some(i) => i,
            None => {
                self.models.push(name.to_string());
                self.models.len() - 1
            }
        }
    }

    pub fn model(&self, name: &str) -> Option<usize> {
        self.models.iter().position(|m| m == name)
    }

    /// The measured latency alone, if measured.
    pub fn measured(&self, model: usize, batch: u32, partition: u32) -> Option<Nanos> {
        self.solo.get(&(model, batch, partition)).copied()
    }

    /// L(b, p) for any b up to the largest measured batch: linear between
    /// the measured batch sizes around b (latency is close to affine in b).
    pub fn latency(&self, model: usize, batch: u32, partition: u32) -> Option<Nanos> {
        if let Some(l) = self.measured(model, batch, partition) {
            return Some(l);
        }
        let hi = *BATCHES.iter().find(|&&x| x > batch)?;
        let lo = *BATCHES.iter().rev().find(|&&x| x < batch)?;
        let (l_lo, l_hi) = (self.measured(model, lo, partition)?, self.measured(model, hi, partition)?);
        let t = (batch - lo) as f64 / (hi - lo) as f64;
        Some((l_lo as f64 + t * (l_hi as f64 - l_lo as f64)).round() as Nanos)
    }

    /// (DRAM %, L2 %) of the model alone at `batch` on `partition`.
    pub fn utilisation(&self, model: usize, batch: u32, partition: u32) -> Option<(f64, f64)> {
        self.util.get(&(model, batch, partition)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: &str = "m,1,50,throughput,100,latency,0.010,1\nm,2,50,throughput,150,latency,0.0134,1\nm,4,50,throughput,200,latency,0.020,1\n";
    const MEM: &str = "m,1,50,mem_util,10,l2_util,20,0\n";
    const CO: &str = "m,1,50,m,1,throughput,80,latency,0.0125,1\n";

    #[test]
    fn parses_and_interpolates() {
        let p = PartitionProfiles::parse(INF, CO, MEM).unwrap();
        assert_eq!(p.latency(0, 1, 50), Some(10_000_000));
        assert_eq!(p.latency(0, 3, 50), Some(16_700_000));
        assert_eq!(p.latency(0, 1, 40), None);
        assert_eq!(p.utilisation(0, 1, 50), Some((10.0, 20.0)));
        assert_eq!(p.co_runs[0].latency, 12_500_000);
    }

    #[test]
    fn bad_rows_are_typed_errors_with_lines() {
        let bad_latency = "m,1,50,throughput,100,latency,0.010,1\nm,2,50,throughput,150,latency,x,1\n";
        let e = PartitionProfiles::parse(bad_latency, CO, MEM).unwrap_err();
        assert_eq!((e.file, e.line), ("inference.csv", 2));
        let e = PartitionProfiles::parse(INF, "m,1,50\n", MEM).unwrap_err();
        assert_eq!((e.file, e.line), ("interference.csv", 1));
        let e = PartitionProfiles::parse(INF, CO, "m,1,50,mem_util,-,l2_util,20,0\n").unwrap_err();
        assert_eq!(e.file, "mem_util.csv");
    }
}
