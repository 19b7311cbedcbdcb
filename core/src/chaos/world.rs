//! The simulated cluster: roles, connections, clients and faults on one
//! virtual clock, stepped event by event (`mod.rs` says what it models).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use baton_sched::rng::Rng;
use baton_sched::scenario::Scenario;
use baton_sched::time::Nanos;
use baton_wire::{fb, Message};

use super::faults::{ExecFaults, Faulty};
use super::ledger::{input_of, Ledger};
use super::sched::Scheduler;
use super::{Config, FaultCounts, Report};
use crate::models::ModelTable;
use crate::roles::backend::{drop_plan, BackendRole};
use crate::roles::frontend::{f32_tensor, le_bytes, Answer, Frontend};
use crate::roles::scheduler::SchedulerRole;
use crate::roles::{Addr, Envelope};
use crate::runtime::part::symphony_split;

/// Input floats of every model here.
const FLOATS: usize = 4;
/// Ids of a role's run `k` start at `k << RUN_SHIFT`.
const RUN_SHIFT: u32 = 40;
/// Steps at one instant before the run is called a livelock.
const MAX_STEPS_AT_ONCE: u32 = 1_000_000;

enum Event {
    Client,
    Deliver {
        from: Addr,
        to: Addr,
        epoch: u64,
        msg: Message,
    },
    /// `at` (in its run `run`) hears its connection to `peer` is up or down.
    Notice {
        at: Addr,
        run: u32,
        peer: Addr,
        up: bool,
    },
    Crash(Addr),
    Restart(Addr),
    Cut(Addr, Addr),
    Heal(Addr, Addr),
    /// The drain begins.
    Calm,
}

/// A role slot: the role while up, and how many times it has started.
struct Node<R> {
    role: Option<R>,
    run: u32,
}

#[derive(Clone, Copy, Default)]
struct Link {
    up: bool,
    /// Changes whenever the connection breaks or comes back: a message
    /// sent on an older one is lost.
    epoch: u64,
}

pub struct World<'a> {
    cfg: &'a Config,
    scenario: Scenario,
    table: ModelTable,
    now: Nanos,
    rng: Rng,
    events: BTreeMap<(Nanos, u64), Event>,
    seq: u64,
    fes: Vec<Node<Frontend>>,
    sched: Node<Scheduler>,
    bes: Vec<Node<BackendRole>>,
    cut: BTreeSet<(u32, u32)>,
    links: BTreeMap<(u32, u32), Link>,
    ledger: Ledger,
    faults: FaultCounts,
    exec: Rc<ExecFaults>,
    calm: bool,
}

impl<'a> World<'a> {
    pub fn new(cfg: &'a Config) -> Self {
        let scenario = Scenario::parse(&cfg.scenario()).expect("the chaos scenario parses");
        let table = ModelTable::from_scenario(&scenario, FLOATS).expect("plain models are served");
        let mut w = Self {
            cfg,
            scenario,
            table,
            now: 0,
            rng: Rng::stream(cfg.seed, 1),
            events: BTreeMap::new(),
            seq: 0,
            fes: (0..cfg.frontends).map(|_| Node { role: None, run: 0 }).collect(),
            sched: Node { role: None, run: 0 },
            bes: (0..cfg.backends).map(|_| Node { role: None, run: 0 }).collect(),
            cut: BTreeSet::new(),
            links: BTreeMap::new(),
            ledger: Ledger::default(),
            faults: FaultCounts::default(),
            exec: Rc::new(ExecFaults::default()),
            calm: false,
        };
        for a in w.addrs() {
            w.start(a);
        }
        w.relink();
        // The cluster is connected before the first request.
        w.events.clear();
        w
    }

    fn addrs(&self) -> Vec<Addr> {
        let fes = (0..self.cfg.frontends).map(Addr::Frontend);
        std::iter::once(Addr::Scheduler(0)).chain(fes).chain((0..self.cfg.backends).map(Addr::Backend)).collect()
    }

    fn key(&self, a: Addr) -> u32 {
        match a {
            Addr::Scheduler(_) => 0,
            Addr::Frontend(f) => 1 + f,
            Addr::Backend(b) => 1 + self.cfg.frontends + b,
        }
    }

    fn pair(&self, a: Addr, b: Addr) -> (u32, u32) {
        let (x, y) = (self.key(a), self.key(b));
        (x.min(y), x.max(y))
    }

