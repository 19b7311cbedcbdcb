//! The scheduler-side shard. What it hosts of the scheduler (`part.rs`): the whole scheduler
//! (the policy inside one `SchedulerRole`), or Symphony's rank shard, or
//! one of Symphony's model shards — and a range of backends (emulated
//! GPUs, or the CUDA executor on real ones with `--executor cuda`). In
//! `baton serve` with the policy inline: the scheduler and every backend;
//! with Symphony split: the rank shard and every backend on one shard, each
//! model shard on its own; `baton scheduler` hosts only the scheduler,
//! `baton backend` only backends. Messages between local roles are
//! delivered at once, in order; the rest queue for the link. Timers (the
//! policy's or shard's next timeout, each backend's next start or finish)
//! live on one wheel (`Alarms`). The shard runs round by round (`Pump`):
//! alone on its executor (`run`), or inside the front shard's loop when
//! both are pinned to one core (`clients.rs`, `frontend_shard.rs`).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use baton_sched::scenario::Scenario;
use baton_sched::time::Nanos;
use baton_wire::{fb, Message};

use super::alarms::Alarms;
use super::lead::{self, Lead, Round};
use super::link::{self, Link, ShardMsg};
use super::marked::Marked;
use super::park::{Bell, Rhythm};
use super::part::{Caused, Part, SchedulerPart};
use super::stall::Stalls;
use super::{EngineConfig, Progress};
use crate::clock::Clock;
use crate::models::ModelTable;
use crate::roles::backend::{BackendRole, BackendStats};
use crate::roles::scheduler::SchedulerStats;
use crate::roles::Addr;

/// How often, at most, a shard sends its totals to frontends in other
/// processes.
const TOTALS_PERIOD: Nanos = 100_000_000;

/// Backend `backend`'s totals, for a frontend's `/metrics`.
fn backend_totals(backend: u32, s: &BackendStats) -> fb::Stats {
    fb::Stats {
        backend: Some(backend),
        batches: s.batches,
        requests: s.requests,
        busy_ns: s.busy_ns,
        sizes: Some(s.sizes.to_vec()),
        ..Default::default()
    }
}

/// How often, at most, a shard stores its totals into the metrics' gauges.
const GAUGE_PERIOD: Nanos = 1_000_000;

/// Alarm target of the scheduler part; backend i (local) is `i + 1`.
const SCHED: usize = 0;

/// How long backends that leave at a stop wait for the scheduler's answer
/// and their last batches.
const LEAVE_PATIENCE: Nanos = 10_000_000_000;

#[derive(Default)]
pub struct Report {
    pub scheduler: SchedulerStats,
    pub backends: Vec<BackendStats>,
}

