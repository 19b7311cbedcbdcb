//! Multi-model queries (Nexus) in the frontend: one client request runs a
//! DAG of stages, each stage's requests batched by the policy like any
//! other, and the client gets exactly one answer for the whole query.
//!
//! Why the frontend holds the DAG: it already holds the client's connection
//! and every stage request's input and result, and a child's input is its
//! parent's output — which arrives here in `Results`. Spawning children
//! here costs no extra hop (a query shard would receive every stage result
//! and send every child back through the frontend that holds the inputs),
//! and the scheduler stays the same for queries and single requests: it
//! sees stage requests with their stage deadlines, as in the simulator.
//!
//! The semantics are `baton_sched::query_run::QueryRun`'s, the state
//! machine the simulator drives. What differs is where a spawn's size comes
//! from: the simulator draws Poisson(gamma) from its seeded stream; here
//! the number of children of a stage request is a function of its output
//! (`fanout`): a 64-bit hash of the output bytes and the child stage, read
//! as a uniform u, gives the Poisson(gamma) quantile at u. So a stage's
//! children average gamma over distinct outputs and a replayed input
//! spawns the same work — with the emulated executor, whose outputs are a
//! function of the inputs, and with a real model alike. A child's input
//! is its parent's output cycled to the child model's input size, plus the
//! child's index among its siblings; a join's is the element-wise sum of
//! its parents' outputs.
//!
//! Deadlines: the DP split gives each stage an offset from the query's
//! arrival for the scenario's SLO; a client's own SLO scales the offsets.
//! A stage request's planned deadline keeps the reserve back as a single
//! request's does (`reserve.rs`), scaled the same way; it is late when its
//! result reaches the frontend after its scaled offset.
//!
//! A query fails at its first stage request dropped or late: the client
//! is answered at once (`Dropped`, the reason, and `stage` naming the
//! stage's model) and the instance spawns nothing more; what it still has
//! in flight finishes and is forgotten. Unlike the simulator, which keeps
//! spawning the failed instance's other branches, no GPU time goes to an
//! answer already given.

use baton_sched::query_run::QueryRun;
use baton_sched::time::Nanos;
use baton_wire::fb;

use super::frontend::{f32_tensor, f32s, le_bytes, ConnId};
use crate::models::{ModelTable, QueryEntry};

/// A query instance the frontend runs.
#[derive(Debug)]
pub struct Instance {
    pub conn: ConnId,
    pub client_id: u64,
    pub query: u32,
    pub arrival: Nanos,
    /// The client's budget, and what of it the scheduler plans with.
    pub slo: Nanos,
    pub planned: Nanos,
    pub run: QueryRun,
    /// Every stage request's output, by stage, in the order they ended.
    pub outputs: Vec<(u16, Vec<u8>)>,
    /// A stage missed and the client has been answered.
    pub failed: bool,
}

/// Where a stage request belongs.
#[derive(Clone, Copy, Debug)]
pub struct StageOf {
    pub instance: u64,
    pub stage: u16,
    /// Its result is late after this (its share of the client's SLO).
    pub late_at: Nanos,
}

/// A stage's deadline offset, for a budget of `budget` where the split was
/// made for `q.spec.slo`.
fn scaled(q: &QueryEntry, stage: usize, budget: Nanos) -> Nanos {
    let off = q.spec.stages[stage].deadline_offset as u128;
    (off * budget as u128 / q.spec.slo.max(1) as u128) as Nanos
}

impl Instance {
    /// A stage request of this instance: where it belongs, and its planned
    /// deadline.
    pub fn stage(&self, id: u64, q: &QueryEntry, stage: usize) -> (StageOf, Nanos) {
        let late_at = self.arrival.saturating_add(scaled(q, stage, self.slo));
        let planned = self.arrival.saturating_add(scaled(q, stage, self.planned));
        (StageOf { instance: id, stage: stage as u16, late_at }, planned)
    }

    /// A stage request ended, its output `output` if it was served in time.
    /// Returns the inputs of the stage requests to spawn, by stage.
    pub fn ended(&mut self, q: &QueryEntry, table: &ModelTable, stage: u16, output: Option<Vec<u8>>) -> Spawns {
        let in_slo = output.is_some();
        if let Some(o) = output {
            self.outputs.push((stage, o));
        }
        let (failed, outputs) = (self.failed || !in_slo, &self.outputs);
        let source = |c: usize| -> Vec<f32> {
            match q.spec.stages[c].is_join() {
                true => join_input(&q.spec.stages[c].parents, outputs),
                false => f32s(&outputs.last().expect("an in-SLO stage left its output").1),
            }
        };
        let fanout = |c: usize| match failed {
            true => 0,
            false => poisson_quantile(q.spec.stages[c].gamma, unit(&le_bytes(&source(c)), c as u64)),
        };
        let mut spawns = Vec::new();
        self.run.ended(&q.spec, &q.joins, usize::from(stage), in_slo, fanout, |c, n| {
            if n == 0 {
                return;
            }
            let x = source(c);
            let floats = table.models[q.spec.stages[c].model.index()].input_floats;
            spawns.extend((0..n).map(|k| (c, child_input(&x, floats, k))));
        });
        spawns
    }

