//! Orloj's finish-rate grid (its paper's Figures 8–9 shape): for four
//! execution-time shapes and SLOs of 1, 1.5, 2 and 3 times the P99 solo
//! time, the finish rate (1 - bad rate) of orloj and each baseline, one run
//! per cell, all at one fixed load per shape: the rate at which the backends
//! would be 90% busy running batches of four (`E[T_4]` by Monte Carlo from
//! the shape itself). Plus the static check: orloj's goodput next to
//! symphony's on models with constant execution times.

use serde::Serialize;

use baton_sched::dist::ExecDist;
use baton_sched::rng::Rng;
use baton_sched::sim::{find_goodput, run};
use baton_sched::{PolicyKind, Scenario};

pub const SLO_MULTIPLES: [f64; 4] = [1.0, 1.5, 2.0, 3.0];
const GPUS: u32 = 4;
const KAPPA: f64 = 0.1;

/// (name, apps as (weight, exec_ms)).
pub fn shapes() -> Vec<(&'static str, Vec<(f64, &'static str)>)> {
    vec![
        ("normal", vec![(1.0, "normal:25,5")]),
        ("bimodal", vec![(0.5, "normal:10,1"), (0.5, "normal:40,4")]),
        ("trimodal", vec![(1.0, "normal:10,1"), (1.0, "normal:25,2.5"), (1.0, "normal:40,4")]),
        ("unequal-peak", vec![(0.8, "normal:10,1"), (0.2, "normal:40,4")]),
    ]
}

pub fn scenario(shape: &str, apps: &[(f64, &str)], slo_multiple: f64, duration_s: f64) -> Scenario {
    let mut t = format!(
        "name = \"orloj-{shape}-{slo_multiple}x\"\nseed = 11\nduration_s = {duration_s}\nwarmup_s = 1\n\
         [cluster]\ngpus = {GPUS}\nctrl_delay_us = 100\n\
         [[models]]\nname = \"dynamic\"\nslo_p99_multiple = {slo_multiple}\nkappa = {KAPPA}\nmax_batch = 32\narrival = \"poisson\"\n"
    );
    for (i, (w, exec)) in apps.iter().enumerate() {
        t += &format!("[[models.apps]]\nname = \"app{i}\"\nweight = {w}\nexec_ms = \"{exec}\"\n");
    }
    Scenario::parse(&t).unwrap_or_else(|e| panic!("grid scenario: {e}"))
}

/// The load of a shape: backends 90% busy with batches of four.
pub fn load_rps(apps: &[(f64, &str)]) -> f64 {
    let dists: Vec<(f64, ExecDist)> = apps.iter().map(|&(w, e)| (w, ExecDist::parse(e).expect("valid"))).collect();
    let total: f64 = dists.iter().map(|d| d.0).sum();
    let mut rng = Rng::new(3);
    let draw = |rng: &mut Rng| {
        let mut pick = rng.unit() * total;
        let d = dists.iter().find(|d| {
            pick -= d.0;
            pick < 0.0
        });
        d.unwrap_or(&dists[0]).1.sample(rng) as f64
    };
    let n = 20_000;
    let mean_t4: f64 = (0..n).map(|_| (0..4).map(|_| draw(&mut rng)).fold(0.0, f64::max)).sum::<f64>() / n as f64
        * (1.0 + 3.0 * KAPPA);
    0.9 * GPUS as f64 * 4.0 / (mean_t4 / 1e9)
}

#[derive(Clone, Debug, Serialize)]
pub struct GridCell {
    pub shape: String,
    pub slo_multiple: f64,
    pub offered_rps: f64,
    /// (policy, finish rate)
    pub finish: Vec<(String, f64)>,
    /// orloj's finish rate over the best baseline's.
    pub orloj_gain: f64,
}

pub fn run_grid(duration_s: f64) -> Vec<GridCell> {
    let mut cells = Vec::new();
    for (shape, apps) in shapes() {
        let rate = load_rps(&apps);
        for &k in &SLO_MULTIPLES {
            let s = scenario(shape, &apps, k, duration_s);
            let finish: Vec<(String, f64)> = PolicyKind::ORLOJ_SET
                .iter()
                .map(|&p| (p.as_str().to_string(), 1.0 - run(&s, p, rate).bad_rate))
                .collect();
            let orloj = finish[0].1;
            let best_baseline = finish[1..].iter().map(|f| f.1).fold(0.0, f64::max);
            cells.push(GridCell {
                shape: shape.to_string(),
                slo_multiple: k,
                offered_rps: rate,
                orloj_gain: if best_baseline > 0.0 { orloj / best_baseline } else { f64::INFINITY },
                finish,
            });
        }
    }
    cells
}

#[derive(Clone, Debug, Serialize)]
pub struct StaticCheck {
    pub scenario: String,
    pub symphony_rps: f64,
    pub orloj_rps: f64,
    pub ratio: f64,
}

/// Orloj's goodput next to symphony's on a static model.
pub fn static_check(s: &Scenario, rel_tolerance: f64) -> StaticCheck {
    let sym = find_goodput(s, PolicyKind::Symphony, rel_tolerance).goodput_rps;
    let orl = find_goodput(s, PolicyKind::Orloj, rel_tolerance).goodput_rps;
    StaticCheck { scenario: s.name.clone(), symphony_rps: sym, orloj_rps: orl, ratio: orl / sym }
}
