//! The scheduler-side shard. What it hosts (`Hosts`): the whole scheduler
//! (the policy inside one `SchedulerRole`), or Symphony's rank shard, or
//! one of Symphony's model shards — and a range of backends (emulated
//! GPUs, or the CUDA executor on real ones with `--executor cuda`). In
//! `baton serve` with the policy inline: the scheduler and every backend;
//! with Symphony split: the rank shard and every backend on one shard, each
//! model shard on its own; `baton scheduler` hosts only the scheduler,
//! `baton backend` only backends. Messages between local roles are
//! delivered at once, in order; the rest queue for the link. Timers (the
//! policy's or shard's next timeout, each backend's next start or finish)
//! live on one wheel (`Alarms`).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_sched::build;
use baton_sched::scenario::Scenario;
use baton_sched::symphony::{models_of, CandidateRule, ToModel, ToRank};
use baton_sched::time::Nanos;
use baton_sched::PolicyKind;
use baton_wire::Message;

use super::alarms::Alarms;
use super::lead::Lead;
use super::link::{Link, ShardMsg};
use super::park::Rhythm;
use super::{EngineConfig, Progress};
use crate::clock::Clock;
use crate::models::ModelTable;
use crate::roles::backend::{BackendRole, BackendStats};
use crate::roles::scheduler::{SchedulerRole, SchedulerStats};
use crate::roles::symphony::{model_of, ModelShardRole, RankRole};
use crate::roles::{Addr, Envelope};

/// The scheduler's part on a shard.
#[derive(Clone, Copy, Debug)]
pub enum SchedulerPart {
    None,
    Whole(PolicyKind),
    Rank,
    /// Model shard `index` of `of`.
    Models {
        index: usize,
        of: usize,
        rule: CandidateRule,
    },
}

/// Alarm target of the scheduler part; backend i (local) is `i + 1`.
const SCHED: usize = 0;

#[derive(Default)]
pub struct Report {
    pub scheduler: SchedulerStats,
    pub backends: Vec<BackendStats>,
}

enum Part {
    None,
    Whole(SchedulerRole),
    Rank(RankRole),
    Models(ModelShardRole),
}

pub struct State {
    part: Part,
    /// Local backends: `first_backend`, `first_backend + 1`, ...
    backends: Vec<BackendRole>,
    first_backend: u32,
    alarms: Alarms,
    outbound: VecDeque<ShardMsg>,
    /// Targets whose deadline may have moved since they were last armed.
    touched: Vec<bool>,
}

impl State {
    pub fn new(
        scenario: &Scenario,
        part: SchedulerPart,
        local: Range<u32>,
        table: &ModelTable,
        cfg: &EngineConfig,
        now: Nanos,
    ) -> Result<Self, String> {
        let n = table.backends(scenario.cluster.backends);
        assert!(local.end <= n, "backends {local:?} of a cluster of {n}");
        let spec = &scenario.cluster;
        let part = match part {
            SchedulerPart::None => Part::None,
            SchedulerPart::Whole(p) => {
                Part::Whole(SchedulerRole::new(build::scheduler(p, scenario, cfg.plan_rate_rps), table.clone(), n))
            }
            SchedulerPart::Rank => Part::Rank(RankRole::new(spec)),
            SchedulerPart::Models { index, of, rule } => {
                let owned = models_of(index, of, spec.models.len());
                Part::Models(ModelShardRole::new(spec, &owned, rule, index, table.clone()))
            }
        };
        let backends: Vec<BackendRole> = local
            .clone()
            .map(|b| {
                let exec = table.executor(&cfg.executor, b, cfg.jitter, scenario.seed ^ u64::from(b));
                let mut role = BackendRole::new(b, exec.map_err(|e| format!("backend {b}: {e}"))?);
                // A scenario's faults, on the engine's clock from its start.
                if let Some(&(at, _)) = scenario.faults.iter().find(|f| f.1 .0 == b) {
                    role.fail_at(now + at);
                }
                Ok(role)
            })
            .collect::<Result<_, String>>()?;
        let targets = backends.len() + 1;
        Ok(Self {
            part,
            backends,
            first_backend: local.start,
            alarms: Alarms::new(targets, now),
            outbound: VecDeque::new(),
            touched: vec![false; targets],
        })
    }

