//! Multi-model queries (Nexus, section 6.2): a DAG of stages, each a model,
//! under one end-to-end SLO.
//!
//! # Shape and what a stage's `gamma` means
//!
//! Stage 0 is the only root. Every other stage names one or more *earlier*
//! stages as its parents, so the graph is acyclic and every stage is
//! reachable from the root.
//!
//! - A stage with one parent is fed request by request: every request of
//!   the parent that ends within its deadline spawns Poisson(gamma) requests
//!   of the stage (gamma: the mean fan-out per parent request).
//! - A stage with two or more parents is a *join*, and a join is a barrier
//!   over the whole query instance: it fires once per query, when no request
//!   of any of its ancestors is still outstanding (so no parent request can
//!   still appear) and none of them missed its deadline, and then spawns
//!   Poisson(gamma) requests (gamma: the mean per query, not per parent
//!   request). A join whose parents got no requests (a Poisson draw of 0
//!   upstream) still fires: it combines whatever the query produced. If an
//!   ancestor request missed, the query has failed: the join and everything
//!   below it never run.
//! - Not expressible, by construction: a join per item below a fan-out (one
//!   ranker per detected object joining that object's recognisers). The
//!   join group is always the whole query instance.
//!
//! Requests per query, the rate model planners see (failures ignored, as
//! everywhere): R_root = 1, R_u = gamma_u * R_parent for one parent,
//! R_u = gamma_u for a join.
//!
//! # Deadlines
//!
//! A stage's deadline offset from the query's arrival is
//! `D(u) = max_{p parent of u} D(p) + budget(u)`, `D(root) = budget(root)`:
//! a join starts when its last parent may finish. Every offset is at most
//! the SLO (asserted), and a query is in SLO only if every stage request it
//! spawned finished by arrival + D(its stage).
//!
//! # Splitting the SLO
//!
//! `even`: every stage gets SLO / (stages on the longest root-to-sink path).
//!
//! `dp` (`../shared/design/planners.md`): with the SLO cut into T =
//! `SPLIT_STEPS` steps, choose integer budgets k_u >= 1 to
//!
//! ```text
//! minimise  sum_u g_u(k_u)   subject to  sum_{u on P} k_u <= T  for every root-to-sink path P
//! g_u(k)  = min_{k' <= k} R_u * l_u(b)/b,  b the largest batch with l_u(b) <= k' steps
//! ```
//!
//! g_u is the GPU time per query stage u needs within k steps; it is
//! non-increasing in k (infinite where not even l_u(1) fits). Nexus's tree
//! recursion `f(u,t) = min_k g_u(k) + sum_{v child} f(v, t-k)` is wrong on a
//! join: the join is counted once per parent, and each parent may place it
//! at a different start. Instead the graph, with a virtual sink after every
//! sink stage, is decomposed into series and parallel blocks, and a block X
//! gets the exact cost h_X(t) of finishing within t steps of its start:
//!
//! ```text
//! stage u:   h_u(t)   = g_u(t)
//! series:    h_A;B(t) = min_{0 <= k <= t} h_A(k) + h_B(t - k)
//! parallel:  h_A|B(t) = h_A(t) + h_B(t)
//! ```
//!
//! This is exact: every path through A;B is a path through A then one
//! through B, so the only coupling is the split k; the paths through A|B are
//! those of A and those of B, both within t, with independent costs. On a
//! tree it is Nexus's recursion. The decomposition comes from the classic
//! series and parallel reductions (Valdes, Tarjan and Lawler, 1982) on the
//! graph where stage u is an edge in_u -> out_u and each dependency a wire
//! of length 0; a graph that does not reduce to one edge is not
//! series-parallel — the smallest case is a stage feeding a join and also a
//! path around it — and the `dp` split rejects it with
//! `QueryError::NotSeriesParallel` (`even` takes any DAG). Budgets come back
//! top down: a series block gives its best k to its first part and t - k to
//! the second, a parallel block gives t to both branches, a stage takes all
//! it is given; so every root-to-sink path sums to T and all parents of a
//! join finish when it starts. Cost: O(n T^2) time and O(n T) memory for n
//! stages, as for the tree; the reductions are O(n^3) on at most
//! `MAX_STAGES` stages. The split is independent of the query rate, which
//! scales every term alike.

