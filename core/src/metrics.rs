//! The engine's Prometheus metrics (`/metrics` on the gateway's HTTP
//! listener).
//!
//! Where each number lives: what the frontend answered, by model and
//! outcome, with latency and queueing histograms, is the frontend role's
//! own `Tally` (plain counters; a scrape asks the frontend shard for a
//! copy); what backends and schedulers did is stored by their shards into
//! `Gauges` (atomics, totals stored once per round when batches ran, one
//! writer each) and read here. Rendering uses prometheus-client's
//! OpenMetrics text encoder through a `Collector` over one `Snapshot`.
//!
//! Families (base units; counters end in `_total`):
//! - `baton_requests_total{model, outcome, reason}`: answers; `outcome` is
//!   `ok` (in time), `late`, `dropped` (with the drop reason) or `error`
//!   (with the error code). Their sum is every request answered.
//! - `baton_request_latency_seconds{model}`, `baton_request_queueing_seconds{model}`:
//!   histograms of ok answers (arrival to answer; time not executing).
//! - `baton_batch_size`: histogram of batches run, every backend's.
//! - `baton_backend_busy_seconds_total{backend}`, `baton_backend_busy_ratio{backend}`
//!   (busy time over the time since start), `baton_backend_batches_total{backend}`.
//! - `baton_queued_requests`: admitted, not answered yet (queued or running).
//! - `baton_open_connections`, `baton_scheduler_decisions_total` (batches
//!   planned; its rate is decisions per second), `baton_uptime_seconds`.

use std::sync::atomic::{AtomicU64, Ordering};

use baton_wire::fb;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::models::ModelTable;
use crate::roles::backend::{BackendStats, BATCH_BOUNDS};
use crate::roles::outcomes::{Histogram, Tally, BUCKETS_S};

/// What backends and scheduler parts have done, stored by their shards.
#[derive(Debug, Default)]
pub struct Gauges {
    backends: Vec<BackendGauge>,
    /// Batches planned, by scheduler-side shard.
    decisions: Vec<AtomicU64>,
}

#[derive(Debug, Default)]
struct BackendGauge {
    busy_ns: AtomicU64,
    batches: AtomicU64,
    sizes: [AtomicU64; BATCH_BOUNDS.len() + 1],
    requests: AtomicU64,
}

