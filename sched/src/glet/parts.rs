//! A partitioned plan and the arithmetic every partition planner shares.
//!
//! A plan is a list of partitions ("glets"): GPU, size p%, and the Nexus
//! node it runs — sessions (model, batch, rate) cycling a duty cycle d
//! (`nexus/squishy.rs`). A session of demand m at batch b on a partition
//! of p% takes
//!
//! ```text
//! l_m(b) = L(b, p) * f,   f = max over sibling sessions s, b' <= s.batch of factor(m, b, p, s.model, b')
//! ```
//!
//! (the sibling runs batches up to its planned one — any batch, if it runs
//! a single session: the runtime lets such a partition absorb a burst in
//! one larger batch — and the measured slowdown is not monotone in the
//! co-runner's batch),
//! with f = 1 when interference is ignored (`glet-noint`) or the partition
//! is the whole GPU. While the sibling partition is still free, anyone may
//! move in later, so f is the worst factor any of the planned demands
//! causes at any batch: a node planned next to a free partition stays valid
//! whoever joins it. A node is valid when its
//! batches fit its duty cycle (`sum l <= d`), each session's worst case
//! (wait one cycle, then run) meets its SLO (`d + l <= SLO`) and each batch
//! holds one cycle's arrivals (`rate * d <= b`). A node that runs one model
//! back to back at its saturating batch B (`2 l(B) <= SLO`) has `d = l(B)`.
//!
//! A node planned next to a known sibling can break when a session is
//! later merged into that sibling; merges check both sides (`spatial.rs`).

use super::oracle::{bucket, PartitionData, MAX_PARTITION_BATCH};
use super::planner::Demand;
use super::profiles::{BATCHES, PARTITIONS};
use crate::nexus::{BackendPlan, PlannedSession};
use crate::profile::Profile;
use crate::time::{Nanos, NANOS_PER_S};
use crate::types::{ModelId, ModelSpec, Partition};

/// One partition of a GPU and what it runs (None: left idle).
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedPart {
    pub gpu: usize,
    pub percent: u32,
    pub node: Option<BackendPlan>,
}

/// A partitioned plan. Sessions name demands by index (`ModelId(i)` is
/// `demands[i]`, which is the scenario's model i).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct GletPlan {
    pub parts: Vec<PlannedPart>,
    /// The factor the offered rates were scaled by to fill the cluster
    /// (`cluster.rs`); at least 1 iff the offered rates are schedulable.
    pub rate_scale: f64,
}

impl GletPlan {
    /// GPUs the plan uses.
    pub fn gpus(&self) -> usize {
        self.parts.iter().map(|p| p.gpu + 1).max().unwrap_or(0)
    }

    /// Partitions that run something, in plan order: what the runtime's
    /// backends are.
    pub fn used(&self) -> impl Iterator<Item = (usize, &PlannedPart)> {
        self.parts.iter().enumerate().filter(|(_, p)| p.node.is_some())
    }

    /// The runtime's backends: one per used partition.
    pub fn slots(&self) -> Vec<Partition> {
        self.used().map(|(_, p)| Partition { gpu: p.gpu as u32, percent: p.percent }).collect()
    }

    /// Requests per second planned for each of `n` demands.
    pub fn planned_rates(&self, n: usize) -> Vec<f64> {
        let mut r = vec![0.0; n];
        for (_, p) in self.used() {
            for s in &p.node.as_ref().expect("used").sessions {
                r[s.model.index()] += s.rate_rps;
            }
        }
        r
    }
}

/// The other partition of part `i`'s GPU, if any.
pub(crate) fn sibling(parts: &[PlannedPart], i: usize) -> Option<usize> {
    (0..parts.len()).find(|&j| j != i && parts[j].gpu == parts[i].gpu)
}

