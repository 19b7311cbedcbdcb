//! One query instance as it runs, with the semantics `query.rs` states:
//! each request of a stage that ends within its deadline spawns its
//! non-join children; a join fires once per instance, when none of its
//! ancestors' requests is outstanding and none missed. How many requests a
//! spawn makes is the caller's (`fanout`): the simulator draws
//! Poisson(gamma) from its seeded stream, the engine derives it from the
//! parent's output. The simulator (`sim/queries.rs`) and the engine's
//! frontend both drive this one state machine.

use crate::query::{QuerySpec, MAX_STAGES};

/// A join stage and the set of its ancestors (bit i: stage i).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Join {
    pub stage: usize,
    pub ancestors: u64,
}

/// A query's joins in stage order (a join before the joins below it):
/// computed once per query and handed to every `QueryRun::ended`.
pub fn joins_of(q: &QuerySpec) -> Vec<Join> {
    let ancestors = q.ancestor_masks();
    (0..q.stages.len())
        .filter(|&s| q.stages[s].is_join())
        .map(|stage| Join { stage, ancestors: ancestors[stage] })
        .collect()
}

const _: () = assert!(MAX_STAGES <= u64::BITS as usize);

#[derive(Clone, Debug)]
pub struct QueryRun {
    /// Requests spawned and not yet ended, per stage.
    pending: Vec<u32>,
    /// The sum of `pending`.
    outstanding: u32,
    /// Stages with a request that missed (bit i: stage i).
    failed: u64,
    /// Join stages that have fired.
    fired: u64,
}

impl QueryRun {
    /// A new instance of `q`: its root request is outstanding.
    pub fn start(q: &QuerySpec) -> Self {
        let mut pending = vec![0; q.stages.len()];
        pending[0] = 1;
        Self { pending, outstanding: 1, failed: 0, fired: 0 }
    }

    /// A request of `stage` ended (`in_slo`: served by its deadline). For
    /// each spawn this makes — the stage's non-join children if it was in
    /// SLO, then in stage order the joins that may fire now — asks
    /// `fanout(child)` how many requests to make and reports them to
    /// `spawn(child, n)`.
    pub fn ended(
        &mut self,
        q: &QuerySpec,
        joins: &[Join],
        stage: usize,
        in_slo: bool,
        mut fanout: impl FnMut(usize) -> u32,
        mut spawn: impl FnMut(usize, u32),
    ) {
        assert!(self.pending[stage] > 0, "stage {stage} ended more requests than it spawned");
        self.pending[stage] -= 1;
        self.outstanding -= 1;
        let mut add = |run: &mut Self, child: usize, n: u32| {
            run.pending[child] += n;
            run.outstanding += n;
            spawn(child, n);
        };
        if in_slo {
            for c in q.children(stage).filter(|&c| !q.stages[c].is_join()) {
                let n = fanout(c);
                add(self, c, n);
            }
        } else {
            self.failed |= 1 << stage;
        }
        // In stage order, so a join that spawns nothing releases the joins below it.
        for j in joins {
            if self.fired >> j.stage & 1 == 0 && self.settled_in_slo(j.ancestors) {
                self.fired |= 1 << j.stage;
                let n = fanout(j.stage);
                add(self, j.stage, n);
            }
        }
        assert!(self.outstanding > 0 || self.pending.iter().all(|&p| p == 0), "outstanding out of step");
    }

    /// No request of these stages is outstanding and none missed.
    fn settled_in_slo(&self, stages: u64) -> bool {
        self.failed & stages == 0 && (0..self.pending.len()).all(|s| stages >> s & 1 == 0 || self.pending[s] == 0)
    }

    /// Every request spawned has ended.
    pub fn done(&self) -> bool {
        self.outstanding == 0
    }

    /// The stages that missed (bit i: stage i); 0 for an instance in SLO.
    pub fn failed(&self) -> u64 {
        self.failed
    }
}
