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
//! it; then the MILP (`partition_milp.rs`) from that start — microlp within
//! a node budget (`MILP_NODES`, deterministic), or HiGHS under a time limit
//! with the `highs` feature — whose answer is taken when it is no worse:
//! the plan says which, with the solver's gap.
//!
//! Limits every step keeps: with `cluster.gpu_memory_mb` set, each
//! sub-cluster's models fit one GPU together (each of its GPUs serves all
//! of them); re-planning (`Options::current`, at an epoch boundary from
//! measured rates) starts from the current assignment and moves at most
//! `moves` models, none for nothing. Not modelled: a cap on a scheduler's
//! request rate, and per-model (un)loading costs beyond counting moves.

use std::ops::Range;

use crate::partition_milp::{self as milp, Instance};
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
    /// The MILP's answer (`by`: the solver's name): proven optimal, or
    /// within `gap` of its bound.
    Milp { by: &'static str, gap: Option<f64>, optimal: bool },
    /// The greedy search's, because the MILP failed or did no better.
    Greedy { why: String },
}

/// Branch-and-bound nodes the MILP may explore.
pub const MILP_NODES: u64 = 5_000;

/// How a plan is searched and what it must keep.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The MILP's solver (default: microlp within `MILP_NODES` nodes).
    pub solver: milp::Solver,
    /// Re-planning: the current assignment (model i on `current[i]`) and
    /// the most models that may change sub-cluster.
    pub current: Option<(Vec<usize>, usize)>,
}

impl Default for Options {
    fn default() -> Self {
        Self { solver: milp::Solver::Microlp { nodes: MILP_NODES }, current: None }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub subclusters: Vec<SubCluster>,
    pub solver: Solver,
    /// `ΔR + w·ΔS` of the plan.
    pub objective: f64,
    /// `(max − min) / mean` of the sub-clusters' demand per GPU.
    pub imbalance: f64,
}

impl Plan {
    /// Each sub-cluster's GPUs, numbered in plan order: sub-cluster 0 the
    /// first `gpus`, sub-cluster 1 the next, and so on. The engine's
    /// routing table (`Routes::of_plan`) and the simulator's partitioned
    /// clusters number them so.
    pub fn gpu_ranges(&self) -> Vec<Range<u32>> {
        let mut first = 0u32;
        let ranges = self.subclusters.iter().map(|c| {
            let gpus = first..first + c.gpus;
            first = gpus.end;
            gpus
        });
        ranges.collect()
    }

