//! The four partition policies and the exhaustive ideal, planned for a
//! fixed cluster of GPUs.
//!
//! - `glet`: elastic partitioning with temporal sharing, interference
//!   accounted (`spatial.rs`); `glet-noint`: the same, planning as if
//!   partitions never slowed each other (the simulator still slows them);
//! - `greedy-part`: greedy best-fit partitioning, one model per partition;
//! - `sbp`: Nexus's squishy bin packing on whole GPUs, L(b, 100);
//! - `ideal` (glet section 5.2: "exhaustively trying all 4^4 glet
//!   combinations"): every way to split the GPUs (each whole, 20+80, 40+60
//!   or 50+50; as multisets, GPUs being alike), each split filled by
//!   elastic's placement with temporal sharing; and, exhaustively, every
//!   assignment of one demand or none per partition, saturated. The first
//!   that covers every rate wins (interference accounted). Exhaustive over
//!   splits, not over how sessions share a partition: glet can still find
//!   a plan it misses, rarely.
//!
//! Fixed cluster: like Nexus's `plan_for_cluster`, a plan is made for the
//! offered rates scaled by the largest factor that still fits the GPUs
//! (bisection), so that spare GPUs give every model headroom instead of
//! idling. A factor of at least 1 means the offered rates are schedulable;
//! below 1 the plan carries what fits, and the rest misses its SLO.

use super::oracle::PartitionData;
use super::parts::{GletPlan, PlannedPart, Planning};
use super::planner::Demand;
use super::spatial::{plan_spatial, Placement, Spatial};
use crate::nexus::squishy_bin_packing;
use crate::policy::PolicyKind;
use crate::profile::Profile;
use crate::types::ModelSpec;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Planner {
    Glet,
    GletNoint,
    GreedyPart,
    Sbp,
    Ideal,
}

impl Planner {
    /// The planner behind a glet-family policy; None for every other policy.
    pub fn of(policy: PolicyKind) -> Option<Self> {
        match policy {
            PolicyKind::Glet => Some(Self::Glet),
            PolicyKind::GletNoint => Some(Self::GletNoint),
            PolicyKind::Sbp => Some(Self::Sbp),
            PolicyKind::GreedyPart => Some(Self::GreedyPart),
            _ => None,
        }
    }

    /// Whether the planner accounts for interference between partitions.
    pub fn aware(self) -> bool {
        matches!(self, Self::Glet | Self::GreedyPart | Self::Ideal)
    }
}

/// Rate scales tried: doubling up to this, halving down to its inverse.
const SCALE_MAX: f64 = 64.0;
/// Bisection steps on the scale (relative precision about 2^-9).
const SCALE_STEPS: usize = 9;

/// The planner's plan for exactly these rates on at most `gpus` GPUs.
pub fn plan_once(planner: Planner, data: &PartitionData, demands: &[Demand], gpus: usize) -> Option<GletPlan> {
    let plan = match planner {
        Planner::Glet | Planner::GletNoint => {
            plan_spatial(Spatial::Elastic, &Planning::new(data, demands, planner.aware()), gpus)
        }
        Planner::GreedyPart => plan_spatial(Spatial::Greedy, &Planning::new(data, demands, true), gpus),
        Planner::Sbp => sbp(data, demands, gpus),
        Planner::Ideal => {
            let planning = Planning::new(data, demands, true);
            splits_with_sharing(&planning, gpus).or_else(|| ideal(&planning, gpus))
        }
    }?;
    assert!(plan.gpus() <= gpus, "{planner:?} planned {} GPUs of {gpus}", plan.gpus());
    Some(plan)
}

