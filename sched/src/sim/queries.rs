//! Query bookkeeping in the simulator, with the semantics of `query.rs`:
//! each query instance spawns its stage requests as parents complete (on
//! average `gamma` per parent request, Poisson distributed); a join fires
//! once per instance, when none of its ancestors' requests is outstanding
//! and none missed, and spawns Poisson(gamma) requests. An instance is
//! counted once, when its last request ends, and in SLO only if every stage
//! request it spawned finished by its stage deadline.

use serde::Serialize;

use crate::query::MAX_STAGES;
use crate::query_run::{joins_of, Join, QueryRun};
use crate::rng::Rng;
use crate::scenario::Scenario;
use crate::time::Nanos;
use crate::types::ModelId;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct QueryReport {
    pub name: String,
    pub offered_rps: f64,
    pub sent: u64,
    pub ok: u64,
    pub bad_rate: f64,
}

#[derive(Debug)]
struct Instance {
    query: usize,
    arrival: Nanos,
    /// Freed once counted.
    run: Option<QueryRun>,
    measured: bool,
}

#[derive(Debug)]
pub(crate) struct QueryBook {
    instances: Vec<Instance>,
    /// Per query, its joins in stage order (a join before the joins below it).
    joins: Vec<Vec<Join>>,
    sent: Vec<u64>,
    ok: Vec<u64>,
    rng: Rng,
}

/// A stage request to create: instance, stage, its deadline, its model.
pub(crate) type Spawn = (u32, u16, Nanos, ModelId);

const _: () = assert!(MAX_STAGES <= u16::MAX as usize);

/// Draws from Poisson(mean) by multiplying uniforms (means here are small).
fn poisson(rng: &mut Rng, mean: f64) -> u32 {
    let limit = (-mean).exp();
    let (mut k, mut p) = (0, rng.unit());
    while p > limit {
        k += 1;
        p *= rng.unit();
    }
    k
}

impl QueryBook {
    pub fn new(scenario: &Scenario, seed: u64) -> Self {
        let n = scenario.queries.len();
        Self {
            instances: Vec::new(),
            joins: scenario.queries.iter().map(joins_of).collect(),
            sent: vec![0; n],
            ok: vec![0; n],
            rng: Rng::stream(seed, 0x5175_6572),
        }
    }

    /// A query arrives: its root stage request is to be created.
    pub fn start(&mut self, scenario: &Scenario, query: usize, arrival: Nanos, measured: bool) -> Spawn {
        let id = self.instances.len() as u32;
        let q = &scenario.queries[query];
        self.instances.push(Instance { query, arrival, run: Some(QueryRun::start(q)), measured });
        if measured {
            self.sent[query] += 1;
        }
        let root = &q.stages[0];
        (id, 0, arrival + root.deadline_offset, root.model)
    }

    /// A stage request ended (`in_slo`: served by its deadline). The
    /// requests this spawns — children of a served stage, joins whose
    /// ancestors are all done — are appended to `spawn`.
    pub fn ended(&mut self, scenario: &Scenario, instance: u32, stage: u16, in_slo: bool, spawn: &mut Vec<Spawn>) {
        let inst = &mut self.instances[instance as usize];
        let q = &scenario.queries[inst.query];
        let Some(run) = &mut inst.run else { panic!("query instance {instance} ended a request after it was counted") };
        let (rng, arrival) = (&mut self.rng, inst.arrival);
        let fanout = |c: usize| poisson(rng, q.stages[c].gamma);
        run.ended(q, &self.joins[inst.query], stage as usize, in_slo, fanout, |c, n| {
            let st = &q.stages[c];
            spawn.extend((0..n).map(|_| (instance, c as u16, arrival + st.deadline_offset, st.model)));
        });
        if run.done() {
            if inst.measured && run.failed() == 0 {
                self.ok[inst.query] += 1;
            }
            inst.run = None;
        }
    }