    /// The pairs of roles that talk: each frontend and each backend with the
    /// scheduler, each backend with each frontend.
    fn talking(&self) -> Vec<(Addr, Addr)> {
        let fes = (0..self.cfg.frontends).map(Addr::Frontend);
        let bes = (0..self.cfg.backends).map(Addr::Backend);
        let with_sched = fes.clone().chain(bes.clone()).map(|a| (a, Addr::Scheduler(0)));
        let be_fe = bes.flat_map(|b| fes.clone().map(move |f| (b, f)));
        with_sched.chain(be_fe).collect()
    }

    fn up(&self, a: Addr) -> bool {
        match a {
            Addr::Scheduler(_) => self.sched.role.is_some(),
            Addr::Frontend(f) => self.fes[f as usize].role.is_some(),
            Addr::Backend(b) => self.bes[b as usize].role.is_some(),
        }
    }

    fn run_of(&self, a: Addr) -> u32 {
        match a {
            Addr::Scheduler(_) => self.sched.run,
            Addr::Frontend(f) => self.fes[f as usize].run,
            Addr::Backend(b) => self.bes[b as usize].run,
        }
    }

    fn at(&mut self, t: Nanos, e: Event) {
        self.seq += 1;
        self.events.insert((t, self.seq), e);
    }

    fn ms(&mut self, lo: f64, hi: f64) -> Nanos {
        ((lo + (hi - lo) * self.rng.unit()) * 1e6) as Nanos
    }

    /// Starts `a`'s next run: a new role object, as a new process is.
    fn start(&mut self, a: Addr) {
        let cfg = self.cfg;
        let run = self.run_of(a) + 1;
        let first_id = u64::from(run) << RUN_SHIFT;
        match a {
            Addr::Scheduler(_) => {
                let role = match cfg.model_shards {
                    0 => {
                        let policy = baton_sched::build::scheduler(cfg.policy, &self.scenario, cfg.rate);
                        let role = SchedulerRole::new(policy, self.table.clone(), cfg.backends);
                        Scheduler::Whole(Box::new(role.starting_at(first_id).with_silence(cfg.silence)))
                    }
                    k => Scheduler::Split(symphony_split(&self.scenario, &self.table, k, first_id)),
                };
                self.sched = Node { role: Some(role), run };
            }
            Addr::Frontend(f) => {
                let role = Frontend::new(f, cfg.capacity, 0, 0).starting_at(first_id).with_grace(cfg.grace);
                self.fes[f as usize] = Node { role: Some(role), run };
            }
            Addr::Backend(b) => {
                let stream = 1_000 + u64::from(b) * 1_000 + u64::from(run);
                let exec = Faulty {
                    inner: Box::new(self.table.emulated_executor(0.0, cfg.seed ^ stream)),
                    rng: Rng::stream(cfg.seed, stream),
                    p_fail: cfg.p_exec_fail,
                    p_stall: cfg.p_exec_stall,
                    stall_max: Duration::from_nanos(cfg.stall_max),
                    faults: Rc::clone(&self.exec),
                };
                let role = BackendRole::new(b, Box::new(exec)).with_limits(cfg.patience, cfg.max_jobs);
                self.bes[b as usize] = Node { role: Some(role), run };
            }
        }
    }

    /// Brings every connection up to date with who is up and which links
    /// are cut; each end of one that changed hears of it `detect` later.
    fn relink(&mut self) {
        for (a, b) in self.talking() {
            let key = self.pair(a, b);
            let is = self.up(a) && self.up(b) && !self.cut.contains(&key);
            let link = self.links.entry(key).or_default();
            if link.up == is {
                continue;
            }
            link.up = is;
            link.epoch += 1;
            for (side, peer) in [(a, b), (b, a)] {
                if self.up(side) {
                    let run = self.run_of(side);
                    self.at(self.now + self.cfg.net.detect, Event::Notice { at: side, run, peer, up: is });
                }
            }
        }
    }

    fn link(&self, a: Addr, b: Addr) -> Link {
        self.links.get(&self.pair(a, b)).copied().unwrap_or_default()
    }

