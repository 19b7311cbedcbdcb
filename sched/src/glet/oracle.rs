//! What a batch on a GPU partition takes: the one answer the simulator's
//! emulated partitions and the interference-aware planners share.
//!
//! - Alone on a partition of p%: `L(b, p)` from `inference.csv`, linear
//!   between measured batch sizes (`profiles.rs`), made non-decreasing in b
//!   (a running maximum: measurement noise makes a few batches a hair
//!   faster than the one below, and a latency table must not decrease).
//! - Next to a sibling partition running `other` at batch `b'`: `L(b, p)`
//!   times a slowdown factor. Where `interference.csv` measured the pair,
//!   the factor is the measured co-run latency over the measured solo
//!   latency at the batch sizes rounded up to the next measured one (the
//!   data measures powers of two; a batch of 24 takes the factor of 32 — the
//!   larger batch presses memory at least as hard). Elsewhere it is the
//!   fitted linear model's prediction from the two models' DRAM and L2
//!   utilisation (`interference.rs`). A factor is never below 1: a
//!   co-runner never speeds a batch up.
//!
//! The planners see the same numbers the emulated GPU runs: the profiler
//! measured those pairs, and a planner uses what its profiler measured.
//!
//! Factors are looked up, not worked out: every (model, batch rounded up,
//! partition below 100%, co-model, co-batch rounded up) the profiles name
//! is computed once, when the data is built, into a dense table (for five
//! models, 6,125 factors). The planners ask for a great many (one glet
//! plan of three models on four GPUs took 28–45 ms, 90% of it in the map
//! lookups of working factors out), and the engine plans on its
//! scheduler's shard, so a re-plan stalls every request for as long as it
//! takes (`perf/src/bin/glet_replan.rs`).

use std::collections::BTreeMap;

use super::interference::{fit_interference, InterferenceModel};
use super::profiles::{PartitionProfiles, BATCHES, PARTITIONS};
use crate::profile::Profile;
use crate::time::Nanos;

/// The largest batch the measured profiles cover.
pub const MAX_PARTITION_BATCH: u32 = 64;

/// Measured partition profiles with the interference model fitted on them.
#[derive(Clone, Debug)]
pub struct PartitionData {
    pub profiles: PartitionProfiles,
    pub fit: InterferenceModel,
    /// (model, batch, partition, co-model, co-batch) -> measured co-run latency.
    co_run: BTreeMap<(usize, u32, u32, usize, u32), Nanos>,
    /// (model, partition) -> L(b, p) for b in 1..=64, non-decreasing.
    solo: BTreeMap<(usize, u32), Vec<Nanos>>,
    /// `factor` for every model, batch bucket, split partition, co-model
    /// and co-batch bucket (`Factors::at`).
    factors: Factors,
}

/// Slowdown factors in one dense table.
#[derive(Clone, Default)]
struct Factors {
    models: usize,
    table: Vec<f64>,
}

impl std::fmt::Debug for Factors {
    /// Its size, not its thousands of numbers (they follow from the data).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Factors {{ models: {}, {} factors }}", self.models, self.table.len())
    }
}

/// Partition sizes that have a sibling: every measured one below 100%.
const SPLIT: usize = PARTITIONS.len() - 1;

impl Factors {
    fn new(data: &PartitionData) -> Self {
        assert_eq!(PARTITIONS[SPLIT], 100, "the whole GPU is the last partition size");
        let models = data.profiles.models.len();
        let mut table = Vec::with_capacity(models * models * SPLIT * BATCHES.len() * BATCHES.len());
        for m in 0..models {
            for &b in &BATCHES {
                for &p in &PARTITIONS[..SPLIT] {
                    for o in 0..models {
                        for &ob in &BATCHES {
                            table.push(data.work_out(m, b, p, o, ob));
                        }
                    }
                }
            }
        }
        Self { models, table }
    }

    /// The factor for batch bucket `b` (an index into BATCHES), if the
    /// table has the case.
    fn at(&self, model: usize, b: usize, percent: u32, other: usize, ob: usize) -> Option<f64> {
        let p = PARTITIONS[..SPLIT].iter().position(|&x| x == percent)?;
        if model >= self.models || other >= self.models {
            return None;
        }
        let n = BATCHES.len();
        Some(self.table[(((model * n + b) * SPLIT + p) * self.models + other) * n + ob])
    }
}

const _: () = assert!(BATCHES[BATCHES.len() - 1] == MAX_PARTITION_BATCH);

/// The index of the measured batch size a batch rounds up to (the largest
/// for a batch beyond them all).
pub(crate) fn bucket(batch: u32) -> usize {
    BATCHES.iter().position(|&x| x >= batch).unwrap_or(BATCHES.len() - 1)
}

