//! Partitioning models into K sub-clusters, each with its own scheduler
//! (Symphony, Appendix A; `../shared/design/symphony.md`, "Partitioning").
//!
//! Each model stays whole on one sub-cluster. Its load is its GPU demand:
//! its rate over one GPU's throughput at the batch it can run — the
//! largest that runs in half its SLO (the batch a GPU can sustain without
//! coordination, as in the analytic bounds) and that its own arrivals can
//! fill in the time the SLO leaves after running it (`r·(SLO − l(b))`
//! requests; a model with little traffic runs small, less efficient
//! batches and needs more GPU time per request). Demand therefore depends
//! on the rate, and a plan is made for one. The plan minimises `ΔR + w·ΔS`: the spread
//! (max − min) of the sub-clusters' demand plus `w` times the spread of
//! their model counts (`w` scales a model to the mean demand per model,
//! so neither term swamps the other). GPUs go to sub-clusters in
//! proportion to their demand (largest remainders), at least one to each
//! that has a model.
//!
//! The search: greedy (largest demand first onto the sub-cluster where the
//! objective grows least), then single moves and swaps while one improves
//! it; then the MILP (`partition_milp.rs`) from that start within a node
//! budget (`MILP_NODES`), whose answer is taken when it is no worse — the
//! plan says which, with the solver's gap. Deterministic throughout. Not
//! yet: memory caps, and the cost of (un)loading models against a current
//! assignment; HiGHS is not wired in (microlp, pure Rust, is the solver).

use crate::scenario::Scenario;
use crate::types::ModelSpec;

/// One sub-cluster of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct SubCluster {
    /// Indices into the scenario's models, ascending.
    pub models: Vec<usize>,
    pub gpus: u32,
    /// The sum of its models' GPU demand.
    pub demand_gpus: f64,
}

/// What made a plan's assignment.
#[derive(Clone, Debug, PartialEq)]
pub enum Solver {
    /// The MILP's answer: proven optimal, or within `gap` of its bound.
    Milp { gap: Option<f64>, optimal: bool },
    /// The greedy search's, because the MILP failed or did no better.
    Greedy { why: String },
}

/// Branch-and-bound nodes the MILP may explore.
pub const MILP_NODES: u64 = 5_000;

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub subclusters: Vec<SubCluster>,
    pub solver: Solver,
    /// `ΔR + w·ΔS` of the plan.
    pub objective: f64,
    /// `(max − min) / mean` of the sub-clusters' demand per GPU.
    pub imbalance: f64,
}

/// What `plan` refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PartitionError {
    NoSchedulers,
    /// Fewer GPUs than sub-clusters that need one.
    TooFewGpus {
        gpus: u32,
        needed: usize,
    },
    /// What a partitioned cluster cannot run (`partitioned.rs`).
    Unsupported(&'static str),
}

impl std::fmt::Display for PartitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoSchedulers => write!(f, "a plan needs at least one scheduler"),
            Self::TooFewGpus { gpus, needed } => {
                write!(f, "{gpus} GPUs for {needed} sub-clusters with models: each needs at least one")
            }
            Self::Unsupported(what) => write!(f, "a partitioned cluster cannot run {what}"),
        }
    }
}

impl std::error::Error for PartitionError {}

/// A model's GPU demand at `rate_rps` (see the top of the file).
pub fn demand_gpus(m: &ModelSpec, rate_rps: f64) -> f64 {
    let most = m.profile.max_batch_within(m.slo / 2, 0, u32::MAX).max(1);
    let fills = |b: u32| {
        let left_s = m.slo.saturating_sub(m.profile.latency(b)) as f64 / 1e9;
        f64::from(b) <= (rate_rps * left_s).max(1.0)
    };
    let b = (1..=most).rev().find(|&b| fills(b)).unwrap_or(1);
    rate_rps / m.profile.throughput_rps(b)
}

