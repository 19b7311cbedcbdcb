//! Spatio-temporal partition planners on a fixed number of GPUs: glet's
//! elastic partitioning (Algorithm 1, with temporal sharing inside a
//! partition) and the greedy best-fit partitioner the paper compares with.
//!
//! Elastic partitioning. Demands by `rate x SLO` ascending; while a demand
//! has rate r left:
//! - `p_eff` = the partition size with the best saturated throughput per
//!   percent, `p_req` = the smallest size whose saturated throughput covers
//!   r, `p_ideal = min(p_eff, p_req)` (p_eff when none covers r);
//! - temporal sharing: if r is a residual (below what a `p_ideal` partition
//!   serves saturated), try to merge it, as a Nexus residual session with
//!   its own batch and duty cycle on that partition's profile, into an
//!   already planned partition; among valid merges take the one with the
//!   highest resulting occupancy (Nexus's rule). Done if one fits;
//! - best fit: the smallest free partition of at least `p_ideal`, else a
//!   fresh GPU split into `p_ideal` and `100 - p_ideal`, else the largest
//!   free partition that still runs the model (ours: the paper fails here,
//!   leaving a usable partition idle);
//! - the partition runs the demand saturated (batch B, `2 l(B) <= SLO`) if
//!   r is at least its throughput, else as a residual node (Nexus: `b` the
//!   largest with `l(b) + b/r <= SLO`, duty `b/r`).
//!
//! If that runs out of GPUs, elastic retries (ours, in the spirit of
//! Algorithm 2's trial and error; the paper's SLOs are loose enough that it
//! does not need them): with every residual load (one below what a
//! `p_ideal` partition serves) sent to a whole GPU instead of a `p_ideal`
//! split when it needs a fresh GPU (free partitions large enough still come
//! first) — p_req of a small load is the smallest partition, and splitting
//! every GPU for small loads leaves temporal sharing no room — then with
//! only the last 1, 2, ... fresh GPUs kept whole for residual loads (the
//! first ones split for the tight models, the rest shared in time), and
//! each of those with the demands in the opposite order (loose SLOs first,
//! so that they share whole GPUs before tight ones take partitions alone).
//!
//! Greedy best-fit (the paper's baseline, section 2.4): demands in scenario
//! order, `p_req` only (the whole GPU when none covers r), the same best
//! fit, one model per partition, no temporal sharing.
//!
//! Interference (`parts.rs`): a partition next to a free one is planned
//! for the worst neighbour any demand could be, next to a used one for the
//! sessions it runs; a merge is taken only if both sides of the GPU still
//! hold afterwards. Every plan is checked whole before it is returned.

use super::parts::{sibling, GletPlan, PlannedPart, Planning};
use super::profiles::PARTITIONS;
use crate::nexus::{merged, residual, BackendPlan, PlannedSession};
use crate::types::ModelId;

/// Which partition planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spatial {
    Elastic,
    Greedy,
}

/// Rates below this (requests/s) count as met.
const EPS_RPS: f64 = 1e-6;

/// Plans every demand on at most `gpus` GPUs; None if it cannot.
pub fn plan_spatial(how: Spatial, planning: &Planning<'_>, gpus: usize) -> Option<GletPlan> {
    // (whole_from, reverse): first as Algorithm 1 has it, then residuals
    // on whole GPUs everywhere, then only on the last 1, 2, ... GPUs.
    let tries: Vec<(usize, bool)> = match how {
        Spatial::Elastic => [false, true]
            .into_iter()
            .flat_map(|rev| [gpus, 0].into_iter().chain((1..gpus).rev()).map(move |w| (w, rev)))
            .collect(),
        Spatial::Greedy => vec![(gpus, false)],
    };
    let parts = tries.iter().find_map(|&(whole_from, reverse)| {
        Placement { how, planning, gpus, whole_from, reverse }.place_all(Vec::new())
    })?;
    for i in 0..parts.len() {
        assert!(planning.holds(&parts, i), "{how:?} planned partition {i} that breaks next to its sibling: {parts:?}");
    }
    Some(GletPlan { parts, rate_scale: 1.0 })
}

/// One way of placing the demands: a residual load that needs a fresh GPU
/// numbered `whole_from` or above takes it whole; with `reverse`, demands
/// go loose SLOs first (module doc).
pub(crate) struct Placement<'a, 'p> {
    pub(crate) how: Spatial,
    pub(crate) planning: &'a Planning<'p>,
    pub(crate) gpus: usize,
    pub(crate) whole_from: usize,
    pub(crate) reverse: bool,
}

impl Placement<'_, '_> {
    /// Places every demand on the GPUs already split as `parts` (all
    /// free), then on fresh GPUs up to `gpus`.
    pub(crate) fn place_all(&self, mut parts: Vec<PlannedPart>) -> Option<Vec<PlannedPart>> {
        assert!(parts.iter().all(|p| p.node.is_none() && p.gpu < self.gpus));
        let demands = self.planning.demands;
        let mut order: Vec<usize> = (0..demands.len()).filter(|&d| demands[d].rate_rps > EPS_RPS).collect();
        if self.how == Spatial::Elastic {
            order.sort_by(|&a, &b| {
                let key = |d: usize| demands[d].rate_rps * demands[d].slo as f64;
                key(a).total_cmp(&key(b)).then(a.cmp(&b))
            });
        }
        if self.reverse {
            order.reverse();
        }
        for d in order {
            let mut left = demands[d].rate_rps;
            while left > EPS_RPS {
                left = self.place_one(&mut parts, d, left)?;
            }
        }
        Some(parts)
    }