    /// Schedules the fault phase: the first request, crashes and restarts,
    /// cuts and heals, then the drain.
    fn plan(&mut self) {
        self.at(0, Event::Client);
        let (len, addrs, pairs) = (self.cfg.faults_for as f64 / 1e6, self.addrs(), self.talking());
        for _ in 0..self.cfg.crashes {
            let a = addrs[self.rng.below(addrs.len() as u64) as usize];
            let t = self.ms(0.0, len);
            let down = self.ms(5.0, 500.0);
            self.at(t, Event::Crash(a));
            self.at(t + down, Event::Restart(a));
        }
        for _ in 0..self.cfg.cuts {
            let (a, b) = pairs[self.rng.below(pairs.len() as u64) as usize];
            let t = self.ms(0.0, len);
            let cut = self.ms(5.0, 300.0);
            self.at(t, Event::Cut(a, b));
            self.at(t + cut, Event::Heal(a, b));
        }
        self.at(self.cfg.faults_for, Event::Calm);
    }

    pub fn run(mut self) -> Report {
        self.plan();
        let end = self.cfg.faults_for + self.cfg.drain_for;
        let (mut last, mut steps) = (0, 0u32);
        loop {
            let event = self.events.first_key_value().map(|(k, _)| k.0);
            let timer = self.next_timer();
            let Some(t) = event.into_iter().chain(timer).min() else { break };
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            steps = if self.now == last { steps + 1 } else { 0 };
            last = self.now;
            if steps > MAX_STEPS_AT_ONCE {
                self.ledger.violations.push(format!("livelock: {MAX_STEPS_AT_ONCE} steps at {} ns", self.now));
                break;
            }
            match (event, timer) {
                (_, Some(tt)) if tt <= t => self.fire_timers(),
                _ => {
                    let (_, e) = self.events.pop_first().expect("peeked");
                    self.handle(e);
                }
            }
            if self.calm && self.settled() {
                break;
            }
        }
        self.finish()
    }

    /// Every request answered and nothing held anywhere.
    fn settled(&self) -> bool {
        self.ledger.pending() == 0
            && self.fes.iter().filter_map(|n| n.role.as_ref()).all(|f| f.held() == 0)
            && self.sched.role.as_ref().is_none_or(|s| s.inflight() == 0)
            && self.bes.iter().filter_map(|n| n.role.as_ref()).all(|b| b.queued() == 0)
    }

    fn finish(mut self) -> Report {
        let pending = self.ledger.pending();
        if pending > 0 {
            let ids = self.ledger.unanswered(5);
            self.ledger.violations.push(format!("{pending} requests never answered (the first: {ids:?})"));
        }
        for (f, n) in self.fes.iter().enumerate() {
            if let Some(fe) = n.role.as_ref().filter(|fe| fe.held() > 0) {
                self.ledger.violations.push(format!("frontend {f} still holds {} requests at the end", fe.held()));
            }
        }
        self.faults.exec_failed = self.exec.failed.get();
        self.faults.exec_stalled = self.exec.stalled.get();
        Report {
            seed: self.cfg.seed,
            policy: match self.cfg.model_shards {
                0 => self.cfg.policy.as_str().to_string(),
                k => format!("{} split over {k} model shards", self.cfg.policy.as_str()),
            },
            tally: self.ledger.tally,
            faults: self.faults,
            violations: std::mem::take(&mut self.ledger.violations),
            ended_at: self.now,
        }
    }

    fn next_timer(&self) -> Option<Nanos> {
        let fes = self.fes.iter().filter_map(|n| n.role.as_ref()?.next_timeout());
        let sched = self.sched.role.as_ref().and_then(|s| s.next_timeout());
        let bes = self.bes.iter().filter_map(|n| n.role.as_ref()?.next_wake());
        fes.chain(sched).chain(bes).min()
    }

    /// Fires every role's timers due now.
    fn fire_timers(&mut self) {
        let now = self.now;
        for f in 0..self.cfg.frontends {
            if self.fes[f as usize].role.as_ref().and_then(|fe| fe.next_timeout()).is_some_and(|t| t <= now) {
                self.on_frontend(f, |fe, table, answers, _| fe.on_timeout(now, table, answers));
            }
        }
        if self.sched.role.as_ref().and_then(|s| s.next_timeout()).is_some_and(|t| t <= now) {
            let mut out = Vec::new();
            self.sched.role.as_mut().expect("up").on_timeout(now, &mut out);
            self.send_all(Addr::Scheduler(0), out);
        }
        for b in 0..self.cfg.backends {
            self.on_backend(b, |be, out| {
                if be.next_wake().is_some_and(|t| t <= now) {
                    be.poll(now, out);
                }
            });
        }
    }

