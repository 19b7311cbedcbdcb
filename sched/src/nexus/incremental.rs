//! Nexus's epoch planner across epochs (section 6.1, last paragraph): start
//! from the previous plan so that few sessions move.
//!
//! 1. Every session keeps its backends; its rate on each is scaled by how
//!    the model's total rate changed. Models new to the plan are unplaced.
//! 2. Each backend is rebuilt from its sessions at their new rates (its own
//!    residual for the first, then Nexus's merge for the rest). A backend that
//!    no longer fits is overloaded: its cheapest sessions (smallest share of
//!    the duty cycle) are evicted until it fits.
//! 3. If the workload shrank, the least-used backends are emptied into the
//!    others where the merge allows, and released.
//! 4. Evicted and unplaced load is packed as in Algorithm 1: whole backends
//!    at the saturating batch, then residuals merged into the existing nodes
//!    first.

use super::squishy::{merged, pack_residuals, residual, saturate, BackendPlan, Plan, PlannedSession, Residual};
use crate::time::NANOS_PER_S;
use crate::types::{ModelId, ModelSpec};

/// Re-plans `rates_rps` starting from `prev`.
pub fn replan(models: &[ModelSpec], prev: &Plan, rates_rps: &[f64], gpu_memory_mb: Option<f64>) -> Plan {
    let mut old_total = vec![0.0; models.len()];
    for s in prev.backends.iter().flat_map(|b| &b.sessions) {
        old_total[s.model.index()] += s.rate_rps;
    }
    // 1. Scale each session's share; unplaced load waits.
    let mut unplaced: Vec<(ModelId, f64)> = Vec::new();
    for (m, &r) in rates_rps.iter().enumerate() {
        if old_total[m] <= 0.0 && r > 0.0 {
            unplaced.push((ModelId(m as u32), r));
        }
    }
    let mut backends: Vec<BackendPlan> = Vec::new();
    for b in &prev.backends {
        let shares: Vec<(ModelId, f64)> = b
            .sessions
            .iter()
            .map(|s| (s.model, s.rate_rps * rates_rps[s.model.index()] / old_total[s.model.index()]))
            .filter(|&(_, r)| r > 1e-9)
            .collect();
        // 2. Rebuild; evict the cheapest until it fits.
        let mut keep = shares;
        loop {
            if keep.is_empty() {
                break;
            }
            if let Some(node) = rebuild(models, &keep, gpu_memory_mb) {
                backends.push(node);
                break;
            }
            let cheapest = (0..keep.len())
                .min_by(|&a, &b| cost(models, keep[a]).total_cmp(&cost(models, keep[b])).then(a.cmp(&b)))
                .expect("non-empty");
            unplaced.push(keep.remove(cheapest));
        }
    }
    // 3. Release the least-used backends whose sessions fit elsewhere.
    let demand: f64 = rates_rps.iter().sum();
    let before: f64 = old_total.iter().sum();
    if demand < before {
        backends.sort_by(|a, b| b.occupancy(models).total_cmp(&a.occupancy(models)));
        let mut i = backends.len();
        while i > 0 {
            i -= 1;
            let mut rest: Vec<BackendPlan> =
                backends.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, b)| b.clone()).collect();
            let moved = backends[i].sessions.iter().all(|s| place(models, &mut rest, s, gpu_memory_mb));
            if moved {
                backends = rest;
            }
        }
    }
    // 4. Pack what is unplaced: whole backends, then residuals into the nodes.
    let mut whole = Vec::new();
    let mut residuals: Vec<Residual> = Vec::new();
    for (m, r) in unplaced {
        saturate(models, m, r, &mut whole, &mut residuals);
    }
    pack_residuals(models, &mut backends, residuals, gpu_memory_mb);
    backends.extend(whole);
    Plan { backends, rate_scale: 1.0 }
}

/// A session's share of its backend: l(b)/d at its own residual plan.
fn cost(models: &[ModelSpec], (m, r): (ModelId, f64)) -> f64 {
    residual(&models[m.index()], m, r).map_or(f64::INFINITY, |(occ, ..)| occ)
}

