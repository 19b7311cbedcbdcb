//! The scheduler shard: the scheduler role and the emulated backends on
//! one core. Messages between them are delivered at once, in order; those
//! for frontends queue for the ring. Timers (the policy's next timeout,
//! each backend's next start or finish) live on one wheel (`Alarms`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_net::mesh::ShardLinks;
use baton_sched::scenario::Scenario;
use baton_sched::time::Nanos;
use baton_sched::PolicyKind;

use super::alarms::Alarms;
use super::{pause, EngineConfig, FRONTEND_SHARD};
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
    sched: SchedulerRole,
    backends: Vec<BackendRole>,
    alarms: Alarms,
    to_frontends: VecDeque<Envelope>,
    /// Targets whose deadline may have moved since they were last armed.
    touched: Vec<bool>,
}

impl State {
    pub fn new(scenario: &Scenario, policy: PolicyKind, table: &ModelTable, cfg: &EngineConfig, now: Nanos) -> Self {
        let n = scenario.cluster.backends;
        let latency = table.models.iter().map(|m| m.latency.clone()).collect();
        let sched = SchedulerRole::new(policy.build(scenario, cfg.plan_rate_rps), latency, n);
        let backends = (0..n)
            .map(|b| {
                let exec = table.emulated_executor(cfg.jitter, scenario.seed ^ u64::from(b));
                BackendRole::new(b, Box::new(exec))
            })
            .collect();
        let targets = n as usize + 1;
        Self {
            sched,
            backends,
            alarms: Alarms::new(targets, now),
            to_frontends: VecDeque::new(),
            touched: vec![false; targets],
        }
    }

    /// Delivers `env` and everything it causes on this shard, at `now`.
    fn deliver(&mut self, now: Nanos, env: Envelope) {
        let mut queue = vec![env];
        let mut out = Vec::new();
        while let Some(e) = queue.pop() {
            match e.to {
                Addr::Scheduler => {
                    self.sched.on_message(now, e.msg, &mut out);
                    self.touched[SCHED] = true;
                }
                Addr::Backend(b) => match self.backends.get_mut(b as usize) {
                    Some(be) => {
                        be.on_message(now, e.msg, &mut out);
                        self.touched[b as usize + 1] = true;
                    }
                    // A plan for a backend that does not exist is a policy
                    // bug; the simulator would have panicked on it.
                    None => panic!("message for backend {b}, the cluster has {}", self.backends.len()),
                },
                Addr::Frontend(_) => self.to_frontends.push_back(e),
            }
            // Keep causal order: what a message caused goes before later ones.
            queue.extend(out.drain(..).rev());
        }
    }

    /// Fires every alarm due at `now`.
    fn fire(&mut self, now: Nanos) -> bool {
        let mut due = Vec::new();
        self.alarms.due(now, &mut due);
        let mut out = Vec::new();
        for &t in &due {
            self.touched[t] = true;
            if t == SCHED {
                self.sched.on_timeout(now, &mut out);
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
                let at = if t == SCHED { self.sched.next_timeout() } else { self.backends[t - 1].next_wake() };
                self.alarms.arm(t, at);
            }
        }
    }
}

pub async fn run(mut s: State, mut links: ShardLinks<Envelope>, clock: Clock, stop: Arc<AtomicBool>) -> Report {
    let mut incoming = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let now = clock.now();
        links.poll(4096, |_, e| incoming.push(e));
        let mut busy = !incoming.is_empty();
        for e in incoming.drain(..) {
            s.deliver(now, e);
        }
        busy |= s.fire(now);
        s.rearm();
        if !s.to_frontends.is_empty() {
            // A full ring keeps the rest queued here for the next round.
            let _ = links.send_batch(FRONTEND_SHARD, &mut s.to_frontends);
            busy = true;
        }
        let next = s.alarms.next().map(|at| Duration::from_nanos(at.saturating_sub(clock.now())));
        pause(busy, next).await;
    }
    Report { scheduler: s.sched.stats, backends: s.backends.iter().map(|b| b.stats).collect() }
}
