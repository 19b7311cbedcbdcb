//! glet's experiments run through the simulator (seeds/003, section 5):
//! every number here is a plan executed on emulated GPU partitions, with
//! the measured co-run slowdowns, by Nexus's runtime (routing, duty
//! cycles, early drop), and judged by the 1%-bad criterion.
//!
//! 1. `goodputs`: the highest SLO-preserving rate (find-goodput) of glet,
//!    glet-noint, sbp and greedy-part on the shipped glet scenarios
//!    (Figure 12).
//! 2. `versus_ideal`: how many of the {0, 100, 200} r/s rate combinations
//!    over five models glet and the exhaustive ideal schedule — a plan on
//!    paper that also keeps every model at most 1% bad in the simulator —
//!    and each one's goodput with all five at one rate (Figures 15, 16).
//! 3. `noint_breaks`: at the highest rate glet-noint calls schedulable, its
//!    simulated bad rate, and whether glet refuses that rate or holds it
//!    (Figure 13).

use std::path::{Path, PathBuf};

use serde::Serialize;

use baton_sched::build;
use baton_sched::glet::{plan_once, Planner, Serving};
use baton_sched::sim::{find_goodput, find_goodput_with, run_with, Report, BAD_RATE_LIMIT};
use baton_sched::{PolicyKind, Scenario, Scheduler};

use crate::load_scenario;

/// The glet scenarios under `perf/scenarios/`, as the table lists them.
pub const SCENARIOS: [&str; 7] =
    ["glet-scen1", "glet-scen2", "glet-scen3", "glet-scen4", "glet-scen5", "glet-game", "glet-traffic"];

pub fn scenario_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(format!("{name}.toml"))
}

/// Loads a shipped glet scenario, shortened to `duration_s` if given.
pub fn scenario(name: &str, duration_s: Option<f64>) -> Scenario {
    let mut s = load_scenario(&scenario_path(name)).unwrap_or_else(|e| panic!("{e}"));
    if let Some(d) = duration_s {
        s.duration = baton_sched::time::ms_to_nanos(d * 1e3);
        s.warmup = s.warmup.min(s.duration / 4);
    }
    s
}

#[derive(Clone, Debug, Serialize)]
pub struct GoodputRow {
    pub scenario: String,
    /// (policy, goodput r/s) in `PolicyKind::GLET_SET` order.
    pub goodput_rps: Vec<(String, f64)>,
}

impl GoodputRow {
    pub fn of(&self, p: PolicyKind) -> f64 {
        self.goodput_rps.iter().find(|x| x.0 == p.as_str()).map_or(0.0, |x| x.1)
    }
}

/// Experiment 1 on the named scenarios.
pub fn goodputs(names: &[&str], policies: &[PolicyKind], duration_s: Option<f64>, tolerance: f64) -> Vec<GoodputRow> {
    names
        .iter()
        .map(|name| {
            let s = scenario(name, duration_s);
            goodput_row(name, &s, policies, tolerance)
        })
        .collect()
}

/// Each policy's goodput on one scenario.
fn goodput_row(name: &str, s: &Scenario, policies: &[PolicyKind], tolerance: f64) -> GoodputRow {
    let goodput_rps = policies.iter().map(|&p| (p.as_str().to_string(), find_goodput(s, p, tolerance).goodput_rps));
    GoodputRow { scenario: name.to_string(), goodput_rps: goodput_rps.collect() }
}

/// Experiment 1 on a counterfactual GPU whose partitions never slow each
/// other (same profiles, every co-run factor 1): what partitioning alone
/// gains on these profiles and SLOs.
pub fn goodputs_without_interference(
    names: &[&str],
    policies: &[PolicyKind],
    duration_s: Option<f64>,
    tolerance: f64,
) -> Vec<GoodputRow> {
    names
        .iter()
        .map(|name| {
            let mut s = scenario(name, duration_s);
            let data = s.partitions.as_deref().expect("glet scenario").without_interference();
            s.partitions = Some(std::sync::Arc::new(data));
            goodput_row(name, &s, policies, tolerance)
        })
        .collect()
}

/// The five-model set of experiment 2, with SLOs as in the scenarios
/// (twice the batch-of-32 latency on a whole GPU).
pub const IDEAL_MODELS: [(&str, f64); 5] =
    [("resnet50", 26.7), ("vgg16", 38.1), ("inception", 23.7), ("mobilenet", 15.8), ("densenet121", 35.7)];
pub const IDEAL_RATES: [f64; 3] = [0.0, 100.0, 200.0];

/// The five models at per-model rates `rates` (weights) on `gpus` GPUs.
pub fn five_models(gpus: usize, rates: &[f64], duration_s: f64) -> Scenario {
    let mut t = format!(
        "name = \"glet-five\"\nseed = 13\nduration_s = {duration_s}\nwarmup_s = {}\n[cluster]\ngpus = {gpus}\n\
         partition_profiles = \"data/partition-profiles\"\n",
        duration_s / 10.0
    );
    for ((name, slo), w) in IDEAL_MODELS.iter().zip(rates) {
        t += &format!("[[models]]\nname = \"{name}\"\nprofile = \"{name}\"\nslo_ms = {slo}\nweight = {w}\n");
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| e.to_string());
    Scenario::parse_with(&t, &read).expect("the five-model scenario parses")
}

