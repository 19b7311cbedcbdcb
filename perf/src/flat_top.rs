//! The flat-top experiment (Symphony section 4.4, Figure 10): each policy's
//! goodput p is found, then it is offered 0.5x to 3x its own p. Above the
//! peak a flat-top scheduler keeps its in-SLO throughput near p (bad rate ~
//! (o-p)/o); below it the GPU idle fraction tracks (p-o)/p. Every policy
//! runs at every load, one scenario and seed, in one invocation.

use serde::Serialize;

use baton_sched::sim::{find_goodput, run};
use baton_sched::{PolicyKind, Scenario};

use crate::plot::{Plot, Series};

/// Offered load as multiples of the policy's own goodput.
pub const LOAD_FACTORS: [f64; 9] = [0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0];

#[derive(Clone, Debug, Serialize)]
pub struct FlatTopPoint {
    pub policy: String,
    /// The policy's goodput p: what `load_factor` multiplies.
    pub goodput_rps: f64,
    pub load_factor: f64,
    pub offered_rps: f64,
    pub in_slo_rps: f64,
    pub bad_rate: f64,
    pub gpu_idle_fraction: f64,
    pub mean_batch: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FlatTop {
    pub scenario: String,
    pub seed: u64,
    pub points: Vec<FlatTopPoint>,
}

pub fn run_flat_top(scenario: &Scenario, policies: &[PolicyKind], rel_tolerance: f64) -> FlatTop {
    let mut points = Vec::new();
    for &policy in policies {
        let p = find_goodput(scenario, policy, rel_tolerance).goodput_rps;
        assert!(p > 0.0, "{} has no goodput on {}", policy.as_str(), scenario.name);
        for &f in &LOAD_FACTORS {
            let r = run(scenario, policy, f * p);
            points.push(FlatTopPoint {
                policy: policy.as_str().to_string(),
                goodput_rps: p,
                load_factor: f,
                offered_rps: r.offered_rps,
                in_slo_rps: r.goodput_rps,
                bad_rate: r.bad_rate,
                gpu_idle_fraction: r.gpu_idle_fraction,
                mean_batch: r.mean_batch,
            });
        }
    }
    FlatTop { scenario: scenario.name.clone(), seed: scenario.seed, points }
}

impl FlatTop {
    pub fn series<'a>(&'a self, policy: &'a str) -> impl Iterator<Item = &'a FlatTopPoint> {
        self.points.iter().filter(move |x| x.policy == policy)
    }

    pub fn table(&self) -> String {
        let mut s = format!(
            "{} seed {} (p: each policy's own goodput)\n{:<18} {:>9} {:>6} {:>10} {:>10} {:>8} {:>9} {:>7} {:>9} {:>7}\n",
            self.scenario, self.seed, "policy", "p", "o/p", "offered", "in-SLO", "in-SLO/p", "bad", "idle", "(p-o)/p", "batch"
        );
        for x in &self.points {
            s += &format!(
                "{:<18} {:>9.1} {:>6.2} {:>10.1} {:>10.1} {:>8.3} {:>9.4} {:>7.3} {:>9.3} {:>7.2}\n",
                x.policy,
                x.goodput_rps,
                x.load_factor,
                x.offered_rps,
                x.in_slo_rps,
                x.in_slo_rps / x.goodput_rps,
                x.bad_rate,
                x.gpu_idle_fraction,
                (1.0 - x.load_factor).max(0.0),
                x.mean_batch
            );
        }
        s
    }

    /// In-SLO throughput and idle fraction against offered load, both
    /// normalised by each policy's p, with the ideal flat top and (p-o)/p dashed.
    pub fn plots(&self, policies: &[PolicyKind]) -> (Plot, Plot) {
        let mut thr = vec![Series {
            name: "ideal".into(),
            points: LOAD_FACTORS.iter().map(|&f| (f, f.min(1.0))).collect(),
            dashed: true,
        }];
        let mut idle = vec![Series {
            name: "(p-o)/p".into(),
            points: LOAD_FACTORS.iter().map(|&f| (f, (1.0 - f).max(0.0))).collect(),
            dashed: true,
        }];
        for pol in policies {
            let pts: Vec<&FlatTopPoint> = self.series(pol.as_str()).collect();
            thr.push(Series {
                name: pol.as_str().into(),
                points: pts.iter().map(|x| (x.load_factor, x.in_slo_rps / x.goodput_rps)).collect(),
                dashed: false,
            });
            idle.push(Series {
                name: pol.as_str().into(),
                points: pts.iter().map(|x| (x.load_factor, x.gpu_idle_fraction)).collect(),
                dashed: false,
            });
        }
        (
            Plot {
                title: format!("{}: in-SLO throughput vs offered load", self.scenario),
                x_label: "offered load / goodput p".into(),
                y_label: "in-SLO throughput / p".into(),
                series: thr,
            },
            Plot {
                title: format!("{}: GPU idle fraction vs offered load", self.scenario),
                x_label: "offered load / goodput p".into(),
                y_label: "GPU idle fraction".into(),
                series: idle,
            },
        )
    }
}