    fn local(&self, b: u32) -> Option<usize> {
        let i = b.checked_sub(self.first_backend)? as usize;
        (i < self.backends.len()).then_some(i)
    }

    /// Delivers `msg` and everything it causes on this shard, at `now`.
    fn deliver(&mut self, now: Nanos, msg: ShardMsg) {
        let mut queue = vec![msg];
        let (mut out, mut to_rank, mut to_model) = (Vec::new(), Vec::new(), Vec::new());
        while let Some(m) = queue.pop() {
            match m {
                ShardMsg::Env(e) => self.envelope(now, e, &mut out, &mut to_rank, &mut to_model),
                ShardMsg::Rank(m) => match &mut self.part {
                    Part::Rank(r) => {
                        r.on_message(m, &mut to_model);
                        self.touched[SCHED] = true;
                    }
                    _ => self.outbound.push_back(ShardMsg::Rank(m)),
                },
                ShardMsg::Model(m) => match &mut self.part {
                    Part::Models(s) if s.owns(model_of(&m).0) => {
                        s.on_message(now, m, &mut out, &mut to_rank);
                        self.touched[SCHED] = true;
                    }
                    _ => self.outbound.push_back(ShardMsg::Model(m)),
                },
            }
            // Keep causal order: what a message caused goes before later
            // ones (the queue is a stack: push in reverse).
            queue.extend(to_model.drain(..).rev().map(ShardMsg::Model));
            queue.extend(to_rank.drain(..).rev().map(ShardMsg::Rank));
            queue.extend(out.drain(..).rev().map(ShardMsg::Env));
        }
    }

    fn envelope(
        &mut self,
        now: Nanos,
        e: Envelope,
        out: &mut Vec<Envelope>,
        to_rank: &mut Vec<ToRank>,
        to_model: &mut Vec<ToModel>,
    ) {
        let local = match e.to {
            Addr::Backend(b) => self.local(b),
            _ => None,
        };
        match (e.to, &mut self.part, local) {
            (_, _, Some(i)) => {
                self.backends[i].on_message(now, e.msg, out);
                self.touched[i + 1] = true;
            }
            (Addr::Scheduler, Part::Whole(s), _) => {
                s.on_message(now, e.msg, out);
                self.touched[SCHED] = true;
            }
            (Addr::Scheduler, Part::Models(s), _) if matches!(&e.msg, Message::RequestMeta(r) if s.owns(r.model)) => {
                let Message::RequestMeta(r) = e.msg else { unreachable!("matched") };
                s.on_request(now, r, out, to_rank);
                self.touched[SCHED] = true;
            }
            (Addr::Scheduler, Part::Rank(r), _) if matches!(e.msg, Message::BatchDone(_)) => {
                let Message::BatchDone(d) = &e.msg else { unreachable!("matched") };
                r.on_batch_done(now, d, to_model);
                self.touched[SCHED] = true;
            }
            _ => self.outbound.push_back(ShardMsg::Env(e)),
        }
    }

    /// Fires every alarm due at `now`.
    fn fire(&mut self, now: Nanos) -> bool {
        let mut due = Vec::new();
        self.alarms.due(now, &mut due);
        let (mut out, mut to_rank, mut to_model) = (Vec::new(), Vec::new(), Vec::new());
        for &t in &due {
            self.touched[t] = true;
            match (t, &mut self.part) {
                (SCHED, Part::Whole(s)) => s.on_timeout(now, &mut out),
                (SCHED, Part::Rank(r)) => r.on_timeout(now, &mut to_model),
                (SCHED, Part::Models(s)) => s.on_timeout(now, &mut out, &mut to_rank),
                (SCHED, Part::None) => {}
                _ => self.backends[t - 1].poll(now, &mut out),
            }
        }
        let caused = out.into_iter().map(ShardMsg::Env);
        let caused =
            caused.chain(to_rank.into_iter().map(ShardMsg::Rank)).chain(to_model.into_iter().map(ShardMsg::Model));
        for m in caused.collect::<Vec<_>>() {
            self.deliver(now, m);
        }
        !due.is_empty()
    }