#[derive(Clone, Debug, Serialize)]
pub struct IdealRow {
    pub gpus: usize,
    pub combinations: usize,
    /// Planned on paper and kept in the simulator.
    pub glet_schedulable: usize,
    pub ideal_schedulable: usize,
    /// Planned on paper only.
    pub glet_planned: usize,
    pub ideal_planned: usize,
    /// Goodput with all five models at one rate.
    pub glet_goodput_rps: f64,
    pub ideal_goodput_rps: f64,
}

/// What `planner` needs to serve the glet scenario `s` at `rate_rps`.
fn serving(planner: Planner, s: &Scenario, rate_rps: f64) -> Serving<'_> {
    build::serving(planner, s, rate_rps).expect("a glet scenario: partition profiles for every model")
}

/// Whether `planner` plans these rates on paper, and whether its run in
/// the simulator keeps every model within the bad-rate limit.
fn schedulable(planner: Planner, s: &Scenario, rate_rps: f64) -> (bool, bool) {
    let serving = serving(planner, s, rate_rps);
    if plan_once(planner, serving.data, &serving.demands, s.cluster.backends as usize).is_none() {
        return (false, false);
    }
    let mut sched = serving.scheduler();
    let r = run_with(s, "plan", &mut sched, rate_rps);
    (true, r.meets_slos())
}

/// Experiment 2 on `gpus` GPUs (every combination but all-zero).
pub fn versus_ideal(gpus: usize, duration_s: f64, tolerance: f64) -> IdealRow {
    let n = IDEAL_MODELS.len();
    let k = IDEAL_RATES.len();
    let mut row = IdealRow {
        gpus,
        combinations: 0,
        glet_schedulable: 0,
        ideal_schedulable: 0,
        glet_planned: 0,
        ideal_planned: 0,
        glet_goodput_rps: 0.0,
        ideal_goodput_rps: 0.0,
    };
    for code in 1..k.pow(n as u32) {
        let rates: Vec<f64> = (0..n).map(|i| IDEAL_RATES[code / k.pow(i as u32) % k]).collect();
        let total: f64 = rates.iter().sum();
        let s = five_models(gpus, &rates, duration_s);
        row.combinations += 1;
        let (gp, gs) = schedulable(Planner::Glet, &s, total);
        let (ip, is) = schedulable(Planner::Ideal, &s, total);
        row.glet_planned += usize::from(gp);
        row.glet_schedulable += usize::from(gs);
        row.ideal_planned += usize::from(ip);
        row.ideal_schedulable += usize::from(is);
    }
    let s = five_models(gpus, &[1.0; 5], duration_s);
    let goodput = |planner: Planner| {
        let build = |rate: f64| -> Box<dyn Scheduler> { Box::new(serving(planner, &s, rate).scheduler()) };
        find_goodput_with(&s, &format!("{planner:?}"), &build, tolerance).goodput_rps
    };
    row.glet_goodput_rps = goodput(Planner::Glet);
    row.ideal_goodput_rps = goodput(Planner::Ideal);
    row
}

#[derive(Clone, Debug, Serialize)]
pub struct NointRow {
    pub scenario: String,
    /// The highest aggregate rate glet-noint's planner calls schedulable.
    pub noint_max_rps: f64,
    pub noint_bad_rate: f64,
    /// Whether glet's planner accepts that rate, and if so its bad rate.
    pub glet_accepts: bool,
    pub glet_bad_rate: Option<f64>,
}

impl NointRow {
    /// glet-noint breaks the SLO at a rate it accepted, and glet either
    /// refuses that rate or keeps it.
    pub fn glet_filters(&self) -> bool {
        self.noint_bad_rate > BAD_RATE_LIMIT && self.glet_bad_rate.is_none_or(|b| b <= BAD_RATE_LIMIT)
    }
}

/// The highest aggregate rate (within 0.1%) `planner` plans on paper.
pub fn highest_planned(planner: Planner, s: &Scenario) -> f64 {
    let data = s.partitions.as_deref().expect("glet scenario");
    let gpus = s.cluster.backends as usize;
    let ok = |r: f64| plan_once(planner, data, &serving(planner, s, r).demands, gpus).is_some();
    let (mut lo, mut hi) = (0.0, s.capacity_bound_rps() * 2.0);
    assert!(!ok(hi), "{planner:?} plans beyond twice the capacity bound");
    while hi - lo > 1e-3 * hi {
        let mid = 0.5 * (lo + hi);
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The worst bad rate of any model with traffic: what the 1% limit judges.
pub fn worst_bad_rate(r: &Report) -> f64 {
    r.models.iter().filter(|m| m.sent > 0).map(|m| m.bad_rate).fold(0.0, f64::max)
}

/// Experiment 3 on the named scenarios.
pub fn noint_breaks(names: &[&str], duration_s: Option<f64>) -> Vec<NointRow> {
    names
        .iter()
        .map(|name| {
            let s = scenario(name, duration_s);
            let rate = highest_planned(Planner::GletNoint, &s);
            let noint = baton_sched::sim::run(&s, PolicyKind::GletNoint, rate);
            let data = s.partitions.as_deref().expect("glet scenario");
            let accepts =
                plan_once(Planner::Glet, data, &serving(Planner::Glet, &s, rate).demands, s.cluster.backends as usize)
                    .is_some();
            let glet = accepts.then(|| worst_bad_rate(&baton_sched::sim::run(&s, PolicyKind::Glet, rate)));
            NointRow {
                scenario: name.to_string(),
                noint_max_rps: rate,
                noint_bad_rate: worst_bad_rate(&noint),
                glet_accepts: accepts,
                glet_bad_rate: glet,
            }
        })
        .collect()
}
