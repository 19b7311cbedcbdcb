//! The engine's Prometheus metrics (`/metrics` on the gateway's HTTP
//! listener).
//!
//! Where each number lives: what the frontend answered, by model and
//! outcome, with latency and queueing histograms, is the frontend role's
//! own `Tally` (plain counters; a scrape asks the frontend shard for a
//! copy); what backends and schedulers did is stored by their shards into
//! `Gauges` (atomics, totals stored once per round when batches ran, one
//! writer each) and read here. One `Snapshot` is rendered in Prometheus's
//! text format 0.0.4 (`Exposition`): prometheus-client writes only
//! OpenMetrics, whose counters' `# HELP` lines name the family without
//! `_total`, which Prometheus's own checker (`promtool check metrics`)
//! and classic parser reject.
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

use std::fmt::Write;

use baton_wire::fb;

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

    /// Prometheus's text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut e = Exposition::default();
        e.family("baton_requests_total", "Requests answered, by model and outcome", "counter");
        for (name, o) in self.names.iter().zip(&self.tally.keys) {
            let mut series = |outcome: &str, reason: &str, n: u64| {
                if n > 0 || outcome == "ok" {
                    e.sample("", &[("model", name), ("outcome", outcome), ("reason", reason)], n as f64);
                }
            };
            series("ok", "", o.ok - o.late);
            series("late", "", o.late);
            for (r, &n) in fb::DropReason::ENUM_VALUES.iter().zip(&o.dropped) {
                series("dropped", &format!("{r:?}"), n);
            }
            for (c, &n) in fb::ErrorCode::ENUM_VALUES.iter().zip(&o.errors) {
                series("error", &format!("{c:?}"), n);
            }
        }
        for (family, help, latency) in [
            ("baton_request_latency_seconds", "Arrival to answer of ok requests", true),
            ("baton_request_queueing_seconds", "Time ok requests spent not executing", false),
        ] {
            e.family(family, help, "histogram");
            for (name, o) in self.names.iter().zip(&self.tally.keys) {
                let h = if latency { &o.latency } else { &o.queueing };
                if h.count() > 0 {
                    e.histogram(&[("model", name)], h, &BUCKETS_S, h.sum_ns as f64 * 1e-9);
                }
            }
        }
        e.family("baton_batch_size", "Requests per batch run", "histogram");
        let bounds: Vec<f64> = BATCH_BOUNDS.iter().map(|&b| f64::from(b)).collect();
        e.histogram(&[], &self.sizes, &bounds, self.size_sum as f64);
        let per_backend = |e: &mut Exposition, value: &dyn Fn(u64, u64) -> f64| {
            for (i, &(busy, batches)) in self.backends.iter().enumerate() {
                e.sample("", &[("backend", &i.to_string())], value(busy, batches));
            }
        };
        e.family("baton_backend_busy_seconds_total", "Time each backend ran batches", "counter");
        per_backend(&mut e, &|busy, _| busy as f64 * 1e-9);
        e.family("baton_backend_busy_ratio", "Busy time over the time since start", "gauge");
        let uptime = self.uptime_s;
        per_backend(&mut e, &|busy, _| if uptime > 0.0 { busy as f64 * 1e-9 / uptime } else { 0.0 });
        e.family("baton_backend_batches_total", "Batches each backend ran", "counter");
        per_backend(&mut e, &|_, batches| batches as f64);
        for (family, help, kind, value) in [
            (
                "baton_queued_requests",
                "Requests admitted, not answered yet (queued or running)",
                "gauge",
                self.queued as f64,
            ),
            ("baton_open_connections", "Connections open on the frontend", "gauge", self.connections as f64),
            (
                "baton_scheduler_decisions_total",
                "Batches planned (its rate: decisions per second)",
                "counter",
                self.decisions as f64,
            ),
            ("baton_uptime_seconds", "Time since the engine started", "gauge", self.uptime_s),
        ] {
            e.family(family, help, kind);
            e.sample("", &[], value);
        }
        e.out
    }
}

/// A text exposition being written: families, each with its samples.
#[derive(Default)]
struct Exposition {
    out: String,
    /// The family being written.
    family: &'static str,
}

impl Exposition {
    fn family(&mut self, name: &'static str, help: &str, kind: &str) {
        self.family = name;
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample of the family (`suffix`: a histogram's `_bucket`, `_sum`, `_count`).
    fn sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(self.family);
        self.out.push_str(suffix);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                let sep = if i == 0 { "" } else { "," };
                let _ = write!(self.out, "{sep}{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", number(value));
    }

    /// A histogram's cumulative buckets, sum and count.
    fn histogram(&mut self, labels: &[(&str, &str)], h: &Histogram, bounds: &[f64], sum: f64) {
        let mut cum = 0;
        for (i, &n) in h.counts.iter().enumerate() {
            cum += n;
            let le = bounds.get(i).map_or("+Inf".to_string(), |&b| number(b));
            let mut with_le = labels.to_vec();
            with_le.push(("le", &le));
            self.sample("_bucket", &with_le, cum as f64);
        }
        self.sample("_sum", labels, sum);
        self.sample("_count", labels, h.count() as f64);
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn number(x: f64) -> String {
    if x.is_infinite() {
        return if x > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    format!("{x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sub_clusters_decisions_are_summed_not_overwritten() {
        let s = baton_sched::Scenario::parse(include_str!("../../tools/scenarios/serve-default.toml")).unwrap();
        let table = ModelTable::from_scenario(&s, 4).unwrap();
        let gauges = Gauges::new(2, 2);
        gauges.store_decisions(0, 5);
        gauges.store_decisions(1, 7);
        gauges.store_decisions(1, 9);
        gauges.store_decisions(2, 100); // no such sub-cluster: ignored
        let text = Snapshot::take(&table, &Tally::default(), 0, 0, &gauges, 1).render();
        assert!(text.lines().any(|l| l == "baton_scheduler_decisions_total 14"), "{text}");
    }
}