    /// Polls every local backend's device at once (one said it is done).
    fn poll_devices(&mut self, now: Nanos) {
        let mut out = Vec::new();
        for (i, b) in self.backends.iter_mut().enumerate() {
            b.poll_device(now, &mut out);
            self.touched[i + 1] = true;
        }
        for e in out {
            self.deliver(now, ShardMsg::Env(e));
        }
    }

    fn rearm(&mut self) {
        for t in 0..self.touched.len() {
            if std::mem::take(&mut self.touched[t]) {
                let at = match (t, &self.part) {
                    (SCHED, Part::Whole(s)) => s.next_timeout(),
                    (SCHED, Part::Rank(r)) => r.next_timeout(),
                    (SCHED, Part::Models(s)) => s.next_timeout(),
                    (SCHED, Part::None) => None,
                    _ => self.backends[t - 1].next_wake(),
                };
                self.alarms.arm(t, at);
            }
        }
    }

    fn report(&self) -> Report {
        let scheduler = match &self.part {
            Part::Whole(s) => s.stats,
            Part::Models(s) => s.stats,
            Part::None | Part::Rank(_) => SchedulerStats::default(),
        };
        Report { scheduler, backends: self.backends.iter().map(|b| b.stats).collect() }
    }
}

pub async fn run(
    mut s: State,
    mut link: Link,
    clock: Clock,
    stop: Arc<AtomicBool>,
    mut rhythm: Rhythm,
    progress: Arc<Progress>,
) -> Report {
    let mut incoming = Vec::new();
    // Batches of the local backends already added to `progress`.
    let mut published = 0;
    let mut lead = Lead::default();
    if let Link::Tcp(r) = &link {
        *r.bell.borrow_mut() = Some(rhythm.bell());
    }
    // Executors that finish on threads of their own (CPU compute) raise
    // this flag and ring the shard's bell: it parks instead of polling them
    // (the flag is published before the bell, the bell's handshake does
    // the rest, `park.rs`).
    let device_done = Arc::new(AtomicBool::new(false));
    let waker: baton_gpu::Waker = {
        let (done, bell) = (Arc::clone(&device_done), rhythm.bell());
        Arc::new(move || {
            done.store(true, Ordering::Release);
            bell.ring();
        })
    };
    for b in &mut s.backends {
        b.set_waker(Arc::clone(&waker));
    }
    while !stop.load(Ordering::Acquire) {
        let now = clock.now();
        link.poll(&mut incoming);
        let mut busy = !incoming.is_empty();
        for m in incoming.drain(..) {
            s.deliver(now, m);
        }
        if device_done.swap(false, Ordering::AcqRel) {
            s.poll_devices(now);
            busy = true;
        }
        busy |= s.fire(now);
        // A shard whose device is running a batch polls it every round
        // instead of parking, unless the device wakes it when done: the
        // GPU's completion is seen within microseconds, not a timer tick.
        // (Emulated backends are never in flight.)
        busy |= s.backends.iter().any(BackendRole::needs_polling);
        s.rearm();
        let batches: u64 = s.backends.iter().map(|b| b.stats.batches).sum();
        if batches > published {
            progress.add_batches(batches - published);
            published = batches;
        }
        if !s.outbound.is_empty() {
            link.flush(&mut s.outbound);
            busy = true;
        }
        let next = s.alarms.next().map(|at| Duration::from_nanos(at.saturating_sub(clock.now())));
        // Spin, not park, through the last `lead` before a due timer, and
        // park only until `lead` before the next one.
        let spin = lead.imminent(next);
        let asked = next.map(|d| d.saturating_sub(lead.get()));
        let parked =
            rhythm.end_round(busy || spin, asked, || link.pending() || device_done.load(Ordering::Acquire)).await;
        if let (Some(asked), Some(parked)) = (asked, parked) {
            if parked >= asked {
                lead.slept(asked, parked);
            }
        }
    }
    s.report()
}
