//! The partitioning MILP (Symphony, Appendix A), written once as rows and
//! columns (`Milp`) and solved by microlp — a pure-Rust branch and bound,
//! within a node budget, deterministic where a time limit would not be:
//! the same inputs give the same plan — or, with the `highs` cargo
//! feature, by HiGHS under a time limit (`Solver`).
//!
//! With d_m a model's demand, x_mk = 1 when model m is on sub-cluster k:
//!
//! ```text
//! minimise   (R⁺ − R⁻) + w·(S⁺ − S⁻) + ε·Σ_m (1 − x_m,c(m))
//! such that  Σ_k x_mk = 1                       every model on one sub-cluster
//!            R⁻ ≤ Σ_m d_m·x_mk ≤ R⁺              every k: demand spread
//!            S⁻ ≤ Σ_m x_mk ≤ S⁺                  every k: model-count spread
//!            Σ_m mem_m·x_mk ≤ M                  every k, with a memory cap M:
//!                                               each of k's GPUs holds all
//!                                               of k's models
//!            Σ_m x_m,c(m) ≥ n − moves            re-planning against a current
//!                                               assignment c: at most `moves`
//!                                               models change sub-cluster
//!            x_mk = 0 for k > rank(m)           a fresh plan only: sub-clusters
//!                                               are interchangeable, so the
//!                                               i-th largest model opens at
//!                                               most sub-cluster i
//! ```
//!
//! The ε term (ε = 10⁻³·w, and only when re-planning) makes a move that
//! buys nothing cost something, so a re-plan keeps what it can. The search
//! starts from the greedy plan (relabelled to meet the symmetry rule on a
//! fresh plan), so it never returns worse; the gap it reports is the
//! solver's, between that answer and its best proven bound. The counts'
//! spread is bounded below by `⌈n/k⌉ − ⌊n/k⌋` (S⁺ ≥ ⌈n/k⌉, S⁻ ≤ ⌊n/k⌋),
//! which the relaxation would not see.

/// ε per moved model, in units of `w` (the module doc).
pub const MOVE_COST: f64 = 1e-3;

/// Which solver runs the MILP, and its budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Solver {
    /// microlp, exploring at most `nodes` branch-and-bound nodes.
    Microlp { nodes: u64 },
    /// HiGHS, stopped after `time_limit_s` seconds (the `highs` feature).
    #[cfg(feature = "highs")]
    Highs { time_limit_s: f64 },
}

impl Solver {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Microlp { .. } => "microlp",
            #[cfg(feature = "highs")]
            Self::Highs { .. } => "highs",
        }
    }
}

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