use crate::arrival::Arrival;
use crate::time::Nanos;
use crate::types::{ModelId, ModelSpec};

/// Budget steps of the dynamic program over the SLO.
pub const SPLIT_STEPS: usize = 400;
/// Stages of one query at most: the simulator keeps a stage set per query
/// instance in a `u64`.
pub const MAX_STAGES: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Dp,
    Even,
}

/// Why a query's SLO cannot be split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// The `dp` split needs a series-parallel (fork-join) graph.
    NotSeriesParallel,
    /// Not even a nanosecond per stage on the longest path.
    SloTooShort { slo: Nanos, longest_path: usize },
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryError::NotSeriesParallel => write!(
                f,
                "the stages are not a fork-join (series-parallel) graph, which the \"dp\" split needs \
                 (a stage feeds a join and also a path around it); use split = \"even\""
            ),
            QueryError::SloTooShort { slo, longest_path } => {
                write!(f, "{slo} ns cannot be split over the {longest_path} stages of the longest path")
            }
        }
    }
}

impl std::error::Error for QueryError {}

#[derive(Clone, Debug, PartialEq)]
pub struct StageSpec {
    pub model: ModelId,
    /// Earlier stages feeding this one: none for the root, one, or two or
    /// more for a join.
    pub parents: Vec<usize>,
    /// Mean requests of this stage per parent request ended in SLO, or per
    /// query for a join (module doc).
    pub gamma: f64,
    /// This stage's latency budget.
    pub budget: Nanos,
    /// Query arrival to this stage's deadline: the latest of its parents'
    /// plus its budget.
    pub deadline_offset: Nanos,
}

