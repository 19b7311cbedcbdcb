//! In-process clients: an engine whose front shard holds an open-loop
//! generator instead of a TCP listener, to measure the engine without the
//! sockets (Symphony's own dispatcher benchmark keeps its generator in its
//! event loop the same way). Everything else is the engine as it serves:
//! the frontend role, the rings, the scheduler shards (Symphony's model and
//! rank shards when asked for), the backends, the clock and timer wheel,
//! parking.
//!
//! The generator draws the simulator's arrivals (`sched::sim::Arrivals`,
//! the scenario's rates, apps and work at the given aggregate rate and
//! seed) and hands each due request to the frontend role as a connection
//! would. Each is judged as its client would judge it: ok when answered
//! within its SLO of the time it was due, not of when the generator got to
//! it, so a shard that falls behind shows as late answers rather than as a
//! lower offered rate; requests also carry only the SLO left when sent, so
//! the engine plans against the client's deadline. A turn of the loop
//! sends for at most `SEND_BUDGET`, so a generator catching up does not
//! hold the core from the work under way. A request the loop sends more
//! than `EngineConfig::shed_aged_share` of its SLO after it was due is
//! turned away at the frontend's door, and those after it until the loop
//! is within half that share (`roles/overload.rs`), so a loop put behind
//! by a stall catches up. Requests due in the warm-up are
//! served but not counted; after the measured window the generator stops
//! and the shard waits for the last answers (at most the longest SLO and
//! a second); what the frontend still holds then is answered dropped and
//! counted so, and a request never answered at all counts as unanswered.
//!
//! With `frontend_shards` K > 1 there are K clients' loops, each a front
//! shard of its own (its own frontend role and the scheduler-side shards
//! pinned to its core): loop k sends the arrivals whose index is k modulo
//! K. Each loop draws the whole arrival sequence (the apps and work of the
//! others' arrivals too, so that every request is the simulator's), and
//! sends only its own.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

use baton_sched::scenario::Scenario;
use baton_sched::sim::{Arrivals, Source};
use baton_sched::time::Nanos;
use baton_sched::PolicyKind;
use baton_wire::fb;
use baton_wire::message::RequestHead;
use glommio::Placement;

use std::sync::Arc;

use super::lead::{Lead, Round};
use super::link::{Link, Outbound, ShardMsg, FRONTEND_SHARD};
use super::park::Rhythm;
use super::sched_shard::Hosting;
use super::{build_hosted, shard_executor, start_back, Back, EngineConfig, EngineError, EngineReport, Front};
use crate::clock::Clock;
use crate::models::ModelTable;
use crate::roles::frontend::{Answer, Away, Frontend, FrontendStats};
use crate::roles::outcomes::add_at;
use crate::roles::request::{ClientRequest, Input};

/// An open-loop run.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub rate_rps: f64,
    pub warmup: Duration,
    pub measure: Duration,
    pub seed: u64,
}

/// The requests due in the measured window, as their clients saw them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub sent: u64,
    pub ok: u64,
    /// Answered ok after their SLO.
    pub late: u64,
    pub dropped: u64,
    /// Of `dropped`, by reason (`fb::DropReason` as its index).
    pub dropped_by: [u64; fb::DropReason::ENUM_VALUES.len()],
    pub errors: u64,
    /// Never answered: not even dropped by the frontend at the end of the
    /// drain (always 0 unless the frontend lost track of a request).
    pub unanswered: u64,
    /// Answers for a request already answered (always 0 unless a role
    /// misbehaves).
    pub duplicates: u64,
    /// The most a request was handed to the frontend after it was due.
    pub behind_max: Nanos,
}

