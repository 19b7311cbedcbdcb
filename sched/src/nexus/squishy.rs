//! Squishy bin packing (Nexus, Algorithm 1).
//!
//! For a session (model, SLO) at rate r:
//! - saturate: `B = max b: 2*l(B) <= SLO`, `T = B/l(B)`; `floor(r/T)` whole
//!   backends each run batches of B back to back (duty cycle l(B));
//! - residual `r'`: `b = max b: l(b) + b/r' <= SLO`, duty cycle `d = b/r'`,
//!   occupancy `l(b)/d` (if not even b = 1 fits, b = 1 and `d = SLO - l(1)`);
//!   a residual whose occupancy exceeds 1 (its batch cannot keep up with
//!   it) takes a whole backend at B instead — found by the property test;
//!   Algorithm 1 as printed plans such a node;
//! - residuals, by occupancy descending, merge into the existing node whose
//!   occupancy after the merge is highest: the merged duty cycle is the
//!   smaller one, every session's batch shrinks to `ceil(d*r)`, and the merge
//!   is valid iff the batch latencies sum to at most `d` and every session
//!   still has `d + l(b) <= SLO`, and the models' memory fits the GPU.
//!   Otherwise the residual opens a new node.
//!
//! Also here: the lower bound on GPUs (every session at its most efficient
//! batch within the SLO, back to back, fractional GPUs) and the
//! batch-oblivious allocator Nexus compares against (each session gets
//! whole GPUs at its maximum single-node throughput, nothing shared).

use crate::time::{Nanos, NANOS_PER_S};
use crate::types::{ModelId, ModelSpec};