    fn handle(&mut self, e: Event) {
        match e {
            Event::Client => self.client(),
            Event::Deliver { from, to, epoch, msg } => {
                let link = self.link(from, to);
                if !link.up || link.epoch != epoch {
                    self.faults.broken += 1;
                    return;
                }
                self.deliver(to, msg);
            }
            Event::Notice { at, run, peer, up } => {
                if self.up(at) && self.run_of(at) == run {
                    self.notice(at, peer, up);
                }
            }
            Event::Crash(a) if self.up(a) && !self.calm => {
                self.faults.crashes += 1;
                if let Addr::Frontend(f) = a {
                    self.ledger.frontend_crashed(f, self.fes[f as usize].run);
                }
                match a {
                    Addr::Scheduler(_) => self.sched.role = None,
                    Addr::Frontend(f) => self.fes[f as usize].role = None,
                    Addr::Backend(b) => self.bes[b as usize].role = None,
                }
                self.relink();
            }
            Event::Restart(a) if !self.up(a) => self.restart(a),
            Event::Cut(a, b) if !self.calm => {
                self.faults.cuts += 1;
                let key = self.pair(a, b);
                self.cut.insert(key);
                self.relink();
            }
            Event::Heal(a, b) => {
                let key = self.pair(a, b);
                self.cut.remove(&key);
                self.relink();
            }
            Event::Calm => {
                self.calm = true;
                self.exec.calm.set(true);
                self.cut.clear();
                for a in self.addrs() {
                    if !self.up(a) {
                        self.restart(a);
                    }
                }
                self.relink();
            }
            Event::Crash(_) | Event::Restart(_) | Event::Cut(..) => {}
        }
    }

    fn restart(&mut self, a: Addr) {
        self.faults.restarts += 1;
        self.start(a);
        self.relink();
        // A frontend that cannot reach the scheduler knows it from the start
        // (its process would fail to connect).
        if let Addr::Frontend(f) = a {
            if !self.link(a, Addr::Scheduler(0)).up {
                let now = self.now;
                self.on_frontend(f, |fe, table, answers, _| fe.peer_lost(now, Addr::Scheduler(0), table, answers));
            }
        }
    }

    /// A client sends a request to a frontend picked at random; the next
    /// one is due an exponential gap later, until the drain.
    fn client(&mut self) {
        let f = self.rng.below(u64::from(self.cfg.frontends)) as u32;
        let model = self.rng.below(self.table.models.len() as u64) as usize;
        let slo = self.table.models[model].slo;
        let input = input_of(self.ledger.tally.sent, FLOATS);
        let id = self.ledger.send(f, self.fes[f as usize].run, self.now, slo, &input);
        if !self.up(Addr::Frontend(f)) {
            self.ledger.refused(id);
        } else {
            let req = fb::InferRequest {
                id,
                model: Some(self.table.models[model].name.clone()),
                slo_ns: slo,
                inputs: Some(vec![f32_tensor(le_bytes(&input))]),
                ..Default::default()
            };
            let now = self.now;
            self.on_frontend(f, |fe, table, answers, out| {
                match fe.admit_to_scheduler(now, 0, &mut req.into(), table) {
                    Ok(meta) => out.push(meta),
                    Err(answer) => answers.push((0, *answer)),
                }
            });
        }
        let gap = (self.rng.exp1() * 1e9 / self.cfg.rate) as Nanos;
        if self.now + gap < self.cfg.faults_for {
            self.at(self.now + gap, Event::Client);
        }
    }

    fn deliver(&mut self, to: Addr, msg: Message) {
        let now = self.now;
        match to {
            Addr::Frontend(f) => {
                let kind = msg.kind();
                let mut taken = true;
                self.on_frontend(f, |fe, table, answers, out| {
                    taken = fe.on_message(now, msg, table, answers, |e| out.push(e));
                });
                if !taken {
                    self.ledger.violations.push(format!("frontend {f} was sent a {kind:?}"));
                }
            }
            Addr::Scheduler(_) => {
                let (mut out, kind) = (Vec::new(), msg.kind());
                if !self.sched.role.as_mut().expect("delivered to a live role").on_message(now, msg, &mut out) {
                    self.ledger.violations.push(format!("the scheduler was sent a {kind:?} no part takes"));
                }
                self.send_all(Addr::Scheduler(0), out);
            }
            Addr::Backend(b) => self.on_backend(b, |be, out| be.on_message(now, msg, out)),
        }
    }

