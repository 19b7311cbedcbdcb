//! A partitioned cluster: K schedulers side by side, each owning one
//! sub-cluster of a partition plan (`partition.rs`) — its models and its
//! GPUs — and knowing nothing of the others, as Symphony's sub-clusters do.
//! `Partitioned` is one `Scheduler` to whoever drives it (the simulator,
//! the goodput search): it routes each request to the scheduler owning
//! its model and each completion or failure to the one owning the backend,
//! and hands out their decisions with models and backends renamed back to
//! the cluster's. Driving the whole cluster as one keeps every arrival
//! what it is with one scheduler, so K = 1, 2, 4, 8 compare on the very
//! same requests.
//!
//! Sub-cluster i runs its models under their own indices (0..) on backends
//! `first_i .. first_i + gpus_i`, numbered 0.. inside it; each scheduler
//! is built for its sub-scenario (`sub_scenario`) at its models' share of
//! the offered rate. Queries, prefix groups and GPU partitions span models
//! or GPUs a plan may split, so scenarios with them are refused.

use crate::partition::{PartitionError, Plan, SubCluster};
use crate::scenario::Scenario;
use crate::side_by_side::SideBySide;
use crate::time::Nanos;
use crate::types::{BackendId, BatchDone, ModelId, Output, Request, Scheduler};

/// How a sub-cluster's ids map back to the cluster's.
struct Names {
    /// The cluster's id of each of its models, by its own index.
    models: Vec<ModelId>,
    first_backend: u32,
}

pub struct Partitioned {
    /// Each sub-cluster's scheduler, and its names.
    subs: SideBySide,
    names: Vec<Names>,
    /// Each of the cluster's models: its sub-cluster and its id there.
    model_at: Vec<(usize, ModelId)>,
    /// Each of the cluster's backends: its sub-cluster and its id there.
    backend_at: Vec<(usize, BackendId)>,
}

/// What a partitioned cluster cannot run.
pub fn refuses(s: &Scenario) -> Option<&'static str> {
    if !s.queries.is_empty() {
        Some("multi-model queries (their stages may land in different sub-clusters)")
    } else if !s.cluster.prefixes.is_empty() {
        Some("prefix groups (their members may land in different sub-clusters)")
    } else if s.partitions.is_some() {
        Some("GPU partitions")
    } else {
        None
    }
}

/// Sub-cluster `sub`'s scenario: its models (in the cluster's order), its
/// GPUs, the faults of its backends renumbered; and its share of the rate.
pub fn sub_scenario(s: &Scenario, sub: &SubCluster, first_backend: u32) -> (Scenario, f64) {
    let mut out = s.clone();
    out.models = sub.models.iter().map(|&m| s.models[m].clone()).collect();
    out.cluster.models = sub.models.iter().map(|&m| s.cluster.models[m].clone()).collect();
    out.cluster.backends = sub.gpus;
    let mine = first_backend..first_backend + sub.gpus;
    out.faults = s
        .faults
        .iter()
        .filter(|(_, b)| mine.contains(&b.0))
        .map(|&(t, b)| (t, BackendId(b.0 - first_backend)))
        .collect();
    out.name = format!("{}/{}", s.name, first_backend);
    (out, weight_share(s, &sub.models))
}

/// The share of `s`'s offered rate that goes to `models`: their weights
/// over the total.
pub fn weight_share(s: &Scenario, models: &[usize]) -> f64 {
    let total: f64 = s.models.iter().map(|m| m.weight).sum();
    models.iter().map(|&m| s.models[m].weight).sum::<f64>() / total
}