impl StageSpec {
    pub fn is_join(&self) -> bool {
        self.parents.len() >= 2
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct QuerySpec {
    pub name: String,
    pub slo: Nanos,
    /// Share of the aggregate offered rate (query arrivals).
    pub weight: f64,
    pub arrival: Arrival,
    pub split: Split,
    /// Stages, parents before children; stage 0 is the root.
    pub stages: Vec<StageSpec>,
}

/// A block of the series-parallel decomposition; operands are indices of
/// earlier blocks.
#[derive(Clone, Copy, Debug)]
enum Block {
    Stage(usize),
    Series(usize, usize),
    Parallel(usize, usize),
}

/// An edge of the reduction graph, carrying its block (`None`: a wire).
#[derive(Clone, Copy, Debug)]
struct Edge {
    from: usize,
    to: usize,
    block: Option<usize>,
}

impl QuerySpec {
    pub fn children(&self, s: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.stages.len()).filter(move |&c| self.stages[c].parents.contains(&s))
    }

    /// Requests of stage s per query.
    pub fn multiplier(&self, s: usize) -> f64 {
        let st = &self.stages[s];
        match st.parents.as_slice() {
            [] => 1.0,
            &[p] => st.gamma * self.multiplier(p),
            _ => st.gamma,
        }
    }

    /// For each stage, the set of its ancestors (bit i: stage i).
    pub fn ancestor_masks(&self) -> Vec<u64> {
        self.assert_shape();
        let mut masks: Vec<u64> = Vec::with_capacity(self.stages.len());
        for st in &self.stages {
            let mask = st.parents.iter().fold(0, |m, &p| m | 1 << p | masks[p]);
            masks.push(mask);
        }
        masks
    }

    /// For each stage, the stages on the longest path from the root to it,
    /// itself included.
    fn path_lengths(&self) -> Vec<usize> {
        let mut lengths: Vec<usize> = Vec::with_capacity(self.stages.len());
        for st in &self.stages {
            let before = st.parents.iter().map(|&p| lengths[p]).max().unwrap_or(0);
            lengths.push(before + 1);
        }
        lengths
    }

    /// What parsing guarantees; a violation is a programmer error.
    fn assert_shape(&self) {
        assert!(!self.stages.is_empty(), "query {} has no stages", self.name);
        assert!(self.stages.len() <= MAX_STAGES, "query {} has {} stages", self.name, self.stages.len());
        assert!(self.stages[0].parents.is_empty(), "query {}: the root has parents", self.name);
        for (s, st) in self.stages.iter().enumerate().skip(1) {
            assert!(!st.parents.is_empty(), "query {}: stage {s} has no parent", self.name);
            for (i, &p) in st.parents.iter().enumerate() {
                assert!(p < s, "query {}: stage {s} has a later parent {p}", self.name);
                assert!(!st.parents[..i].contains(&p), "query {}: stage {s} names {p} twice", self.name);
            }
        }
    }

    /// Splits the SLO into budgets and deadline offsets.
    pub fn split_budgets(&mut self, models: &[ModelSpec]) -> Result<(), QueryError> {
        self.assert_shape();
        let longest_path = self.path_lengths().into_iter().max().expect("at least one stage");
        if self.slo < longest_path as Nanos {
            return Err(QueryError::SloTooShort { slo: self.slo, longest_path });
        }
        let budgets = match self.split {
            Split::Even => self.even_budgets(),
            Split::Dp => self.dp_budgets(models)?,
        };
        self.set_budgets(&budgets);
        Ok(())
    }

    fn even_budgets(&self) -> Vec<Nanos> {
        let longest = self.path_lengths().into_iter().max().expect("at least one stage");
        vec![self.slo / longest as Nanos; self.stages.len()]
    }

    fn set_budgets(&mut self, budgets: &[Nanos]) {
        assert_eq!(budgets.len(), self.stages.len());
        for (s, &budget) in budgets.iter().enumerate() {
            let before = self.stages[s].parents.iter().map(|&p| self.stages[p].deadline_offset).max().unwrap_or(0);
            assert!(budget > 0, "query {}: stage {s} gets no budget", self.name);
            let offset = before + budget;
            assert!(offset <= self.slo, "query {}: stage {s} is due after the SLO", self.name);
            self.stages[s].budget = budget;
            self.stages[s].deadline_offset = offset;
        }
    }

    fn dp_budgets(&self, models: &[ModelSpec]) -> Result<Vec<Nanos>, QueryError> {
        let step = (self.slo / SPLIT_STEPS as Nanos).max(1);
        let steps = (self.slo / step) as usize;
        let g = self.stage_costs(models, step, steps);
        Ok(match self.dp_steps(&g, steps)? {
            Some(ks) => ks.into_iter().map(|k| k as Nanos * step).collect(),
            // Not even l(1) fits somewhere on the grid: the even split, for
            // parsing to judge.
            None => self.even_budgets(),
        })
    }

    /// g[u][k]: GPU time per query of stage u within k steps, made
    /// non-increasing in k (module doc).
    fn stage_costs(&self, models: &[ModelSpec], step: Nanos, steps: usize) -> Vec<Vec<f64>> {
        (0..self.stages.len())
            .map(|u| {
                let p = &models[self.stages[u].model.index()].profile;
                let r = self.multiplier(u);
                let mut best = f64::INFINITY;
                (0..=steps)
                    .map(|k| {
                        let here = match p.max_batch_within(k as Nanos * step, 0, p.max_batch()) {
                            0 => f64::INFINITY,
                            b => r * p.latency(b) as f64 / b as f64,
                        };
                        best = best.min(here);
                        best
                    })
                    .collect()
            })
            .collect()
    }

    /// Budgets in steps minimising `sum_u g[u][k_u]` with every
    /// root-to-sink path within `steps`; `None` if no choice is finite.
    fn dp_steps(&self, g: &[Vec<f64>], steps: usize) -> Result<Option<Vec<usize>>, QueryError> {
        assert_eq!(g.len(), self.stages.len());
        assert!(g.iter().all(|row| row.len() == steps + 1 && row[0] == f64::INFINITY));
        let (blocks, top) = self.decompose()?;
        let (h, best_k) = block_costs(&blocks, g, steps);
        if !h[top][steps].is_finite() {
            return Ok(None);
        }
        let mut budgets = vec![0; self.stages.len()];
        let mut todo = vec![(top, steps)];
        while let Some((x, t)) = todo.pop() {
            match blocks[x] {
                Block::Stage(u) => budgets[u] = t,
                Block::Series(a, b) => todo.extend([(a, best_k[x][t]), (b, t - best_k[x][t])]),
                Block::Parallel(a, b) => todo.extend([(a, t), (b, t)]),
            }
        }
        let total: f64 = budgets.iter().enumerate().map(|(u, &k)| g[u][k]).sum();
        assert!((total - h[top][steps]).abs() <= 1e-9 * total.abs().max(1.0), "recovered budgets cost {total}");
        Ok(Some(budgets))
    }

    /// The series-parallel decomposition: its blocks and the top one.
    fn decompose(&self) -> Result<(Vec<Block>, usize), QueryError> {
        let n = self.stages.len();
        // Vertices: in_u = 2u, out_u = 2u + 1, the virtual sink 2n.
        let (source, sink) = (0, 2 * n);
        let mut blocks: Vec<Block> = (0..n).map(Block::Stage).collect();
        let mut edges: Vec<Edge> = Vec::with_capacity(3 * n);
        for (u, st) in self.stages.iter().enumerate() {
            edges.push(Edge { from: 2 * u, to: 2 * u + 1, block: Some(u) });
            edges.extend(st.parents.iter().map(|&p| Edge { from: 2 * p + 1, to: 2 * u, block: None }));
            if self.children(u).next().is_none() {
                edges.push(Edge { from: 2 * u + 1, to: sink, block: None });
            }
        }
        while edges.len() > 1 {
            if !reduce_parallel(&mut edges, &mut blocks) && !reduce_series(&mut edges, &mut blocks, source, sink) {
                return Err(QueryError::NotSeriesParallel);
            }
        }
        let last = edges[0];
        assert!(last.from == source && last.to == sink, "reduced to {last:?}");
        Ok((blocks, last.block.expect("the root stage is a block")))
    }
}

/// Joins two edges' blocks; a wire (`None`) is neutral both in series
/// (length 0) and in parallel (no constraint).
fn combine(
    blocks: &mut Vec<Block>,
    a: Option<usize>,
    b: Option<usize>,
    make: fn(usize, usize) -> Block,
) -> Option<usize> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => {
            blocks.push(make(a, b));
            Some(blocks.len() - 1)
        }
    }
}