pub struct State {
    part: Box<dyn Part>,
    /// Local backends: `first_backend`, `first_backend + 1`, ...
    backends: Vec<BackendRole>,
    first_backend: u32,
    alarms: Alarms,
    outbound: VecDeque<ShardMsg>,
    /// What the local backends' touched states add up to.
    watch: Watch,
    /// Buffers kept between rounds: messages being delivered, what they
    /// caused, the alarms due.
    queue: Vec<ShardMsg>,
    caused: Caused,
    /// What the alarms of a round caused, kept for the next (`fire`).
    fired: Caused,
    due: Vec<usize>,
    /// This shard's number among the scheduler-side shards (`Gauges`).
    pub slot: usize,
    /// With a flag: a stop makes the local backends leave the cluster
    /// first (a backend process scaling in) unless the flag is set (the
    /// process is killed); without, a stop is at once.
    pub leaves: Option<Arc<AtomicBool>>,
    /// Whether the scheduler is unreachable (a link said so).
    scheduler_lost: bool,
    /// The scenario's stalls still to come (`stall.rs`).
    stalls: Stalls,
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
        let part = part.build(scenario, table, cfg, n, now);
        // Emulated backends share one copy of the models' tables.
        let mut shared = None;
        let backends: Vec<BackendRole> = local
            .clone()
            .map(|b| {
                let core =
                    (!cfg.compute_cores.is_empty()).then(|| cfg.compute_cores[b as usize % cfg.compute_cores.len()]);
                let seed = scenario.seed ^ u64::from(b);
                let exec = table.executor(&cfg.executor, b, core, cfg.jitter, seed, &mut shared);
                let exec = exec.map_err(|e| format!("backend {b}: {e}"))?;
                let mut role = BackendRole::new(b, exec).in_subcluster(cfg.subcluster);
                if let Some(reader) = cfg.input_reader()? {
                    role = role.with_reader(reader);
                }
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
            watch: Watch::new(targets - 1),
            queue: Vec::new(),
            caused: Caused::default(),
            fired: Caused::default(),
            due: Vec::new(),
            slot: 0,
            leaves: None,
            scheduler_lost: false,
            stalls: Stalls::new(&scenario.stalls, now),
        })
    }

    /// Peer `peer` came (`up`) or went, as a link reports it; for roles in
    /// one process, which no link reports.
    pub fn peer(&mut self, now: Nanos, peer: Addr, up: bool) {
        self.deliver(now, ShardMsg::Peer { peer, up });
    }

    /// When the shard is next due: its first timer, or a stall's start.
    fn next(&self) -> Option<Nanos> {
        self.alarms.next().into_iter().chain(self.stalls.next()).min()
    }

    fn local(&self, b: u32) -> Option<usize> {
        let i = b.checked_sub(self.first_backend)? as usize;
        (i < self.backends.len()).then_some(i)
    }

    /// Delivers `msg` and everything it causes on this shard, at `now`:
    /// to a local backend, to the scheduler's part, or out over the link.
    fn deliver(&mut self, now: Nanos, msg: ShardMsg) {
        let (mut queue, mut caused) = (std::mem::take(&mut self.queue), std::mem::take(&mut self.caused));
        queue.push(msg);
        while let Some(m) = queue.pop() {
            if let ShardMsg::Peer { peer, up } = m {
                // A frontend gone: no local backend waits for its inputs; one
                // come: local backends offer it queue pairs. (A backend gone
                // reaches the scheduler as its BackendStatus.)
                // The scheduler gone: backends leaving wait for no answer.
                match peer {
                    Addr::Frontend(f) => {
                        for (i, b) in self.backends.iter_mut().enumerate() {
                            match up {
                                true => b.frontend_joined(f, &mut caused.env),
                                false => b.frontend_lost(now, f, &mut caused.env),
                            }
                            self.alarms.touch(i + 1);
                        }
                    }
                    Addr::Scheduler(_) => {
                        self.scheduler_lost = !up;
                        if !up {
                            self.backends.iter_mut().for_each(BackendRole::scheduler_lost);
                        }
                    }
                    Addr::Backend(_) => {}
                }
                queue.extend(caused.env.drain(..).rev().map(ShardMsg::env));
                continue;
            }
            let backend = match &m {
                ShardMsg::Env(e) => match e.to {
                    Addr::Backend(b) => self.local(b),
                    _ => None,
                },
                _ => None,
            };
            match (backend, m) {
                (Some(i), ShardMsg::Env(e)) => {
                    self.backends[i].on_message(now, link::open(e).msg, &mut caused.env);
                    self.alarms.touch(i + 1);
                }
                (_, m) => match self.part.take(now, m, &mut caused) {
                    Some(m) => self.outbound.push_back(m),
                    None => self.alarms.touch(SCHED),
                },
            }
            // Keep causal order: what a message caused goes before later
            // ones (the queue is a stack: push in reverse).
            queue.extend(caused.model.drain(..).rev().map(ShardMsg::Model));
            queue.extend(caused.rank.drain(..).rev().map(ShardMsg::Rank));
            queue.extend(caused.env.drain(..).rev().map(ShardMsg::env));
        }
        (self.queue, self.caused) = (queue, caused);
    }

    /// Fires every alarm due at `now`.
    fn fire(&mut self, now: Nanos) -> bool {
        let mut due = std::mem::take(&mut self.due);
        self.alarms.due(now, &mut due);
        let mut caused = std::mem::take(&mut self.fired);
        for &t in &due {
            self.alarms.touch(t);
            match t {
                SCHED => self.part.on_timeout(now, &mut caused),
                _ => self.backends[t - 1].poll(now, &mut caused.env),
            }
        }
        let fired = !due.is_empty();
        due.clear();
        self.due = due;
        let Caused { env, rank, model } = &mut caused;
        let msgs = env.drain(..).map(ShardMsg::env);
        for m in msgs.chain(rank.drain(..).map(ShardMsg::Rank)).chain(model.drain(..).map(ShardMsg::Model)) {
            self.deliver(now, m);
        }
        self.fired = caused;
        fired
    }

    /// Polls every local backend's device at once (one said it is done),
    /// and looks at the scheduler's part again (its offloaded work may be).
    fn poll_devices(&mut self, now: Nanos) {
        self.alarms.touch(SCHED);
        let mut out = Vec::new();
        for (i, b) in self.backends.iter_mut().enumerate() {
            b.poll_device(now, &mut out);
            self.alarms.touch(i + 1);
        }
        for e in out {
            self.deliver(now, ShardMsg::env(e));
        }
    }

    fn rearm(&mut self) {
        let (part, backends, watch) = (&self.part, &self.backends, &mut self.watch);
        self.alarms.rearm(|t| match t {
            SCHED => part.next_timeout(),
            _ => {
                watch.saw(t - 1, &backends[t - 1]);
                backends[t - 1].next_wake()
            }
        });
    }

    /// Every local backend starts leaving the cluster (`BackendRole::leave`).
    fn leave(&mut self, now: Nanos) {
        let mut out = Vec::new();
        for (i, b) in self.backends.iter_mut().enumerate() {
            b.leave(&mut out);
            if self.scheduler_lost {
                b.scheduler_lost();
            }
            self.alarms.touch(i + 1);
        }
        for e in out {
            self.deliver(now, ShardMsg::env(e));
        }
    }

    pub fn report(&self) -> Report {
        Report { scheduler: self.part.stats(), backends: self.backends.iter().map(|b| b.stats).collect() }
    }
}