impl Partitioned {
    /// The plan's sub-clusters, each under a scheduler `build` makes for
    /// its sub-scenario and rate (the offered `rate_rps` times its share).
    pub fn new(
        s: &Scenario,
        plan: &Plan,
        rate_rps: f64,
        build: &dyn Fn(&Scenario, f64) -> Box<dyn Scheduler>,
    ) -> Result<Self, PartitionError> {
        if let Some(what) = refuses(s) {
            return Err(PartitionError::Unsupported(what));
        }
        let gpus: u32 = plan.subclusters.iter().map(|c| c.gpus).sum();
        assert_eq!(gpus, s.cluster.backends, "a plan shares out every GPU");
        let mut model_at = vec![None; s.models.len()];
        let mut backend_at = Vec::with_capacity(gpus as usize);
        let (mut subs, mut names) = (Vec::new(), Vec::new());
        let ranges = plan.gpu_ranges();
        for (sub, mine) in plan.subclusters.iter().zip(&ranges).filter(|(c, _)| !c.models.is_empty()) {
            let i = subs.len();
            // GPUs of sub-clusters without models would idle; a plan gives them none.
            assert_eq!(mine.start as usize, backend_at.len(), "GPUs in a sub-cluster without models");
            let first_backend = mine.start;
            let (scenario, share) = sub_scenario(s, sub, first_backend);
            for (local, &m) in sub.models.iter().enumerate() {
                assert!(model_at[m].is_none(), "model {m} in two sub-clusters");
                model_at[m] = Some((i, ModelId(local as u32)));
            }
            backend_at.extend((0..sub.gpus).map(|b| (i, BackendId(b))));
            let sched = build(&scenario, rate_rps * share);
            if sched.partitions().is_some() {
                return Err(PartitionError::Unsupported("policies that partition GPUs"));
            }
            let models = sub.models.iter().map(|&m| ModelId(m as u32)).collect();
            subs.push(sched);
            names.push(Names { models, first_backend });
        }
        let model_at = model_at.into_iter().map(|m| m.expect("a plan places every model")).collect();
        Ok(Partitioned { subs: SideBySide::new(subs), names, model_at, backend_at })
    }

    pub fn schedulers(&self) -> usize {
        self.subs.count()
    }
}

impl Scheduler for Partitioned {
    fn on_request(&mut self, now: Nanos, req: Request) {
        let (i, model) = self.model_at[req.model.index()];
        self.subs.sched(i).on_request(now, Request { model, ..req });
    }

    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        let (i, backend) = self.backend_at[done.backend.index()];
        let (j, model) = self.model_at[done.model.index()];
        debug_assert_eq!(i, j, "a batch runs in its model's sub-cluster");
        self.subs.sched(i).on_batch_done(now, &BatchDone { backend, model, ..*done });
    }

    fn on_backend_failed(&mut self, now: Nanos, backend: BackendId) {
        let (i, b) = self.backend_at[backend.index()];
        self.subs.sched(i).on_backend_failed(now, b);
    }

    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId) {
        let (i, b) = self.backend_at[backend.index()];
        self.subs.sched(i).on_backend_joined(now, b);
    }

    fn on_timeout(&mut self, now: Nanos) {
        self.subs.on_timeout(now);
    }

    fn next_timeout(&self) -> Option<Nanos> {
        self.subs.next_timeout()
    }

    fn poll_output(&mut self) -> Option<Output> {
        let (i, out) = self.subs.poll_output()?;
        let names = &self.names[i];
        Some(match out {
            Output::Dispatch(mut plan) => {
                plan.model = names.models[plan.model.index()];
                plan.backend = BackendId(names.first_backend + plan.backend.0);
                Output::Dispatch(plan)
            }
            dropped => dropped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::partition::plan;
    use crate::policy::PolicyKind;
    use crate::sim::run_with;

    fn zoo() -> Scenario {
        let text = include_str!("../../perf/scenarios/zoo-a100-all.toml");
        Scenario::parse(text).expect("the zoo parses")
    }

    fn symphony(s: &Scenario, rate: f64) -> Box<dyn Scheduler> {
        crate::build::scheduler(PolicyKind::Symphony, s, rate)
    }

    #[test]
    fn one_sub_cluster_is_one_scheduler_exactly() {
        let s = zoo();
        let rate = 8_000.0;
        let whole = run_with(&s, "symphony", symphony(&s, rate).as_mut(), rate);
        let p = plan(&s, 1, rate).unwrap();
        let mut one = Partitioned::new(&s, &p, rate, &symphony).unwrap();
        let split = run_with(&s, "symphony", &mut one, rate);
        assert_eq!(
            (split.sent, split.ok, split.late, split.dropped),
            (whole.sent, whole.ok, whole.late, whole.dropped)
        );
    }

    #[test]
    fn every_request_ends_once_across_sub_clusters_on_their_own_gpus() {
        let s = zoo();
        let rate = 8_000.0;
        let p = plan(&s, 4, rate).unwrap();
        let mut four = Partitioned::new(&s, &p, rate, &symphony).unwrap();
        assert_eq!(four.schedulers(), 4);
        // The simulator's checker panics on a request ended twice or never,
        // on a batch of the wrong model or backend.
        let r = run_with(&s, "symphony", &mut four, rate);
        assert_eq!(r.sent, r.ok + r.late + r.dropped, "{r:?}");
        assert!(r.ok > r.sent / 2, "the split cluster serves: {} of {}", r.ok, r.sent);
    }
}