impl Gauges {
    /// Room for `backends` backends and `shards` scheduler-side shards.
    pub fn new(backends: usize, shards: usize) -> Self {
        Self {
            backends: (0..backends).map(|_| BackendGauge::default()).collect(),
            decisions: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Backend `b`'s totals (its shard is the only writer).
    pub fn store_backend(&self, b: usize, s: &BackendStats) {
        let Some(g) = self.backends.get(b) else { return };
        g.busy_ns.store(s.busy_ns, Ordering::Relaxed);
        g.requests.store(s.requests, Ordering::Relaxed);
        for (slot, &n) in g.sizes.iter().zip(&s.sizes) {
            slot.store(n, Ordering::Relaxed);
        }
        g.batches.store(s.batches, Ordering::Release);
    }

    /// Scheduler-side shard `shard`'s batches planned.
    pub fn store_decisions(&self, shard: usize, n: u64) {
        if let Some(d) = self.decisions.get(shard) {
            d.store(n, Ordering::Relaxed);
        }
    }
}

/// Everything one scrape shows.
#[derive(Debug)]
pub struct Snapshot {
    /// The label of each `Tally` key.
    names: Vec<String>,
    tally: Tally,
    queued: u64,
    connections: u64,
    uptime_s: f64,
    backends: Vec<(u64, u64)>,
    sizes: Histogram,
    size_sum: u64,
    decisions: u64,
}

impl Snapshot {
    /// The frontend's tally (keyed as `outcomes.rs` says for `table`), its
    /// gauges, and what `gauges` holds now, `uptime_ns` after the start.
    pub fn take(
        table: &ModelTable,
        tally: &Tally,
        queued: u64,
        connections: u64,
        gauges: &Gauges,
        uptime_ns: u64,
    ) -> Self {
        let mut names: Vec<String> = table.models.iter().map(|m| m.name.clone()).collect();
        names.extend(table.queries.iter().map(|q| q.spec.name.clone()));
        names.push("(unknown)".into());
        let mut sizes = Histogram::default();
        let mut size_sum = 0;
        let backends = gauges
            .backends
            .iter()
            .map(|g| {
                let batches = g.batches.load(Ordering::Acquire);
                for (i, n) in g.sizes.iter().enumerate() {
                    sizes.counts[i] += n.load(Ordering::Relaxed);
                }
                size_sum += g.requests.load(Ordering::Relaxed);
                (g.busy_ns.load(Ordering::Relaxed), batches)
            })
            .collect();
        let decisions = gauges.decisions.iter().map(|d| d.load(Ordering::Relaxed)).sum();
        Self {
            names,
            tally: tally.clone(),
            queued,
            connections,
            uptime_s: uptime_ns as f64 * 1e-9,
            backends,
            sizes,
            size_sum,
            decisions,
        }
    }

    /// The OpenMetrics text exposition.
    pub fn render(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("writing to a String does not fail");
        out
    }
}

type Labels = Vec<(&'static str, String)>;

/// Each bucket's (upper bound, count); the encoder makes them cumulative.
fn buckets(h: &Histogram, bounds: impl Iterator<Item = f64>) -> Vec<(f64, u64)> {
    bounds.chain(std::iter::once(f64::INFINITY)).zip(h.counts.iter().copied()).collect()
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut m = enc.encode_descriptor(
            "baton_requests",
            "Requests answered, by model and outcome",
            None,
            MetricType::Counter,
        )?;
        for (name, o) in self.names.iter().zip(&self.tally.keys) {
            let mut series = |outcome: &'static str, reason: String, n: u64| -> Result<(), std::fmt::Error> {
                if n == 0 && outcome != "ok" {
                    return Ok(());
                }
                let labels: Labels = vec![("model", name.clone()), ("outcome", outcome.into()), ("reason", reason)];
                ConstCounter::new(n).encode(m.encode_family(&labels)?)
            };
            series("ok", String::new(), o.ok - o.late)?;
            series("late", String::new(), o.late)?;
            for (r, &n) in fb::DropReason::ENUM_VALUES.iter().zip(&o.dropped) {
                series("dropped", format!("{r:?}"), n)?;
            }
            for (c, &n) in fb::ErrorCode::ENUM_VALUES.iter().zip(&o.errors) {
                series("error", format!("{c:?}"), n)?;
            }
        }
        for (family, help, of) in [
            ("baton_request_latency", "Arrival to answer of ok requests", 0),
            ("baton_request_queueing", "Time ok requests spent not executing", 1),
        ] {
            let mut m = enc.encode_descriptor(family, help, Some(&Unit::Seconds), MetricType::Histogram)?;
            for (name, o) in self.names.iter().zip(&self.tally.keys) {
                let h = if of == 0 { &o.latency } else { &o.queueing };
                if h.count() == 0 {
                    continue;
                }
                let labels: Labels = vec![("model", name.clone())];
                let b = buckets(h, BUCKETS_S.iter().copied());
                m.encode_family(&labels)?.encode_histogram::<Labels>(h.sum_ns as f64 * 1e-9, h.count(), &b, None)?;
            }
        }
        let b = buckets(&self.sizes, BATCH_BOUNDS.iter().map(|&x| f64::from(x)));
        enc.encode_descriptor("baton_batch_size", "Requests per batch run", None, MetricType::Histogram)?
            .encode_histogram::<Labels>(self.size_sum as f64, self.sizes.count(), &b, None)?;
        let mut busy = enc.encode_descriptor(
            "baton_backend_busy",
            "Time each backend ran batches",
            Some(&Unit::Seconds),
            MetricType::Counter,
        )?;
        for (i, &(ns, _)) in self.backends.iter().enumerate() {
            ConstCounter::new(ns as f64 * 1e-9).encode(busy.encode_family(&vec![("backend", i.to_string())])?)?;
        }
        let mut ratio = enc.encode_descriptor(
            "baton_backend_busy_ratio",
            "Busy time over the time since start",
            None,
            MetricType::Gauge,
        )?;
        for (i, &(ns, _)) in self.backends.iter().enumerate() {
            let r = if self.uptime_s > 0.0 { ns as f64 * 1e-9 / self.uptime_s } else { 0.0 };
            ConstGauge::new(r).encode(ratio.encode_family(&vec![("backend", i.to_string())])?)?;
        }
        let mut batches =
            enc.encode_descriptor("baton_backend_batches", "Batches each backend ran", None, MetricType::Counter)?;
        for (i, &(_, n)) in self.backends.iter().enumerate() {
            ConstCounter::new(n).encode(batches.encode_family(&vec![("backend", i.to_string())])?)?;
        }
        let queued = "Requests admitted and not answered yet (queued or running)";
        ConstGauge::new(self.queued as i64).encode(enc.encode_descriptor(
            "baton_queued_requests",
            queued,
            None,
            MetricType::Gauge,
        )?)?;
        let open = "Connections open on the frontend";
        ConstGauge::new(self.connections as i64).encode(enc.encode_descriptor(
            "baton_open_connections",
            open,
            None,
            MetricType::Gauge,
        )?)?;
        let decided = "Batches the scheduler planned (its rate is decisions per second)";
        ConstCounter::new(self.decisions).encode(enc.encode_descriptor(
            "baton_scheduler_decisions",
            decided,
            None,
            MetricType::Counter,
        )?)?;
        let up = "Time since the engine started";
        ConstGauge::new(self.uptime_s).encode(enc.encode_descriptor(
            "baton_uptime",
            up,
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?)?;
        Ok(())
    }
}