#[derive(Clone, Debug, PartialEq)]
pub struct PlannedSession {
    pub model: ModelId,
    pub batch: u32,
    /// Requests per second the plan routes to this session on this backend.
    pub rate_rps: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BackendPlan {
    pub sessions: Vec<PlannedSession>,
    pub duty_cycle: Nanos,
}

impl BackendPlan {
    /// Share of the duty cycle spent executing.
    pub fn occupancy(&self, models: &[ModelSpec]) -> f64 {
        let busy: Nanos = self.sessions.iter().map(|s| models[s.model.index()].profile.latency(s.batch)).sum();
        busy as f64 / self.duty_cycle as f64
    }
}

#[derive(Clone, Debug, PartialEq, Default)]
pub struct Plan {
    pub backends: Vec<BackendPlan>,
    /// The factor the offered rates were scaled by to fill the cluster.
    pub rate_scale: f64,
}

/// The largest batch whose latency fits `budget` (0 if none).
fn max_batch(m: &ModelSpec, budget: Nanos) -> u32 {
    m.profile.max_batch_within(budget, 0, m.profile.max_batch())
}

/// Plans `rates_rps[m]` for every model onto as few backends as it can.
pub fn squishy_bin_packing(models: &[ModelSpec], rates_rps: &[f64], gpu_memory_mb: Option<f64>) -> Plan {
    assert_eq!(models.len(), rates_rps.len());
    let mut backends = Vec::new();
    let mut residuals = Vec::new();
    for (i, &rate) in rates_rps.iter().enumerate() {
        saturate(models, ModelId(i as u32), rate, &mut backends, &mut residuals);
    }
    let mut nodes = Vec::new();
    pack_residuals(models, &mut nodes, residuals, gpu_memory_mb);
    backends.extend(nodes);
    Plan { backends, rate_scale: 1.0 }
}

/// A residual load waiting to be packed: (occupancy, session, duty cycle).
pub(crate) type Residual = (f64, PlannedSession, Nanos);

/// Whole backends for `rate` of `model` at its saturating batch, pushed to
/// `backends`; what is left over, if any, pushed to `residuals`.
pub(crate) fn saturate(
    models: &[ModelSpec],
    model: ModelId,
    rate: f64,
    backends: &mut Vec<BackendPlan>,
    residuals: &mut Vec<Residual>,
) {
    let m = &models[model.index()];
    assert!(rate >= 0.0 && rate.is_finite(), "rate of {} is {rate}", m.name);
    let big = max_batch(m, m.slo / 2).max(1);
    let l_big = m.profile.latency(big);
    let per_backend = big as f64 * NANOS_PER_S as f64 / l_big as f64;
    let whole = (rate / per_backend).floor();
    for _ in 0..whole as u64 {
        backends.push(BackendPlan {
            sessions: vec![PlannedSession { model, batch: big, rate_rps: per_backend }],
            duty_cycle: l_big,
        });
    }
    let rest = rate - whole * per_backend;
    if rest <= 1e-9 {
        return;
    }
    match residual(m, model, rest) {
        Some(r) => residuals.push(r),
        // The residual's own batch cannot keep up with it: it takes a whole
        // backend at the saturating batch (rest < its throughput).
        None => backends.push(BackendPlan {
            sessions: vec![PlannedSession { model, batch: big, rate_rps: rest }],
            duty_cycle: l_big,
        }),
    }
}

/// A residual load's own batch, duty cycle and occupancy, or None if its
/// occupancy would exceed 1.
pub(crate) fn residual(m: &ModelSpec, model: ModelId, rest: f64) -> Option<Residual> {
    let ns_per_req = NANOS_PER_S as f64 / rest;
    // max b with l(b) + b/r' <= SLO: both grow with b, so scan down from
    // the largest batch (at most a few hundred steps, planning time).
    let b = (1..=m.profile.max_batch())
        .rev()
        .find(|&b| m.profile.latency(b) as f64 + b as f64 * ns_per_req <= m.slo as f64)
        .unwrap_or(0);
    let (batch, duty) = if b == 0 {
        (1, m.slo.saturating_sub(m.profile.latency(1)).max(1))
    } else {
        (b, (b as f64 * ns_per_req).round() as Nanos)
    };
    let occ = m.profile.latency(batch) as f64 / duty as f64;
    (occ <= 1.0).then_some((occ, PlannedSession { model, batch, rate_rps: rest }, duty))
}

/// Merges residuals, by occupancy descending, into the node of `nodes`
/// whose occupancy after the merge is highest, or into a new node.
pub(crate) fn pack_residuals(
    models: &[ModelSpec],
    nodes: &mut Vec<BackendPlan>,
    mut residuals: Vec<Residual>,
    gpu_memory_mb: Option<f64>,
) {
    residuals.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.model.cmp(&b.1.model)));
    for (_, s, duty) in residuals {
        let best = nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| merged(models, n, &s, duty, gpu_memory_mb).map(|m| (m.occupancy(models), i, m)))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        match best {
            Some((_, i, m)) => nodes[i] = m,
            None => nodes.push(BackendPlan { sessions: vec![s], duty_cycle: duty }),
        }
    }
}

/// `node` with `s` merged in, or None if the merge breaks a duty cycle, an
/// SLO or the GPU's memory.
pub(crate) fn merged(
    models: &[ModelSpec],
    node: &BackendPlan,
    s: &PlannedSession,
    duty: Nanos,
    gpu_memory_mb: Option<f64>,
) -> Option<BackendPlan> {
    if let Some(cap) = gpu_memory_mb {
        let mut on_node: Vec<ModelId> = node.sessions.iter().map(|x| x.model).chain([s.model]).collect();
        on_node.sort();
        on_node.dedup();
        if on_node.iter().map(|m| models[m.index()].memory_mb).sum::<f64>() > cap {
            return None;
        }
    }
    let d = node.duty_cycle.min(duty);
    let mut sessions = Vec::with_capacity(node.sessions.len() + 1);
    let mut busy = 0;
    for x in node.sessions.iter().chain(std::iter::once(s)) {
        let m = &models[x.model.index()];
        let batch = ((d as f64 * x.rate_rps / NANOS_PER_S as f64).ceil() as u32).clamp(1, m.profile.max_batch());
        let l = m.profile.latency(batch);
        if d + l > m.slo {
            return None;
        }
        busy += l;
        sessions.push(PlannedSession { batch, ..x.clone() });
    }
    (busy <= d).then_some(BackendPlan { sessions, duty_cycle: d })
}

