//! The routing table of a partitioned cluster (Symphony's sub-clusters):
//! which sub-cluster's scheduler takes each model's requests, and which
//! backends (GPUs) each sub-cluster's scheduler plans on.
//!
//! A partitioned cluster keeps one numbering of models and backends (the
//! scenario's) across all its schedulers: scheduler `k` is started with
//! the whole scenario, plans only on the backends that connect to it (it
//! starts with every backend down), and only ever receives requests for
//! the models routed to it. Moving a model between sub-clusters is then a
//! new table published to the frontends (`ModelTable::route`): requests
//! admitted after it go to the new scheduler, those already sent stay with
//! the old one and are answered there — nothing is lost or answered twice
//! (`Held::sub` remembers where each request went). Moving a GPU is its
//! backend process leaving one scheduler and a new one joining the other.

use baton_sched::handover::handover;
use baton_sched::partition::Plan;
use baton_sched::Scenario;

use crate::models::ModelTable;
use crate::roles::Addr;

/// One sub-cluster: the models it serves (indices into the scenario's)
/// and the backends its scheduler plans on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subcluster {
    pub models: Vec<usize>,
    pub backends: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routes {
    pub subclusters: Vec<Subcluster>,
}

/// One step from a table to the next (`Routes::replanned`).
pub use baton_sched::handover::Change;

/// A routing table that does not fit its scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteError(pub String);

impl std::fmt::Display for RouteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "routing table: {}", self.0)
    }
}

impl std::error::Error for RouteError {}

impl Routes {
    /// A partition plan's sub-clusters, their GPUs numbered in plan order
    /// (`Plan::gpu_ranges`: sub-cluster 0 the first `gpus`, and so on).
    pub fn of_plan(plan: &Plan) -> Self {
        let subclusters = plan.subclusters.iter().zip(plan.gpu_ranges());
        let subclusters =
            subclusters.map(|(c, gpus)| Subcluster { models: c.models.clone(), backends: gpus.collect() });
        Self { subclusters: subclusters.collect() }
    }

    /// The table `baton partition --json` prints (`subclusters`, each with
    /// `models` by name and a count of `gpus`), for `s`.
    pub fn from_json(s: &Scenario, text: &str) -> Result<Self, RouteError> {
        let bad = |why: String| RouteError(why);
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let list = v["subclusters"].as_array().ok_or_else(|| bad("no `subclusters` list".into()))?;
        let mut next = 0u32;
        let mut subclusters = Vec::with_capacity(list.len());
        for (k, c) in list.iter().enumerate() {
            let names = c["models"].as_array().ok_or_else(|| bad(format!("sub-cluster {k}: no `models` list")))?;
            let models = names
                .iter()
                .map(|n| {
                    let n = n.as_str().ok_or_else(|| bad(format!("sub-cluster {k}: a model name is not a string")))?;
                    s.models.iter().position(|m| m.spec.name == n).ok_or_else(|| bad(format!("no model named `{n}`")))
                })
                .collect::<Result<Vec<usize>, RouteError>>()?;
            let gpus = c["gpus"].as_u64().and_then(|g| u32::try_from(g).ok());
            let gpus = gpus.ok_or_else(|| bad(format!("sub-cluster {k}: `gpus` is not a count")))?;
            let n = s.cluster.backends;
            let end = next.checked_add(gpus).filter(|&e| e <= n);
            let end = end.ok_or_else(|| bad(format!("sub-cluster {k}: GPUs past the cluster's {n}")))?;
            subclusters.push(Subcluster { models, backends: (next..end).collect() });
            next = end;
        }
        let routes = Self { subclusters };
        routes.check(s)?;
        Ok(routes)
    }

    /// Every model in exactly one sub-cluster, every backend of the
    /// cluster in at most one, and at least one sub-cluster.
    pub fn check(&self, s: &Scenario) -> Result<(), RouteError> {
        if self.subclusters.is_empty() {
            return Err(RouteError("no sub-clusters".into()));
        }
        let mut model_in = vec![None; s.models.len()];
        let mut backend_in = vec![None; s.cluster.backends as usize];
        for (k, c) in self.subclusters.iter().enumerate() {
            for &m in &c.models {
                let name = s.models.get(m).map(|m| m.spec.name.as_str());
                let slot = model_in.get_mut(m).ok_or_else(|| RouteError(format!("model {m} is not the scenario's")))?;
                if let Some(j) = slot.replace(k) {
                    return Err(RouteError(format!("`{}` is in sub-clusters {j} and {k}", name.unwrap_or("?"))));
                }
            }
            for &b in &c.backends {
                let n = backend_in.len();
                let slot = backend_in
                    .get_mut(b as usize)
                    .ok_or_else(|| RouteError(format!("backend {b}: the cluster has {n}")))?;
                if let Some(j) = slot.replace(k) {
                    return Err(RouteError(format!("backend {b} is in sub-clusters {j} and {k}")));
                }
            }
        }
        match model_in.iter().position(Option::is_none) {
            Some(m) => Err(RouteError(format!("`{}` is in no sub-cluster", s.models[m].spec.name))),
            None => Ok(()),
        }
    }