/// The scheduler-side shard's pump, round by round: messages in, timers
/// fired, messages out, totals published. `run` drives it alone on its
/// shard; a shard that shares its core with the front shard is driven by
/// the front shard's loop beside its own work (`Hosting`), one event loop
/// per core.
pub struct Pump {
    link: Link,
    clock: Clock,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    incoming: Vec<ShardMsg>,
    /// Batches of the local backends already added to `progress`; whether
    /// the metrics' gauges are behind, and when they may be stored next.
    published: u64,
    stale: bool,
    next_gauges: Nanos,
    /// Whether totals are owed to frontends in other processes, and when
    /// they may be sent next.
    unsent: bool,
    next_totals: Nanos,
    /// Raised by executors that finish on threads of their own.
    device_done: Arc<AtomicBool>,
    leave_by: Option<Nanos>,
}

impl Pump {
    /// The pump of `s`, whose wake-ups ring `bell`.
    pub fn new(
        s: &mut State,
        link: Link,
        clock: Clock,
        stop: Arc<AtomicBool>,
        bell: Bell,
        progress: Arc<Progress>,
    ) -> Self {
        if let Link::Tcp(r) = &link {
            *r.bell.borrow_mut() = Some(bell.clone());
        }
        // Executors that finish on threads of their own (CPU compute), and
        // the scheduler's offloaded work, raise this flag and ring the
        // shard's bell: it parks instead of polling them (the flag is
        // published before the bell, the bell's handshake does the rest,
        // `park.rs`).
        let device_done = Arc::new(AtomicBool::new(false));
        let waker: baton_gpu::Waker = {
            let done = Arc::clone(&device_done);
            Arc::new(move || {
                done.store(true, Ordering::Release);
                bell.ring();
            })
        };
        for b in &mut s.backends {
            b.set_waker(Arc::clone(&waker));
        }
        s.part.offloading(&waker);
        Self {
            link,
            clock,
            stop,
            progress,
            incoming: Vec::new(),
            published: 0,
            stale: false,
            next_gauges: 0,
            unsent: false,
            next_totals: 0,
            device_done,
            leave_by: None,
        }
    }