impl Tally {
    /// `o`'s requests added to these.
    fn add(&mut self, o: &Tally) {
        (self.sent, self.ok, self.late, self.dropped) =
            (self.sent + o.sent, self.ok + o.ok, self.late + o.late, self.dropped + o.dropped);
        for (a, b) in self.dropped_by.iter_mut().zip(o.dropped_by) {
            *a += b;
        }
        (self.errors, self.unanswered, self.duplicates) =
            (self.errors + o.errors, self.unanswered + o.unanswered, self.duplicates + o.duplicates);
        self.behind_max = self.behind_max.max(o.behind_max);
    }

    pub fn bad(&self) -> u64 {
        self.late + self.dropped + self.errors + self.unanswered
    }

    pub fn bad_rate(&self) -> f64 {
        self.bad() as f64 / self.sent.max(1) as f64
    }

    /// The reasons requests were dropped for, with their counts.
    pub fn drops(&self) -> impl Iterator<Item = (fb::DropReason, u64)> + '_ {
        fb::DropReason::ENUM_VALUES.into_iter().zip(self.dropped_by).filter(|&(_, n)| n > 0)
    }
}

/// Where the measured ok answers' time went beyond the plan, in µs, one
/// entry per answer: start lag (batch start − `exec_at`) and completion
/// (the clients hold the answer − the batch finished). In process there is
/// no ingress or egress to speak of.
#[derive(Clone, Debug, Default)]
pub struct Parts {
    pub start_lag_us: Vec<u32>,
    pub completion_us: Vec<u32>,
    pub longest: Longest,
    /// The clients' loop's working time (its own parts and the hosted
    /// shards' rounds, in the turns that did work) summed over the
    /// measured window, ns: over the window's length, the share of its
    /// core the work takes at this rate. Below capacity the rate over that
    /// share bounds capacity from below (a turn that did a little work
    /// counts whole, its fixed part too: measured 0.57 at 200,000 r/s and
    /// 0.81 at 400,000 on stress-64 with 4,000 GPUs). The turns that found
    /// nothing to do are left out: within the lead of the next arrival the
    /// loop turns again at once (`lead.rs`), and counted they made the
    /// share read 0.94-0.99 at any rate past a few hundred thousand a
    /// second. Of several loops, the busiest's.
    pub busy: Nanos,
    /// Bad requests (late, dropped, failed or unanswered) by the second of
    /// the measured window they arrived in: a probe that collapsed shows
    /// when, and whether it came back.
    pub bad_by_second: Vec<u64>,
}

/// The longest one turn of the clients' loop spent in each of its parts
/// in the measured window, ns: the clients' own work (answers in, requests
/// out), the round of the scheduler-side shards it hosts, and the rest of
/// the turn: yielding to the executor after a busy round, or parked until
/// the next timer or message after an idle one. A stall inside the engine
/// shows in the first two; one that takes the core away, in the third or
/// fourth (a long park is also what an idle loop does at a low rate).
#[derive(Clone, Copy, Debug, Default)]
pub struct Longest {
    pub clients: Nanos,
    pub shards: Nanos,
    pub yielded: Nanos,
    pub parked: Nanos,
}

impl Parts {
    /// Another loop's parts added to these: its answers', its longest turns
    /// where longer, its busy time where busier.
    fn add(&mut self, o: Parts) {
        self.start_lag_us.extend(o.start_lag_us);
        self.completion_us.extend(o.completion_us);
        let (l, m) = (&mut self.longest, o.longest);
        (l.clients, l.shards) = (l.clients.max(m.clients), l.shards.max(m.shards));
        (l.yielded, l.parked) = (l.yielded.max(m.yielded), l.parked.max(m.parked));
        self.busy = self.busy.max(o.busy);
        for (i, b) in o.bad_by_second.into_iter().enumerate() {
            add_at(&mut self.bad_by_second, i, b);
        }
    }

    /// A bad request that arrived `since` into the measured window.
    fn bad_at(&mut self, since: Nanos) {
        add_at(&mut self.bad_by_second, (since / 1_000_000_000) as usize, 1);
    }

