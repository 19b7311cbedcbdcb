//! Query bookkeeping in the simulator: each query instance spawns its stage
//! requests as parents complete (on average `gamma` per parent, Poisson
//! distributed), and counts in SLO only if every stage request it spawned
//! finished by its stage deadline.

use serde::Serialize;

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
    /// Stage requests spawned and not yet ended.
    pending: u32,
    failed: bool,
    measured: bool,
}

#[derive(Debug)]
pub(crate) struct QueryBook {
    instances: Vec<Instance>,
    sent: Vec<u64>,
    ok: Vec<u64>,
    rng: Rng,
}

/// A stage request to create: instance, stage, its deadline, its model.
pub(crate) type Spawn = (u32, u16, Nanos, ModelId);

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
        Self { instances: Vec::new(), sent: vec![0; n], ok: vec![0; n], rng: Rng::stream(seed, 0x5175_6572) }
    }

    /// A query arrives: its root stage request is to be created.
    pub fn start(&mut self, scenario: &Scenario, query: usize, arrival: Nanos, measured: bool) -> Spawn {
        let id = self.instances.len() as u32;
        self.instances.push(Instance { query, arrival, pending: 1, failed: false, measured });
        if measured {
            self.sent[query] += 1;
        }
        let root = &scenario.queries[query].stages[0];
        (id, 0, arrival + root.deadline_offset, root.model)
    }

    /// A stage request ended (`in_slo`: served by its deadline). Children
    /// of a served stage are appended to `spawn`.
    pub fn ended(&mut self, scenario: &Scenario, instance: u32, stage: u16, in_slo: bool, spawn: &mut Vec<Spawn>) {
        let inst = &mut self.instances[instance as usize];
        let q = &scenario.queries[inst.query];
        inst.pending -= 1;
        inst.failed |= !in_slo;
        if in_slo {
            for c in q.children(stage as usize) {
                let n = poisson(&mut self.rng, q.stages[c].gamma);
                inst.pending += n;
                let st = &q.stages[c];
                spawn.extend((0..n).map(|_| (instance, c as u16, inst.arrival + st.deadline_offset, st.model)));
            }
        }
        if inst.pending == 0 && inst.measured && !inst.failed {
            self.ok[inst.query] += 1;
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
