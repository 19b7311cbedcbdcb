//! What a frontend answered, by model and outcome, with latency and
//! queueing histograms: the frontend role's share of `/metrics`. Plain
//! counters in the role's state (no atomics on the request path); a scrape
//! asks the frontend's shard for a copy (`metrics.rs` renders it).
//!
//! Keys: the table's models `0..m`, then its queries `m..m+q`, then one
//! for requests that name nothing known (so a client cannot grow the label
//! set).

use baton_wire::fb;

/// Adds `by` to entry `i` of a count list (a second of a run's timeline, a
/// model), growing the list to it.
pub fn add_at(counts: &mut Vec<u64>, i: usize, by: u64) {
    if counts.len() <= i {
        counts.resize(i + 1, 0);
    }
    counts[i] += by;
}

/// Histogram bucket bounds, in seconds (Prometheus's base unit).
pub const BUCKETS_S: [f64; 16] =
    [1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// `BUCKETS_S` in nanoseconds, what an observation is compared with (an
/// answer is counted twice, and float conversions and comparisons were
/// 2% of a loaded frontend's samples).
const BUCKETS_NS: [u64; BUCKETS_S.len()] = {
    let mut ns = [0; BUCKETS_S.len()];
    let mut i = 0;
    while i < ns.len() {
        ns[i] = (BUCKETS_S[i] * 1e9) as u64;
        i += 1;
    }
    ns
};

/// Observations by bucket (the last: above every bound) and their sum.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    pub counts: [u64; BUCKETS_S.len() + 1],
    pub sum_ns: u64,
}

impl Histogram {
    pub fn observe(&mut self, ns: u64) {
        self.counts[BUCKETS_NS.partition_point(|&b| b < ns)] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    fn add(&mut self, other: &Histogram) {
        self.counts.iter_mut().zip(&other.counts).for_each(|(a, b)| *a += b);
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }
}

/// One key's answers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcomes {
    pub ok: u64,
    /// Of `ok`, after the deadline.
    pub late: u64,
    pub dropped: [u64; fb::DropReason::ENUM_VALUES.len()],
    pub errors: [u64; fb::ErrorCode::ENUM_VALUES.len()],
    /// Arrival to answer written, of ok answers.
    pub latency: Histogram,
    /// Time not executing (arrival to answer, less the batch's run), of ok answers.
    pub queueing: Histogram,
}

impl Outcomes {
    fn add(&mut self, other: &Outcomes) {
        self.ok += other.ok;
        self.late += other.late;
        self.dropped.iter_mut().zip(&other.dropped).for_each(|(a, b)| *a += b);
        self.errors.iter_mut().zip(&other.errors).for_each(|(a, b)| *a += b);
        self.latency.add(&other.latency);
        self.queueing.add(&other.queueing);
    }
}

/// Every key's answers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    pub keys: Vec<Outcomes>,
}

impl Tally {
    fn key(&mut self, key: usize) -> &mut Outcomes {
        if key >= self.keys.len() {
            self.keys.resize(key + 1, Outcomes::default());
        }
        &mut self.keys[key]
    }

    /// Adds `other`'s answers (another frontend's) to these.
    pub fn add(&mut self, other: &Tally) {
        for (k, o) in other.keys.iter().enumerate() {
            self.key(k).add(o);
        }
    }

    /// Counts answer `a` for `key`; `late` for an ok answer after its deadline.
    pub fn count(&mut self, key: usize, a: &fb::InferResponse, late: bool) {
        let o = self.key(key);
        match a.status {
            fb::Status::Ok => {
                o.ok += 1;
                o.late += u64::from(late);
                if let Some(t) = &a.timing {
                    o.latency.observe(t.written_ns.saturating_sub(t.received_ns));
                    o.queueing.observe(t.queue_ns);
                }
            }
            fb::Status::Dropped => o.dropped[a.drop_reason as usize] += 1,
            fb::Status::Error => o.errors[a.error_code as usize] += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_lands_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        for (i, &b) in BUCKETS_S.iter().enumerate() {
            let ns = (b * 1e9).round() as u64;
            assert_eq!(BUCKETS_NS[i], ns, "bound {b} s in nanoseconds");
            let mut h = Histogram::default();
            h.observe(ns);
            h.observe(ns + 1);
            assert_eq!((h.counts[i], h.counts[i + 1]), (1, 1), "`le` {b} s holds {ns} ns, not one more");
        }
        let mut h = Histogram::default();
        h.observe(0);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.sum_ns, 0);
    }
}
