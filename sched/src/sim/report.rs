//! What a simulated run measured, in the units and names of
//! `../shared/design/evaluation.md`. Only requests that arrived inside the
//! measured window count; GPU time counts inside the same window.

use std::collections::BTreeMap;

use serde::Serialize;

use super::queries::QueryReport;
use crate::scenario::Scenario;
use crate::time::{nanos_to_s, Nanos};
use crate::types::DropReason;

/// A model's bad rate may be at most this for a run to count as meeting SLOs
/// (Symphony's goodput criterion: its p99 within its SLO).
pub const BAD_RATE_LIMIT: f64 = 0.01;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ModelReport {
    pub name: String,
    pub offered_rps: f64,
    pub sent: u64,
    pub ok: u64,
    pub late: u64,
    pub dropped: u64,
    pub drop_reasons: BTreeMap<&'static str, u64>,
    pub bad_rate: f64,
    /// Latency percentiles of served requests (arrival to batch end).
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_batch: f64,
    pub queue_delay_mean_ms: f64,
    pub queue_delay_p99_ms: f64,
    /// Mean accuracy (%) of the subnets that served in-SLO requests; None
    /// for a model without subnets.
    pub mean_accuracy: Option<f64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Checks {
    /// Requests that never got a terminal outcome. Always 0 unless a
    /// scheduler loses requests.
    pub unanswered: u64,
    /// Batches planned to finish after their earliest deadline per the
    /// profile. Always 0 unless a scheduler plans what cannot work.
    pub infeasible_plans: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Report {
    pub scenario: String,
    pub policy: String,
    pub seed: u64,
    pub duration_s: f64,
    pub offered_rps: f64,
    /// In-SLO completions per second.
    pub goodput_rps: f64,
    pub bad_rate: f64,
    pub gpu_idle_fraction: f64,
    pub sent: u64,
    pub ok: u64,
    pub late: u64,
    pub dropped: u64,
    pub mean_batch: f64,
    /// Mean accuracy (%) served to in-SLO requests of supernet models.
    pub mean_accuracy: Option<f64>,
    /// batch size → number of batches started in the window.
    pub batch_sizes: BTreeMap<u32, u64>,
    pub checks: Checks,
    pub models: Vec<ModelReport>,
    /// Multi-model queries: in SLO only if every stage is.
    pub queries: Vec<QueryReport>,
}

impl Report {
    /// Every model and query with traffic kept its bad rate within the limit.
    pub fn meets_slos(&self) -> bool {
        self.models.iter().filter(|m| m.sent > 0).all(|m| m.bad_rate <= BAD_RATE_LIMIT)
            && self.queries.iter().filter(|q| q.sent > 0).all(|q| q.bad_rate <= BAD_RATE_LIMIT)
    }

    /// The bad rate as `scenario`'s clients see it: each query once, not
    /// its stage requests (`bad_rate` counts those), and each request sent
    /// to a model directly (a model that is also a query's stage counts
    /// its stage requests too: the report does not tell them apart).
    pub fn client_bad_rate(&self, scenario: &Scenario) -> f64 {
        if self.queries.is_empty() {
            return self.bad_rate;
        }
        assert_eq!(self.models.len(), scenario.models.len(), "a report of this scenario");
        let direct =
            scenario.models.iter().zip(&self.models).filter(|(m, _)| m.weight > 0.0).map(|(_, r)| (r.sent, r.bad_rate));
        let queries = self.queries.iter().map(|q| (q.sent, q.bad_rate));
        let (sent, bad) =
            direct.chain(queries).fold((0, 0.0), |(n, b), (sent, rate)| (n + sent, b + rate * sent as f64));
        if sent == 0 {
            0.0
        } else {
            bad / sent as f64
        }
    }
}

/// Per-model tallies while the run goes on.
#[derive(Clone, Debug, Default)]
pub struct ModelTally {
    pub sent: u64,
    pub ok: u64,
    pub late: u64,
    pub dropped: [u64; DropReason::ALL.len()],
    pub latency_us: Vec<u32>,
    pub queue_delay_us: Vec<u32>,
    pub batches: u64,
    pub batched_requests: u64,
    /// Sum of served accuracy over in-SLO requests (supernet models).
    pub accuracy_sum: f64,
}

fn percentile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() as f64 * q).ceil() as usize).clamp(1, sorted_us.len()) - 1;
    sorted_us[i] as f64 / 1e3
}

