//! The scheduler role: the adapter between wire messages and a
//! `baton-sched` policy (the same `Scheduler` object the simulator drives).
//! It turns `RequestMeta` into requests, `BatchDone` into completions, a
//! failed `BackendStatus` into a backend failure (a healthy one into a
//! failed backend's return), and the policy's outputs
//! into `BatchPlan`s for backends and `Dropped` lists for frontends. It owns
//! no policy logic: it only remembers each batch in flight, because a
//! completion names its batch and the policy wants its members back, each
//! with its app and solo time — as the backend measured it for a model
//! whose time depends on its input (Orloj learns its distributions from
//! these), l(1) of what the batch ran otherwise, as in the simulator.
//!
//! A backend leaving (`BackendStatus { leaving }`, scaling in) is taken
//! out of the policy's use as a failed one is, but its batches in flight
//! are kept: it runs them, and their completions come as usual. The
//! scheduler answers with the same flag once the policy has taken the
//! news (Symphony's rank shard hears it a message delay later:
//! `with_policy_delay`), so the answer follows every plan sent there
//! (`backend.rs` exits once it has run them).
//!
//! A backend that goes silent — a batch sent to it not done `silence`
//! after its `exec_at` (a stalled device, or a plan or completion lost
//! between roles) — is failed as if it had said so, and comes back when it
//! next speaks. A scheduler restarted gives batch ids from where the last
//! run's cannot be (`starting_at`), so a late completion or input for an
//! old batch never matches a new one.
//!
//! A policy's long computations (glet's re-plan) run on a helper thread
//! when the shard asks for it (`offloading`, `offload.rs`); elsewhere (the
//! chaos simulator, tests) in place, as the simulator runs them.
//!
//! Reduced: the whole policy runs on one shard (Symphony's model shards and
//! rank shard inside it exchange messages in process). A dispatch the
//! engine cannot carry out as decided (a prefix batch outside the table's
//! groups) is refused, not changed (`decisions::Refused`).

use rustc_hash::FxHashMap;

use baton_sched::time::Nanos;
use baton_sched::types::{AppId, BackendId, BatchDone, BatchPlan, Completed, Scheduler};
use baton_wire::{fb, Message};

use super::autoscaling::Autoscaling;
use super::decisions::{Decisions, Sent};
use super::offload::OffThread;
use super::{request_of, Addr, Envelope};
use crate::models::ModelTable;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    pub requests: u64,
    pub batches: u64,
    pub dropped: u64,
    /// Messages the scheduler does not take, or that name what it does not
    /// know (a model, an app, a backend, a batch): ignored, counted.
    pub rejected: u64,
    /// Dispatches refused instead of sent (`decisions::Refused`); their
    /// requests are answered `NoBackend`.
    pub refused: u64,
    /// Layouts the policy announced: GPUs re-partitioned (glet's epochs).
    pub relayouts: u64,
}

impl SchedulerStats {
    /// Adds another shard's counts (Symphony's model shards each count theirs).
    pub fn add(&mut self, o: &SchedulerStats) {
        self.requests += o.requests;
        self.batches += o.batches;
        self.dropped += o.dropped;
        self.rejected += o.rejected;
        self.refused += o.refused;
        self.relayouts += o.relayouts;
    }
}

pub struct SchedulerRole {
    policy: Box<dyn Scheduler>,
    backends: u32,
    decisions: Decisions,
    /// Batches sent and not yet done, by batch id, with their members' apps
    /// and deadlines.
    inflight: FxHashMap<u64, (BatchPlan, Vec<AppId>, Vec<Nanos>)>,
    completed: Vec<Completed>,
    silence: Nanos,
    /// When batches in flight are next looked over for silent backends.
    next_sweep: Nanos,
    /// Per backend: failed for silence (it rejoins when it next speaks).
    silent: Vec<bool>,
    /// Per backend: leaving (the policy was told it is out).
    leaving: Vec<bool>,
    /// Symphony's autoscaling signals and advice, when on.
    autoscaling: Option<Autoscaling>,
    /// Answers to backends leaving, each due once the policy has heard.
    leave_answers: Vec<(Nanos, u32)>,
    /// How long the policy takes to hear of a backend's change.
    policy_delay: Nanos,
    /// Where the policy's long computations run, once asked (`offloading`).
    offload: Option<OffThread>,
    pub stats: SchedulerStats,
}

/// How long past its `exec_at` a batch may stay not done before its
/// backend counts as failed, unless set (`with_silence`).
pub const SILENCE: Nanos = 5_000_000_000;

/// The scheduler's answer to a backend leaving: no plan follows it.
pub fn leaving_told(backend: u32) -> Envelope {
    let status = fb::BackendStatus { backend, healthy: true, leaving: true, ..Default::default() };
    Envelope { to: Addr::Backend(backend), msg: Message::BackendStatus(status) }
}