    /// Whether work waits that a parked shard must not sleep through.
    pub fn pending(&self) -> bool {
        self.link.pending() || self.device_done.load(Ordering::Acquire)
    }

    /// One round at `now` (just read from the shard's clock); None once
    /// the shard is to stop.
    pub fn round(&mut self, s: &mut State, now: Nanos) -> Option<Round> {
        if self.stop.load(Ordering::Acquire) {
            if s.leaves.as_ref().is_none_or(|killed| killed.load(Ordering::Acquire)) {
                return None;
            }
            let by = *self.leave_by.get_or_insert_with(|| {
                s.leave(now);
                now + LEAVE_PATIENCE
            });
            if now >= by || (s.outbound.is_empty() && s.backends.iter().all(BackendRole::gone)) {
                return None;
            }
        }
        if s.stalls.hold(now) {
            // What waited is handled from the next round on, at its time.
            return Some(Round { busy: true, next: s.next() });
        }
        self.link.poll(&mut self.incoming);
        let mut busy = !self.incoming.is_empty();
        for m in self.incoming.drain(..) {
            s.deliver(now, m);
        }
        if self.device_done.swap(false, Ordering::AcqRel) {
            s.poll_devices(now);
            busy = true;
        }
        busy |= s.fire(now);
        s.rearm();
        // A shard whose device is running a batch polls it every round
        // instead of parking, unless the device wakes it when done: the
        // GPU's completion is seen within microseconds, not a timer tick.
        // (Emulated backends are never in flight.)
        busy |= s.watch.polling > 0;
        if s.watch.batches > self.published {
            self.progress.add_batches(s.watch.batches - self.published);
            self.published = s.watch.batches;
        }
        // The metrics' gauges trail by at most `GAUGE_PERIOD` (or a parked
        // shard's longest sleep, `park::MAX_PARK`), and only backends
        // touched since are stored again: storing every backend's totals
        // each round would cost thousands of emulated GPUs' worth of
        // stores per batch.
        self.stale |= busy;
        self.unsent |= busy;
        if self.stale && now >= self.next_gauges {
            while let Some(i) = s.watch.changed.pop() {
                self.progress.gauges.store_backend(s.first_backend as usize + i, &s.backends[i].stats);
            }
            self.progress.gauges.store_decisions(s.slot, s.part.stats().batches);
            (self.stale, self.next_gauges) = (false, now + GAUGE_PERIOD);
        }
        // Frontends in other processes show the same totals on their
        // `/metrics`, trailing by at most `TOTALS_PERIOD` (or `MAX_PARK`).
        if let (Link::Tcp(router), true) = (&self.link, self.unsent && now >= self.next_totals) {
            for (i, b) in s.backends.iter().enumerate() {
                router.to_frontends(&Message::Stats(backend_totals(s.first_backend + i as u32, &b.stats)));
            }
            if let Some(subcluster) = router.hosts_scheduler {
                let decisions = s.part.stats().batches;
                router.to_frontends(&Message::Stats(fb::Stats { decisions, subcluster, ..Default::default() }));
            }
            (self.unsent, self.next_totals) = (false, now + TOTALS_PERIOD);
        }
        if !s.outbound.is_empty() {
            self.link.flush(&mut s.outbound);
            busy = true;
        }
        self.link.submit();
        Some(Round { busy, next: s.next() })
    }
}