pub(crate) fn to_us(ns: Nanos) -> u32 {
    (ns / 1_000).min(u32::MAX as Nanos) as u32
}

impl ModelTally {
    pub fn finish(mut self, name: &str, offered_rps: f64, supernet: bool) -> ModelReport {
        self.latency_us.sort_unstable();
        self.queue_delay_us.sort_unstable();
        let dropped: u64 = self.dropped.iter().sum();
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let qd_sum: u64 = self.queue_delay_us.iter().map(|&x| x as u64).sum();
        ModelReport {
            name: name.to_string(),
            offered_rps,
            sent: self.sent,
            ok: self.ok,
            late: self.late,
            dropped,
            drop_reasons: DropReason::ALL
                .iter()
                .zip(self.dropped)
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.as_str(), n))
                .collect(),
            bad_rate: ratio(self.sent - self.ok, self.sent),
            p50_ms: percentile_ms(&self.latency_us, 0.50),
            p99_ms: percentile_ms(&self.latency_us, 0.99),
            mean_batch: ratio(self.batched_requests, self.batches),
            queue_delay_mean_ms: ratio(qd_sum, self.queue_delay_us.len() as u64) / 1e3,
            queue_delay_p99_ms: percentile_ms(&self.queue_delay_us, 0.99),
            mean_accuracy: (supernet && self.ok > 0).then(|| self.accuracy_sum / self.ok as f64),
        }
    }
}

pub(crate) struct RunSummary<'a> {
    pub scenario: &'a str,
    pub policy: &'a str,
    pub seed: u64,
    pub window: Nanos,
    pub offered_rps: f64,
    pub backends: u32,
    pub busy: Nanos,
    pub batch_sizes: BTreeMap<u32, u64>,
    pub checks: Checks,
}

pub(crate) fn build(s: RunSummary<'_>, models: Vec<ModelReport>, queries: Vec<QueryReport>) -> Report {
    let sent: u64 = models.iter().map(|m| m.sent).sum();
    let ok: u64 = models.iter().map(|m| m.ok).sum();
    let late: u64 = models.iter().map(|m| m.late).sum();
    let dropped: u64 = models.iter().map(|m| m.dropped).sum();
    let batches: u64 = s.batch_sizes.values().sum();
    let batched: u64 = s.batch_sizes.iter().map(|(&b, &n)| b as u64 * n).sum();
    let capacity = s.backends as f64 * s.window as f64;
    let (acc, acc_ok) = models
        .iter()
        .filter_map(|m| m.mean_accuracy.map(|a| (a * m.ok as f64, m.ok)))
        .fold((0.0, 0u64), |(a, n), (x, k)| (a + x, n + k));
    Report {
        scenario: s.scenario.to_string(),
        policy: s.policy.to_string(),
        seed: s.seed,
        duration_s: nanos_to_s(s.window),
        offered_rps: s.offered_rps,
        goodput_rps: ok as f64 / nanos_to_s(s.window),
        bad_rate: if sent == 0 { 0.0 } else { (sent - ok) as f64 / sent as f64 },
        gpu_idle_fraction: (1.0 - s.busy as f64 / capacity).max(0.0),
        sent,
        ok,
        late,
        dropped,
        mean_batch: if batches == 0 { 0.0 } else { batched as f64 / batches as f64 },
        mean_accuracy: (acc_ok > 0).then(|| acc / acc_ok as f64),
        batch_sizes: s.batch_sizes,
        checks: s.checks,
        models,
        queries,
    }
}
