//! Goodput (Symphony's definition): the highest aggregate offered rate, the
//! scenario's shares kept, at which every model's bad rate is at most 1%.
//! Found by bisection on the rate, each probe a full simulated run.

use serde::Serialize;

use super::{run_with, Report, MAX_RATE_RPS};
use crate::build;
use crate::policy::PolicyKind;
use crate::scenario::Scenario;
use crate::types::Scheduler;

#[derive(Clone, Debug, Serialize)]
pub struct GoodputSearch {
    pub policy: String,
    pub goodput_rps: f64,
    /// The run at the goodput (None if even the lowest probe failed).
    pub at_goodput: Option<Report>,
    /// Every probe: (offered rate, met SLOs).
    pub probes: Vec<(f64, bool)>,
}

/// Bisects until the bracket is within `rel_tolerance` of its upper end.
pub fn find_goodput(scenario: &Scenario, policy: PolicyKind, rel_tolerance: f64) -> GoodputSearch {
    find_goodput_with(scenario, policy.as_str(), &|rate| build::scheduler(policy, scenario, rate), rel_tolerance)
}

/// The same for any scheduler: `build(rate)` makes a fresh one per probe.
pub fn find_goodput_with(
    scenario: &Scenario,
    name: &str,
    build: &dyn Fn(f64) -> Box<dyn Scheduler>,
    rel_tolerance: f64,
) -> GoodputSearch {
    assert!(rel_tolerance > 0.0 && rel_tolerance < 1.0);
    let mut probes = Vec::new();
    let mut at_goodput = None;
    let mut probe = |rate: f64, best: &mut Option<Report>| {
        let r = run_with(scenario, name, build(rate).as_mut(), rate);
        let ok = r.meets_slos();
        probes.push((rate, ok));
        if ok {
            *best = Some(r);
        }
        ok
    };
    // No schedule beats every backend running the largest feasible batch.
    let mut hi = (scenario.capacity_bound_rps() * 1.02).min(MAX_RATE_RPS);
    let mut lo = 0.0;
    while probe(hi, &mut at_goodput) {
        lo = hi;
        if hi >= MAX_RATE_RPS {
            return GoodputSearch { policy: name.to_string(), goodput_rps: lo, at_goodput, probes };
        }
        hi = (hi * 2.0).min(MAX_RATE_RPS);
    }
    while hi - lo > rel_tolerance * hi {
        let mid = 0.5 * (lo + hi);
        if probe(mid, &mut at_goodput) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    GoodputSearch { policy: name.to_string(), goodput_rps: lo, at_goodput, probes }
}
