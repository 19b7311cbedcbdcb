//! Partition planners on measured profiles (glet section 4), on paper
//! only, one model per partition: the first version, kept for the
//! on-paper comparison in `perf`. The planners the policies run, with
//! temporal sharing inside partitions and executed in the simulator, are
//! in `spatial.rs` and `cluster.rs`.
//!
//! A GPU is whole (100%) or split into two partitions whose sizes sum to
//! 100 (20+80, 40+60, 50+50). A model on a partition of size p next to a
//! sibling runs batches back to back; it keeps its SLO when
//! `2 * L(b, p) * f <= SLO` (a request may wait one batch, then run one),
//! with f the interference factor for its sibling (1 alone, or for
//! `glet-noint`). Its throughput is the best `b / (L(b, p) * f)` among such b.
//!
//! - `elastic` (glet's Algorithm 1): models by rate x SLO ascending; while a
//!   model's rate is not met, take `p_ideal = min(p_eff, p_req)` — p_eff the
//!   partition with the best throughput per percent, p_req the smallest that
//!   meets the remaining rate — best-fit into the free partitions (smallest
//!   that is large enough), else split a fresh GPU into p_ideal and the
//!   rest. The plan is then checked with every sibling in place.
//! - `scale` (Algorithm 2): the fewest GPUs, up to a limit, that `elastic`
//!   plans for.
//! - `ideal`: exhaustive search over every way to split and assign the GPUs
//!   (small instances).

use super::interference::InterferenceModel;
use super::profiles::{PartitionProfiles, BATCHES, PARTITIONS};
use crate::time::Nanos;

/// How two partitions of one GPU affect each other.
#[derive(Clone, Copy, Debug)]
pub enum Interference<'a> {
    Ignore,
    Model(&'a InterferenceModel),
}

/// Throughput (requests/s) of `model` alone-or-next-to `sibling` on a
/// partition, within `slo`; and the batch that gives it.
pub fn throughput(
    p: &PartitionProfiles,
    intf: Interference<'_>,
    model: usize,
    partition: u32,
    slo: Nanos,
    sibling: Option<usize>,
) -> (f64, u32) {
    let factor = |b: u32| match (intf, sibling) {
        (Interference::Model(m), Some(s)) => {
            let own = p.utilisation(model, b, partition);
            // The sibling's pressure at a typical batch of its own.
            let other = p.utilisation(s, 16, 100 - partition);
            match (own, other) {
                (Some(o), Some(x)) => m.factor(o, x),
                _ => 1.0,
            }
        }
        _ => 1.0,
    };
    BATCHES
        .iter()
        .filter_map(|&b| {
            let l = p.measured(model, b, partition)? as f64 * factor(b);
            (2.0 * l <= slo as f64).then(|| (b as f64 * 1e9 / l, b))
        })
        .fold((0.0, 0), |best, x| if x.0 > best.0 { x } else { best })
}

/// A planned GPU: its partitions, each with the model it runs (if any).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuPlan {
    pub parts: Vec<(u32, Option<usize>)>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PartitionPlan {
    pub gpus: Vec<GpuPlan>,
}

/// A model to place: profile index, rate, SLO.
#[derive(Clone, Copy, Debug)]
pub struct Demand {
    pub model: usize,
    pub rate_rps: f64,
    pub slo: Nanos,
}

impl PartitionPlan {
    /// Each demand's served rate with every sibling in place.
    pub fn served(&self, p: &PartitionProfiles, intf: Interference<'_>, demands: &[Demand]) -> Vec<f64> {
        let mut served = vec![0.0; demands.len()];
        for g in &self.gpus {
            for (i, &(size, d)) in g.parts.iter().enumerate() {
                let Some(d) = d else { continue };
                let sibling =
                    g.parts.iter().enumerate().find(|&(j, _)| j != i).and_then(|(_, s)| s.1).map(|s| demands[s].model);
                served[d] += throughput(p, intf, demands[d].model, size, demands[d].slo, sibling).0;
            }
        }
        served
    }

    pub fn meets(&self, p: &PartitionProfiles, intf: Interference<'_>, demands: &[Demand]) -> bool {
        self.served(p, intf, demands).iter().zip(demands).all(|(s, d)| *s + 1e-9 >= d.rate_rps)
    }
}

/// glet's elastic partitioning on `gpus` GPUs; None if it runs out.
/// After the first pass, models that a later neighbour slowed below their
/// rate get more partitions for the deficit (a few repair rounds).
pub fn elastic(
    p: &PartitionProfiles,
    intf: Interference<'_>,
    demands: &[Demand],
    gpus: usize,
) -> Option<PartitionPlan> {
    let mut order: Vec<usize> = (0..demands.len()).filter(|&d| demands[d].rate_rps > 0.0).collect();
    order.sort_by(|&a, &b| {
        let key = |d: usize| demands[d].rate_rps * demands[d].slo as f64;
        key(a).total_cmp(&key(b)).then(a.cmp(&b))
    });
    let mut plan = PartitionPlan { gpus: vec![] };
    for &d in &order {
        allocate(p, intf, demands, gpus, &mut plan, d, demands[d].rate_rps)?;
    }
    for _ in 0..REPAIR_ROUNDS {
        let served = plan.served(p, intf, demands);
        let short: Vec<(usize, f64)> =
            order.iter().map(|&d| (d, demands[d].rate_rps - served[d])).filter(|&(_, gap)| gap > 1e-9).collect();
        if short.is_empty() {
            return Some(plan);
        }
        for (d, gap) in short {
            allocate(p, intf, demands, gpus, &mut plan, d, gap)?;
        }
    }
    plan.meets(p, intf, demands).then_some(plan)
}