/// Drives shard `s` alone until its stop.
pub async fn run(
    mut s: State,
    link: Link,
    clock: Clock,
    stop: Arc<AtomicBool>,
    mut rhythm: Rhythm,
    progress: Arc<Progress>,
) -> Report {
    // Peers' sockets are on the router's ring, polled every round: only
    // the listener and the reconnecting tasks wait for reactor turns.
    let mut lead = match &link {
        Link::Tcp(_) => Lead::turning_every(lead::RARE_TURN),
        Link::Ring(_) => Lead::default(),
    };
    let mut pump = Pump::new(&mut s, link, clock.clone(), stop, rhythm.bell(), progress);
    while let Some(round) = pump.round(&mut s, clock.now()) {
        let has_work = || {
            pump.link.arm_wake();
            pump.pending()
        };
        lead.end_round(&mut rhythm, &clock, clock.now(), round, has_work).await;
        pump.link.disarm_wake();
    }
    s.report()
}

/// Scheduler-side shards a front shard's loop drives beside its own work
/// (`clients.rs`, `frontend_shard.rs`): those pinned to its core.
pub struct Hosting(Vec<(Pump, State)>);

impl Hosting {
    /// `shards` with their links, woken by the front shard's `bell`.
    pub fn new(
        shards: Vec<(State, Link)>,
        clock: &Clock,
        stop: &Arc<AtomicBool>,
        bell: &Bell,
        progress: &Arc<Progress>,
    ) -> Self {
        let pump = |(mut s, link): (State, Link)| {
            let (stop, progress) = (Arc::clone(stop), Arc::clone(progress));
            (Pump::new(&mut s, link, clock.clone(), stop, bell.clone(), progress), s)
        };
        Self(shards.into_iter().map(pump).collect())
    }

    /// One round of each shard, folded into the front shard's `round`, the
    /// first at `now` (just read), each after it at a read of its own. A
    /// stopping shard adds nothing: the front loop stops with the engine.
    pub fn round(&mut self, round: &mut Round, now: Nanos) {
        for (i, (pump, state)) in self.0.iter_mut().enumerate() {
            let now = if i == 0 { now } else { pump.clock.now() };
            if let Some(r) = pump.round(state, now) {
                round.busy |= r.busy;
                round.next = round.next.into_iter().chain(r.next).min();
            }
        }
    }

    /// Whether any shard has work waiting (`Pump::pending`).
    pub fn pending(&self) -> bool {
        self.0.iter().any(|(p, _)| p.pending())
    }

    pub fn reports(&self) -> Vec<Report> {
        self.0.iter().map(|(_, s)| s.report()).collect()
    }
}

/// The local backends' totals a round needs, kept from the backends it
/// touched (a backend changes only when touched): how many must be polled
/// every round (a device in flight that does not wake the shard), the
/// batches they ran, and which changed since their gauges were stored.
struct Watch {
    polls: Vec<bool>,
    polling: usize,
    seen: Vec<u64>,
    batches: u64,
    changed: Marked,
}

impl Watch {
    fn new(backends: usize) -> Self {
        let changed = Marked::new(backends);
        Self { polls: vec![false; backends], polling: 0, seen: vec![0; backends], batches: 0, changed }
    }

    /// Local backend `i` was touched and is now `b`.
    fn saw(&mut self, i: usize, b: &BackendRole) {
        self.changed.mark(i);
        let polls = b.needs_polling();
        if std::mem::replace(&mut self.polls[i], polls) != polls {
            match polls {
                true => self.polling += 1,
                false => self.polling -= 1,
            }
        }
        let batches = b.stats.batches;
        self.batches += batches - std::mem::replace(&mut self.seen[i], batches);
    }
}
