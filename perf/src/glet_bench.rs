//! glet's measured partition profiles (`perf/data/partition-profiles`, from
//! the Gpulet repository) and the interference model fitted on them.

use std::path::Path;

use baton_sched::glet::{elastic, fit_interference, ideal, Demand, FitReport, Interference, PartitionProfiles};

/// Loads the three CSVs of a partition-profile folder.
pub fn load_profiles(dir: &Path) -> Result<PartitionProfiles, String> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| format!("{}: {e}", dir.join(f).display()));
    PartitionProfiles::parse(&read("inference.csv")?, &read("interference.csv")?, &read("mem_util.csv")?)
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// The shipped profiles.
pub fn shipped_profiles() -> PartitionProfiles {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/partition-profiles");
    load_profiles(&dir).unwrap_or_else(|e| panic!("{e}"))
}

pub fn interference_fit() -> FitReport {
    fit_interference(&shipped_profiles()).expect("the measured pairs determine the model")
}

/// glet's Figure-14-style comparison: the five-model set, each SLO five
/// times its model's batch-of-one latency on a whole GPU.
pub const MODELS: [&str; 5] = ["resnet50", "vgg16", "inception", "mobilenet", "densenet121"];
pub const RATES: [f64; 3] = [0.0, 100.0, 200.0];

#[derive(Clone, Debug, serde::Serialize)]
pub struct IdealComparison {
    pub combinations: usize,
    pub ideal_schedulable: usize,
    pub glet_schedulable: usize,
    /// Highest common rate (every model at it) each finds a plan for.
    pub glet_max_rps: f64,
    pub ideal_max_rps: f64,
}

fn demands(p: &PartitionProfiles, rates: &[f64]) -> Vec<Demand> {
    MODELS
        .iter()
        .zip(rates)
        .map(|(name, &r)| {
            let m = p.model(name).expect("model in the profiles");
            let slo = 5 * p.measured(m, 1, 100).expect("measured alone on a whole GPU");
            Demand { model: m, rate_rps: r, slo }
        })
        .collect()
}

/// Every combination of {0, 100, 200} r/s over the five models on `gpus`
/// GPUs: how many each planner can schedule, and the highest common rate.
pub fn versus_ideal(gpus: usize) -> IdealComparison {
    let p = shipped_profiles();
    let fit = interference_fit();
    let intf = Interference::Model(&fit.model);
    let n = MODELS.len();
    let mut counts = (0, 0, 0);
    for code in 0..RATES.len().pow(n as u32) {
        let rates: Vec<f64> = (0..n).map(|i| RATES[code / RATES.len().pow(i as u32) % RATES.len()]).collect();
        let d = demands(&p, &rates);
        counts.0 += 1;
        counts.1 += usize::from(ideal(&p, intf, &d, gpus).is_some());
        counts.2 += usize::from(elastic(&p, intf, &d, gpus).is_some());
    }
    let highest = |plan: &dyn Fn(&[Demand]) -> bool| {
        let (mut lo, mut hi) = (0.0, 100_000.0);
        for _ in 0..40 {
            let mid = 0.5 * (lo + hi);
            if plan(&demands(&p, &[mid; 5])) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    };
    IdealComparison {
        combinations: counts.0,
        ideal_schedulable: counts.1,
        glet_schedulable: counts.2,
        glet_max_rps: highest(&|d| elastic(&p, intf, d, gpus).is_some()),
        ideal_max_rps: highest(&|d| ideal(&p, intf, d, gpus).is_some()),
    }
}
