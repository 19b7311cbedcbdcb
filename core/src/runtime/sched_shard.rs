//! The scheduler shard: the scheduler role and emulated backends on one
//! core — both in `baton serve`, only the scheduler in `baton scheduler`,
//! only backends in `baton backend`. Messages between local roles are
//! delivered at once, in order; the rest queue for the link. Timers (the
//! policy's next timeout, each backend's next start or finish) live on one
//! wheel (`Alarms`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_sched::scenario::Scenario;
use baton_sched::time::Nanos;
use baton_sched::PolicyKind;

use super::alarms::Alarms;
use super::link::Link;
use super::{pause, EngineConfig};
use crate::clock::Clock;
use crate::models::ModelTable;
use crate::roles::backend::{BackendRole, BackendStats};
use crate::roles::scheduler::{SchedulerRole, SchedulerStats};
use crate::roles::{Addr, Envelope};

/// Alarm target of the scheduler; backend b is target `b + 1`.
const SCHED: usize = 0;

pub struct Report {
    pub scheduler: SchedulerStats,
    pub backends: Vec<BackendStats>,
}

pub struct State {
    sched: Option<SchedulerRole>,
    /// Local backends: `first_backend`, `first_backend + 1`, ...
    backends: Vec<BackendRole>,
    first_backend: u32,
    alarms: Alarms,
    outbound: VecDeque<Envelope>,
    /// Targets whose deadline may have moved since they were last armed.
    touched: Vec<bool>,
}

impl State {
    /// The scheduler (if `policy` is given) and the backends `local`.
    pub fn new(
        scenario: &Scenario,
        policy: Option<PolicyKind>,
        local: std::ops::Range<u32>,
        table: &ModelTable,
        cfg: &EngineConfig,
        now: Nanos,
    ) -> Self {
        let n = scenario.cluster.backends;
        assert!(local.end <= n, "backends {local:?} of a cluster of {n}");
        let latency: Vec<Vec<Nanos>> = table.models.iter().map(|m| m.latency.clone()).collect();
        let sched = policy.map(|p| SchedulerRole::new(p.build(scenario, cfg.plan_rate_rps), latency, n));
        let backends: Vec<BackendRole> = local
            .clone()
            .map(|b| {
                let exec = table.emulated_executor(cfg.jitter, scenario.seed ^ u64::from(b));
                BackendRole::new(b, Box::new(exec))
            })
            .collect();
        let targets = backends.len() + 1;
        Self {
            sched,
            backends,
            first_backend: local.start,
            alarms: Alarms::new(targets, now),
            outbound: VecDeque::new(),
            touched: vec![false; targets],
        }
    }

    /// Delivers `env` and everything it causes on this shard, at `now`.
    fn deliver(&mut self, now: Nanos, env: Envelope) {
        let mut queue = vec![env];
        let mut out = Vec::new();
        while let Some(e) = queue.pop() {
            let local = match e.to {
                Addr::Backend(b) => self.local(b),
                _ => None,
            };
            match (e.to, &mut self.sched, local) {
                (Addr::Scheduler, Some(sched), _) => {
                    sched.on_message(now, e.msg, &mut out);
                    self.touched[SCHED] = true;
                }
                (_, _, Some(i)) => {
                    self.backends[i].on_message(now, e.msg, &mut out);
                    self.touched[i + 1] = true;
                }
                _ => self.outbound.push_back(e),
            }
            // Keep causal order: what a message caused goes before later ones.
            queue.extend(out.drain(..).rev());
        }
    }

    fn local(&self, b: u32) -> Option<usize> {
        let i = b.checked_sub(self.first_backend)? as usize;
        (i < self.backends.len()).then_some(i)
    }

    /// Fires every alarm due at `now`.
    fn fire(&mut self, now: Nanos) -> bool {
        let mut due = Vec::new();
        self.alarms.due(now, &mut due);
        let mut out = Vec::new();
        for &t in &due {
            self.touched[t] = true;
            if t == SCHED {
                self.sched.as_mut().expect("armed only with a scheduler").on_timeout(now, &mut out);
            } else {
                self.backends[t - 1].poll(now, &mut out);
            }
        }
        for e in out {
            self.deliver(now, e);
        }
        !due.is_empty()
    }

    fn rearm(&mut self) {
        for t in 0..self.touched.len() {
            if std::mem::take(&mut self.touched[t]) {
                let at = match t {
                    SCHED => self.sched.as_ref().and_then(|s| s.next_timeout()),
                    _ => self.backends[t - 1].next_wake(),
                };
                self.alarms.arm(t, at);
            }
        }
    }
}

pub async fn run(mut s: State, mut link: Link, clock: Clock, stop: Arc<AtomicBool>) -> Report {
    let mut incoming = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let now = clock.now();
        link.poll(&mut incoming);
        let mut busy = !incoming.is_empty();
        for e in incoming.drain(..) {
            s.deliver(now, e);
        }
        busy |= s.fire(now);
        s.rearm();
        if !s.outbound.is_empty() {
            link.flush(&mut s.outbound);
            busy = true;
        }
        let next = s.alarms.next().map(|at| Duration::from_nanos(at.saturating_sub(clock.now())));
        pause(busy, next).await;
    }
    Report {
        scheduler: s.sched.map(|x| x.stats).unwrap_or_default(),
        backends: s.backends.iter().map(|b| b.stats).collect(),
    }
}