    pub fn reports(&self, scenario: &Scenario, query_rates: &[f64]) -> Vec<QueryReport> {
        scenario
            .queries
            .iter()
            .enumerate()
            .map(|(i, q)| QueryReport {
                name: q.name.clone(),
                offered_rps: query_rates[i],
                sent: self.sent[i],
                ok: self.ok[i],
                bad_rate: if self.sent[i] == 0 { 0.0 } else { 1.0 - self.ok[i] as f64 / self.sent[i] as f64 },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A detector fans out to cars and faces, a ranker joins them (about 12
    /// requests per query, so it is seen to fire), a tail follows the ranker.
    const FORK_JOIN: &str = r#"
name = "fj"
[cluster]
gpus = 1
[[models]]
name = "det"
alpha_ms = 1.0
beta_ms = 1.0
[[models]]
name = "car"
alpha_ms = 1.0
beta_ms = 1.0
[[models]]
name = "face"
alpha_ms = 1.0
beta_ms = 1.0
[[models]]
name = "rank"
alpha_ms = 1.0
beta_ms = 1.0
[[models]]
name = "tail"
alpha_ms = 1.0
beta_ms = 1.0
[[queries]]
name = "q"
slo_ms = 500.0
[[queries.stages]]
model = "det"
[[queries.stages]]
model = "car"
parent = "det"
gamma = 2.0
[[queries.stages]]
model = "face"
parent = "det"
gamma = 0.5
[[queries.stages]]
model = "rank"
parents = ["car", "face"]
gamma = 12.0
[[queries.stages]]
model = "tail"
parent = "rank"
gamma = 0.5
"#;

    /// Clients see each query once, not its stage requests: with only the
    /// query sent, its bad rate is the clients'; requests sent to a model
    /// directly count beside it, the stage-only models' requests never.
    #[test]
    fn clients_see_each_query_once_and_direct_requests() {
        let s = Scenario::parse(FORK_JOIN).expect("valid");
        let r = crate::sim::run(&s, s.policy, 200.0);
        let q = &r.queries[0];
        assert!(q.sent > 0 && r.sent > 5 * q.sent, "stage requests outnumber queries: {} vs {}", r.sent, q.sent);
        assert!(
            q.bad_rate > 0.0 && q.bad_rate != r.bad_rate,
            "a rate where the two differ: {} vs {}",
            q.bad_rate,
            r.bad_rate
        );
        assert_eq!(r.client_bad_rate(&s), q.bad_rate);
        let direct = "[[models]]\nname = \"solo\"\nalpha_ms = 1.0\nbeta_ms = 1.0\nslo_ms = 20.0\nweight = 1.0\n";
        let mixed = Scenario::parse(&format!("{FORK_JOIN}{direct}")).expect("valid");
        let r = crate::sim::run(&mixed, mixed.policy, 200.0);
        let (q, solo) = (&r.queries[0], &r.models[5]);
        assert!(solo.sent > 0 && q.sent > 0);
        let expected = (q.bad_rate * q.sent as f64 + solo.bad_rate * solo.sent as f64) / (q.sent + solo.sent) as f64;
        assert!((r.client_bad_rate(&mixed) - expected).abs() < 1e-12, "{} vs {expected}", r.client_bad_rate(&mixed));
        let plain = Scenario::parse(&format!("name = \"plain\"\n[cluster]\ngpus = 1\n{direct}")).expect("valid");
        let r = crate::sim::run(&plain, plain.policy, 200.0);
        assert_eq!(r.client_bad_rate(&plain), r.bad_rate, "no queries: every request is a client's");
    }

    /// What the test knows of one instance: requests ended per stage, and
    /// whether one missed.
    #[derive(Clone, Default)]
    struct Seen {
        ended: [u32; 5],
        spawned: [u32; 5],
        missed: bool,
        missed_upstream: bool,
        rank_spawns: u32,
    }

    /// Random interleavings of many instances, requests ending in random
    /// order and 5% missing: the ranker fires once, after all cars and faces
    /// of its instance and only if none missed; every instance is counted
    /// once; ok counts exactly the instances with no miss.
    #[test]
    fn joins_wait_for_their_parents_and_every_instance_counts_once() {
        let s = Scenario::parse(FORK_JOIN).expect("valid");
        let mut book = QueryBook::new(&s, 3);
        let mut rng = Rng::new(5);
        let mut seen: Vec<Seen> = Vec::new();
        let mut outstanding: Vec<Spawn> = Vec::new();
        let mut spawn: Vec<Spawn> = Vec::new();
        let (mut fired_after_all_good, mut blocked_by_miss) = (0, 0);
        loop {
            if seen.len() < 600 && (outstanding.is_empty() || rng.below(4) == 0) {
                let root = book.start(&s, 0, 0, true);
                assert_eq!(root.0 as usize, seen.len());
                seen.push(Seen::default());
                seen[root.0 as usize].spawned[0] = 1;
                outstanding.push(root);
                continue;
            }
            if outstanding.is_empty() {
                break;
            }
            let (inst, stage, _, _) = outstanding.swap_remove(rng.below(outstanding.len() as u64) as usize);
            let in_slo = rng.below(20) != 0;
            let v = &mut seen[inst as usize];
            v.ended[stage as usize] += 1;
            v.missed |= !in_slo;
            v.missed_upstream |= !in_slo && stage < 3;
            book.ended(&s, inst, stage, in_slo, &mut spawn);
            let ranks = spawn.iter().filter(|x| x.1 == 3).count() as u32;
            if ranks > 0 {
                v.rank_spawns += 1;
                assert!(v.rank_spawns == 1, "instance {inst}: the ranker fired twice");
                assert!(v.ended[..3] == v.spawned[..3] && !v.missed, "instance {inst}: fired early or after a miss");
                fired_after_all_good += 1;
            }
            let upstream_done = v.ended[..3] == v.spawned[..3];
            if upstream_done && v.rank_spawns == 0 && v.missed {
                blocked_by_miss += 1;
            }
            for x in spawn.drain(..) {
                assert_eq!(x.0, inst, "a request spawned for another instance");
                v.spawned[x.1 as usize] += 1;
                outstanding.push(x);
            }
        }
        assert!(outstanding.is_empty() && seen.len() == 600);
        assert!(book.instances.iter().all(|i| i.run.is_none()), "an instance was never counted");
        let good = seen.iter().filter(|v| !v.missed).count() as u64;
        assert_eq!((book.sent[0], book.ok[0]), (600, good));
        // Both branches of the semantics were exercised.
        assert!(fired_after_all_good > 400 && blocked_by_miss > 20, "{fired_after_all_good} {blocked_by_miss}");
        for (i, v) in seen.iter().enumerate() {
            assert_eq!(v.spawned, v.ended, "instance {i}");
            assert_eq!(v.rank_spawns, u32::from(!v.missed_upstream), "instance {i}: fires iff its ancestors were good");
            assert!(v.spawned[4] == 0 || v.spawned[3] > 0, "instance {i}: a tail without a ranker");
        }
    }
}