/// Why profiles cannot serve as partition data.
#[derive(Clone, Debug, PartialEq)]
pub enum PartitionDataError {
    /// The measured pairs do not determine the five coefficients.
    NoFit,
}

impl std::fmt::Display for PartitionDataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoFit => write!(f, "interference.csv has too few independent pairs to fit the interference model"),
        }
    }
}

impl std::error::Error for PartitionDataError {}

impl PartitionData {
    pub fn new(profiles: PartitionProfiles) -> Result<Self, PartitionDataError> {
        let fit = fit_interference(&profiles).ok_or(PartitionDataError::NoFit)?.model;
        let co_run = profiles
            .co_runs
            .iter()
            .map(|r| ((r.model, r.batch, r.partition, r.co_model, r.co_batch), r.latency))
            .collect();
        let mut solo = BTreeMap::new();
        for m in 0..profiles.models.len() {
            for p in PARTITIONS {
                let mut running = 0;
                let table: Option<Vec<Nanos>> = (1..=MAX_PARTITION_BATCH)
                    .map(|b| {
                        running = profiles.latency(m, b, p)?.max(running);
                        Some(running)
                    })
                    .collect();
                if let Some(t) = table {
                    solo.insert((m, p), t);
                }
            }
        }
        Ok(Self { profiles, fit, co_run, solo, factors: Factors::default() }.with_factors())
    }

    /// Self with its factors tabled.
    fn with_factors(mut self) -> Self {
        self.factors = Factors::new(&self);
        self
    }

    /// The same profiles on a GPU whose partitions never slow each other:
    /// a counterfactual that measures what partitioning alone would gain.
    pub fn without_interference(&self) -> Self {
        let fit = InterferenceModel { c: [0.0, 0.0, 0.0, 0.0, 1.0] };
        Self { fit, co_run: BTreeMap::new(), ..self.clone() }.with_factors()
    }

    /// L(b, p) alone, non-decreasing in b; None if the model was not
    /// measured for every batch up to 64 on that partition size, or b is
    /// outside 1..=64.
    pub fn solo(&self, model: usize, batch: u32, percent: u32) -> Option<Nanos> {
        if !(1..=MAX_PARTITION_BATCH).contains(&batch) {
            return None;
        }
        self.solo.get(&(model, percent)).map(|t| t[batch as usize - 1])
    }

    /// L(b, p) for b in 1..=64 (`solo`'s numbers, in one lookup).
    pub fn solo_table(&self, model: usize, percent: u32) -> Option<&[Nanos]> {
        self.solo.get(&(model, percent)).map(Vec::as_slice)
    }

    /// The whole profile L(., p) for b in 1..=64.
    pub fn solo_profile(&self, model: usize, percent: u32) -> Option<Profile> {
        Profile::table(self.solo.get(&(model, percent))?.clone()).ok()
    }

    /// The slowdown of `model` at `batch` on `percent`% while `other` runs
    /// `other_batch` on the rest of the GPU.
    pub fn factor(&self, model: usize, batch: u32, percent: u32, other: usize, other_batch: u32) -> f64 {
        assert!(percent > 0 && percent < 100, "a partition with a sibling is below 100%, got {percent}");
        let (b, ob) = (bucket(batch), bucket(other_batch));
        match self.factors.at(model, b, percent, other, ob) {
            Some(f) => f,
            None => self.work_out(model, BATCHES[b], percent, other, BATCHES[ob]),
        }
    }

    /// `factor` for batch sizes that are measured ones (module doc).
    fn work_out(&self, model: usize, b: u32, percent: u32, other: usize, ob: u32) -> f64 {
        let measured = self.co_run.get(&(model, b, percent, other, ob)).zip(self.profiles.measured(model, b, percent));
        if let Some((&co, solo)) = measured {
            return (co as f64 / solo as f64).max(1.0);
        }
        match (self.profiles.utilisation(model, b, percent), self.profiles.utilisation(other, ob, 100 - percent)) {
            (Some(own), Some(theirs)) => self.fit.factor(own, theirs),
            // Utilisation not measured: no basis for a slowdown.
            _ => 1.0,
        }
    }

