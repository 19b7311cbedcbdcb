//! SuperServe's experiments on the default supernet (12 subnets, 73–80%),
//! 8 GPUs, SLO 36 ms: SLO attainment against mean serving accuracy for
//! SlackFit and every baseline, one run per cell, on the bursty grid
//! (Figure 8's shape), and attainment with accuracy while half the
//! backends fail one at a time (Figure 11a).

use serde::Serialize;

use baton_sched::sim::run;
use baton_sched::time::ms_to_nanos;
use baton_sched::{PolicyKind, Scenario};

pub const BASE_RATES: [f64; 3] = [6_000.0, 10_000.0, 16_000.0];
pub const CV2S: [f64; 3] = [2.0, 4.0, 8.0];
/// Share of the rate arriving as a Poisson base; the rest is bursty.
const BASE_SHARE: f64 = 0.3;

pub fn supernet_scenario(arrival: &str, duration_s: f64, faults: &[(f64, u32)]) -> Scenario {
    let mut t = format!(
        "name = \"superserve\"\nseed = 13\nduration_s = {duration_s}\nwarmup_s = 1\n\
         [cluster]\ngpus = 8\nctrl_delay_us = 100\n\
         [[models]]\nname = \"supernet\"\nsupernet = \"default\"\nmax_batch = 32\nslo_ms = 36.0\narrival = \"{arrival}\"\n"
    );
    for (at, b) in faults {
        t += &format!("[[faults]]\nat_s = {at}\nbackend = {b}\n");
    }
    Scenario::parse(&t).expect("valid SuperServe scenario")
}

#[derive(Clone, Debug, Serialize)]
pub struct Point {
    pub policy: String,
    pub attainment: f64,
    pub mean_accuracy: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub rate_rps: f64,
    pub cv2: f64,
    pub points: Vec<Point>,
}

impl Cell {
    /// SlackFit's point, then: is it at least `min_attainment`, and more
    /// accurate than every fixed-accuracy baseline that attains as much?
    pub fn slackfit_wins(&self, min_attainment: f64) -> bool {
        let sf = &self.points[0];
        sf.attainment >= min_attainment
            && self.points[1..]
                .iter()
                .filter(|p| p.policy.starts_with("fixed") || p.policy == "min-acc")
                .filter(|p| p.attainment >= sf.attainment)
                .all(|p| p.mean_accuracy < sf.mean_accuracy)
    }
}

fn points(s: &Scenario, rate: f64) -> Vec<Point> {
    PolicyKind::SUPERSERVE_SET
        .iter()
        .map(|&p| {
            let r = run(s, p, rate);
            Point {
                policy: p.as_str().into(),
                attainment: 1.0 - r.bad_rate,
                mean_accuracy: r.mean_accuracy.unwrap_or(0.0),
            }
        })
        .collect()
}

pub fn bursty_grid(duration_s: f64) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &rate in &BASE_RATES {
        for &cv2 in &CV2S {
            let s = supernet_scenario(&format!("bursty:{BASE_SHARE},{cv2}"), duration_s, &[]);
            cells.push(Cell { rate_rps: rate, cv2, points: points(&s, rate) });
        }
    }
    cells
}

#[derive(Clone, Debug, Serialize)]
pub struct FaultPhase {
    pub backends_alive: u32,
    pub attainment: f64,
    pub mean_accuracy: f64,
}

/// 3,500 q/s, CV² 2, 8 backends; one fails every `phase_s` until half are
/// gone. Each phase is measured on its own window of the same run (same
/// seed: the runs are identical up to the window's end).
pub fn faults(phase_s: f64) -> Vec<FaultPhase> {
    let kills: Vec<(f64, u32)> = (1..=4).map(|i| (1.0 + i as f64 * phase_s, i - 1)).collect();
    (0..=4)
        .map(|phase| {
            let mut s = supernet_scenario(&format!("bursty:{BASE_SHARE},2"), phase_s, &kills);
            s.warmup = ms_to_nanos((1.0 + phase as f64 * phase_s) * 1e3);
            let r = run(&s, PolicyKind::SlackFit, 3_500.0);
            FaultPhase {
                backends_alive: 8 - phase as u32,
                attainment: 1.0 - r.bad_rate,
                mean_accuracy: r.mean_accuracy.unwrap_or(0.0),
            }
        })
        .collect()
}

/// Figure 9's grid: from lambda1 = 2,500 q/s to lambda2 at tau q/s², CV² 8.
pub const LAMBDA2: [f64; 3] = [4_800.0, 6_800.0, 7_800.0];
pub const TAU: [f64; 3] = [250.0, 500.0, 5_000.0];

pub fn accel_grid(duration_s: f64) -> Vec<Cell> {
    let mut cells = Vec::new();
    for &l2 in &LAMBDA2 {
        for &tau in &TAU {
            let s = supernet_scenario(&format!("accel:{},{},8", 2_500.0 / l2, tau / l2), duration_s, &[]);
            cells.push(Cell { rate_rps: l2, cv2: tau, points: points(&s, l2) });
        }
    }
    cells
}

#[derive(Clone, Debug, Serialize)]
pub struct TraceResult {
    pub mean_rate_rps: f64,
    pub points: Vec<Point>,
    /// SlackFit's accuracy minus the best accuracy of a baseline that
    /// attains at least as much (None if none does).
    pub accuracy_gap: Option<f64>,
}

/// The real-shaped trace: a day of a generated Azure-schema trace (`trace.rs`,
/// 200 functions) compressed into the run, at mean rate `rate`.
pub fn real_trace(rate: f64, duration_s: f64) -> TraceResult {
    let csv = baton_sched::trace::generate_azure_csv(2019, 200);
    let mut s = supernet_scenario("trace:maf-synthetic.csv", duration_s, &[]);
    s.attach_traces(&|_| Ok(csv.clone())).expect("generated traces parse");
    let points = points(&s, rate);
    let sf = &points[0];
    let accuracy_gap = points[1..]
        .iter()
        .filter(|p| p.attainment >= sf.attainment)
        .map(|p| p.mean_accuracy)
        .fold(None, |m: Option<f64>, a| Some(m.map_or(a, |m| m.max(a))))
        .map(|best| sf.mean_accuracy - best);
    TraceResult { mean_rate_rps: rate, points, accuracy_gap }
}