/// Splits `s`'s models over `k` sub-clusters at aggregate `rate_rps`.
pub fn plan(s: &Scenario, k: usize, rate_rps: f64) -> Result<Plan, PartitionError> {
    if k == 0 {
        return Err(PartitionError::NoSchedulers);
    }
    let total_weight: f64 = s.models.iter().map(|m| m.weight).sum();
    let demand: Vec<f64> = s
        .models
        .iter()
        .map(|m| demand_gpus(&m.spec, rate_rps * m.weight / total_weight.max(f64::MIN_POSITIVE)))
        .collect();
    let w = demand.iter().sum::<f64>() / demand.len().max(1) as f64;
    let mut of = greedy(&demand, k, w);
    improve(&mut of, &demand, k, w);
    let solver = match crate::partition_milp::solve(&demand, k, w, &of, MILP_NODES) {
        Ok(s) if objective(&s.of, &demand, k, w) <= objective(&of, &demand, k, w) + 1e-9 => {
            of = s.of;
            Solver::Milp { gap: s.gap, optimal: s.optimal }
        }
        Ok(_) => Solver::Greedy { why: "the MILP's answer was no better".into() },
        Err(why) => Solver::Greedy { why },
    };
    let needed = (0..k).filter(|&c| of.contains(&c)).count();
    if (s.cluster.backends as usize) < needed {
        return Err(PartitionError::TooFewGpus { gpus: s.cluster.backends, needed });
    }
    let loads = loads(&of, &demand, k);
    let gpus = share_gpus(&loads, &counts(&of, k), s.cluster.backends);
    let subclusters: Vec<SubCluster> = (0..k)
        .map(|c| SubCluster {
            models: (0..of.len()).filter(|&i| of[i] == c).collect(),
            gpus: gpus[c],
            demand_gpus: loads[c],
        })
        .collect();
    let per_gpu: Vec<f64> = subclusters.iter().filter(|c| c.gpus > 0).map(|c| c.demand_gpus / c.gpus as f64).collect();
    let mean = per_gpu.iter().sum::<f64>() / per_gpu.len().max(1) as f64;
    let imbalance = if mean > 0.0 { spread(&per_gpu) / mean } else { 0.0 };
    Ok(Plan { subclusters, solver, objective: objective(&of, &demand, k, w), imbalance })
}

/// Each sub-cluster's demand; a model on sub-cluster `k` (not placed
/// yet) counts nowhere.
fn loads(of: &[usize], demand: &[f64], k: usize) -> Vec<f64> {
    let mut l = vec![0.0; k];
    for (&c, &d) in of.iter().zip(demand).filter(|(&c, _)| c < k) {
        l[c] += d;
    }
    l
}

/// Each sub-cluster's number of models.
fn counts(of: &[usize], k: usize) -> Vec<f64> {
    loads(of, &vec![1.0; of.len()], k)
}

/// max − min.
fn spread(v: &[f64]) -> f64 {
    v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min)
}

/// `ΔR + w·ΔS` of assignment `of` (model i on sub-cluster `of[i]`).
fn objective(of: &[usize], demand: &[f64], k: usize, w: f64) -> f64 {
    spread(&loads(of, demand, k)) + w * spread(&counts(of, k))
}

/// Largest demand first, each onto the sub-cluster where the objective is
/// least after it (ties: the lowest index).
fn greedy(demand: &[f64], k: usize, w: f64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..demand.len()).collect();
    order.sort_by(|&a, &b| demand[b].total_cmp(&demand[a]).then(a.cmp(&b)));
    let mut of = vec![k; demand.len()];
    for i in order {
        let mut cost = |c: usize| {
            of[i] = c;
            (objective(&of, demand, k, w), c)
        };
        let best = (0..k).map(&mut cost).min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        of[i] = best.expect("k > 0").1;
    }
    of
}

/// Single moves, then swaps, while one lowers the objective (strictly, so
/// it ends).
fn improve(of: &mut [usize], demand: &[f64], k: usize, w: f64) {
    let mut best = objective(of, demand, k, w);
    let better = |of: &mut [usize], best: &mut f64| {
        let o = objective(of, demand, k, w);
        let won = o < *best - 1e-12;
        if won {
            *best = o;
        }
        won
    };
    loop {
        let mut changed = false;
        for i in 0..of.len() {
            for c in 0..k {
                let was = of[i];
                if c == was {
                    continue;
                }
                of[i] = c;
                if better(of, &mut best) {
                    changed = true;
                } else {
                    of[i] = was;
                }
            }
        }
        for i in 0..of.len() {
            for j in i + 1..of.len() {
                if of[i] == of[j] {
                    continue;
                }
                of.swap(i, j);
                if better(of, &mut best) {
                    changed = true;
                } else {
                    of.swap(i, j);
                }
            }
        }
        if !changed {
            return;
        }
    }
}