/// How a planner sees its partitions: the data, the demands, whether it
/// accounts for interference.
#[derive(Clone, Debug)]
pub struct Planning<'a> {
    pub data: &'a PartitionData,
    pub demands: &'a [Demand],
    pub aware: bool,
    /// `worst[d][pi][bi]`: the largest factor any demand with traffic, at
    /// any batch, causes demand d at batch `BATCHES[bi]` on `PARTITIONS[pi]`.
    worst: Vec<Vec<[f64; BATCHES.len()]>>,
    /// `alone[d][pi]`: demand d's saturated throughput on `PARTITIONS[pi]`
    /// next to a free sibling.
    alone: Vec<[f64; PARTITIONS.len()]>,
}

/// Worst-case slack in nanoseconds for rounding in the node checks.
const SLACK: Nanos = 2;

impl<'a> Planning<'a> {
    pub fn new(data: &'a PartitionData, demands: &'a [Demand], aware: bool) -> Self {
        for d in demands {
            assert!(d.rate_rps >= 0.0 && d.rate_rps.is_finite(), "demand rate {}", d.rate_rps);
            assert!(d.model < data.profiles.models.len(), "demand names profile row {}", d.model);
        }
        let active: Vec<usize> = demands.iter().filter(|d| d.rate_rps > 0.0).map(|d| d.model).collect();
        let worst = if aware {
            demands
                .iter()
                .map(|dm| {
                    PARTITIONS
                        .iter()
                        .map(|&p| {
                            let mut row = [1.0; BATCHES.len()];
                            if p < 100 {
                                for (bi, &b) in BATCHES.iter().enumerate() {
                                    for &other in &active {
                                        for &ob in &BATCHES {
                                            row[bi] = f64::max(row[bi], data.factor(dm.model, b, p, other, ob));
                                        }
                                    }
                                }
                            }
                            row
                        })
                        .collect()
                })
                .collect()
        } else {
            vec![]
        };
        let mut planning = Self { data, demands, aware, worst, alone: vec![] };
        planning.alone = (0..demands.len())
            .map(|d| {
                let mut row = [0.0; PARTITIONS.len()];
                for (pi, &percent) in PARTITIONS.iter().enumerate() {
                    let parts = [PlannedPart { gpu: 0, percent, node: None }];
                    row[pi] = planning.saturated(&parts, 0, d).map_or(0.0, |n| n.sessions[0].rate_rps);
                }
                row
            })
            .collect();
        planning
    }

    /// The factor demand `d` at batch `b` meets on part `i` next to what
    /// its sibling runs in `parts`, or the worst any demand could cause
    /// while the sibling is free.
    fn factor(&self, parts: &[PlannedPart], i: usize, d: usize, b: u32) -> f64 {
        let percent = parts[i].percent;
        if !self.aware || percent == 100 {
            return 1.0;
        }
        let model = self.demands[d].model;
        match sibling(parts, i).and_then(|j| parts[j].node.as_ref()) {
            Some(n) => {
                let mut f = 1.0f64;
                for s in &n.sessions {
                    let other = self.demands[s.model.index()].model;
                    // Every measured co-batch up to the planned one, rounded
                    // up; every one for a single session (module doc).
                    let top = match n.sessions.len() {
                        1 => BATCHES.len() - 1,
                        _ => bucket(s.batch),
                    };
                    for &ob in &BATCHES[..=top] {
                        f = f.max(self.data.factor(model, b, percent, other, ob));
                    }
                }
                f
            }
            None => {
                let pi = PARTITIONS.iter().position(|&p| p == percent).expect("planned sizes are measured sizes");
                self.worst[d][pi][bucket(b)]
            }
        }
    }

    /// l_d(b) on part `i` of `parts`, or None if the model has no profile
    /// for that partition size.
    /// (the profile's l(b): the slowdown of a smaller batch can exceed a
    /// larger one's, and a profile must not decrease).
    pub fn latency(&self, parts: &[PlannedPart], i: usize, d: usize, b: u32) -> Option<Nanos> {
        Some(self.profile(parts, i, d)?.latency(b))
    }