    /// The answer of a query whose every stage was in time: each stage
    /// request's output, in stage order, named by the stage's model.
    pub fn answer(mut self, q: &QueryEntry, table: &ModelTable) -> fb::InferResponse {
        self.outputs.sort_by_key(|o| o.0);
        let outputs = self
            .outputs
            .into_iter()
            .map(|(stage, bytes)| {
                let model = &table.models[q.spec.stages[usize::from(stage)].model.index()].name;
                fb::Tensor { name: Some(model.clone()), ..f32_tensor(bytes) }
            })
            .collect();
        fb::InferResponse { id: self.client_id, status: fb::Status::Ok, outputs: Some(outputs), ..Default::default() }
    }
}

/// Stage requests to create: (stage, input bytes).
pub type Spawns = Vec<(usize, Vec<u8>)>;

/// A join's input: the element-wise sum of its parents' outputs.
fn join_input(parents: &[usize], outputs: &[(u16, Vec<u8>)]) -> Vec<f32> {
    let mut sum: Vec<f32> = Vec::new();
    for (_, o) in outputs.iter().filter(|o| parents.contains(&usize::from(o.0))) {
        let x = f32s(o);
        if sum.len() < x.len() {
            sum.resize(x.len(), 0.0);
        }
        sum.iter_mut().zip(x).for_each(|(s, v)| *s += v);
    }
    sum
}

/// The k-th child's input of `floats` floats from its source.
fn child_input(source: &[f32], floats: usize, k: u32) -> Vec<u8> {
    let at = |i: usize| if source.is_empty() { 0.0 } else { source[i % source.len()] };
    le_bytes(&(0..floats).map(|i| at(i) + k as f32).collect::<Vec<_>>())
}

/// A uniform in [0, 1) from `bytes` and `salt` (FNV-1a, then a splitmix64
/// finaliser so that nearby inputs land far apart).
fn unit(bytes: &[u8], salt: u64) -> f64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The smallest k with P(Poisson(mean) <= k) > u (capped far beyond any
/// mean a query stage has).
fn poisson_quantile(mean: f64, u: f64) -> u32 {
    const CAP: u32 = 10_000;
    let (mut k, mut p) = (0, (-mean).exp());
    let mut cdf = p;
    while u >= cdf && k < CAP && p > 0.0 {
        k += 1;
        p *= mean / f64::from(k);
        cdf += p;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over distinct outputs, spawn counts follow Poisson(gamma): their
    /// mean is gamma and P(0) is e^-gamma.
    #[test]
    fn fanout_from_outputs_averages_gamma() {
        for gamma in [0.5, 1.0, 4.0] {
            let n = 20_000;
            let counts: Vec<u32> =
                (0..n).map(|i| poisson_quantile(gamma, unit(&le_bytes(&[i as f32, 1.0]), 2))).collect();
            let mean = counts.iter().sum::<u32>() as f64 / n as f64;
            let zeros = counts.iter().filter(|&&c| c == 0).count() as f64 / n as f64;
            assert!((mean - gamma).abs() < 0.05 * gamma.max(1.0), "gamma {gamma}: mean {mean}");
            assert!((zeros - (-gamma).exp()).abs() < 0.02, "gamma {gamma}: P(0) {zeros}");
        }
        // A replayed output spawns the same.
        assert_eq!(unit(b"abc", 1), unit(b"abc", 1));
        assert_ne!(unit(b"abc", 1), unit(b"abc", 2));
    }

    #[test]
    fn children_inputs_come_from_their_parents() {
        assert_eq!(f32s(&child_input(&[1.0, 2.0], 3, 1)), vec![2.0, 3.0, 2.0]);
        assert_eq!(f32s(&child_input(&[], 2, 0)), vec![0.0, 0.0]);
        let outputs = vec![(1, le_bytes(&[1.0, 1.0])), (2, le_bytes(&[2.0])), (0, le_bytes(&[9.0]))];
        assert_eq!(join_input(&[1, 2], &outputs), vec![3.0, 1.0]);
    }
}