/// The instance: demands, sub-clusters, the count weight, and the limits a
/// plan must keep.
#[derive(Clone, Debug)]
pub struct Instance<'a> {
    pub demand: &'a [f64],
    pub k: usize,
    pub w: f64,
    /// Each model's memory and every GPU's capacity, when memory is a limit.
    pub memory: Option<(&'a [f64], f64)>,
    /// The current assignment and how many models may leave it (a re-plan).
    pub current: Option<(&'a [usize], usize)>,
}

/// One column: objective coefficient, bounds, binary or continuous.
#[derive(Clone, Copy, Debug)]
struct Col {
    cost: f64,
    lo: f64,
    hi: f64,
    binary: bool,
}

/// One row: `lo ≤ Σ coef·col ≤ hi`.
#[derive(Clone, Debug)]
struct Row {
    terms: Vec<(usize, f64)>,
    lo: f64,
    hi: f64,
}

/// The MILP as columns and rows, and a starting answer for every column.
struct Milp {
    cols: Vec<Col>,
    rows: Vec<Row>,
    /// `x[m][c]`: the column of x_mc, None where the symmetry rule fixes it to 0.
    x: Vec<Vec<Option<usize>>>,
    start: Vec<f64>,
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

impl Milp {
    fn col(&mut self, cost: f64, lo: f64, hi: f64, binary: bool) -> usize {
        self.cols.push(Col { cost, lo, hi, binary });
        self.cols.len() - 1
    }

    /// The formulation in the module doc, started at `start` (a feasible
    /// assignment), which it returns relabelled as the columns expect.
    fn of(inst: &Instance<'_>, start: &[usize]) -> (Self, Vec<usize>) {
        let (demand, k, w) = (inst.demand, inst.k, inst.w);
        let n = demand.len();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| demand[b].total_cmp(&demand[a]).then(a.cmp(&b)));
        let mut rank = vec![usize::MAX; n];
        let start = match inst.current {
            // Labels mean something against a current assignment: no symmetry.
            Some(_) => start.to_vec(),
            None => {
                for (r, &i) in order.iter().enumerate() {
                    rank[i] = r;
                }
                canonical(start, &order)
            }
        };
        let mut p = Milp { cols: vec![], rows: vec![], x: vec![], start: vec![] };
        let eps = MOVE_COST * w;
        for m in 0..n {
            let row = (0..k)
                .map(|c| {
                    let stays = inst.current.is_some_and(|(cur, _)| cur[m] == c);
                    let cost = if inst.current.is_some() && !stays { eps } else { 0.0 };
                    (c <= rank[m]).then(|| p.col(cost, 0.0, 1.0, true))
                })
                .collect();
            p.x.push(row);
        }
        let big = demand.iter().sum::<f64>().max(1.0) + n as f64;
        let (r_hi, r_lo) = (p.col(1.0, 0.0, big, false), p.col(-1.0, 0.0, big, false));
        // Some sub-cluster holds at least ⌈n/k⌉ models and some at most ⌊n/k⌋:
        // bounds that tighten the relaxation (without them its bound is 0).
        let (most, least) = (n.div_ceil(k) as f64, (n / k) as f64);
        let (s_hi, s_lo) = (p.col(w, most, n as f64, false), p.col(-w, 0.0, least, false));
        for m in 0..n {
            let terms = p.x[m].iter().flatten().map(|&v| (v, 1.0)).collect();
            p.rows.push(Row { terms, lo: 1.0, hi: 1.0 });
        }
        let on = |p: &Milp, c: usize, coef: &dyn Fn(usize) -> f64| -> Vec<(usize, f64)> {
            (0..n).filter_map(|m| p.x[m][c].map(|v| (v, coef(m)))).collect()
        };
        for c in 0..k {
            for (hi, lo, coef) in
                [(r_hi, r_lo, &(|m: usize| demand[m]) as &dyn Fn(usize) -> f64), (s_hi, s_lo, &|_| 1.0)]
            {
                let sum = on(&p, c, coef);
                let mut le_hi = sum.clone();
                le_hi.push((hi, -1.0));
                p.rows.push(Row { terms: le_hi, lo: f64::NEG_INFINITY, hi: 0.0 });
                let mut ge_lo = sum;
                ge_lo.push((lo, -1.0));
                p.rows.push(Row { terms: ge_lo, lo: 0.0, hi: f64::INFINITY });
            }
            if let Some((mem, cap)) = inst.memory {
                p.rows.push(Row { terms: on(&p, c, &|m| mem[m]), lo: f64::NEG_INFINITY, hi: cap });
            }
        }
        if let Some((cur, moves)) = inst.current {
            let terms = (0..n).filter_map(|m| p.x[m][cur[m]].map(|v| (v, 1.0))).collect();
            p.rows.push(Row { terms, lo: n.saturating_sub(moves) as f64, hi: f64::INFINITY });
        }
        // The start, every column: x from the assignment, the spreads' ends
        // from its sums.
        let mut at = vec![0.0; p.cols.len()];
        for (m, &c) in start.iter().enumerate() {
            at[p.x[m][c].expect("the start keeps the symmetry rule")] = 1.0;
        }
        let sums = |coef: &dyn Fn(usize) -> f64| -> Vec<f64> {
            (0..k).map(|c| (0..n).filter(|&m| start[m] == c).map(coef).sum()).collect()
        };
        let fold =
            |v: Vec<f64>| (v.iter().cloned().fold(f64::MIN, f64::max), v.iter().cloned().fold(f64::MAX, f64::min));
        (at[r_hi], at[r_lo]) = fold(sums(&|m| demand[m]));
        (at[s_hi], at[s_lo]) = fold(sums(&|_| 1.0));
        p.start = at;
        (p, start)
    }

    /// Model i's sub-cluster in a solution's column values.
    fn read(&self, values: &[f64]) -> Vec<usize> {
        self.x.iter().map(|row| row.iter().position(|v| v.is_some_and(|v| values[v] > 0.5)).unwrap_or(0)).collect()
    }
}

/// Solves the MILP for `inst` with `solver`, starting from assignment
/// `start` (which must keep the instance's limits).
pub fn solve(inst: &Instance<'_>, start: &[usize], solver: Solver) -> Result<Solved, String> {
    assert_eq!(start.len(), inst.demand.len(), "a start for every model");
    let (milp, _) = Milp::of(inst, start);
    match solver {
        Solver::Microlp { nodes } => microlp_solve(&milp, nodes),
        #[cfg(feature = "highs")]
        Solver::Highs { time_limit_s } => highs_solve(&milp, time_limit_s),
    }
}

fn microlp_solve(milp: &Milp, nodes: u64) -> Result<Solved, String> {
    use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOptions, TerminationReason};
    let mut p = Problem::new(OptimizationDirection::Minimize);
    let vars: Vec<microlp::Variable> = milp
        .cols
        .iter()
        .map(|c| if c.binary { p.add_binary_var(c.cost) } else { p.add_var(c.cost, (c.lo, c.hi)) })
        .collect();
    for r in &milp.rows {
        let terms: Vec<(microlp::Variable, f64)> = r.terms.iter().map(|&(v, a)| (vars[v], a)).collect();
        match (r.lo.is_finite(), r.hi.is_finite()) {
            (true, true) if r.lo == r.hi => p.add_constraint(terms, ComparisonOp::Eq, r.lo),
            (lo, hi) => {
                if lo {
                    p.add_constraint(terms.clone(), ComparisonOp::Ge, r.lo);
                }
                if hi {
                    p.add_constraint(terms, ComparisonOp::Le, r.hi);
                }
            }
        }
    }
    let mut opts = SolveOptions::default();
    opts.node_limit = Some(nodes);
    let warm = milp.x.iter().flatten().flatten().map(|&v| (vars[v], milp.start[v])).collect();
    opts.warm_start = Some(warm);
    let outcome = p.solve_with(opts).map_err(|e| format!("microlp: {e}"))?;
    let optimal = outcome.termination_reason() == TerminationReason::ProvenOptimal;
    let solution =
        outcome.into_solution().map_err(|_| "microlp: no feasible answer within the node budget".to_string())?;
    let values: Vec<f64> = vars.iter().map(|&v| solution.var_value(v)).collect();
    Ok(Solved { of: milp.read(&values), objective: solution.objective(), gap: solution.gap(), optimal })
}