/// Plans the offered rates scaled by the largest factor whose plan fits in
/// `gpus` backends, so a fixed cluster is used whole: below capacity every
/// session gets headroom, above it the plan is what the cluster can carry.
/// Models that do not fit even at the smallest scale get no backend.
pub fn plan_for_cluster(models: &[ModelSpec], offered_rps: &[f64], gpus: u32, gpu_memory_mb: Option<f64>) -> Plan {
    let plan_at =
        |s: f64| squishy_bin_packing(models, &offered_rps.iter().map(|r| r * s).collect::<Vec<_>>(), gpu_memory_mb);
    let fits = |p: &Plan| p.backends.len() <= gpus as usize;
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while fits(&plan_at(hi)) && hi < 1e9 {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if fits(&plan_at(mid)) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut plan = plan_at(lo);
    plan.backends.truncate(gpus as usize);
    plan.rate_scale = lo;
    plan
}

/// The most efficient batch whose latency alone fits the SLO, and its
/// throughput (requests per second of one backend).
fn best_batch(m: &ModelSpec) -> (u32, f64) {
    (1..=max_batch(m, m.slo).max(1)).map(|b| (b, m.profile.throughput_rps(b))).fold((1, 0.0), |best, x| {
        if x.1 > best.1 {
            x
        } else {
            best
        }
    })
}

/// Nexus's lower bound on GPUs: every session at its most efficient batch,
/// back to back, as if fully batchable with enough requests (fractional).
pub fn lower_bound_gpus(models: &[ModelSpec], rates_rps: &[f64]) -> f64 {
    models.iter().zip(rates_rps).map(|(m, &r)| r / best_batch(m).1).sum()
}

/// The batch-oblivious allocator: each session gets whole GPUs by its
/// maximum single-node throughput within the SLO (no sharing, no
/// duty-cycle packing).
pub fn batch_oblivious_gpus(models: &[ModelSpec], rates_rps: &[f64]) -> u32 {
    models
        .iter()
        .zip(rates_rps)
        .filter(|(_, &r)| r > 0.0)
        .map(|(m, &r)| {
            let big = max_batch(m, m.slo / 2).max(1);
            (r / m.profile.throughput_rps(big)).ceil() as u32
        })
        .sum()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A linear-profile model for plan tests.
    pub(crate) fn model(alpha: f64, beta: f64, slo: f64) -> ModelSpec {
        ModelSpec::linear("m", alpha, beta, 256, slo).expect("valid profile")
    }

    #[test]
    fn saturated_batch_is_the_no_coordination_batch() {
        // Table 4: ResNet50 with no coordination runs batches of 7, 562.6 r/s per GPU.
        let m = vec![model(1.053, 5.072, 25.0)];
        let p = squishy_bin_packing(&m, &[4500.0], None);
        assert_eq!(p.backends[0].sessions[0].batch, 7);
        assert_eq!(p.backends.len(), 8);
    }

    #[test]
    fn plans_meet_every_slo_and_duty_cycle() {
        let models: Vec<ModelSpec> =
            (0..12).map(|i| model(0.5 + i as f64 * 0.3, 2.0 + i as f64, 30.0 + 5.0 * i as f64)).collect();
        let rates: Vec<f64> = (0..12).map(|i| 20.0 + 37.0 * i as f64).collect();
        let p = squishy_bin_packing(&models, &rates, None);
        for b in &p.backends {
            assert!(b.occupancy(&models) <= 1.0 + 1e-9);
            for s in &b.sessions {
                let m = &models[s.model.index()];
                assert!(b.duty_cycle + m.profile.latency(s.batch) <= m.slo + 1);
            }
        }
        for (i, &r) in rates.iter().enumerate() {
            let planned: f64 =
                p.backends.iter().flat_map(|b| &b.sessions).filter(|s| s.model.index() == i).map(|s| s.rate_rps).sum();
            assert!((planned - r).abs() < 1e-6, "model {i} planned {planned} of {r}");
        }
    }

    /// Property test over random sessions: every plan meets each session's
    /// SLO and rate per the profile, memory fits every backend, and merging
    /// never lengthens a session's duty cycle beyond its own.
    #[test]
    fn random_plans_keep_slos_rates_memory_and_duty_cycles() {
        use crate::rng::Rng;
        for seed in 0..300 {
            let mut rng = Rng::new(seed);
            let n = 1 + rng.below(15) as usize;
            let models: Vec<ModelSpec> = (0..n)
                .map(|_| {
                    let (a, b) = (0.05 + rng.unit() * 4.0, rng.unit() * 20.0);
                    let mut m = model(a, b, (a + b) * (2.5 + rng.unit() * 8.0));
                    m.memory_mb = rng.unit() * 4_000.0;
                    m
                })
                .collect();
            let rates: Vec<f64> = (0..n).map(|_| rng.unit().powi(3) * 3_000.0).collect();
            let cap = 8_000.0;
            let p = squishy_bin_packing(&models, &rates, Some(cap));
            for (i, &r) in rates.iter().enumerate() {
                let planned: f64 = p
                    .backends
                    .iter()
                    .flat_map(|b| &b.sessions)
                    .filter(|s| s.model.index() == i)
                    .map(|s| s.rate_rps)
                    .sum();
                assert!((planned - r).abs() <= 1e-6 * r.max(1.0), "seed {seed}: model {i} rate");
            }
            for b in &p.backends {
                let busy: u64 = b.sessions.iter().map(|s| models[s.model.index()].profile.latency(s.batch)).sum();
                assert!(busy <= b.duty_cycle, "seed {seed}: batches overflow the duty cycle");
                let mut on: Vec<usize> = b.sessions.iter().map(|s| s.model.index()).collect();
                on.sort();
                on.dedup();
                if on.len() > 1 {
                    assert!(on.iter().map(|&m| models[m].memory_mb).sum::<f64>() <= cap, "seed {seed}: memory");
                }
                for s in &b.sessions {
                    let m = &models[s.model.index()];
                    // Worst case: wait a whole duty cycle, then run.
                    assert!(b.duty_cycle + m.profile.latency(s.batch) <= m.slo + 1, "seed {seed}: SLO");
                    // The requests of one cycle fit the batch.
                    let per_cycle = s.rate_rps * b.duty_cycle as f64 / NANOS_PER_S as f64;
                    assert!(s.batch as f64 >= per_cycle - 1e-6, "seed {seed}: batch below the cycle's arrivals");
                    if b.sessions.len() > 1 {
                        // Its own residual duty cycle, as planned alone.
                        let ns_per_req = NANOS_PER_S as f64 / s.rate_rps;
                        let own = (1..=m.profile.max_batch())
                            .rev()
                            .find(|&x| m.profile.latency(x) as f64 + x as f64 * ns_per_req <= m.slo as f64)
                            .map_or(m.slo - m.profile.latency(1), |x| (x as f64 * ns_per_req).round() as Nanos);
                        assert!(b.duty_cycle <= own + 1, "seed {seed}: merging lengthened a duty cycle");
                    }
                }
            }
        }
    }

    #[test]
    fn cluster_plan_uses_at_most_the_gpus() {
        let models: Vec<ModelSpec> = (0..5).map(|i| model(1.0, 5.0 + i as f64, 40.0)).collect();
        for gpus in [5, 8, 20] {
            let p = plan_for_cluster(&models, &[100.0; 5], gpus, None);
            assert!(p.backends.len() <= gpus as usize);
            assert!(p.rate_scale > 0.0);
        }
    }
}