impl SchedulerRole {
    pub fn new(policy: Box<dyn Scheduler>, table: ModelTable, backends: u32) -> Self {
        Self {
            policy,
            backends,
            decisions: Decisions::new(table, 0),
            inflight: FxHashMap::default(),
            completed: Vec::new(),
            silence: SILENCE,
            next_sweep: 0,
            silent: vec![false; backends as usize],
            leaving: vec![false; backends as usize],
            autoscaling: None,
            leave_answers: Vec::new(),
            policy_delay: 0,
            offload: None,
            stats: SchedulerStats::default(),
        }
    }

    /// The policy hands its long computations out to a helper thread,
    /// which rings `waker` when one is done; its result goes back to the
    /// policy in the next `on_timeout` (due at once: `next_timeout`).
    pub fn offloading(&mut self, waker: baton_gpu::Waker) {
        self.policy.offload();
        self.offload = Some(OffThread::new(waker));
    }

    /// Gives batch ids from `first` on: a restarted scheduler starts where
    /// its last run's ids are not, e.g. from the clock.
    pub fn starting_at(mut self, first: u64) -> Self {
        let keep_deadlines = self.decisions.keep_deadlines;
        self.decisions = Decisions::new(self.decisions.table().clone(), first);
        self.decisions.keep_deadlines = keep_deadlines;
        self
    }

    /// The policy hears of a backend failing `delay` after it is told (a
    /// message between Symphony's shards).
    pub fn with_policy_delay(mut self, delay: Nanos) -> Self {
        self.policy_delay = delay;
        self
    }

    /// Counts the autoscaler's signals and takes its advice each period.
    pub fn with_autoscaling(mut self, a: Autoscaling) -> Self {
        self.autoscaling = Some(a);
        self.decisions.keep_deadlines = true;
        self
    }

    /// Tells the autoscaler whether backend `b` is in use.
    fn in_use(&mut self, b: u32, up: bool) {
        if let Some(a) = &mut self.autoscaling {
            a.set_up(b as usize, up);
        }
    }

    /// Fails a backend whose batch is not done `silence` after its `exec_at`.
    pub fn with_silence(mut self, silence: Nanos) -> Self {
        self.silence = silence;
        self
    }

    /// Handles one message at `now`; what the policy decides goes to `out`.
    pub fn on_message(&mut self, now: Nanos, msg: Message, out: &mut Vec<Envelope>) {
        if let Message::BatchDone(d) = &msg {
            self.heard_from(now, d.backend);
        }
        match msg {
            Message::RequestMeta(m) if self.decisions.knows(&m) => {
                self.stats.requests += 1;
                let req = request_of(&m);
                self.decisions.saw(&req, now, m.input);
                if let Some(a) = &mut self.autoscaling {
                    a.arrived(now);
                }
                self.policy.on_request(now, req);
            }
            Message::BatchDone(d) => match self.inflight.remove(&d.batch_id) {
                Some((plan, apps, deadlines)) => {
                    let measured = d.requests.as_deref().zip(d.solo_ns.as_deref());
                    self.batch_done(now, &plan, &apps, d.started_ns, measured);
                    if let Some(a) = &mut self.autoscaling {
                        a.batch_done(now, d.started_ns, d.failed, &deadlines);
                    }
                    crate::pool::give(apps);
                }
                None => self.stats.rejected += 1,
            },
            Message::BackendStatus(s) if s.leaving && s.backend < self.backends => {
                if !std::mem::replace(&mut self.leaving[s.backend as usize], true) {
                    self.policy.on_backend_failed(now, BackendId(s.backend));
                }
                self.in_use(s.backend, false);
                self.leave_answers.push((now + self.policy_delay, s.backend));
            }
            Message::BackendStatus(s) if !s.healthy && s.backend < self.backends => {
                self.backend_failed(now, BackendId(s.backend), out);
            }
            // A backend (re)starting says it is healthy: one that had failed
            // (or left) is used again; for any other, nothing changes.
            Message::BackendStatus(s) if s.backend < self.backends => {
                self.silent[s.backend as usize] = false;
                self.leaving[s.backend as usize] = false;
                self.policy.on_backend_joined(now, BackendId(s.backend));
                self.in_use(s.backend, true);
            }
            _ => self.stats.rejected += 1,
        }
        self.drain(now, out);
    }

    /// Tells the policy `plan` finished at `now` after starting at `started`.
    /// Its members are those the backend measured (`measured`: request ids
    /// and solo times, one each — the decoder checks it; members it did not
    /// run had been answered already, and ids not of the plan are left
    /// out), or without measurements every member, each taking l(1) alone.
    fn batch_done(
        &mut self,
        now: Nanos,
        plan: &BatchPlan,
        apps: &[AppId],
        started: Nanos,
        measured: Option<(&[u64], &[u64])>,
    ) {
        self.completed.clear();
        match measured {
            Some((ids, solo)) => self.completed.extend(ids.iter().zip(solo).filter_map(|(&id, &solo)| {
                let i = plan.requests.iter().position(|r| r.0 == id)?;
                Some(Completed { request: plan.requests[i], app: apps[i], solo })
            })),
            None => {
                let solo = self.decisions.solo(plan);
                let members = plan.requests.iter().zip(apps);
                self.completed.extend(members.map(|(&request, &app)| Completed { request, app, solo }));
            }
        }
        let done = BatchDone { backend: plan.backend, model: plan.model, started, members: &self.completed };
        self.policy.on_batch_done(now, &done);
    }