#[cfg(feature = "highs")]
fn highs_solve(milp: &Milp, time_limit_s: f64) -> Result<Solved, String> {
    use highs::{HighsModelStatus, RowProblem, Sense};
    let mut p = RowProblem::default();
    let cols: Vec<highs::Col> = milp
        .cols
        .iter()
        .map(|c| if c.binary { p.add_integer_column(c.cost, 0.0..=1.0) } else { p.add_column(c.cost, c.lo..=c.hi) })
        .collect();
    for r in &milp.rows {
        let terms: Vec<(highs::Col, f64)> = r.terms.iter().map(|&(v, a)| (cols[v], a)).collect();
        p.add_row(r.lo..=r.hi, terms);
    }
    let mut model = p.optimise(Sense::Minimise);
    model.make_quiet();
    // One thread: the answer within the limit depends on nothing else.
    model.set_option("threads", 1);
    model.set_option("time_limit", time_limit_s);
    model.try_set_solution(Some(&milp.start), None, None, None).map_err(|e| format!("highs: start refused: {e:?}"))?;
    let solved = model.try_solve().map_err(|e| format!("highs: {e:?}"))?;
    let status = solved.status();
    let usable = matches!(
        status,
        HighsModelStatus::Optimal | HighsModelStatus::ReachedTimeLimit | HighsModelStatus::ReachedIterationLimit
    );
    let values = solved.get_solution().columns().to_vec();
    if !usable || values.len() != milp.cols.len() {
        return Err(format!("highs: {status:?}"));
    }
    let gap = solved.mip_gap();
    Ok(Solved {
        of: milp.read(&values),
        objective: solved.objective_value(),
        gap: gap.is_finite().then_some(gap),
        optimal: status == HighsModelStatus::Optimal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: Solver = Solver::Microlp { nodes: 100_000 };

    fn fresh<'a>(demand: &'a [f64], k: usize) -> Instance<'a> {
        Instance { demand, k, w: 1.0, memory: None, current: None }
    }

    fn solvers() -> Vec<Solver> {
        #[allow(unused_mut)]
        let mut v = vec![NODES];
        #[cfg(feature = "highs")]
        v.push(Solver::Highs { time_limit_s: 10.0 });
        v
    }

    #[test]
    fn a_small_instance_is_solved_to_proven_optimality() {
        // {5, 4, 3, 3, 2, 1} into 2: 9 and 9 with three models each is optimal.
        let demand = [5.0, 4.0, 3.0, 3.0, 2.0, 1.0];
        for solver in solvers() {
            let s = solve(&fresh(&demand, 2), &[0, 0, 0, 1, 1, 1], solver).unwrap();
            assert!(s.optimal, "{s:?}");
            assert!(s.objective.abs() < 1e-6, "{} {s:?}", solver.name());
            let load = |c| (0..6).filter(|&i| s.of[i] == c).map(|i| demand[i]).sum::<f64>();
            assert!((load(0) - load(1)).abs() < 1e-6);
            // Deterministic: the same answer again.
            assert_eq!(solve(&fresh(&demand, 2), &[0, 0, 0, 1, 1, 1], solver).unwrap(), s);
        }
    }

    #[test]
    fn a_memory_cap_keeps_two_large_models_apart() {
        // Balance alone would pair 5+1 and 3+3; 5 and 3 do not fit together
        // in 7 GB, nor 3 and 3 in 5.
        let (demand, mem) = ([5.0, 3.0, 3.0, 1.0], [4.0, 4.0, 1.0, 1.0]);
        for solver in solvers() {
            let inst = Instance { memory: Some((&mem, 5.0)), ..fresh(&demand, 2) };
            let s = solve(&inst, &[0, 1, 0, 1], solver).unwrap();
            assert_ne!(s.of[0], s.of[1], "{} {s:?}", solver.name());
            for c in 0..2 {
                assert!((0..4).filter(|&m| s.of[m] == c).map(|m| mem[m]).sum::<f64>() <= 5.0);
            }
        }
    }

    #[test]
    fn a_replan_moves_at_most_its_budget_and_nothing_for_nothing() {
        // Current: {6, 1, 1} against {1, 1}: the best is 4 against 4.
        let demand = [6.0, 1.0, 1.0, 1.0, 1.0];
        let current = [0, 0, 0, 1, 1];
        for solver in solvers() {
            let one = Instance { current: Some((&current, 1)), ..fresh(&demand, 2) };
            let s = solve(&one, &current, solver).unwrap();
            assert_eq!((0..5).filter(|&m| s.of[m] != current[m]).count(), 1, "{} {s:?}", solver.name());
            // Balanced already: nothing moves, however large the budget.
            let even = [2.0, 2.0, 1.0, 1.0];
            let now = [0, 1, 0, 1];
            let all = Instance { current: Some((&now, 4)), ..fresh(&even, 2) };
            assert_eq!(solve(&all, &now, solver).unwrap().of, now, "{}", solver.name());
        }
    }

    #[test]
    fn the_start_is_relabelled_to_meet_the_symmetry_rule() {
        assert_eq!(canonical(&[2, 2, 0, 1], &[0, 1, 2, 3]), vec![0, 0, 1, 2]);
    }
}