    /// Each model's sub-cluster, by model (a checked table places every
    /// model; one it does not counts as sub-cluster 0).
    pub fn assignment(&self) -> Vec<usize> {
        let n = self.subclusters.iter().flat_map(|c| c.models.iter().map(|&m| m + 1)).max().unwrap_or(0);
        let mut of = vec![0; n];
        for (k, c) in self.subclusters.iter().enumerate() {
            for &m in &c.models {
                of[m] = k;
            }
        }
        of
    }

    /// The table re-planning to `plan` (as many sub-clusters, as many
    /// GPUs) makes of this one, and the steps (`baton_sched::handover`: no
    /// GPU moves that need not).
    pub fn replanned(&self, plan: &Plan) -> Result<(Self, Vec<Change>), RouteError> {
        let k = self.subclusters.len();
        if plan.subclusters.len() != k {
            return Err(RouteError(format!("a plan of {} sub-clusters for a table of {k}", plan.subclusters.len())));
        }
        let have: u32 = self.subclusters.iter().map(|c| c.backends.len() as u32).sum();
        let want: u32 = plan.subclusters.iter().map(|c| c.gpus).sum();
        if have != want {
            return Err(RouteError(format!("a plan of {want} GPUs for a table of {have}")));
        }
        let held: Vec<Vec<u32>> = self.subclusters.iter().map(|c| c.backends.clone()).collect();
        let (gpus, changes) = handover(&held, &self.assignment(), plan);
        let subclusters = plan.subclusters.iter().zip(gpus);
        let next = Routes {
            subclusters: subclusters.map(|(p, backends)| Subcluster { models: p.models.clone(), backends }).collect(),
        };
        Ok((next, changes))
    }

    /// The sub-cluster serving model `m`.
    pub fn subcluster_of(&self, m: usize) -> Option<u32> {
        self.subclusters.iter().position(|c| c.models.contains(&m)).map(|k| k as u32)
    }

    /// Model `m` moved to sub-cluster `to`, with backend `gpu` (from
    /// wherever it was) when given.
    pub fn moved(&self, m: usize, to: u32, gpu: Option<u32>) -> Result<Self, RouteError> {
        let k = self.subclusters.len();
        if to as usize >= k {
            return Err(RouteError(format!("sub-cluster {to}: there are {k}")));
        }
        let mut next = self.clone();
        for c in &mut next.subclusters {
            c.models.retain(|&x| x != m);
            c.backends.retain(|&b| Some(b) != gpu);
        }
        let dest = &mut next.subclusters[to as usize];
        dest.models.push(m);
        dest.backends.extend(gpu);
        Ok(next)
    }
}

impl ModelTable {
    /// The scheduler that takes model `model`'s requests.
    pub fn scheduler_of(&self, model: u32) -> Addr {
        Addr::Scheduler(self.models[model as usize].subcluster)
    }

