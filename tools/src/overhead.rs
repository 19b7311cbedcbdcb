//! The time the engine adds beyond its plan, in four parts a performance
//! engineer can act on, per request answered ok:
//!
//! ```text
//! ingress     = seen     - sent       client send -> the scheduler sees the request
//! start lag   = started  - exec_at    the batch starts after its planned time
//! completion  = written  - finished   batch end -> the frontend composes the answer
//! egress      = received - written    answer composed -> the client has it
//! ```
//!
//! Ingress is also split where the frontend reads the request
//! (`received`): `until_read = received - sent` (the client's send, the
//! network, the socket) and `after_read = seen - received` (admission and
//! the way to the scheduler).
//!
//! `seen`, `exec_at`, `started`, `finished` and `written` come from the
//! answer's `Timing` on the cluster clock; `sent` and `received` are the
//! client's. Both sides are placed on the Unix clock (the cluster clock's
//! origin travels in the answer), so ingress and egress assume client and
//! server share a host clock; their sum, `(received - sent) - (written -
//! seen)`, is exact either way, since each difference is read on one clock.
//! What remains between `seen` and `exec_at` is the scheduler's deliberate
//! wait, which the simulator has too, and `finished - started` is the batch.
//!
//! A part that comes out negative (the two clocks disagree by more than the
//! part) is recorded as 0, and the request counted once in `clock_skew`.

use std::io::Write;
use std::path::Path;

use baton_wire::fb;
use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of one part, microseconds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PartStats {
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct OverheadReport {
    pub ingress: PartStats,
    pub start_lag: PartStats,
    pub completion: PartStats,
    pub egress: PartStats,
    /// Ingress until the frontend read the request, and after.
    pub ingress_until_read: PartStats,
    pub ingress_after_read: PartStats,
    /// Requests measured.
    pub count: u64,
    /// Requests with a part that came out negative across the two clocks
    /// (recorded as 0).
    pub clock_skew: u64,
}

/// The four parts' histograms and ingress's two halves, in nanoseconds.
#[derive(Clone)]
pub struct Overhead {
    parts: [Histogram<u64>; 6],
    clock_skew: u64,
}

const NAMES: [&str; 6] = ["ingress", "start_lag", "completion", "egress", "ingress_until_read", "ingress_after_read"];

impl Default for Overhead {
    fn default() -> Self {
        // 1 ns to 1 hour at 3 significant digits.
        let h = || Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds");
        Self { parts: [h(), h(), h(), h(), h(), h()], clock_skew: 0 }
    }
}

/// Their percentiles (`report`), not every bucket.
impl std::fmt::Debug for Overhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Overhead {{ {:?} }}", self.report())
    }
}

impl Overhead {
    /// Records one answer: `sent_unix_ns` and `received_unix_ns` are the
    /// client's times on the Unix clock.
    pub fn record(&mut self, sent_unix_ns: u64, received_unix_ns: u64, t: &fb::Timing) {
        // In i128: whatever a server puts in its answer cannot overflow.
        let server = |x: u64| t.origin_unix_ns as i128 + x as i128;
        let parts = [
            server(t.seen_ns) - sent_unix_ns as i128,
            t.started_ns as i128 - t.exec_at_ns as i128,
            t.written_ns as i128 - t.finished_ns as i128,
            received_unix_ns as i128 - server(t.written_ns),
            server(t.received_ns) - sent_unix_ns as i128,
            t.seen_ns as i128 - t.received_ns as i128,
        ];
        self.clock_skew += u64::from(parts.iter().any(|&v| v < 0));
        for (h, v) in self.parts.iter_mut().zip(parts) {
            h.saturating_record(v.clamp(0, u64::MAX as i128) as u64);
        }
    }

    pub fn merge(&mut self, other: &Overhead) {
        for (a, b) in self.parts.iter_mut().zip(&other.parts) {
            a.add(b).expect("equal bounds");
        }
        self.clock_skew += other.clock_skew;
    }

    pub fn report(&self) -> OverheadReport {
        let stats = |h: &Histogram<u64>| {
            let us = |q: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1e3 };
            PartStats { p50_us: us(0.5), p99_us: us(0.99), p999_us: us(0.999), max_us: h.max() as f64 / 1e3 }
        };
        let [ingress, start_lag, completion, egress, ingress_until_read, ingress_after_read] =
            self.parts.each_ref().map(stats);
        OverheadReport {
            ingress,
            start_lag,
            completion,
            egress,
            ingress_until_read,
            ingress_after_read,
            count: self.parts[0].len(),
            clock_skew: self.clock_skew,
        }
    }

    /// Writes each part as an HdrHistogram percentile distribution
    /// (`<part>.hgrm`, values in microseconds, the format HdrHistogram's
    /// plotter reads) into `dir`.
    pub fn write_hgrm(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for (name, h) in NAMES.iter().zip(&self.parts) {
            let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{name}.hgrm")))?);
            writeln!(f, "{:>12} {:>14} {:>10} {:>14}\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)")?;
            let mut total = 0u64;
            for v in h.iter_quantiles(1) {
                total += v.count_since_last_iteration();
                let q = v.quantile_iterated_to();
                let inv = if q < 1.0 { format!("{:>14.2}", 1.0 / (1.0 - q)) } else { format!("{:>14}", "") };
                writeln!(f, "{:>12.3} {:>14.12} {:>10} {inv}", v.value_iterated_to() as f64 / 1e3, q, total)?;
            }
            let mean = h.mean() / 1e3;
            writeln!(f, "#[Mean    = {mean:>12.3}, StdDeviation   = {:>12.3}]", h.stdev() / 1e3)?;
            writeln!(f, "#[Max     = {:>12.3}, Total count    = {:>12}]", h.max() as f64 / 1e3, h.len())?;
        }
        Ok(())
    }
}