    /// The `q` quantile (0..=1) of `v`, in µs (0 when empty).
    pub fn quantile(v: &mut [u32], q: f64) -> u32 {
        if v.is_empty() {
            return 0;
        }
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        *v.select_nth_unstable(i).1
    }
}

pub struct Outcome {
    pub tally: Tally,
    pub parts: Parts,
    pub engine: EngineReport,
    /// The core each shard ran on: the clients' shards first.
    pub cores: Vec<usize>,
}

/// What a client sends: a model's or a query's name.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    Model(&'a str),
    Query(&'a str),
}

impl<'a> Target<'a> {
    /// The request's `model` and `query` fields: one of them named.
    fn names(self) -> (Option<&'a str>, Option<&'a str>) {
        match self {
            Target::Model(m) => (Some(m), None),
            Target::Query(q) => (None, Some(q)),
        }
    }
}

/// A client's request `id` for `target` with `slo_ns`, app `app`, and an
/// input of `floats` floats 0, 1, 2, ... whose first is `first` when given
/// (a dynamic model's work, or a query's own value: what its stages spawn
/// depends on their input).
pub fn client_request(
    id: u64,
    target: Target<'_>,
    slo_ns: Nanos,
    app: u32,
    floats: usize,
    first: Option<f32>,
) -> fb::InferRequest {
    let mut r = fb::InferRequest::default();
    fill_request(&mut r, id, target, slo_ns, app, floats, first);
    r
}

/// `r` becomes `client_request`'s request, in the buffers it has (a
/// generator reusing one request allocates nothing per request once they
/// have grown). Its `path_ns` is left as it is.
pub fn fill_request(
    r: &mut fb::InferRequest,
    id: u64,
    target: Target<'_>,
    slo_ns: Nanos,
    app: u32,
    floats: usize,
    first: Option<f32>,
) {
    let name = |s: &mut Option<String>, to: Option<&str>| match to {
        Some(to) => {
            let s = s.get_or_insert_default();
            s.clear();
            s.push_str(to);
        }
        None => *s = None,
    };
    let (model, query) = target.names();
    name(&mut r.model, model);
    name(&mut r.query, query);
    (r.id, r.slo_ns, r.app, r.app_name) = (id, slo_ns, app, None);
    let inputs = r.inputs.get_or_insert_default();
    inputs.truncate(1);
    if inputs.is_empty() {
        inputs.push(fb::Tensor::default());
    }
    let t = &mut inputs[0];
    (t.name, t.dtype) = (None, fb::DType::F32);
    let shape = t.shape.get_or_insert_default();
    shape.clear();
    shape.push(floats as i64);
    let data = t.data.get_or_insert_default();
    data.clear();
    input_bytes(data, floats, first);
}

/// `buf` becomes the little-endian bytes of `floats` floats 0, 1, 2, ...
/// whose first is `first` when given. `buf` is empty or what an earlier
/// call left.
fn input_bytes(buf: &mut Vec<u8>, floats: usize, first: Option<f32>) {
    // The floats 0, 1, 2, ... are written once per length: only the first
    // one changes from request to request.
    if buf.len() != floats * 4 {
        buf.clear();
        buf.extend((0..floats).flat_map(|i| (i as f32).to_le_bytes()));
    }
    if let Some(x) = buf.first_chunk_mut::<4>() {
        *x = first.unwrap_or(0.0).to_le_bytes();
    }
}

/// `client_request`'s request as the frontend admits it, borrowing the
/// target's name and the input's bytes: nothing allocated.
fn borrowed_request<'a>(id: u64, target: Target<'a>, slo_ns: Nanos, app: u32, data: &'a [u8]) -> ClientRequest<'a> {
    let (model, query) = target.names();
    let (model, query) = (model.map(Cow::Borrowed), query.map(Cow::Borrowed));
    let input = Input { dtype: fb::DType::F32, elements: Some((data.len() / 4) as i64), data: Cow::Borrowed(data) };
    ClientRequest { id, model, query, app, app_name: None, slo_ns, path_ns: 0, tensors: 1, input: Some(input) }
}