    /// Routes each model's requests to its sub-cluster's scheduler
    /// (`routes` checked against the scenario the table was built from).
    pub fn route(&mut self, routes: &Routes) {
        for (k, c) in routes.subclusters.iter().enumerate() {
            for &m in &c.models {
                self.models[m].subcluster = k as u32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Models `a` and `b`, alike, on 4 GPUs.
    fn zoo() -> Scenario {
        let mut text = "name = \"two\"\n[cluster]\ngpus = 4\n".to_string();
        for name in ["a", "b"] {
            text += &format!("[[models]]\nname = \"{name}\"\nalpha_ms = 1.0\nbeta_ms = 2.0\nslo_ms = 50\n");
        }
        Scenario::parse(&text).expect("a scenario")
    }

    #[test]
    fn a_plan_as_json_routes_each_model_and_numbers_the_gpus_in_order() {
        let s = zoo();
        let json = r#"{"subclusters":[{"models":["b"],"gpus":1},{"models":["a"],"gpus":3}]}"#;
        let r = Routes::from_json(&s, json).expect("fits");
        assert_eq!(r.subclusters[0], Subcluster { models: vec![1], backends: vec![0] });
        assert_eq!(r.subclusters[1], Subcluster { models: vec![0], backends: vec![1, 2, 3] });
        assert_eq!(r.subcluster_of(0), Some(1));
    }

    #[test]
    fn a_table_that_misses_or_doubles_a_model_or_a_gpu_is_refused() {
        let s = zoo();
        let missing = r#"{"subclusters":[{"models":["a"],"gpus":2}]}"#;
        assert!(Routes::from_json(&s, missing).unwrap_err().0.contains("`b` is in no sub-cluster"));
        let twice = r#"{"subclusters":[{"models":["a","b"],"gpus":2},{"models":["a"],"gpus":2}]}"#;
        assert!(Routes::from_json(&s, twice).unwrap_err().0.contains("sub-clusters 0 and 1"));
        let too_many = r#"{"subclusters":[{"models":["a","b"],"gpus":5}]}"#;
        assert!(Routes::from_json(&s, too_many).unwrap_err().0.contains("GPUs past the cluster's 4"));
        let huge = r#"{"subclusters":[{"models":["a","b"],"gpus":4000000000}]}"#;
        assert!(Routes::from_json(&s, huge).is_err());
        assert!(Routes::from_json(&s, "[1, 2").unwrap_err().0.contains("not JSON"));
        let unknown = r#"{"subclusters":[{"models":["c"],"gpus":1}]}"#;
        assert!(Routes::from_json(&s, unknown).unwrap_err().0.contains("no model named `c`"));
    }

    #[test]
    fn moving_a_model_and_a_gpu_keeps_the_table_whole() {
        let s = zoo();
        let json = r#"{"subclusters":[{"models":["a"],"gpus":2},{"models":["b"],"gpus":2}]}"#;
        let r = Routes::from_json(&s, json).expect("fits").moved(0, 1, Some(1)).expect("a sub-cluster");
        r.check(&s).expect("still whole");
        assert_eq!(r.subclusters[0], Subcluster { models: vec![], backends: vec![0] });
        assert_eq!(r.subclusters[1], Subcluster { models: vec![1, 0], backends: vec![2, 3, 1] });
        assert!(r.moved(0, 2, None).unwrap_err().0.contains("sub-cluster 2: there are 2"));
    }

    #[test]
    fn a_replanned_table_moves_only_what_the_plan_changes() {
        use baton_sched::partition::{Plan, Solver, SubCluster};
        let s = zoo();
        let json = r#"{"subclusters":[{"models":["a"],"gpus":3},{"models":["b"],"gpus":1}]}"#;
        let r = Routes::from_json(&s, json).expect("fits");
        assert_eq!(r.assignment(), vec![0, 1]);
        let sub = |models: Vec<usize>, gpus| SubCluster { models, gpus, demand_gpus: 0.0 };
        let plan = |subs| Plan {
            subclusters: subs,
            solver: Solver::Greedy { why: String::new() },
            objective: 0.0,
            imbalance: 0.0,
        };
        // The same models, one GPU fewer for sub-cluster 0: its highest goes.
        let (next, changes) = r.replanned(&plan(vec![sub(vec![0], 2), sub(vec![1], 2)])).unwrap();
        next.check(&s).unwrap();
        assert_eq!(changes, vec![Change::Gpu { gpu: 2, from: 0, to: 1 }]);
        assert_eq!(next.subclusters[1].backends, vec![2, 3]);
        // Both models together, all GPUs with them.
        let (next, changes) = r.replanned(&plan(vec![sub(vec![0, 1], 4), sub(vec![], 0)])).unwrap();
        assert_eq!(changes, vec![Change::Model { model: 1, from: 1, to: 0 }, Change::Gpu { gpu: 3, from: 1, to: 0 }]);
        assert_eq!(next.subclusters[0].backends, vec![0, 1, 2, 3]);
        // Nothing changes: no steps.
        assert_eq!(r.replanned(&plan(vec![sub(vec![0], 3), sub(vec![1], 1)])).unwrap(), (r.clone(), vec![]));
        assert!(r.replanned(&plan(vec![sub(vec![0, 1], 3)])).is_err());
        assert!(r.replanned(&plan(vec![sub(vec![0], 3), sub(vec![1], 2)])).is_err());
    }
}