    /// What a batch takes on its partition, next to what its sibling runs
    /// (None: the sibling is idle, or the partition is the whole GPU).
    pub fn batch_time(&self, model: usize, batch: u32, percent: u32, sibling: Option<(usize, u32)>) -> Option<Nanos> {
        let solo = self.solo(model, batch, percent)?;
        Some(match sibling {
            Some((other, ob)) if percent < 100 => {
                (solo as f64 * self.factor(model, batch, percent, other, ob)).round() as Nanos
            }
            _ => solo,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: &str = "a,1,50,t,1,latency,0.01,1\n\
                       a,2,50,t,1,latency,0.009,1\n\
                       a,4,50,t,1,latency,0.02,1\n\
                       a,8,50,t,1,latency,0.03,1\n\
                       a,16,50,t,1,latency,0.05,1\n\
                       a,32,50,t,1,latency,0.09,1\n\
                       a,64,50,t,1,latency,0.17,1\n\
                       b,1,50,t,1,latency,0.004,1\n\
                       b,2,50,t,1,latency,0.005,1\n\
                       b,4,50,t,1,latency,0.006,1\n\
                       b,8,50,t,1,latency,0.01,1\n\
                       b,16,50,t,1,latency,0.018,1\n\
                       b,32,50,t,1,latency,0.034,1\n\
                       b,64,50,t,1,latency,0.06,1\n\
                       a,1,100,t,1,latency,0.008,1\n";
    const MEM: &str =
        "a,1,50,m,10,l,20,0\na,2,50,m,12,l,22,0\na,4,50,m,30,l,31,0\nb,1,50,m,5,l,6,0\nb,4,50,m,9,l,4,0\n";
    const CO: &str = "a,4,50,b,4,t,1,latency,0.030,1\na,1,50,b,1,t,1,latency,0.011,1\n\
                      b,1,50,a,1,t,1,latency,0.005,1\nb,4,50,a,4,t,1,latency,0.007,1\na,2,50,b,1,t,1,latency,0.0099,1\n\
                      b,1,50,a,4,t,1,latency,0.0044,1\n\
                      a,2,50,b,4,t,1,latency,0.0120,1\nb,4,50,a,1,t,1,latency,0.0065,1\n\
                      a,1,50,b,4,t,1,latency,0.0130,1\nb,4,50,a,2,t,1,latency,0.0068,1\n";

    fn data() -> PartitionData {
        PartitionData::new(PartitionProfiles::parse(INF, CO, MEM).unwrap()).unwrap()
    }

    #[test]
    fn solo_is_monotone_and_bounded() {
        let d = data();
        // Measured 9 ms at b=2 below 10 ms at b=1: the running maximum keeps 10.
        assert_eq!(d.solo(0, 2, 50), Some(10_000_000));
        assert_eq!(d.solo(0, 3, 50), Some(14_500_000));
        assert_eq!(d.solo(0, 65, 50), None);
        assert_eq!(d.solo(0, 1, 40), None);
        assert_eq!(d.solo(0, 64, 50), Some(170_000_000));
    }

    #[test]
    fn the_counterfactual_gpu_has_no_interference() {
        let d = data().without_interference();
        assert_eq!(d.factor(0, 4, 50, 1, 4), 1.0);
        assert_eq!(d.batch_time(0, 4, 50, Some((1, 4))), d.solo(0, 4, 50));
    }

    #[test]
    fn measured_pairs_win_and_batches_round_up() {
        let d = data();
        assert!((d.factor(0, 4, 50, 1, 4) - 1.5).abs() < 1e-9);
        // b=3 rounds up to the measured 4, co-batch 3 to 4.
        assert!((d.factor(0, 3, 50, 1, 3) - 1.5).abs() < 1e-9);
        assert_eq!(d.batch_time(0, 4, 50, Some((1, 4))), Some(30_000_000));
        assert_eq!(d.batch_time(0, 4, 50, None), Some(20_000_000));
        // Never below 1, even where a measurement says faster.
        assert!(d.factor(1, 1, 50, 0, 4) >= 1.0);
    }

    /// The table gives what working a factor out gives, for every batch
    /// (rounded up, beyond 64 too), partition size and pair, and for what
    /// it does not hold (a partition size never measured, a model not in
    /// the profiles).
    #[test]
    fn tabled_factors_are_the_worked_out_ones() {
        for d in [data(), data().without_interference()] {
            for (m, o) in [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (0, 5)] {
                for p in [20, 30, 40, 50, 60, 80, 99] {
                    for (b, ob) in [(1, 1), (3, 4), (4, 64), (24, 2), (64, 65), (100, 7)] {
                        let want = d.work_out(m, BATCHES[bucket(b)], p, o, BATCHES[bucket(ob)]);
                        assert_eq!(d.factor(m, b, p, o, ob).to_bits(), want.to_bits(), "{m} {b} {p} {o} {ob}");
                    }
                }
            }
        }
        assert_eq!(data().factors.table.len(), 2 * 7 * 5 * 2 * 7);
    }
}