    /// Each model's sub-cluster, by model. A plan places models 0..n, each
    /// in exactly one sub-cluster (`plan_with` makes no other).
    pub fn assignment(&self) -> Vec<usize> {
        let n = self.subclusters.iter().map(|c| c.models.len()).sum();
        let mut of = vec![usize::MAX; n];
        for (k, c) in self.subclusters.iter().enumerate() {
            for &m in &c.models {
                assert!(m < n, "model {m} in a plan of {n} models");
                assert_eq!(of[m], usize::MAX, "model {m} in two sub-clusters");
                of[m] = k;
            }
        }
        // n models placed, none twice, all below n: every one placed.
        of
    }
}

/// What `plan` refuses.
#[derive(Clone, Debug, PartialEq)]
pub enum PartitionError {
    NoSchedulers,
    /// Fewer GPUs than sub-clusters that need one.
    TooFewGpus {
        gpus: u32,
        needed: usize,
    },
    /// What a partitioned cluster cannot run (`partitioned.rs`).
    Unsupported(&'static str),
    /// With GPUs of `gpu_mb`, the search found no sub-cluster for model
    /// `model` that its memory fits beside the others'.
    NoRoom {
        model: String,
        gpu_mb: f64,
    },
    /// A re-plan's inputs do not match the scenario.
    BadCurrent(String),
}

impl std::fmt::Display for PartitionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoSchedulers => write!(f, "a plan needs at least one scheduler"),
            Self::TooFewGpus { gpus, needed } => {
                write!(f, "{gpus} GPUs for {needed} sub-clusters with models: each needs at least one")
            }
            Self::Unsupported(what) => write!(f, "a partitioned cluster cannot run {what}"),
            Self::NoRoom { model, gpu_mb } => {
                write!(f, "no sub-cluster has room for model {model} beside the others on {gpu_mb} MB GPUs")
            }
            Self::BadCurrent(why) => write!(f, "re-planning: {why}"),
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

/// Splits `s`'s models over `k` sub-clusters at aggregate `rate_rps`,
/// shared by the models' weights.
pub fn plan(s: &Scenario, k: usize, rate_rps: f64) -> Result<Plan, PartitionError> {
    let total_weight: f64 = s.models.iter().map(|m| m.weight).sum();
    let rates: Vec<f64> = s.models.iter().map(|m| rate_rps * m.weight / total_weight.max(f64::MIN_POSITIVE)).collect();
    plan_with(s, k, &rates, &Options::default())
}

/// Splits `s`'s models over `k` sub-clusters for each model's rate
/// `rates_rps[i]` (planned, or measured over the last epoch when
/// re-planning), as `opts` says.
pub fn plan_with(s: &Scenario, k: usize, rates_rps: &[f64], opts: &Options) -> Result<Plan, PartitionError> {
    if k == 0 {
        return Err(PartitionError::NoSchedulers);
    }
    let n = s.models.len();
    if rates_rps.len() != n || rates_rps.iter().any(|r| !(r.is_finite() && *r >= 0.0)) {
        return Err(PartitionError::BadCurrent(format!(
            "{} rates for {n} models, each finite and >= 0",
            rates_rps.len()
        )));
    }
    let demand: Vec<f64> = s.models.iter().zip(rates_rps).map(|(m, &r)| demand_gpus(&m.spec, r)).collect();
    let w = demand.iter().sum::<f64>() / n.max(1) as f64;
    let mem: Vec<f64> = s.models.iter().map(|m| m.spec.memory_mb).collect();
    let memory = s.cluster.gpu_memory_mb.map(|cap| (&mem[..], cap));
    if let Some((cur, _)) = &opts.current {
        if cur.len() != n || cur.iter().any(|&c| c >= k) {
            return Err(PartitionError::BadCurrent(format!("a current assignment of {n} models onto 0..{k}")));
        }
    }
    let current = opts.current.as_ref().map(|(cur, moves)| (&cur[..], *moves));
    let inst = Instance { demand: &demand, k, w, memory, current };
    let mut of = match current {
        Some((cur, _)) => cur.to_vec(),
        None => greedy(&inst).map_err(|m| PartitionError::NoRoom {
            model: s.models[m].spec.name.clone(),
            gpu_mb: s.cluster.gpu_memory_mb.unwrap_or(0.0),
        })?,
    };
    improve(&mut of, &inst);
    let cost = |of: &[usize]| objective(of, &inst);
    let solver = match milp::solve(&inst, &of, opts.solver) {
        Ok(s) if cost(&s.of) <= cost(&of) + 1e-9 && keeps(&s.of, &inst) => {
            of = s.of;
            Solver::Milp { by: opts.solver.name(), gap: s.gap, optimal: s.optimal }
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
    Ok(Plan { subclusters, solver, objective: spread(&loads) + w * spread(&counts(&of, k)), imbalance })
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

/// The MILP's objective (`partition_milp.rs`) of assignment `of` (model i
/// on sub-cluster `of[i]`): `ΔR + w·ΔS`, plus ε per model moved when
/// re-planning.
fn objective(of: &[usize], inst: &Instance<'_>) -> f64 {
    let (k, w) = (inst.k, inst.w);
    spread(&loads(of, inst.demand, k)) + w * spread(&counts(of, k)) + milp::MOVE_COST * w * moved(of, inst) as f64
}

/// Models `of` places elsewhere than the current assignment (0 on a fresh plan).
fn moved(of: &[usize], inst: &Instance<'_>) -> usize {
    inst.current.map_or(0, |(cur, _)| of.iter().zip(cur).filter(|(a, b)| a != b).count())
}

/// Whether `of` keeps the instance's limits: every sub-cluster's models fit
/// a GPU, and no more than the budget moved. A model on sub-cluster `k`
/// (not placed yet) counts nowhere.
fn keeps(of: &[usize], inst: &Instance<'_>) -> bool {
    let fits = inst.memory.is_none_or(|(mem, cap)| loads(of, mem, inst.k).iter().all(|&m| m <= cap + 1e-9));
    fits && inst.current.is_none_or(|(_, moves)| moved(of, inst) <= moves)
}

/// Largest demand first, each onto the sub-cluster where the objective is
/// least after it among those it fits (ties: the lowest index); the model
/// that fits nowhere if one does not.
fn greedy(inst: &Instance<'_>) -> Result<Vec<usize>, usize> {
    let (demand, k) = (inst.demand, inst.k);
    let mut order: Vec<usize> = (0..demand.len()).collect();
    order.sort_by(|&a, &b| demand[b].total_cmp(&demand[a]).then(a.cmp(&b)));
    let mut of = vec![k; demand.len()];
    for i in order {
        let mut cost = |c: usize| {
            of[i] = c;
            keeps(&of, inst).then(|| (objective(&of, inst), c))
        };
        let best = (0..k).filter_map(&mut cost).min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        of[i] = best.ok_or(i)?.1;
    }
    Ok(of)
}

/// Single moves, then swaps, while one lowers the objective (strictly, so
/// it ends) and keeps the limits.
fn improve(of: &mut [usize], inst: &Instance<'_>) {
    let k = inst.k;
    let mut best = objective(of, inst);
    let better = |of: &mut [usize], best: &mut f64| {
        let o = objective(of, inst);
        let won = o < *best - 1e-12 && keeps(of, inst);
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
        let inst = Instance { demand: &demand, k, w, memory: None, current: None };
        assert!(p.objective <= objective(&dealt, &inst) + 1e-9, "{p:?}");
        assert_eq!(plan(&s, k, 4000.0).unwrap(), p, "deterministic");
    }

    #[test]
    fn gpus_are_numbered_in_plan_order_and_every_model_has_its_sub_cluster() {
        let s = zoo(13, 64);
        let p = plan(&s, 4, 4000.0).unwrap();
        let ranges = p.gpu_ranges();
        assert_eq!(ranges.len(), 4);
        assert_eq!(ranges[0].start, 0);
        assert_eq!(ranges[3].end, 64);
        for (c, (r, next)) in p.subclusters.iter().zip(ranges.iter().zip(ranges.iter().skip(1))) {
            assert_eq!(r.len() as u32, c.gpus);
            assert_eq!(r.end, next.start);
        }
        let of = p.assignment();
        assert_eq!(of.len(), 13);
        for (k, c) in p.subclusters.iter().enumerate() {
            assert!(c.models.iter().all(|&m| of[m] == k), "{of:?}");
        }
    }

    #[test]
    fn impossible_plans_are_refused_with_the_reason() {
        let s = zoo(8, 2);
        assert_eq!(plan(&s, 0, 100.0).unwrap_err(), PartitionError::NoSchedulers);
        assert_eq!(plan(&s, 4, 100.0).unwrap_err(), PartitionError::TooFewGpus { gpus: 2, needed: 4 });
        let rates = vec![10.0; 8];
        let bad = Options { current: Some((vec![0, 0, 0, 0, 0, 0, 0, 3], 1)), ..Options::default() };
        assert!(matches!(plan_with(&s, 2, &rates, &bad), Err(PartitionError::BadCurrent(_))));
        assert!(matches!(plan_with(&s, 2, &rates[1..], &Options::default()), Err(PartitionError::BadCurrent(_))));
    }

    #[test]
    fn sub_clusters_hold_what_fits_one_gpu() {
        // Eight 10 GB models on 24 GB GPUs: at most two per sub-cluster.
        let mut s = zoo(8, 16);
        s.cluster.gpu_memory_mb = Some(24_000.0);
        for m in &mut s.models {
            m.spec.memory_mb = 10_000.0;
        }
        let p = plan(&s, 4, 4000.0).unwrap();
        assert!(p.subclusters.iter().all(|c| c.models.len() == 2), "{p:?}");
        assert_eq!(
            plan(&s, 3, 4000.0).unwrap_err(),
            PartitionError::NoRoom { model: "m5".into(), gpu_mb: 24_000.0 },
            "three sub-clusters hold six"
        );
    }

    #[test]
    fn a_replan_from_measured_rates_moves_few_models_toward_balance() {
        let s = zoo(12, 64);
        let even = plan(&s, 3, 4000.0).unwrap();
        let mut of = vec![0; 12];
        for (c, sub) in even.subclusters.iter().enumerate() {
            for &m in &sub.models {
                of[m] = c;
            }
        }
        // Sub-cluster 0's models now see ten times their planned rate.
        let mut rates = vec![4000.0 / 12.0; 12];
        for &m in &even.subclusters[0].models {
            rates[m] *= 10.0;
        }
        let stay = Options { current: Some((of.clone(), 0)), ..Options::default() };
        let kept = plan_with(&s, 3, &rates, &stay).unwrap();
        assert_eq!(kept.subclusters.iter().map(|c| c.models.clone()).collect::<Vec<_>>(), subs(&even));
        let two = Options { current: Some((of.clone(), 2)), ..Options::default() };
        let moved = plan_with(&s, 3, &rates, &two).unwrap();
        let changed = moved
            .subclusters
            .iter()
            .enumerate()
            .map(|(c, sub)| sub.models.iter().filter(|&&m| of[m] != c).count())
            .sum::<usize>();
        assert!((1..=2).contains(&changed), "{changed} moved: {moved:?}");
        assert!(moved.objective < kept.objective, "{} vs {}", moved.objective, kept.objective);
        // The busy models' sub-cluster gets more of the GPUs.
        assert!(moved.subclusters[0].gpus > even.subclusters[0].gpus);
    }

    fn subs(p: &Plan) -> Vec<Vec<usize>> {
        p.subclusters.iter().map(|c| c.models.clone()).collect()
    }
}