    fn notice(&mut self, at: Addr, peer: Addr, up: bool) {
        let now = self.now;
        match (at, peer) {
            (Addr::Frontend(f), peer) => self.on_frontend(f, |fe, table, answers, _| match up {
                true => fe.peer_joined(peer),
                false => fe.peer_lost(now, peer, table, answers),
            }),
            (Addr::Scheduler(_), Addr::Backend(b)) => {
                let status = fb::BackendStatus { backend: b, healthy: up, ..Default::default() };
                let mut out = Vec::new();
                self.sched.role.as_mut().expect("up").on_message(now, Message::BackendStatus(status), &mut out);
                self.send_all(Addr::Scheduler(0), out);
            }
            (Addr::Backend(b), Addr::Frontend(f)) if !up => self.on_backend(b, |be, out| be.frontend_lost(now, f, out)),
            _ => {}
        }
    }

    /// Runs `step` on frontend `f` if it is up; its answers go to the
    /// ledger (checking that the frontend counts late exactly the ok
    /// answers its clients see late), its messages to their roles.
    fn on_frontend(
        &mut self,
        f: u32,
        step: impl FnOnce(&mut Frontend, &ModelTable, &mut Vec<Answer>, &mut Vec<Envelope>),
    ) {
        let Some(fe) = self.fes[f as usize].role.as_mut() else { return };
        let (mut answers, mut out) = (Vec::new(), Vec::new());
        let late_before = fe.stats.late;
        step(fe, &self.table, &mut answers, &mut out);
        out.extend(fe.spawned().map(|m| Envelope { to: Addr::Scheduler(0), msg: Message::RequestMeta(m) }));
        let (late, held) = (fe.stats.late - late_before, fe.held());
        let late_seen = answers.iter().filter(|(_, a)| self.ledger.answer(self.now, f, a)).count() as u64;
        if late != late_seen {
            let v = format!("frontend {f} counted {late} late answers at {}, its clients saw {late_seen}", self.now);
            self.ledger.violations.push(v);
        }
        if held > self.cfg.capacity {
            let v = format!("frontend {f} holds {held} requests, over its capacity {}", self.cfg.capacity);
            self.ledger.violations.push(v);
        }
        self.send_all(Addr::Frontend(f), out);
    }

    fn on_backend(&mut self, b: u32, step: impl FnOnce(&mut BackendRole, &mut Vec<Envelope>)) {
        let Some(be) = self.bes[b as usize].role.as_mut() else { return };
        let mut out = Vec::new();
        step(be, &mut out);
        if be.queued() > self.cfg.max_jobs {
            let v = format!("backend {b} queues {} plans, over its limit {}", be.queued(), self.cfg.max_jobs);
            self.ledger.violations.push(v);
        }
        self.send_all(Addr::Backend(b), out);
    }

    fn send_all(&mut self, from: Addr, out: Vec<Envelope>) {
        for e in out {
            self.send(from, e);
        }
    }

    /// Puts a message on the wire from `from`. With no connection to its
    /// role it is undeliverable, and a batch plan's requests are answered
    /// `BackendFailed` to their frontends, as the engine's router does.
    fn send(&mut self, from: Addr, e: Envelope) {
        let link = self.link(from, e.to);
        if !link.up {
            self.faults.broken += 1;
            if let Message::BatchPlan(p) = e.msg {
                let mut out = Vec::new();
                drop_plan(&p, fb::DropReason::BackendFailed, None, |_| true, &mut out);
                self.send_all(from, out);
            }
            return;
        }
        self.faults.messages += 1;
        let net = self.cfg.net;
        let chaos = if self.calm { 0.0 } else { 1.0 };
        if self.rng.unit() < chaos * net.p_loss {
            self.faults.lost += 1;
            return;
        }
        let copies = if self.rng.unit() < chaos * net.p_dup { 2 } else { 1 };
        self.faults.duplicated += copies - 1;
        for _ in 0..copies {
            let mut delay = net.base + (self.rng.exp1() * net.jitter as f64) as Nanos;
            if self.rng.unit() < chaos * net.p_long {
                self.faults.stalled_messages += 1;
                delay += (self.rng.unit() * net.long_max as f64) as Nanos;
            }
            let msg = e.msg.clone();
            self.at(self.now + delay, Event::Deliver { from, to: e.to, epoch: link.epoch, msg });
        }
    }
}