/// Rounds of re-allocation for models a neighbour slowed down.
const REPAIR_ROUNDS: usize = 3;

/// Gives demand `d` partitions until `rate` more is served (Algorithm 1's
/// inner loop).
fn allocate(
    p: &PartitionProfiles,
    intf: Interference<'_>,
    demands: &[Demand],
    gpus: usize,
    plan: &mut PartitionPlan,
    d: usize,
    rate: f64,
) -> Option<()> {
    let dm = demands[d];
    let alone = |size: u32| throughput(p, Interference::Ignore, dm.model, size, dm.slo, None).0;
    let p_eff = *PARTITIONS.iter().max_by(|&&a, &&b| (alone(a) / a as f64).total_cmp(&(alone(b) / b as f64)))?;
    let mut remaining = rate;
    while remaining > 1e-9 {
        let p_req = PARTITIONS.iter().copied().find(|&s| alone(s) >= remaining);
        let ideal = p_req.map_or(p_eff, |r| r.min(p_eff));
        // Best fit: the smallest free partition at least `ideal` large.
        let free = plan
            .gpus
            .iter()
            .enumerate()
            .flat_map(|(g, gp)| {
                gp.parts.iter().enumerate().filter(|(_, x)| x.1.is_none()).map(move |(i, x)| (x.0, g, i))
            })
            .filter(|&(size, ..)| size >= ideal)
            .min();
        let (g, i) = match free {
            Some((_, g, i)) => (g, i),
            None if plan.gpus.len() < gpus => {
                let parts = if ideal == 100 { vec![(100, None)] } else { vec![(ideal, None), (100 - ideal, None)] };
                plan.gpus.push(GpuPlan { parts });
                (plan.gpus.len() - 1, 0)
            }
            None => return None,
        };
        plan.gpus[g].parts[i].1 = Some(d);
        let size = plan.gpus[g].parts[i].0;
        let sibling = plan.gpus[g].parts.iter().enumerate().find(|&(j, _)| j != i).and_then(|(_, s)| s.1);
        let got = throughput(p, intf, dm.model, size, dm.slo, sibling.map(|s| demands[s].model)).0;
        if got <= 0.0 {
            return None;
        }
        remaining -= got;
    }
    Some(())
}

/// Algorithm 2: the fewest GPUs, up to `limit`, that `elastic` fits.
pub fn scale(p: &PartitionProfiles, intf: Interference<'_>, demands: &[Demand], limit: usize) -> Option<PartitionPlan> {
    (1..=limit).find_map(|n| elastic(p, intf, demands, n))
}

/// The GPU setups the exhaustive search tries: a split and who runs where.
fn setups(demands: usize) -> Vec<GpuPlan> {
    let who: Vec<Option<usize>> = std::iter::once(None).chain((0..demands).map(Some)).collect();
    let mut v = Vec::new();
    for &a in &who {
        v.push(GpuPlan { parts: vec![(100, a)] });
    }
    for (x, y) in [(20, 80), (40, 60), (50, 50)] {
        for &a in &who {
            for &b in &who {
                v.push(GpuPlan { parts: vec![(x, a), (y, b)] });
            }
        }
    }
    v
}

/// The exhaustive ideal: is there any way to split `gpus` GPUs and assign
/// the demands that meets every rate? Searches multisets of GPU setups,
/// pruning when the GPUs left cannot cover what is missing.
pub fn ideal(p: &PartitionProfiles, intf: Interference<'_>, demands: &[Demand], gpus: usize) -> Option<PartitionPlan> {
    let all = setups(demands.len());
    // Each setup's contribution to every demand.
    let gives: Vec<Vec<f64>> =
        all.iter().map(|g| PartitionPlan { gpus: vec![g.clone()] }.served(p, intf, demands)).collect();
    let best_per_gpu: Vec<f64> = (0..demands.len()).map(|d| gives.iter().map(|g| g[d]).fold(0.0, f64::max)).collect();
    let mut chosen = Vec::with_capacity(gpus);
    fn dfs(
        start: usize,
        left: usize,
        need: &mut Vec<f64>,
        gives: &[Vec<f64>],
        best: &[f64],
        chosen: &mut Vec<usize>,
    ) -> bool {
        if need.iter().all(|&n| n <= 1e-9) {
            return true;
        }
        if left == 0 || need.iter().zip(best).any(|(n, b)| *n > b * left as f64 + 1e-9) {
            return false;
        }
        for s in start..gives.len() {
            if gives[s].iter().zip(need.iter()).all(|(g, n)| *g <= 0.0 || *n <= 1e-9) {
                continue;
            }
            for (n, g) in need.iter_mut().zip(&gives[s]) {
                *n -= g;
            }
            chosen.push(s);
            if dfs(s, left - 1, need, gives, best, chosen) {
                return true;
            }
            chosen.pop();
            for (n, g) in need.iter_mut().zip(&gives[s]) {
                *n += g;
            }
        }
        false
    }
    let mut need: Vec<f64> = demands.iter().map(|d| d.rate_rps).collect();
    dfs(0, gpus, &mut need, &gives, &best_per_gpu, &mut chosen)
        .then(|| PartitionPlan { gpus: chosen.iter().map(|&s| all[s].clone()).collect() })
}