/// The plan for the rates scaled by the largest factor (in 1/64..=64)
/// that fits `gpus` GPUs; None if not even 1/64 of them fits.
pub fn plan_for_gpus(planner: Planner, data: &PartitionData, demands: &[Demand], gpus: usize) -> Option<GletPlan> {
    let at = |s: f64| {
        let scaled: Vec<Demand> = demands.iter().map(|d| Demand { rate_rps: d.rate_rps * s, ..*d }).collect();
        plan_once(planner, data, &scaled, gpus)
    };
    let (mut lo, mut hi, mut best) = match at(1.0) {
        Some(p) => {
            let (mut lo, mut best) = (1.0, p);
            loop {
                if lo >= SCALE_MAX {
                    break (lo, lo, best);
                }
                match at(lo * 2.0) {
                    Some(p) => (lo, best) = (lo * 2.0, p),
                    None => break (lo, lo * 2.0, best),
                }
            }
        }
        None => {
            let mut hi = 1.0;
            loop {
                if hi <= 1.0 / SCALE_MAX {
                    return None;
                }
                if let Some(p) = at(hi / 2.0) {
                    break (hi / 2.0, hi, p);
                }
                hi /= 2.0;
            }
        }
    };
    for _ in 0..SCALE_STEPS {
        if hi <= lo {
            break;
        }
        let mid = 0.5 * (lo + hi);
        match at(mid) {
            Some(p) => (lo, best) = (mid, p),
            None => hi = mid,
        }
    }
    best.rate_scale = lo;
    Some(best)
}

/// What the runtime believes each session's batches take on its partition:
/// `profiles[k][j]` for the k-th used partition's j-th session — L(b, p)
/// times the slowdown its final sibling causes, for planners that account
/// for interference, L(b, p) alone for those that do not.
pub fn runtime_profiles(
    planner: Planner,
    data: &PartitionData,
    demands: &[Demand],
    plan: &GletPlan,
) -> Vec<Vec<Profile>> {
    let planning = Planning::new(data, demands, planner.aware());
    plan.used()
        .map(|(i, p)| {
            p.node
                .as_ref()
                .expect("used")
                .sessions
                .iter()
                .map(|s| planning.profile(&plan.parts, i, s.model.index()).expect("planned partitions have profiles"))
                .collect()
        })
        .collect()
}

/// Squishy bin packing on whole GPUs (L(b, 100)); None if it needs more.
fn sbp(data: &PartitionData, demands: &[Demand], gpus: usize) -> Option<GletPlan> {
    let specs: Vec<ModelSpec> = demands
        .iter()
        .enumerate()
        .map(|(i, d)| ModelSpec {
            name: format!("demand-{i}"),
            profile: data.solo_profile(d.model, 100).expect("demands have whole-GPU profiles"),
            slo: d.slo,
            dynamic: None,
            memory_mb: 0.0,
            prefix: None,
            subnets: vec![],
        })
        .collect();
    let rates: Vec<f64> = demands.iter().map(|d| d.rate_rps).collect();
    let plan = squishy_bin_packing(&specs, &rates, None);
    (plan.backends.len() <= gpus).then(|| GletPlan {
        parts: plan
            .backends
            .into_iter()
            .enumerate()
            .map(|(gpu, node)| PlannedPart { gpu, percent: 100, node: Some(node) })
            .collect(),
        rate_scale: 1.0,
    })
}

/// The ways to split one GPU.
const SPLITS: [&[u32]; 4] = [&[100], &[20, 80], &[40, 60], &[50, 50]];

/// Every multiset of `gpus` GPU splits, each filled by elastic's
/// placement; the first that places every demand.
fn splits_with_sharing(planning: &Planning<'_>, gpus: usize) -> Option<GletPlan> {
    fn walk(planning: &Planning<'_>, gpus: usize, from: usize, chosen: &mut Vec<usize>) -> Option<GletPlan> {
        if chosen.len() == gpus {
            let parts: Vec<PlannedPart> = chosen
                .iter()
                .enumerate()
                .flat_map(|(gpu, &k)| SPLITS[k].iter().map(move |&percent| PlannedPart { gpu, percent, node: None }))
                .collect();
            let placement = Placement { how: Spatial::Elastic, planning, gpus, whole_from: gpus, reverse: false };
            let placed = placement.place_all(parts)?;
            assert!(planning.valid(&placed));
            return Some(GletPlan { parts: placed, rate_scale: 1.0 });
        }
        for k in from..SPLITS.len() {
            chosen.push(k);
            let found = walk(planning, gpus, k, chosen);
            chosen.pop();
            if found.is_some() {
                return found;
            }
        }
        None
    }
    walk(planning, gpus, 0, &mut Vec::with_capacity(gpus))
}