/// One backend serving `sessions` at their rates, if they fit: a lone
/// session above its residual capacity runs saturated.
fn rebuild(models: &[ModelSpec], sessions: &[(ModelId, f64)], gpu_memory_mb: Option<f64>) -> Option<BackendPlan> {
    let (m0, r0) = sessions[0];
    let spec = &models[m0.index()];
    let mut node = match residual(spec, m0, r0) {
        Some((_, s, duty)) => BackendPlan { sessions: vec![s], duty_cycle: duty },
        None if sessions.len() == 1 => {
            let big = spec.profile.max_batch_within(spec.slo / 2, 0, spec.profile.max_batch()).max(1);
            let l_big = spec.profile.latency(big);
            if r0 > big as f64 * NANOS_PER_S as f64 / l_big as f64 + 1e-9 {
                return None;
            }
            return Some(BackendPlan {
                sessions: vec![PlannedSession { model: m0, batch: big, rate_rps: r0 }],
                duty_cycle: l_big,
            });
        }
        None => return None,
    };
    for &(m, r) in &sessions[1..] {
        let (_, s, duty) = residual(&models[m.index()], m, r)?;
        node = merged(models, &node, &s, duty, gpu_memory_mb)?;
    }
    Some(node)
}

/// Merges session `s` into the fullest node of `nodes` that takes it.
fn place(models: &[ModelSpec], nodes: &mut [BackendPlan], s: &PlannedSession, gpu_memory_mb: Option<f64>) -> bool {
    let Some((_, _, duty)) = residual(&models[s.model.index()], s.model, s.rate_rps) else { return false };
    let best = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| merged(models, n, s, duty, gpu_memory_mb).map(|m| (m.occupancy(models), i, m)))
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
    match best {
        Some((_, i, m)) => {
            nodes[i] = m;
            true
        }
        None => false,
    }
}

/// Sessions (model, backend index) that differ between two plans, matched
/// backend by backend: how much an epoch change moves.
pub fn moved_sessions(a: &Plan, b: &Plan) -> usize {
    let key = |p: &Plan| {
        let mut v: Vec<Vec<u32>> = p
            .backends
            .iter()
            .map(|x| {
                let mut m: Vec<u32> = x.sessions.iter().map(|s| s.model.0).collect();
                m.sort();
                m
            })
            .collect();
        v.sort();
        v
    };
    let (ka, mut kb) = (key(a), key(b));
    let mut moved = 0;
    for set in ka {
        match kb.iter().position(|x| *x == set) {
            Some(i) => {
                kb.remove(i);
            }
            None => moved += set.len(),
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nexus::squishy::squishy_bin_packing;
    use crate::nexus::squishy::tests::model;

    use crate::rng::Rng;
    use crate::time::Nanos;

    /// Epoch after epoch of drifting rates: every plan carries every model's
    /// rate within its SLOs and duty cycles, and moves fewer sessions than
    /// planning from scratch.
    #[test]
    fn replans_stay_valid_and_move_less_than_from_scratch() {
        let mut moved_incremental = 0;
        let mut moved_scratch = 0;
        for seed in 0..40 {
            let mut rng = Rng::new(seed);
            let n = 3 + rng.below(10) as usize;
            let models: Vec<ModelSpec> = (0..n)
                .map(|_| model(0.1 + rng.unit() * 3.0, 1.0 + rng.unit() * 15.0, 40.0 + rng.unit() * 100.0))
                .collect();
            let mut rates: Vec<f64> = (0..n).map(|_| 50.0 + rng.unit() * 1_500.0).collect();
            let mut plan = squishy_bin_packing(&models, &rates, None);
            for _epoch in 0..6 {
                for r in &mut rates {
                    *r = (*r * (0.7 + 0.6 * rng.unit())).max(1.0);
                }
                let next = replan(&models, &plan, &rates, None);
                let scratch = squishy_bin_packing(&models, &rates, None);
                for (m, &r) in rates.iter().enumerate() {
                    let planned: f64 = next
                        .backends
                        .iter()
                        .flat_map(|b| &b.sessions)
                        .filter(|s| s.model.index() == m)
                        .map(|s| s.rate_rps)
                        .sum();
                    assert!((planned - r).abs() <= 1e-6 * r, "seed {seed}: model {m} planned {planned} of {r}");
                }
                for b in &next.backends {
                    let busy: Nanos = b.sessions.iter().map(|s| models[s.model.index()].profile.latency(s.batch)).sum();
                    assert!(busy <= b.duty_cycle, "seed {seed}: overfull backend");
                    for s in &b.sessions {
                        let m = &models[s.model.index()];
                        assert!(b.duty_cycle + m.profile.latency(s.batch) <= m.slo + 1, "seed {seed}: SLO");
                    }
                }
                moved_incremental += moved_sessions(&plan, &next);
                moved_scratch += moved_sessions(&plan, &scratch);
                plan = next;
            }
        }
        eprintln!("sessions moved over 240 epochs: incremental {moved_incremental}, from scratch {moved_scratch}");
        assert!(moved_incremental < moved_scratch, "incremental moved {moved_incremental}, scratch {moved_scratch}");
    }
}