/// Runs `load` on an engine serving `scenario` under `policy` whose clients
/// are in process (`cfg.frontend_shards` loops of them), and reports what
/// they saw. The scheduler-side shards pinned to a clients' core run in
/// that clients' event loop.
pub fn run(scenario: &Scenario, policy: PolicyKind, cfg: &EngineConfig, load: Load) -> Result<Outcome, EngineError> {
    let Back { sched, table, clock, stop, progress, fronts, cores, node, cfg } = start_back(scenario, policy, cfg)?;
    let loops = fronts.len();
    let spawned: Result<Vec<_>, _> = fronts
        .into_iter()
        .enumerate()
        .map(|(k, Front { ring, doorbell, hosted })| {
            let (scenario, table, cfg, clock) = (scenario.clone(), table.clone(), cfg.clone(), clock.clone());
            let (halt, progress) = (Arc::clone(&stop), Arc::clone(&progress));
            let core = cores[FRONTEND_SHARD + k];
            shard_executor(Placement::Fixed(core), &format!("baton-clients-{k}")).spawn(move || async move {
                let rhythm = Rhythm::new(doorbell.on_shard(), cfg.poll);
                let shards = build_hosted(hosted, &scenario, &table, &cfg, &clock, node)?;
                let mut shards = Hosting::new(shards, &clock, &halt, &rhythm.bell(), &progress);
                let fe = Frontend::new(k as u32, cfg.frontend_capacity, clock.origin_unix_ns(), cfg.reserve_floor)
                    .with_max_waiting(cfg.max_waiting)
                    .shedding_when_behind(cfg.shed_when_behind)
                    .shedding_aged(cfg.shed_aged_share);
                let mut gen = Generator::new(&scenario, &table, load, (k, loops));
                let seen = gen.drive(fe, &table, &clock, Link::Ring(ring), rhythm, &mut shards).await;
                Ok((seen, shards.reports()))
            })
        })
        .collect();
    let mut engine = EngineReport::default();
    let handles = match spawned {
        Ok(h) => h,
        Err(e) => {
            Back::stop(sched, &stop, &mut engine);
            return Err(EngineError::Shard(e.to_string()));
        }
    };
    let (mut tally, mut parts) = (Tally::default(), Parts::default());
    let mut failed = None;
    for h in handles {
        match h.join().expect("a clients' shard does not panic") {
            Ok(((t, p, frontend), reports)) => {
                tally.add(&t);
                parts.add(p);
                engine.frontend.add(&frontend);
                reports.into_iter().for_each(|r| engine.add_shard(r));
            }
            Err(e) => failed = Some(e),
        }
    }
    Back::stop(sched, &stop, &mut engine);
    match failed {
        Some(e) => Err(e),
        None => Ok(Outcome { tally, parts, engine, cores }),
    }
}

/// The longest the generator hands requests to the frontend in one turn of
/// its loop, checked every `SEND_CHECK` requests. A generator catching up
/// after a stall (milliseconds behind, at a million requests a second
/// thousands due at once) would otherwise hold the core for the whole
/// backlog, while the fetches of batches planned to start, and on one core
/// the hosted scheduler's timers, waited behind it. A time, not a count:
/// on a saturated core a count per turn fell behind without bound (turns
/// grew with what they answered, sends did not).
const SEND_BUDGET: Nanos = 100_000;
const SEND_CHECK: usize = 32;

/// A request sent and not yet answered.
#[derive(Clone, Copy)]
struct Due {
    at: Nanos,
    slo: Nanos,
    counted: bool,
    answered: bool,
}