    /// Demand `d`'s profile on part `i`, as the planners, Nexus's merge and
    /// the runtime see it: `L(b, p) * f`, made non-decreasing in b.
    pub fn profile(&self, parts: &[PlannedPart], i: usize, d: usize) -> Option<Profile> {
        let model = self.demands[d].model;
        // A factor depends on the batch only through the measured size it
        // rounds up to: one for each.
        let solo = self.data.solo_table(model, parts[i].percent)?;
        let factors = BATCHES.map(|b| self.factor(parts, i, d, b));
        let mut t = Vec::with_capacity(solo.len());
        for (b, &l) in (1..).zip(solo) {
            let l = (l as f64 * factors[bucket(b)]).round() as Nanos;
            t.push(l.max(t.last().copied().unwrap_or(0)));
        }
        Profile::table(t).ok()
    }

    /// Specs for Nexus's merge on part `i`: real profiles for the demands
    /// in `involved`, a placeholder for the rest (never looked at).
    pub(crate) fn specs(&self, parts: &[PlannedPart], i: usize, involved: &[usize]) -> Option<Vec<ModelSpec>> {
        let mut v = Vec::with_capacity(self.demands.len());
        for (d, dm) in self.demands.iter().enumerate() {
            let profile = if involved.contains(&d) { self.profile(parts, i, d)? } else { Profile::Table(vec![1]) };
            v.push(ModelSpec {
                name: format!("demand-{d}"),
                profile,
                slo: dm.slo,
                dynamic: None,
                memory_mb: 0.0,
                prefix: None,
                subnets: vec![],
            });
        }
        Some(v)
    }

    /// The saturating node of demand `d` on part `i`: batch B, the largest
    /// with `2 l(B) <= SLO`, back to back. None if not even b = 1 fits.
    pub fn saturated(&self, parts: &[PlannedPart], i: usize, d: usize) -> Option<BackendPlan> {
        let slo = self.demands[d].slo;
        let profile = self.profile(parts, i, d)?;
        let b = profile.max_batch_within(slo / 2, 0, MAX_PARTITION_BATCH);
        if b == 0 {
            return None;
        }
        let l = profile.latency(b);
        let rate_rps = b as f64 * NANOS_PER_S as f64 / l as f64;
        Some(BackendPlan {
            sessions: vec![PlannedSession { model: ModelId(d as u32), batch: b, rate_rps }],
            duty_cycle: l,
        })
    }

    /// Throughput of demand `d` saturating a partition of `percent`% next to
    /// a free sibling (the worst neighbour): what p_eff and p_req compare.
    pub fn alone_rps(&self, d: usize, percent: u32) -> f64 {
        let pi = PARTITIONS.iter().position(|&p| p == percent).expect("a measured partition size");
        self.alone[d][pi]
    }

    /// Whether the node on part `i` (if any) holds next to its sibling:
    /// its batches fit the duty cycle, each session's worst case meets its
    /// SLO, and each batch holds a cycle's arrivals.
    pub fn holds(&self, parts: &[PlannedPart], i: usize) -> bool {
        let Some(node) = parts[i].node.as_ref() else { return true };
        let d = node.duty_cycle;
        let mut busy = 0;
        for s in &node.sessions {
            let dm = s.model.index();
            let Some(profile) = self.profile(parts, i, dm) else { return false };
            let l = profile.latency(s.batch);
            busy += l;
            if d + l > self.demands[dm].slo + SLACK {
                return false;
            }
            // A thousandth of a request: the duty cycle is rounded to a nanosecond.
            if s.rate_rps * d as f64 / NANOS_PER_S as f64 > s.batch as f64 + 1e-3 {
                return false;
            }
        }
        busy <= d + SLACK * node.sessions.len() as Nanos
    }

    /// Every node holds next to its final sibling.
    pub fn valid(&self, parts: &[PlannedPart]) -> bool {
        (0..parts.len()).all(|i| self.holds(parts, i))
    }
}