    /// `backend` is gone: the policy stops using it, and the batches it
    /// held will never complete — their requests are dropped here (a
    /// result that did reach a frontend first wins there; the frontend
    /// refuses the second answer).
    fn backend_failed(&mut self, now: Nanos, backend: BackendId, out: &mut Vec<Envelope>) {
        // One that was leaving is out of the policy's use already.
        if !self.leaving[backend.index()] {
            self.policy.on_backend_failed(now, backend);
        }
        self.in_use(backend.0, false);
        let mut lost: Vec<u64> =
            self.inflight.iter().filter(|(_, (p, ..))| p.backend == backend).map(|(&id, _)| id).collect();
        lost.sort_unstable();
        for id in lost {
            for r in self.inflight.remove(&id).expect("listed").0.requests {
                self.decisions.drop(r.0, fb::DropReason::BackendFailed);
            }
        }
        self.decisions.flush(out);
    }

    /// A backend failed for silence speaks again: it is back.
    fn heard_from(&mut self, now: Nanos, backend: u32) {
        let (silent, leaving) = (self.silent.get(backend as usize), self.leaving.get(backend as usize));
        if silent.copied().unwrap_or(false) && !leaving.copied().unwrap_or(false) {
            self.silent[backend as usize] = false;
            self.policy.on_backend_joined(now, BackendId(backend));
            self.in_use(backend, true);
        }
    }

    /// Fires the policy's timers due at `now`, and fails the backends of
    /// batches not done by their time.
    /// Looks every quarter `silence` (at least every 10 ms), so a silent
    /// backend is failed at most a quarter `silence` late.
    pub fn on_timeout(&mut self, now: Nanos, out: &mut Vec<Envelope>) {
        if let Some(done) = self.offload.as_mut().and_then(OffThread::take) {
            self.policy.on_offloaded(now, done);
        }
        if !self.inflight.is_empty() && self.next_sweep <= now {
            self.next_sweep = now + (self.silence / 4).max(10_000_000);
            let silence = self.silence;
            let mut silent: Vec<BackendId> = (self.inflight.values())
                .filter(|(p, ..)| p.exec_at.saturating_add(silence) <= now)
                .map(|(p, ..)| p.backend)
                .collect();
            silent.sort_unstable();
            silent.dedup();
            for b in silent {
                self.silent[b.index()] = true;
                self.backend_failed(now, b, out);
            }
        }
        if self.policy.next_timeout().is_some_and(|t| t <= now) {
            self.policy.on_timeout(now);
        }
        self.drain(now, out);
        if let Some(a) = &mut self.autoscaling {
            a.on_timeout(now);
        }
        // After the policy's timers: it has heard of the leave by now.
        self.leave_answers.retain(|&(at, b)| {
            let due = at <= now;
            if due {
                out.push(leaving_told(b));
            }
            !due
        });
    }

    pub fn next_timeout(&self) -> Option<Nanos> {
        let sweep = (!self.inflight.is_empty()).then_some(self.next_sweep);
        let period = self.autoscaling.as_ref().map(Autoscaling::next_timeout);
        let answers = self.leave_answers.iter().map(|a| a.0).min();
        let offloaded = self.offload.as_ref().is_some_and(OffThread::ready).then_some(0);
        let policy = self.policy.next_timeout();
        policy.into_iter().chain(sweep).chain(period).chain(answers).chain(offloaded).min()
    }

    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    fn drain(&mut self, now: Nanos, out: &mut Vec<Envelope>) {
        while let Some(job) = self.policy.take_offload() {
            self.offload.as_mut().expect("a policy hands work out only when asked").submit(job);
        }
        while let Some(o) = self.policy.poll_output() {
            match self.decisions.push(o, out) {
                Ok(Some(Sent { batch_id, plan, apps, deadlines })) => {
                    self.inflight.insert(batch_id, (plan, apps, deadlines));
                }
                Ok(None) => {}
                Err(refused) => {
                    // Its requests are dropped; the policy gets its backend
                    // back at once, as if the batch had taken no time.
                    self.stats.refused += 1;
                    self.batch_done(now, &refused.plan, &refused.apps, now, None);
                }
            }
        }
        self.decisions.flush(out);
        self.stats.batches = self.decisions.batches;
        self.stats.dropped = self.decisions.dropped;
        self.stats.relayouts = self.decisions.relayouts;
        if let Some(a) = &mut self.autoscaling {
            a.dropped(self.decisions.dropped);
        }
    }
}