struct Generator {
    arrivals: Arrivals,
    /// This loop's share of the arrivals: those whose index is `.0`
    /// modulo `.1`; `turn` is the next arrival's index modulo `.1`.
    share: (u32, u32),
    turn: u32,
    /// Per model, then per query: name and SLO.
    targets: Vec<(String, Nanos)>,
    models: usize,
    floats: Vec<usize>,
    warmup: Nanos,
    end: Nanos,
    drain: Nanos,
    /// Requests by client id from `base`; answered ones leave the front.
    due: VecDeque<Due>,
    base: u64,
    tally: Tally,
    parts: Parts,
    /// The input of the request being sent (its capacity kept).
    input: Vec<u8>,
}

impl Generator {
    fn new(scenario: &Scenario, table: &ModelTable, load: Load, (k, loops): (usize, usize)) -> Self {
        assert!(k < loops, "loop {k} of {loops}");
        let (warmup, measure) = (load.warmup.as_nanos() as Nanos, load.measure.as_nanos() as Nanos);
        let end = warmup + measure;
        let models = scenario.models.iter().map(|m| (m.spec.name.clone(), m.spec.slo));
        let targets: Vec<_> = models.chain(scenario.queries.iter().map(|q| (q.name.clone(), q.slo))).collect();
        let longest = targets.iter().map(|t| t.1).max().unwrap_or(0);
        // Room for every measured answer's parts from the start: grown
        // while requests are due, a list of millions moved in one turn
        // (milliseconds: the heap's copy, as glibc's threshold for
        // mapping large blocks rises after a run frees one) and stalled
        // the generator it measures.
        let measured = (load.rate_rps * load.measure.as_secs_f64() * 1.05) as usize + 1024;
        let parts = Parts {
            start_lag_us: Vec::with_capacity(measured),
            completion_us: Vec::with_capacity(measured),
            longest: Longest::default(),
            busy: 0,
            bad_by_second: vec![0; load.measure.as_secs_f64().ceil() as usize],
        };
        Self {
            arrivals: Arrivals::new(scenario, load.rate_rps, load.seed, end),
            share: (k as u32, loops as u32),
            turn: 0,
            models: scenario.models.len(),
            floats: table.models.iter().map(|m| m.input_floats).collect(),
            targets,
            warmup,
            end,
            drain: longest + 1_000_000_000,
            // Those in flight: about the rate times the longest SLO.
            due: VecDeque::with_capacity((load.rate_rps * longest as f64 / 1e9) as usize * 2 + 1024),
            base: 0,
            tally: Tally::default(),
            parts,
            input: Vec::new(),
        }
    }

    /// Whether the arrival just drawn is this loop's (of several), and on
    /// to the next.
    fn take_turn(&mut self) -> bool {
        let mine = self.turn == self.share.0;
        self.turn = if self.turn + 1 == self.share.1 { 0 } else { self.turn + 1 };
        mine
    }