/// One GPU set up: its partitions, each saturated by its demand (if any),
/// each side's factor from the other side's batch.
fn setup(planning: &Planning<'_>, split: &[(u32, Option<usize>)]) -> Option<Vec<PlannedPart>> {
    let mut parts: Vec<PlannedPart> =
        split.iter().map(|&(percent, _)| PlannedPart { gpu: 0, percent, node: None }).collect();
    // Two rounds: each side sized alone, then next to the other.
    for _ in 0..2 {
        for (i, &(_, d)) in split.iter().enumerate() {
            if let Some(d) = d {
                parts[i].node = Some(planning.saturated(&parts, i, d)?);
            }
        }
    }
    planning.valid(&parts).then_some(parts)
}

/// The exhaustive ideal (module doc): DFS over multisets of GPU setups,
/// pruned when the GPUs left cannot cover what is missing.
fn ideal(planning: &Planning<'_>, gpus: usize) -> Option<GletPlan> {
    let n = planning.demands.len();
    let who: Vec<Option<usize>> =
        std::iter::once(None).chain((0..n).filter(|&d| planning.demands[d].rate_rps > 0.0).map(Some)).collect();
    let mut splits: Vec<Vec<(u32, Option<usize>)>> = who.iter().map(|&a| vec![(100, a)]).collect();
    for (x, y) in [(20, 80), (40, 60), (50, 50)] {
        for &a in &who {
            for &b in &who {
                splits.push(vec![(x, a), (y, b)]);
            }
        }
    }
    let setups: Vec<(Vec<PlannedPart>, Vec<f64>)> = splits
        .iter()
        .filter_map(|s| setup(planning, s))
        .map(|parts| {
            let mut gives = vec![0.0; n];
            for p in parts.iter().filter_map(|p| p.node.as_ref()) {
                for s in &p.sessions {
                    gives[s.model.index()] += s.rate_rps;
                }
            }
            (parts, gives)
        })
        .filter(|(_, g)| g.iter().any(|&x| x > 0.0))
        .collect();
    let best: Vec<f64> = (0..n).map(|d| setups.iter().map(|s| s.1[d]).fold(0.0, f64::max)).collect();
    let mut need: Vec<f64> = planning.demands.iter().map(|d| d.rate_rps).collect();
    let mut chosen = Vec::with_capacity(gpus);
    if !dfs(0, gpus, &mut need, &setups, &best, &mut chosen) {
        return None;
    }
    let mut parts = Vec::new();
    for (gpu, &s) in chosen.iter().enumerate() {
        parts.extend(setups[s].0.iter().cloned().map(|p| PlannedPart { gpu, ..p }));
    }
    Some(GletPlan { parts, rate_scale: 1.0 })
}

fn dfs(
    start: usize,
    left: usize,
    need: &mut Vec<f64>,
    setups: &[(Vec<PlannedPart>, Vec<f64>)],
    best: &[f64],
    chosen: &mut Vec<usize>,
) -> bool {
    const EPS: f64 = 1e-9;
    if need.iter().all(|&x| x <= EPS) {
        return true;
    }
    if left == 0 || need.iter().zip(best).any(|(x, b)| *x > b * left as f64 + EPS) {
        return false;
    }
    for s in start..setups.len() {
        let gives = &setups[s].1;
        if gives.iter().zip(need.iter()).all(|(g, x)| *g <= 0.0 || *x <= EPS) {
            continue;
        }
        for (x, g) in need.iter_mut().zip(gives) {
            *x -= g;
        }
        chosen.push(s);
        if dfs(s, left - 1, need, setups, best, chosen) {
            return true;
        }
        chosen.pop();
        for (x, g) in need.iter_mut().zip(gives) {
            *x += g;
        }
    }
    false
}