/// `gpus` in proportion to `loads`, by largest remainder, at least one to
/// each sub-cluster with a model (checked possible by the caller).
fn share_gpus(loads: &[f64], counts: &[f64], gpus: u32) -> Vec<u32> {
    let used: Vec<usize> = (0..loads.len()).filter(|&c| counts[c] > 0.0).collect();
    let mut out = vec![0u32; loads.len()];
    for &c in &used {
        out[c] = 1;
    }
    let spare = gpus.saturating_sub(used.len() as u32);
    let total: f64 = used.iter().map(|&c| loads[c]).sum();
    if total <= 0.0 || spare == 0 {
        if let Some(&c) = used.first() {
            out[c] += spare;
        }
        return out;
    }
    let quota: Vec<(usize, f64)> = used.iter().map(|&c| (c, spare as f64 * loads[c] / total)).collect();
    let mut given = 0;
    for &(c, q) in &quota {
        out[c] += q.floor() as u32;
        given += q.floor() as u32;
    }
    let mut rest: Vec<(usize, f64)> = quota.iter().map(|&(c, q)| (c, q - q.floor())).collect();
    rest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    for &(c, _) in rest.iter().take((spare - given) as usize) {
        out[c] += 1;
    }
    debug_assert_eq!(out.iter().sum::<u32>(), gpus.max(used.len() as u32));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zoo(n: usize, gpus: u32) -> Scenario {
        let mut text = format!("name = \"zoo\"\nrate_rps = 4000\n[cluster]\ngpus = {gpus}\n");
        for i in 0..n {
            let (alpha, beta, slo) = (0.5 + (i % 5) as f64, 2.0 + (i % 3) as f64 * 3.0, 40.0 + (i % 4) as f64 * 30.0);
            text += &format!("[[models]]\nname = \"m{i}\"\nalpha_ms = {alpha}\nbeta_ms = {beta}\nslo_ms = {slo}\n");
        }
        Scenario::parse(&text).unwrap()
    }

    #[test]
    fn every_model_lands_once_and_every_gpu_is_shared_out() {
        let s = zoo(13, 64);
        for k in [1, 2, 4, 8] {
            let p = plan(&s, k, 4000.0).unwrap();
            let mut all: Vec<usize> = p.subclusters.iter().flat_map(|c| c.models.clone()).collect();
            all.sort_unstable();
            assert_eq!(all, (0..13).collect::<Vec<_>>(), "K = {k}");
            assert_eq!(p.subclusters.iter().map(|c| c.gpus).sum::<u32>(), 64, "K = {k}");
            assert!(p.subclusters.iter().all(|c| c.models.is_empty() || c.gpus >= 1));
        }
        assert_eq!(plan(&s, 1, 4000.0).unwrap().imbalance, 0.0);
    }

    #[test]
    fn the_search_balances_better_than_dealing_models_round_robin() {
        let s = zoo(16, 64);
        let k = 4;
        let p = plan(&s, k, 4000.0).unwrap();
        let total: f64 = s.models.iter().map(|m| m.weight).sum();
        let demand: Vec<f64> = s.models.iter().map(|m| demand_gpus(&m.spec, 4000.0 * m.weight / total)).collect();
        let w = demand.iter().sum::<f64>() / demand.len() as f64;
        let dealt: Vec<usize> = (0..16).map(|i| i % k).collect();
        assert!(p.objective <= objective(&dealt, &demand, k, w) + 1e-9, "{p:?}");
        assert_eq!(plan(&s, k, 4000.0).unwrap(), p, "deterministic");
    }

    #[test]
    fn impossible_plans_are_refused_with_the_reason() {
        let s = zoo(8, 2);
        assert_eq!(plan(&s, 0, 100.0).unwrap_err(), PartitionError::NoSchedulers);
        assert_eq!(plan(&s, 4, 100.0).unwrap_err(), PartitionError::TooFewGpus { gpus: 2, needed: 4 });
    }
}
