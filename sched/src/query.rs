//! Multi-model queries (Nexus, section 5): a tree of stages, each a model,
//! fed by its parent — every completed request of a stage spawns on
//! average `gamma` requests of each child stage — with one end-to-end SLO.
//! The SLO is split into per-stage latency budgets, by Nexus's dynamic
//! program or evenly; a stage's requests must finish by the query's arrival
//! plus the budgets along its path, and a query is in SLO only if every one
//! of its stage requests is.
//!
//! The dynamic program (`../shared/design/planners.md`), over budgets
//! discretised in `SPLIT_STEPS` steps of the SLO, with R_u the stage's rate
//! per query (the product of gammas along its path):
//!
//! ```text
//! f(u, t) = min_{k <= t} { R_u * min_{b: l_u(b) <= k} l_u(b)/b  +  sum_{v child of u} f(v, t - k) }
//! ```
//!
//! f(u, t) is the GPU time per query the subtree under u needs within budget
//! t; the budgets are the minimising k, top down. It is independent of the
//! query rate, which scales every term alike.

use crate::scenario::Arrival;
use crate::time::Nanos;
use crate::types::{ModelId, ModelSpec};

/// Budget steps of the dynamic program over the SLO.
pub const SPLIT_STEPS: usize = 400;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Dp,
    Even,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StageSpec {
    pub model: ModelId,
    pub parent: Option<usize>,
    /// Requests of this stage per completed request of its parent, on average.
    pub gamma: f64,
    /// This stage's latency budget.
    pub budget: Nanos,
    /// Query arrival to this stage's deadline: the budgets along its path.
    pub deadline_offset: Nanos,
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

impl QuerySpec {
    pub fn children(&self, s: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.stages.len()).filter(move |&c| self.stages[c].parent == Some(s))
    }

    /// Requests of stage s per query.
    pub fn multiplier(&self, s: usize) -> f64 {
        let st = &self.stages[s];
        st.gamma * st.parent.map_or(1.0, |p| self.multiplier(p))
    }

    fn depth(&self, s: usize) -> usize {
        1 + self.stages[s].parent.map_or(0, |p| self.depth(p))
    }

    /// Splits the SLO into budgets and deadline offsets.
    pub fn split_budgets(&mut self, models: &[ModelSpec]) {
        let budgets = match self.split {
            Split::Even => {
                let depth = (0..self.stages.len()).map(|s| self.depth(s)).max().unwrap_or(1);
                vec![self.slo / depth as Nanos; self.stages.len()]
            }
            Split::Dp => self.dp_budgets(models),
        };
        for (s, &budget) in budgets.iter().enumerate() {
            let before = self.stages[s].parent.map_or(0, |p| self.stages[p].deadline_offset);
            self.stages[s].budget = budget;
            self.stages[s].deadline_offset = before + budget;
        }
    }

    fn dp_budgets(&self, models: &[ModelSpec]) -> Vec<Nanos> {
        let n = self.stages.len();
        let step = (self.slo / SPLIT_STEPS as Nanos).max(1);
        let steps = (self.slo / step) as usize;
        // g[u][k]: GPU time per query of stage u alone within k steps.
        let g: Vec<Vec<f64>> = (0..n)
            .map(|u| {
                let p = &models[self.stages[u].model.index()].profile;
                let r = self.multiplier(u);
                (0..=steps)
                    .map(|k| match p.max_batch_within(k as Nanos * step, 0, p.max_batch()) {
                        0 => f64::INFINITY,
                        b => r * p.latency(b) as f64 / b as f64,
                    })
                    .collect()
            })
            .collect();
        // f[u][t] and its minimising k, children before parents.
        let mut f = vec![vec![f64::INFINITY; steps + 1]; n];
        let mut best_k = vec![vec![0usize; steps + 1]; n];
        for u in (0..n).rev() {
            let kids: Vec<usize> = self.children(u).collect();
            for t in 1..=steps {
                for k in 1..=t {
                    let rest: f64 = kids.iter().map(|&v| if k == t { f64::INFINITY } else { f[v][t - k] }).sum();
                    let total = g[u][k] + if kids.is_empty() { 0.0 } else { rest };
                    if total < f[u][t] {
                        f[u][t] = total;
                        best_k[u][t] = k;
                    }
                }
            }
        }
        // Top down: each stage takes its k out of what its parent left.
        let mut left = vec![steps; n];
        let mut budgets = vec![0; n];
        for u in 0..n {
            let t = match self.stages[u].parent {
                Some(p) => left[p],
                None => steps,
            };
            let k = if f[u][t].is_finite() { best_k[u][t] } else { t / (self.depth_below(u) + 1) }.max(1);
            budgets[u] = k as Nanos * step;
            left[u] = t.saturating_sub(k);
        }
        budgets
    }

    /// Stages below u on its longest path.
    fn depth_below(&self, u: usize) -> usize {
        self.children(u).map(|c| 1 + self.depth_below(c)).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::time::ms_to_nanos;

    fn model(alpha: f64, beta: f64) -> ModelSpec {
        ModelSpec::linear("m", alpha, beta, 256, 1000.0).expect("valid profile")
    }

    fn two_stage(gamma: f64, split: Split) -> QuerySpec {
        let st =
            |model, parent, gamma| StageSpec { model: ModelId(model), parent, gamma, budget: 0, deadline_offset: 0 };
        QuerySpec {
            name: "q".into(),
            slo: ms_to_nanos(100.0),
            weight: 1.0,
            arrival: Arrival::Poisson,
            split,
            stages: vec![st(0, None, 1.0), st(1, Some(0), gamma)],
        }
    }

    #[test]
    fn budgets_fill_the_slo_and_follow_the_load() {
        let models = vec![model(1.0, 10.0), model(1.0, 10.0)];
        for gamma in [0.1, 1.0, 10.0] {
            let mut q = two_stage(gamma, Split::Dp);
            q.split_budgets(&models);
            let (a, b) = (q.stages[0].budget, q.stages[1].budget);
            assert!(a + b <= q.slo && a + b >= q.slo - q.slo / 50, "gamma {gamma}: {a} + {b}");
            assert_eq!(q.stages[1].deadline_offset, a + b);
        }
        // The busier stage gets the larger budget.
        let mut light = two_stage(0.1, Split::Dp);
        light.split_budgets(&models);
        assert!(light.stages[0].budget > light.stages[1].budget);
        let mut heavy = two_stage(10.0, Split::Dp);
        heavy.split_budgets(&models);
        assert!(heavy.stages[0].budget < heavy.stages[1].budget);
        let mut even = two_stage(10.0, Split::Even);
        even.split_budgets(&models);
        assert_eq!(even.stages[0].budget, even.stages[1].budget);
    }
}
