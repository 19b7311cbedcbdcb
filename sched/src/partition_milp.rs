//! The partitioning MILP (Symphony, Appendix A), solved by microlp, a
//! pure-Rust branch and bound, within a node budget — deterministic where
//! a time limit would not be: the same inputs give the same plan. (microlp
//! notes the elapsed time in its statistics; nothing here reads them, and
//! no time limit is set.)
//!
//! With d_m a model's demand, x_mk = 1 when model m is on sub-cluster k:
//!
//! ```text
//! minimise   (R⁺ − R⁻) + w·(S⁺ − S⁻)
//! such that  Σ_k x_mk = 1                       every model on one sub-cluster
//!            R⁻ ≤ Σ_m d_m·x_mk ≤ R⁺              every k: demand spread
//!            S⁻ ≤ Σ_m x_mk ≤ S⁺                  every k: model-count spread
//!            x_mk = 0 for k > rank(m)           symmetry: sub-clusters are
//!                                               interchangeable, so the i-th
//!                                               largest model opens at most
//!                                               sub-cluster i
//! ```
//!
//! The search starts from the greedy plan (relabelled to meet the
//! symmetry rule), so it never returns worse; the gap it reports is the
//! solver's, between that answer and its best proven bound. The counts'
//! spread is bounded below by `⌈n/k⌉ − ⌊n/k⌋` (S⁺ ≥ ⌈n/k⌉, S⁻ ≤ ⌊n/k⌋),
//! which the relaxation would not see.

use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOptions, TerminationReason, Variable};

/// What the solver found.
#[derive(Clone, Debug, PartialEq)]
pub struct Solved {
    /// Model i on sub-cluster `of[i]`.
    pub of: Vec<usize>,
    pub objective: f64,
    /// Relative gap to the best proven bound (0: proven optimal).
    pub gap: Option<f64>,
    pub optimal: bool,
}

/// Relabels `of` so sub-clusters are numbered in the order the models,
/// largest demand first (`order`), first use them.
fn canonical(of: &[usize], order: &[usize]) -> Vec<usize> {
    let mut name: Vec<Option<usize>> = vec![None; of.len().max(1) + of.iter().max().map_or(0, |&m| m + 1)];
    let mut next = 0;
    let mut out = vec![0; of.len()];
    for &i in order {
        let label = *name[of[i]].get_or_insert_with(|| {
            next += 1;
            next - 1
        });
        out[i] = label;
    }
    out
}

/// Solves the MILP for `demand` over `k` sub-clusters with weight `w`,
/// starting from assignment `start`, exploring at most `nodes` nodes.
pub fn solve(demand: &[f64], k: usize, w: f64, start: &[usize], nodes: u64) -> Result<Solved, String> {
    let n = demand.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| demand[b].total_cmp(&demand[a]).then(a.cmp(&b)));
    let mut rank = vec![0; n];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    let mut p = Problem::new(OptimizationDirection::Minimize);
    let x: Vec<Vec<Option<Variable>>> =
        (0..n).map(|m| (0..k).map(|c| (c <= rank[m]).then(|| p.add_binary_var(0.0))).collect()).collect();
    let big = demand.iter().sum::<f64>().max(1.0) + n as f64;
    let (r_hi, r_lo) = (p.add_var(1.0, (0.0, big)), p.add_var(-1.0, (0.0, big)));
    // Some sub-cluster holds at least ⌈n/k⌉ models and some at most ⌊n/k⌋:
    // bounds that tighten the relaxation (without them its bound is 0).
    let (most, least) = (n.div_ceil(k) as f64, (n / k) as f64);
    let (s_hi, s_lo) = (p.add_var(w, (most, n as f64)), p.add_var(-w, (0.0, least)));
    for row in &x {
        p.add_constraint(row.iter().flatten().map(|&v| (v, 1.0)).collect::<Vec<_>>(), ComparisonOp::Eq, 1.0);
    }
    // Column by column: each sub-cluster's sums over the models.
    #[allow(clippy::needless_range_loop)]
    for c in 0..k {
        let on = |coef: &dyn Fn(usize) -> f64| -> Vec<(Variable, f64)> {
            (0..n).filter_map(|m| x[m][c].map(|v| (v, coef(m)))).collect()
        };
        for (hi, lo, coef) in [(r_hi, r_lo, &(|m: usize| demand[m]) as &dyn Fn(usize) -> f64), (s_hi, s_lo, &|_| 1.0)] {
            let mut le_hi = on(coef);
            le_hi.push((hi, -1.0));
            p.add_constraint(le_hi, ComparisonOp::Le, 0.0);
            let mut ge_lo = on(coef);
            ge_lo.push((lo, -1.0));
            p.add_constraint(ge_lo, ComparisonOp::Ge, 0.0);
        }
    }
    let start = canonical(start, &order);
    let mut warm: Vec<(Variable, f64)> = Vec::new();
    for (row, &at) in x.iter().zip(&start) {
        for (c, v) in row.iter().enumerate() {
            if let Some(v) = *v {
                warm.push((v, f64::from(u8::from(at == c))));
            }
        }
    }
    let mut opts = SolveOptions::default();
    opts.node_limit = Some(nodes);
    opts.warm_start = Some(warm);
    let outcome = p.solve_with(opts).map_err(|e| format!("microlp: {e}"))?;
    let optimal = outcome.termination_reason() == TerminationReason::ProvenOptimal;
    let solution =
        outcome.into_solution().map_err(|_| "microlp: no feasible answer within the node budget".to_string())?;
    let of = x
        .iter()
        .map(|row| row.iter().position(|v| v.is_some_and(|v| solution.var_value(v) > 0.5)).unwrap_or(0))
        .collect();
    Ok(Solved { of, objective: solution.objective(), gap: solution.gap(), optimal })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_instance_is_solved_to_proven_optimality() {
        // {5, 4, 3, 3, 2, 1} into 2: 9 and 9 with three models each is optimal.
        let demand = [5.0, 4.0, 3.0, 3.0, 2.0, 1.0];
        let s = solve(&demand, 2, 1.0, &[0, 0, 0, 1, 1, 1], 100_000).unwrap();
        assert!(s.optimal, "{s:?}");
        assert!(s.objective.abs() < 1e-6, "{s:?}");
        let load = |c| (0..6).filter(|&i| s.of[i] == c).map(|i| demand[i]).sum::<f64>();
        assert!((load(0) - load(1)).abs() < 1e-6);
        // Deterministic: the same answer again.
        assert_eq!(solve(&demand, 2, 1.0, &[0, 0, 0, 1, 1, 1], 100_000).unwrap(), s);
    }

    #[test]
    fn the_start_is_relabelled_to_meet_the_symmetry_rule() {
        assert_eq!(canonical(&[2, 2, 0, 1], &[0, 1, 2, 3]), vec![0, 0, 1, 2]);
    }
}