/// `p50 / p99 / p99.9` of each part on one line, microseconds.
pub fn one_line(r: &OverheadReport) -> String {
    if r.count == 0 {
        // A query's answer spans many batches and carries none's timing.
        return "engine overhead: not measured (no answer carried a batch's timing)".into();
    }
    let part = |name: &str, p: &PartStats| format!("{name} {:.0}/{:.0}/{:.0}", p.p50_us, p.p99_us, p.p999_us);
    format!(
        "engine overhead p50/p99/p99.9 µs: {}  {}  {}  {}  (ingress until read {:.0}/{:.0}/{:.0}, after {:.0}/{:.0}/{:.0})",
        part("ingress", &r.ingress),
        part("start lag", &r.start_lag),
        part("completion", &r.completion),
        part("egress", &r.egress),
        r.ingress_until_read.p50_us,
        r.ingress_until_read.p99_us,
        r.ingress_until_read.p999_us,
        r.ingress_after_read.p50_us,
        r.ingress_after_read.p99_us,
        r.ingress_after_read.p999_us
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(seen: u64, exec_at: u64, started: u64, finished: u64, written: u64) -> fb::Timing {
        fb::Timing {
            queue_ns: 0,
            exec_ns: finished - started,
            batch_size: 1,
            received_ns: seen,
            seen_ns: seen,
            exec_at_ns: exec_at,
            started_ns: started,
            finished_ns: finished,
            written_ns: written,
            origin_unix_ns: 1_000_000,
        }
    }

    #[test]
    fn the_four_parts_are_read_across_both_clocks() {
        let mut o = Overhead::default();
        // Sent at unix 1_000_100, seen at cluster 300 (unix 1_000_300):
        // ingress 200; starts 50 late; answer composed 70 after the batch;
        // received 400 after it was composed.
        o.record(1_000_100, 1_000_000 + 2_070 + 400, &timing(300, 1_000, 1_050, 2_000, 2_070));
        let r = o.report();
        assert_eq!(r.count, 1);
        assert_eq!(
            (r.ingress.p50_us, r.start_lag.p50_us, r.completion.p50_us, r.egress.p50_us),
            (0.2, 0.05, 0.07, 0.4)
        );
        // Read at once when it reached the frontend: all of ingress before.
        assert_eq!((r.ingress_until_read.p50_us, r.ingress_after_read.p50_us), (0.2, 0.0));
        let mut split = Overhead::default();
        let read_at_250 = fb::Timing { received_ns: 250, ..timing(300, 1_000, 1_050, 2_000, 2_070) };
        split.record(1_000_100, 1_000_000 + 2_470, &read_at_250);
        let r = split.report();
        assert_eq!((r.ingress.p50_us, r.ingress_until_read.p50_us, r.ingress_after_read.p50_us), (0.2, 0.15, 0.05));
        // A client clock ahead of the server's: a negative ingress is 0, counted.
        o.record(1_000_400, 1_000_000 + 2_070 + 400, &timing(300, 1_000, 1_050, 2_000, 2_070));
        assert_eq!(o.report().clock_skew, 1);
    }

    #[test]
    fn any_timing_a_server_sends_is_recorded_without_panicking() {
        let mut o = Overhead::default();
        let mut t = timing(0, 0, 0, 0, 0);
        (t.origin_unix_ns, t.seen_ns, t.written_ns, t.finished_ns) = (u64::MAX, u64::MAX, u64::MAX, 0);
        o.record(0, u64::MAX, &t);
        o.record(u64::MAX, 0, &timing(0, u64::MAX, 0, u64::MAX, 0));
        assert_eq!(o.report().count, 2);
    }

    #[test]
    fn hgrm_files_are_written_per_part() {
        let mut o = Overhead::default();
        for i in 1..=100 {
            o.record(1_000_000, 1_000_000 + 10_000 + i, &timing(i, 5_000, 5_000 + i, 9_000, 10_000));
        }
        let dir = std::env::temp_dir().join(format!("baton-hgrm-{}", std::process::id()));
        o.write_hgrm(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join("egress.hgrm")).unwrap();
        assert!(text.contains("Total count    =          100"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