    /// One step of Algorithm 1's inner loop for demand `d` with `left` r/s
    /// to place; returns what is left after it.
    fn place_one(&self, parts: &mut Vec<PlannedPart>, d: usize, left: f64) -> Option<f64> {
        let (how, planning) = (self.how, self.planning);
        let per_percent = |p: u32| planning.alone_rps(d, p) / p as f64;
        let p_req = PARTITIONS.iter().copied().find(|&p| planning.alone_rps(d, p) >= left);
        let ideal = match how {
            Spatial::Elastic => {
                let p_eff = PARTITIONS
                    .iter()
                    .copied()
                    .max_by(|&a, &b| per_percent(a).total_cmp(&per_percent(b)).then(b.cmp(&a)))?;
                p_req.map_or(p_eff, |r| r.min(p_eff))
            }
            Spatial::Greedy => p_req.unwrap_or(100),
        };
        let residual_load = left < planning.alone_rps(d, ideal);
        if how == Spatial::Elastic && residual_load && merge(planning, parts, d, left) {
            return Some(0.0);
        }
        let whole_from = if residual_load { self.whole_from } else { self.gpus };
        let i = best_fit(planning, self.gpus, parts, d, ideal, whole_from)?;
        let mut node = planning.saturated(parts, i, d)?;
        let full = node.sessions[0].rate_rps;
        assert!(full > 0.0);
        if left < full {
            let specs = planning.specs(parts, i, &[d])?;
            node = match residual(&specs[d], ModelId(d as u32), left) {
                Some((_, s, duty)) => BackendPlan { sessions: vec![s], duty_cycle: duty },
                // Its own batch cannot keep up: saturated, routed only `left`.
                None => {
                    node.sessions[0].rate_rps = left;
                    node
                }
            };
        }
        parts[i].node = Some(node);
        Some((left - full).max(0.0))
    }
}

/// Merges `left` r/s of demand `d` into the planned partition where the
/// merged node's occupancy is highest; false if it fits none.
fn merge(planning: &Planning<'_>, parts: &mut [PlannedPart], d: usize, left: f64) -> bool {
    let mut best: Option<(f64, usize, BackendPlan)> = None;
    for i in 0..parts.len() {
        let Some(node) = &parts[i].node else { continue };
        let mut involved: Vec<usize> = node.sessions.iter().map(|s| s.model.index()).collect();
        if involved.contains(&d) {
            // One session per model and partition: the runtime queues per session.
            continue;
        }
        involved.push(d);
        let Some(specs) = planning.specs(parts, i, &involved) else { continue };
        let Some((_, s, duty)) = residual(&specs[d], ModelId(d as u32), left) else { continue };
        let Some(m) = merged(&specs, node, &s, duty, None) else { continue };
        let occ = m.occupancy(&specs);
        // The sibling must still hold next to the merged node.
        if let Some(j) = sibling(parts, i) {
            let mut trial = parts.to_vec();
            trial[i].node = Some(m.clone());
            if !planning.holds(&trial, j) {
                continue;
            }
        }
        if best.as_ref().is_none_or(|b| occ > b.0) {
            best = Some((occ, i, m));
        }
    }
    let Some((_, i, m)) = best else { return false };
    assert!(m.sessions.iter().any(|s: &PlannedSession| s.model.index() == d));
    parts[i].node = Some(m);
    true
}

/// The partition demand `d` goes to: the smallest free one of at least
/// `ideal`%, else a fresh GPU split at `ideal` (whole from GPU
/// `whole_from` on), else the largest free one that runs it at all. Only
/// partitions where the demand meets its SLO count.
fn best_fit(
    planning: &Planning<'_>,
    gpus: usize,
    parts: &mut Vec<PlannedPart>,
    d: usize,
    ideal: u32,
    whole_from: usize,
) -> Option<usize> {
    let runs = |parts: &[PlannedPart], i: usize| planning.saturated(parts, i, d).is_some();
    let free: Vec<usize> = (0..parts.len()).filter(|&i| parts[i].node.is_none() && runs(parts, i)).collect();
    let key = |i: usize| (parts[i].percent, parts[i].gpu, i);
    if let Some(&i) = free.iter().filter(|&&i| parts[i].percent >= ideal).min_by_key(|&&i| key(i)) {
        return Some(i);
    }
    let used = parts.iter().map(|p| p.gpu + 1).max().unwrap_or(0);
    let ideal = if used >= whole_from { 100 } else { ideal };
    if used < gpus {
        let gpu = used;
        parts.push(PlannedPart { gpu, percent: ideal, node: None });
        if ideal < 100 {
            parts.push(PlannedPart { gpu, percent: 100 - ideal, node: None });
        }
        let i = parts.len() - if ideal < 100 { 2 } else { 1 };
        assert_eq!(sibling(parts, i).is_some(), ideal < 100);
        if runs(parts, i) {
            return Some(i);
        }
        // The model does not run on this size: take the whole GPU instead.
        parts.truncate(parts.len() - if ideal < 100 { 2 } else { 1 });
        parts.push(PlannedPart { gpu, percent: 100, node: None });
        return runs(parts, parts.len() - 1).then_some(parts.len() - 1);
    }
    free.iter().copied().max_by_key(|&i| (parts[i].percent, std::cmp::Reverse(i)))
}