    /// Hands the frontend the requests due by `t` (ns from the start), for
    /// at most `SEND_BUDGET` after `now` by `clock`; true when more are due.
    fn send(
        &mut self,
        t: Nanos,
        now: Nanos,
        clock: &Clock,
        fe: &mut Frontend,
        table: &ModelTable,
        out: &mut Outbound,
    ) -> bool {
        let mut sent = 0;
        while self.arrivals.peek().is_some_and(|at| at <= t) {
            sent += 1;
            if sent % SEND_CHECK == 0 && clock.now() - now > SEND_BUDGET {
                return true;
            }
            let (at, src) = self.arrivals.pop().expect("peeked");
            if self.share.1 > 1 && !self.take_turn() {
                // Another loop's: its app and work drawn all the same.
                if let Source::Model(m) = src {
                    self.arrivals.input(m);
                }
                continue;
            }
            let id = self.base + self.due.len() as u64;
            let (target, slo, app, floats, first) = match src {
                Source::Model(m) => {
                    let (app, work) = self.arrivals.input(m);
                    let (name, slo) = &self.targets[m.index()];
                    (Target::Model(name), *slo, app.0, self.floats[m.index()], work)
                }
                Source::Query(q) => {
                    let (name, slo) = &self.targets[self.models + q];
                    let root = table.queries[q].spec.stages[0].model.index();
                    (Target::Query(name), *slo, 0, self.floats[root], Some(id as f32))
                }
            };
            let behind = t - at;
            let counted = at >= self.warmup;
            if counted {
                self.tally.sent += 1;
                self.tally.behind_max = self.tally.behind_max.max(behind);
            }
            self.due.push_back(Due { at, slo, counted, answered: false });
            // Turned away as `serve`'s frontend shard does, before the rest
            // of the request is read. Here the wait is known (how far this
            // loop is behind the request's time): the aged door sees every
            // arrival's, in order.
            let away = match fe.aged(behind, slo) {
                true => Some(Away::Aged),
                false => fe.turning_away(now).then_some(Away::Behind),
            };
            if let Some(why) = away {
                let (model, query) = target.names();
                let answer = fe.turned_away(&RequestHead { id, model, query }, why, table);
                self.answer(t, now, &answer);
                continue;
            }
            // The SLO left: the client's deadline, not the generator's.
            let left = slo.saturating_sub(behind).max(1);
            input_bytes(&mut self.input, floats, first);
            let admitted =
                fe.admit_to_scheduler(now, 0, &mut borrowed_request(id, target, left, app, &self.input), table);
            match admitted {
                Ok(meta) => out.arrivals.push_back(ShardMsg::env(meta)),
                Err(e) => self.answer(t, now, &e),
            }
        }
        false
    }

    /// Counts an answer received at `t` (ns from the start; `now` on the
    /// cluster clock).
    fn answer(&mut self, t: Nanos, now: Nanos, a: &fb::InferResponse) {
        let Some(d) = a.id.checked_sub(self.base).and_then(|i| self.due.get_mut(i as usize)) else {
            self.tally.duplicates += 1;
            return;
        };
        if std::mem::replace(&mut d.answered, true) {
            self.tally.duplicates += 1;
            return;
        }
        if d.counted {
            let (tally, in_slo) = (&mut self.tally, t - d.at <= d.slo);
            match a.status {
                fb::Status::Ok if in_slo => tally.ok += 1,
                fb::Status::Ok => tally.late += 1,
                fb::Status::Dropped => {
                    tally.dropped += 1;
                    tally.dropped_by[a.drop_reason as usize] += 1;
                }
                fb::Status::Error => tally.errors += 1,
            }
            if a.status != fb::Status::Ok || !in_slo {
                self.parts.bad_at(d.at - self.warmup);
            }
            if let (fb::Status::Ok, Some(tm)) = (a.status, &a.timing) {
                let us = |ns: Nanos| (ns / 1_000).min(u64::from(u32::MAX)) as u32;
                self.parts.start_lag_us.push(us(tm.started_ns.saturating_sub(tm.exec_at_ns)));
                self.parts.completion_us.push(us(now.saturating_sub(tm.finished_ns)));
            }
        }
        while self.due.front().is_some_and(|d| d.answered) {
            self.due.pop_front();
            self.base += 1;
        }
    }