/// Merges two edges with the same ends into one parallel edge.
fn reduce_parallel(edges: &mut Vec<Edge>, blocks: &mut Vec<Block>) -> bool {
    for i in 0..edges.len() {
        if let Some(j) = (i + 1..edges.len()).find(|&j| edges[j].from == edges[i].from && edges[j].to == edges[i].to) {
            edges[i].block = combine(blocks, edges[i].block, edges[j].block, Block::Parallel);
            edges.swap_remove(j);
            return true;
        }
    }
    false
}

/// Merges the two edges of an inner vertex with one edge in and one out.
fn reduce_series(edges: &mut Vec<Edge>, blocks: &mut Vec<Block>, source: usize, sink: usize) -> bool {
    for i in 0..edges.len() {
        let v = edges[i].to;
        if v == sink || v == source || edges.iter().filter(|e| e.to == v).count() != 1 {
            continue;
        }
        let mut out = (0..edges.len()).filter(|&j| edges[j].from == v);
        if let (Some(j), None) = (out.next(), out.next()) {
            edges[i].to = edges[j].to;
            edges[i].block = combine(blocks, edges[i].block, edges[j].block, Block::Series);
            edges.swap_remove(j);
            return true;
        }
    }
    false
}

/// h[x][t] for every block (module doc) and, for series blocks, the k
/// reaching it (smallest on ties). Operands precede their blocks.
fn block_costs(blocks: &[Block], g: &[Vec<f64>], steps: usize) -> (Vec<Vec<f64>>, Vec<Vec<usize>>) {
    let mut h: Vec<Vec<f64>> = Vec::with_capacity(blocks.len());
    let mut best_k: Vec<Vec<usize>> = Vec::with_capacity(blocks.len());
    for (x, block) in blocks.iter().enumerate() {
        let (costs, ks) = match *block {
            Block::Stage(u) => (g[u].clone(), Vec::new()),
            Block::Parallel(a, b) => {
                assert!(a < x && b < x);
                ((0..=steps).map(|t| h[a][t] + h[b][t]).collect(), Vec::new())
            }
            Block::Series(a, b) => {
                assert!(a < x && b < x);
                (0..=steps)
                    .map(|t| {
                        (0..=t).map(|k| (h[a][k] + h[b][t - k], k)).fold((f64::INFINITY, 0), |m, c| {
                            if c.0 < m.0 {
                                c
                            } else {
                                m
                            }
                        })
                    })
                    .unzip()
            }
        };
        h.push(costs);
        best_k.push(ks);
    }
    (h, best_k)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::rng::Rng;
    use crate::time::ms_to_nanos;

    fn model(alpha: f64, beta: f64) -> ModelSpec {
        ModelSpec::linear("m", alpha, beta, 256, 1000.0).expect("valid profile")
    }

    /// A query whose stage i runs model i with the given parents.
    fn query(parents: &[&[usize]], gammas: &[f64], split: Split) -> QuerySpec {
        let stages = parents
            .iter()
            .zip(gammas)
            .enumerate()
            .map(|(i, (p, &gamma))| StageSpec {
                model: ModelId(i as u32),
                parents: p.to_vec(),
                gamma,
                budget: 0,
                deadline_offset: 0,
            })
            .collect();
        QuerySpec { name: "q".into(), slo: ms_to_nanos(100.0), weight: 1.0, arrival: Arrival::Poisson, split, stages }
    }

    const DIAMOND: &[&[usize]] = &[&[], &[0], &[0], &[1, 2]];
    /// b feeds the join d and the sink e: not series-parallel.
    const BRIDGE: &[&[usize]] = &[&[], &[0], &[0], &[1, 2], &[1]];

    #[test]
    fn budgets_fill_the_slo_and_follow_the_load() {
        let models = vec![model(1.0, 10.0), model(1.0, 10.0)];
        let two_stage = |gamma, split| query(&[&[], &[0]], &[1.0, gamma], split);
        for gamma in [0.1, 1.0, 10.0] {
            let mut q = two_stage(gamma, Split::Dp);
            q.split_budgets(&models).expect("a chain is series-parallel");
            let (a, b) = (q.stages[0].budget, q.stages[1].budget);
            assert!(a + b <= q.slo && a + b >= q.slo - q.slo / 50, "gamma {gamma}: {a} + {b}");
            assert_eq!(q.stages[1].deadline_offset, a + b);
        }
        // The busier stage gets the larger budget.
        let mut light = two_stage(0.1, Split::Dp);
        light.split_budgets(&models).expect("series-parallel");
        assert!(light.stages[0].budget > light.stages[1].budget);
        let mut heavy = two_stage(10.0, Split::Dp);
        heavy.split_budgets(&models).expect("series-parallel");
        assert!(heavy.stages[0].budget < heavy.stages[1].budget);
        let mut even = two_stage(10.0, Split::Even);
        even.split_budgets(&models).expect("even takes any graph");
        assert_eq!(even.stages[0].budget, even.stages[1].budget);
    }

    /// The least `sum_u g[u][k_u]` over every budget choice on the grid
    /// whose deadline offsets all fit in `steps`.
    fn brute_force(q: &QuerySpec, g: &[Vec<f64>], steps: usize) -> f64 {
        let n = q.stages.len();
        let mut ks = vec![1; n];
        let mut best = f64::INFINITY;
        loop {
            let mut offsets: Vec<usize> = Vec::with_capacity(n);
            for (u, st) in q.stages.iter().enumerate() {
                offsets.push(st.parents.iter().map(|&p| offsets[p]).max().unwrap_or(0) + ks[u]);
            }
            if offsets.iter().all(|&d| d <= steps) {
                best = best.min(ks.iter().enumerate().map(|(u, &k)| g[u][k]).sum());
            }
            // Next choice, like an odometer.
            let Some(u) = (0..n).find(|&u| ks[u] < steps) else { return best };
            ks[u] += 1;
            ks[..u].fill(1);
        }
    }

    /// Non-increasing random costs, infinite below a random l(1).
    fn random_costs(rng: &mut Rng, n: usize, steps: usize) -> Vec<Vec<f64>> {
        (0..n)
            .map(|_| {
                let fits_from = 1 + rng.below(2) as usize;
                let mut c = 1.0 + 10.0 * rng.unit();
                (0..=steps)
                    .map(|k| {
                        if k < fits_from {
                            return f64::INFINITY;
                        }
                        c -= c * 0.4 * rng.unit();
                        c
                    })
                    .collect()
            })
            .collect()
    }

    /// The cost the split's budgets reach (infinite if it finds none), and
    /// that they fit.
    fn dp_cost(q: &QuerySpec, g: &[Vec<f64>], steps: usize) -> f64 {
        let Some(ks) = q.dp_steps(g, steps).expect("series-parallel") else { return f64::INFINITY };
        let mut offsets: Vec<usize> = Vec::new();
        for (u, st) in q.stages.iter().enumerate() {
            assert!(ks[u] >= 1);
            offsets.push(st.parents.iter().map(|&p| offsets[p]).max().unwrap_or(0) + ks[u]);
        }
        assert!(offsets.iter().all(|&d| d <= steps), "{ks:?} overruns {steps} steps");
        ks.iter().enumerate().map(|(u, &k)| g[u][k]).sum()
    }

    #[test]
    fn dp_matches_brute_force_on_fork_join_shapes() {
        let shapes: [&[&[usize]]; 5] = [
            DIAMOND,
            // The tree Nexus describes, and a chain.
            &[&[], &[0], &[0], &[1]],
            &[&[], &[0], &[1], &[2]],
            // A join of unequal branches, then a tail.
            &[&[], &[0], &[1], &[0], &[2, 3], &[4]],
            // Nested joins: d joins b and c, f joins d and e.
            &[&[], &[0], &[0], &[1, 2], &[0], &[3, 4]],
        ];
        let mut rng = Rng::new(11);
        let mut feasible = 0;
        for (i, shape) in shapes.iter().enumerate() {
            let q = query(shape, &vec![1.0; shape.len()], Split::Dp);
            let steps = if shape.len() <= 4 { 10 } else { 8 };
            for _ in 0..20 {
                let g = random_costs(&mut rng, shape.len(), steps);
                let (dp, brute) = (dp_cost(&q, &g, steps), brute_force(&q, &g, steps));
                if brute.is_infinite() {
                    assert!(dp.is_infinite(), "shape {i}: dp {dp} where nothing fits");
                    continue;
                }
                feasible += 1;
                assert!((dp - brute).abs() <= 1e-9 * brute, "shape {i}: dp {dp}, brute force {brute}");
            }
        }
        assert!(feasible >= 80, "only {feasible} of 100 cases could fit");
    }

    #[test]
    fn dp_matches_brute_force_on_a_diamond_of_real_profiles() {
        let models = vec![model(2.0, 20.0), model(1.0, 5.0), model(3.0, 2.0), model(0.5, 10.0)];
        for gammas in [[1.0, 1.0, 1.0, 1.0], [1.0, 8.0, 0.5, 1.0], [1.0, 0.2, 4.0, 3.0]] {
            let q = query(DIAMOND, &gammas, Split::Dp);
            let steps = 16;
            let g = q.stage_costs(&models, q.slo / steps as Nanos, steps);
            let (dp, brute) = (dp_cost(&q, &g, steps), brute_force(&q, &g, steps));
            assert!((dp - brute).abs() <= 1e-9 * brute, "gammas {gammas:?}: dp {dp}, brute force {brute}");
        }
    }

    /// The tree recursion counts a join once per parent: on a diamond whose
    /// join is the only costly stage it pays for it twice.
    #[test]
    fn a_join_is_paid_for_once() {
        let q = query(DIAMOND, &[1.0; 4], Split::Dp);
        let steps = 6;
        let cheap = vec![f64::INFINITY, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let join = (0..=steps).map(|k| if k == 0 { f64::INFINITY } else { 10.0 / k as f64 }).collect();
        let g = vec![cheap.clone(), cheap.clone(), cheap, join];
        // a, b and c take a step each (b and c side by side), d the other 4.
        assert_eq!(q.dp_steps(&g, steps), Ok(Some(vec![1, 1, 1, 4])));
    }

    #[test]
    fn joins_start_after_their_latest_parent() {
        let models: Vec<ModelSpec> = (0..5).map(|_| model(1.0, 5.0)).collect();
        // a -> b -> c and a -> d, joined by e.
        let shape: &[&[usize]] = &[&[], &[0], &[1], &[0], &[2, 3]];
        let mut even = query(shape, &[1.0; 5], Split::Even);
        even.split_budgets(&models).expect("even takes any graph");
        let x = even.slo / 4;
        let offsets: Vec<Nanos> = even.stages.iter().map(|s| s.deadline_offset).collect();
        assert_eq!(offsets, vec![x, 2 * x, 3 * x, 2 * x, 4 * x]);
        let mut dp = query(shape, &[1.0, 1.0, 1.0, 4.0, 2.0], Split::Dp);
        dp.split_budgets(&models).expect("series-parallel");
        let st = &dp.stages;
        assert_eq!(st[4].deadline_offset, st[2].deadline_offset.max(st[3].deadline_offset) + st[4].budget);
        // Parallel branches both run until the join starts.
        assert_eq!(st[2].deadline_offset, st[3].deadline_offset);
        assert_eq!(st[4].deadline_offset, dp.slo);
        assert_eq!(dp.multiplier(3), 4.0);
        assert_eq!(dp.multiplier(4), 2.0, "a join's gamma is per query");
    }

    #[test]
    fn the_dp_rejects_a_bridge_and_even_takes_it() {
        let models: Vec<ModelSpec> = (0..5).map(|_| model(1.0, 5.0)).collect();
        let mut dp = query(BRIDGE, &[1.0; 5], Split::Dp);
        assert_eq!(dp.split_budgets(&models), Err(QueryError::NotSeriesParallel));
        let mut even = query(BRIDGE, &[1.0; 5], Split::Even);
        even.split_budgets(&models).expect("even takes any graph");
        assert!(even.stages.iter().all(|s| s.deadline_offset <= even.slo));
        even.slo = 2;
        assert_eq!(even.split_budgets(&models), Err(QueryError::SloTooShort { slo: 2, longest_path: 3 }));
        assert_eq!(even.ancestor_masks(), vec![0, 0b1, 0b1, 0b111, 0b11]);
    }
}