    /// The shard's pump: answers in, requests out, until every request is
    /// answered after the window, or the drain runs out; each round also
    /// drives the scheduler-side `shards` it hosts.
    async fn drive(
        &mut self,
        mut fe: Frontend,
        table: &ModelTable,
        clock: &Clock,
        mut link: Link,
        mut rhythm: Rhythm,
        shards: &mut Hosting,
    ) -> (Tally, Parts, FrontendStats) {
        let (mut incoming, mut answers, mut out) = (Vec::new(), Vec::<Answer>::new(), Outbound::default());
        let mut lead = Lead::default();
        // The roles' times are on the cluster clock; the clients' from the run's start.
        let start = clock.now();
        // When the last measured turn's hosted round ended, and whether it
        // parked: the turn's parts are timed only while requests are due
        // (after, the loop waits for answers).
        let (mut rounded, mut parked) = (None, None);
        loop {
            let now = clock.now();
            let t = now - start;
            let measured = (self.warmup..=self.end).contains(&t);
            if let Some(rounded) = rounded.filter(|_| measured) {
                let longest = &mut self.parts.longest;
                let rest = if parked.is_some() { &mut longest.parked } else { &mut longest.yielded };
                *rest = (*rest).max(now - rounded);
            }
            link.poll(&mut incoming);
            let mut busy = !incoming.is_empty();
            for m in incoming.drain(..) {
                if let Ok(e) = m.into_envelope() {
                    fe.on_message(now, e.msg, table, &mut answers, |e| out.under_way.push_back(ShardMsg::env(e)));
                }
            }
            for (_, a) in &answers {
                if let Some(d) = a.id.checked_sub(self.base).and_then(|i| self.due.get(i as usize)) {
                    crate::prefetch::prefetch(d);
                }
            }
            for (_, a) in answers.iter_mut() {
                self.answer(t, now, a);
                crate::pool::give_answer(a);
            }
            answers.clear();
            busy |= self.send(t, now, clock, &mut fe, table, &mut out);
            if !out.is_empty() {
                link.flush_outbound(&mut out);
                busy = true;
            }
            fe.set_waiting(out.len(), out.oldest_arrival());
            // Answered requests leave the front of `due`: empty, all answered.
            let done = self.arrivals.peek().is_none() && self.due.is_empty();
            if done || t > self.end + self.drain {
                break;
            }
            let mut round = Round { busy, next: self.arrivals.peek().map(|at| start + at) };
            // Three clock reads a turn: its start, the hosted shards' round
            // and the round's end, which times the turn's parts too.
            let worked = clock.now();
            // Hosted shards stop with the engine, after the clients.
            shards.round(&mut round, worked);
            let done = clock.now();
            rounded = measured.then(|| {
                let longest = &mut self.parts.longest;
                longest.clients = longest.clients.max(worked - now);
                longest.shards = longest.shards.max(done - worked);
                if round.busy {
                    self.parts.busy += done - now;
                }
                done
            });
            if lead.again(link.pending()) {
                parked = None;
                continue;
            }
            let pending = || link.pending() || shards.pending();
            parked = lead.end_round(&mut rhythm, clock, done, round, pending).await;
        }
        // What is still held is answered `dropped`, so no role keeps it,
        // and counted so: `unanswered` is what the frontend never held.
        let now = clock.now();
        fe.drop_all(now, table, &mut answers);
        for (_, a) in answers.drain(..) {
            self.answer(now - start, now, &a);
        }
        for d in self.due.iter().filter(|d| d.counted && !d.answered) {
            self.tally.unanswered += 1;
            self.parts.bad_at(d.at - self.warmup);
        }
        (self.tally, std::mem::take(&mut self.parts), fe.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request refilled for another target is the one made fresh for
    /// it, in the buffers it had.
    #[test]
    fn a_refilled_request_is_the_fresh_one_in_the_same_buffers() {
        let mut r = client_request(1, Target::Model("resnet"), 5, 2, 8, Some(3.0));
        r.app_name = Some("an app".into());
        let data = r.inputs.as_ref().unwrap()[0].data.as_ref().unwrap().as_ptr();
        fill_request(&mut r, 2, Target::Query("q"), 7, 0, 4, None);
        assert_eq!(r, client_request(2, Target::Query("q"), 7, 0, 4, None));
        assert_eq!(r.inputs.as_ref().unwrap()[0].data.as_ref().unwrap().as_ptr(), data, "the input's buffer is kept");
        fill_request(&mut r, 3, Target::Model("bert"), 9, 1, 8, Some(0.5));
        assert_eq!(r, client_request(3, Target::Model("bert"), 9, 1, 8, Some(0.5)));
    }
}
