//! The frontend role: the only role that talks to clients. It validates a
//! request (known model and app — by index or by name —, positive SLO, one
//! f32 tensor of the model's input size, and for a dynamic model an input
//! whose work is in range), assigns it a cluster id, keeps its input
//! bytes, and sends only metadata to the scheduler. Answers say the app a
//! request was served as, the subnet (and its accuracy) of a supernet, and
//! a dynamic model's measured solo time. Every request it receives gets exactly one
//! answer: an error at once, or later ok (from a backend's `Results`) or
//! dropped (from the scheduler's or a backend's `Dropped`). Answers for a
//! client that has gone are counted and discarded; the request is still
//! finished, so nothing leaks.
//!
//! Nothing is held forever, whatever the rest of the cluster does: a
//! request still held `grace` after its deadline (its metadata, plan,
//! inputs, results or drop lost between roles) is answered `Lost`; when
//! the scheduler becomes unreachable every request whose input no backend
//! has taken yet is answered `Lost` at once (the rest are in a backend's
//! hands), and when a backend does, every request whose input it took;
//! until the scheduler is back, new requests are refused `Unavailable`.
//! A frontend restarted under the same index starts its ids where the old
//! run's cannot be (`starting_at`), so a late message for an old request
//! never answers a new one. A multi-model query (a request naming a
//! query) is one client request whose stages the frontend runs as
//! requests of its own (`queries.rs`): the client gets one answer for the
//! whole query.
//!
//! A frontend given registered memory (`with_store`) keeps each input
//! there and tells the scheduler where it lies, so a backend can READ it
//! without asking (`fetch.rs`); an input that does not fit is kept here
//! and fetched over TCP. Such inputs are invisible when read, so a
//! frontend losing its scheduler does not answer them `Lost` at once (a
//! backend may have read them): the grace does, if nothing else comes.

use std::borrow::Cow;
use std::collections::HashMap;

use baton_net::rdma::{InputStore, Remote};

use baton_sched::query_run::QueryRun;
use baton_sched::time::Nanos;
use baton_wire::message::RequestHead;
use baton_wire::{clip, fb, Message};

use super::fetch::{answer, input_at};
use super::held::ByIds;
use super::outcomes::Tally;
use super::overload::{Aged, Overload};
use super::queries::{Instance, StageOf};
use super::request::ClientRequest;
use super::reserve::Reserve;
use super::{Addr, Envelope, FRONTEND_SHIFT};
use crate::models::{ModelEntry, ModelTable};
use crate::pool;

/// A client connection, as the runtime numbers them.
pub type ConnId = u64;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrontendStats {
    pub received: u64,
    pub ok: u64,
    /// Of `ok`, answered after the request's deadline.
    pub late: u64,
    pub dropped: u64,
    pub errors: u64,
    /// Answers whose client had disconnected.
    pub orphaned: u64,
    /// Inputs kept for TCP fetch because the registered memory was full.
    pub unregistered: u64,
    /// Results or drops for requests this frontend no longer holds: a second
    /// answer that was refused. 0 unless a role misbehaves or the frontend
    /// answered requests `Lost` itself (past their grace, or with a peer
    /// gone) whose results or drops came after all.
    pub duplicates: u64,
    /// Time kept back from admitted requests' SLOs for the network path
    /// (`reserve.rs`), summed: the scheduler planned each that much earlier.
    pub reserved_ns: u64,
    /// Of `errors`, requests turned away `Overloaded` at the door while the
    /// engine ran behind its plans, or aged (`overload.rs`).
    pub turned_away: u64,
}

impl FrontendStats {
    pub fn answered(&self) -> u64 {
        self.ok + self.dropped + self.errors
    }

    /// Adds another frontend's counts to these.
    pub fn add(&mut self, o: &FrontendStats) {
        let FrontendStats {
            received,
            ok,
            late,
            dropped,
            errors,
            orphaned,
            unregistered,
            duplicates,
            reserved_ns,
            turned_away,
        } = *o;
        self.received += received;
        self.ok += ok;
        self.late += late;
        self.dropped += dropped;
        self.errors += errors;
        self.orphaned += orphaned;
        self.unregistered += unregistered;
        self.duplicates += duplicates;
        self.reserved_ns += reserved_ns;
        self.turned_away += turned_away;
    }
}

#[derive(Debug)]
struct Held {
    conn: ConnId,
    client_id: u64,
    model: u32,
    app: u32,
    /// The sub-cluster whose scheduler it was sent to (its model's when it
    /// was admitted: a model moved since keeps its requests where they are).
    sub: u32,
    arrival: Nanos,
    deadline: Nanos,
    input: Vec<u8>,
    /// A query's stage request: answered to its instance, not the client.
    /// Boxed (only stage requests have one): inline, it made the record
    /// 136 bytes, past the 128 a move copies without a call, and every
    /// move into and out of `held` called `memcpy` (measured: `memmove`
    /// 8.5% of a loaded frontend's core, these moves most of it).
    stage: Option<Box<StageOf>>,
    /// Answered already (its model was unloaded): its results or drop, when
    /// they come, end it without a second answer.
    answered: bool,
    /// The backend that took its input by TCP fetch, once one has.
    fetched_by: Option<u32>,
    /// Where the input lies in registered memory (then `input` is empty).
    slot: Option<Remote>,
}

// Moved without a call (see `Held::stage`).
const _: () = assert!(std::mem::size_of::<Held>() <= 128);

/// A request's input goes back to the shard's pool when its record goes
/// (answered, dropped, lost, or taken by a backend's fetch, which leaves
/// an empty buffer): the next admission reuses it instead of allocating.
impl Drop for Held {
    fn drop(&mut self) {
        // Most have none left: a backend took it with the batch.
        if self.input.capacity() > 0 {
            pool::give_bytes(std::mem::take(&mut self.input));
        }
    }
}

/// How long after its deadline a request is held waiting for an answer
/// from the cluster before it is answered `Lost`, unless set
/// (`with_grace`). Generous: a late result is more use to a client than a
/// drop, and a sound cluster answers every request by its deadline or
/// soon after.
pub const EXPIRY_GRACE: Nanos = 1_000_000_000;

/// Request ids below the frontend's bits.
const SEQ_MASK: u64 = (1 << FRONTEND_SHIFT) - 1;

pub struct Frontend {
    index: u32,
    /// The cluster clock's origin on the Unix clock, which answers carry.
    origin_unix_ns: u64,
    /// What to keep back from each SLO for the path around a batch.
    reserve: Reserve,
    /// The share of arrivals turned away while the engine runs behind its
    /// plans (`overload.rs`), if on.
    overload: Option<Overload>,
    /// Arrivals that waited too much of their SLO to reach the frontend
    /// are turned away (`overload.rs`), if on.
    aged: Option<Aged>,
    next_seq: u64,
    capacity: usize,
    /// Messages waiting to leave for the scheduler (as the shard last
    /// counted them, plus requests admitted since), and how many may wait
    /// before new requests are shed `Overloaded` (`with_max_waiting`).
    waiting: usize,
    max_waiting: usize,
    /// When the oldest request still on its way to the scheduler arrived
    /// (as the shard last looked): a request whose slack is shorter than
    /// that wait is shed at the door (`reaches_scheduler_in_time`).
    waiting_since: Option<Nanos>,
    /// How long past its deadline a request is held (`EXPIRY_GRACE`).
    grace: Nanos,
    /// When held requests are next looked over for ones past their grace.
    next_sweep: Nanos,
    /// The sub-clusters whose scheduler is unreachable; while it is not,
    /// requests for its models are refused `Unavailable`.
    unreachable: Vec<u32>,
    held: ByIds<Held>,
    /// Query instances running (`queries.rs`), by number.
    queries: HashMap<u64, Instance>,
    next_instance: u64,
    /// Stage requests spawned for the scheduler since last taken.
    spawned: Vec<fb::RequestMeta>,
    /// Registered memory for inputs, if one-sided fetch is on.
    store: Option<Box<dyn InputStore>>,
    pub stats: FrontendStats,
    /// Answers by model and outcome, for `/metrics`.
    pub outcomes: Tally,
}

/// An answer for a client connection.
pub type Answer = (ConnId, fb::InferResponse);

/// A request's metadata for its model's sub-cluster's scheduler.
fn to_scheduler(meta: fb::RequestMeta, table: &ModelTable) -> Envelope {
    Envelope { to: table.scheduler_of(meta.model), msg: Message::RequestMeta(meta) }
}

/// Why an arrival was turned away at the door (`overload.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Away {
    /// A share of arrivals, while the engine runs behind its plans.
    Behind,
    /// It waited more than `Aged`'s share of its SLO to reach the
    /// frontend, or an arrival before it did and none since came within
    /// half the share.
    Aged,
}

impl Away {
    fn why(self) -> &'static str {
        match self {
            Away::Behind => "the engine runs behind its plans: a share of arrivals is turned away",
            Away::Aged => {
                "requests wait too much of their SLO to reach the frontend: turned away while the engine catches up"
            }
        }
    }
}

fn error(id: u64, code: fb::ErrorCode, message: String) -> fb::InferResponse {
    fb::InferResponse { id, status: fb::Status::Error, error_code: code, message: Some(message), ..Default::default() }
}

impl Frontend {
    /// Frontend number `index`, holding at most `capacity` requests (beyond
    /// that new requests are refused as overloaded), on a cluster clock
    /// whose origin is `origin_unix_ns` on the Unix clock, keeping back at
    /// least `reserve_floor` of each SLO for the client's network path
    /// (`reserve.rs`).
    pub fn new(index: u32, capacity: usize, origin_unix_ns: u64, reserve_floor: Nanos) -> Self {
        assert!(index < 1 << (64 - FRONTEND_SHIFT), "frontend index {index} does not fit a request id");
        Self {
            index,
            origin_unix_ns,
            reserve: Reserve::new(reserve_floor),
            overload: None,
            aged: None,
            next_seq: 0,
            capacity,
            waiting: 0,
            max_waiting: usize::MAX,
            waiting_since: None,
            grace: EXPIRY_GRACE,
            next_sweep: 0,
            unreachable: Vec::new(),
            held: ByIds::new(SEQ_MASK),
            queries: HashMap::new(),
            next_instance: 0,
            spawned: Vec::new(),
            store: None,
            stats: FrontendStats::default(),
            outcomes: Tally::default(),
        }
    }

    /// Turns a share of arrivals away while the engine runs behind its
    /// plans, if `on` (`overload.rs`).
    pub fn shedding_when_behind(mut self, on: bool) -> Self {
        self.overload = on.then(Overload::default);
        self
    }

    /// Turns away arrivals that waited more than `share` of their SLO to
    /// reach the frontend, where the transport knows the wait
    /// (`overload.rs`); a share of 1 or more turns none away.
    pub fn shedding_aged(mut self, share: f64) -> Self {
        self.aged = Aged::new(share);
        self
    }

    /// Gives ids from `seq` on (below the frontend's bits, wrapping): a
    /// run restarted under the same index starts where its last run's ids
    /// are not, e.g. from the clock.
    pub fn starting_at(mut self, seq: u64) -> Self {
        self.next_seq = seq & SEQ_MASK;
        self
    }

    /// Keeps inputs in `store`'s registered memory, for backends to READ.
    pub fn with_store(mut self, store: Box<dyn InputStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Holds a request at most `grace` past its deadline.
    /// Sheds new requests `Overloaded` while `max` messages wait to reach
    /// the scheduler: when the scheduler (or the link to it) falls behind,
    /// clients learn at once instead of their requests queueing unbounded
    /// on the way, to miss their deadlines there.
    pub fn with_max_waiting(mut self, max: usize) -> Self {
        self.max_waiting = max;
        self
    }

    /// The messages waiting to reach the scheduler, as the shard counts
    /// them after sending what it could, and when the oldest request among
    /// them arrived (`link::Outbound::oldest_arrival`).
    pub fn set_waiting(&mut self, n: usize, since: Option<Nanos>) {
        (self.waiting, self.waiting_since) = (n, since);
    }

    pub fn with_grace(mut self, grace: Nanos) -> Self {
        self.grace = grace;
        self
    }

    pub fn index(&self) -> u32 {
        self.index
    }

    /// Requests held: single requests and queries' stage requests. A
    /// query instance always has one (it ends with its last).
    pub fn held(&self) -> usize {
        debug_assert!(self.queries.is_empty() || !self.held.is_empty(), "a query instance without requests");
        self.held.len()
    }

    /// Query instances running.
    pub fn queries(&self) -> usize {
        self.queries.len()
    }

    /// Stage requests spawned since last asked, for the scheduler.
    pub fn spawned(&mut self) -> std::vec::Drain<'_, fb::RequestMeta> {
        self.spawned.drain(..)
    }

    /// A client request arrives at `now`: its metadata for the scheduler, or
    /// the error to answer at once.
    pub fn admit<'a>(
        &mut self,
        now: Nanos,
        conn: ConnId,
        req: impl Into<ClientRequest<'a>>,
        table: &ModelTable,
    ) -> Result<fb::RequestMeta, Box<fb::InferResponse>> {
        self.admit_request(now, conn, &mut req.into(), table)
    }

    /// `admit`, reading the request in place (it is large, and admission
    /// runs once per request: no copy of it is made); its input's bytes are
    /// taken out of it when it is admitted.
    fn admit_request(
        &mut self,
        now: Nanos,
        conn: ConnId,
        req: &mut ClientRequest<'_>,
        table: &ModelTable,
    ) -> Result<fb::RequestMeta, Box<fb::InferResponse>> {
        self.stats.received += 1;
        let checked = match req.query.is_some() {
            true => self.check_query(req, table),
            false => self.check(req, table),
        };
        let reserved = self.reserve.of(req.slo_ns, req.path_ns);
        let (model, app) = match checked.and_then(|admitted| {
            self.reaches_scheduler_in_time(now, req.slo_ns.saturating_sub(reserved)).map(|()| admitted)
        }) {
            Ok(admitted) => admitted,
            Err((code, why)) => {
                self.stats.errors += 1;
                let answer = error(req.id, code, why);
                self.outcomes.count(key_of(req.model.as_deref(), req.query.as_deref(), table), &answer, false);
                return Err(Box::new(answer));
            }
        };
        // Checked: exactly one tensor. Its bytes are held: an owned
        // request's move, a frame's are copied once, into a reused buffer.
        let input = match req.input.take().map(|t| t.data) {
            Some(Cow::Owned(v)) => v,
            Some(Cow::Borrowed(b)) => {
                let mut v = pool::bytes();
                v.extend_from_slice(b);
                v
            }
            None => Vec::new(),
        };
        let deadline = now.saturating_add(req.slo_ns);
        self.stats.reserved_ns += reserved;
        // The model that runs first: a query's (`model` numbers queries
        // then) is its root stage's, whose sub-cluster gets the request.
        let first = match &req.query {
            Some(_) => table.queries[model as usize].spec.stages[0].model.0,
            None => model,
        };
        let mut held = Held {
            conn,
            client_id: req.id,
            model: first,
            app,
            sub: table.models[first as usize].subcluster,
            arrival: now,
            deadline,
            input,
            stage: None,
            answered: false,
            fetched_by: None,
            slot: None,
        };
        if req.query.is_none() {
            return Ok(self.hold(held, deadline - reserved));
        }
        // A query: its root stage request runs first.
        let instance = self.next_instance;
        self.next_instance += 1;
        let inst = Instance {
            conn,
            client_id: req.id,
            query: model,
            arrival: now,
            slo: req.slo_ns,
            planned: req.slo_ns - reserved,
            run: QueryRun::start(&table.queries[model as usize].spec),
            outputs: Vec::new(),
            failed: false,
        };
        let q = &table.queries[model as usize];
        let (stage, planned) = inst.stage(instance, q, 0);
        self.queries.insert(instance, inst);
        held.stage = Some(Box::new(stage));
        Ok(self.hold(held, planned))
    }

    /// `admit`, its metadata addressed to its model's sub-cluster's
    /// scheduler in `table` (the one `admit` read: where the frontend
    /// records that it went).
    pub fn admit_to_scheduler(
        &mut self,
        now: Nanos,
        conn: ConnId,
        req: &mut ClientRequest<'_>,
        table: &ModelTable,
    ) -> Result<Envelope, Box<fb::InferResponse>> {
        self.admit_request(now, conn, req, table).map(|meta| to_scheduler(meta, table))
    }

    /// Holds a request under a new cluster id; its metadata for the scheduler.
    #[inline]
    fn hold(&mut self, mut held: Held, planned: Nanos) -> fb::RequestMeta {
        let id = (u64::from(self.index) << FRONTEND_SHIFT) | self.next_seq;
        self.next_seq = (self.next_seq + 1) & SEQ_MASK;
        self.waiting += 1;
        if let Some(store) = self.store.as_mut() {
            match store.put(id, &held.input) {
                Ok(at) => (held.slot, held.input) = (Some(at), Vec::new()),
                Err(_) => self.stats.unregistered += 1,
            }
        }
        let (model, app, arrival, input) = (held.model, held.app, held.arrival, held.slot.map(input_at));
        self.held.insert(id, held);
        fb::RequestMeta { id, frontend: self.index, model, app, arrival_ns: arrival, deadline_ns: planned, input }
    }

    /// A query request's (query, app 0), or why it is refused: a known
    /// query, no model named beside it, and its root model's input.
    fn check_query(&self, req: &ClientRequest<'_>, table: &ModelTable) -> Result<(u32, u32), (fb::ErrorCode, String)> {
        use fb::ErrorCode::*;
        let name = req.query.as_deref().unwrap_or("");
        let query = table.find_query(name).ok_or_else(|| (UnknownQuery, format!("no query named `{}`", clip(name))))?;
        if req.model.is_some() {
            return Err((UnknownQuery, format!("the request names query `{}` and a model: name one", clip(name))));
        }
        let q = &table.queries[query as usize];
        if let Some(st) = q.spec.stages.iter().find(|st| !table.models[st.model.index()].loaded) {
            let why =
                format!("query `{}`: its stage `{}` is not loaded", q.spec.name, table.models[st.model.index()].name);
            return Err((Unloaded, why));
        }
        let root = &table.models[q.spec.stages[0].model.index()];
        self.check_input(req, root)?;
        Ok((query, 0))
    }

    /// The request's (model, app), or why it is refused.
    fn check(&self, req: &ClientRequest<'_>, table: &ModelTable) -> Result<(u32, u32), (fb::ErrorCode, String)> {
        use fb::ErrorCode::*;
        let name = req.model.as_deref().unwrap_or("");
        let model = table.find(name).ok_or_else(|| (UnknownModel, format!("no model named `{}`", clip(name))))?;
        let entry = &table.models[model as usize];
        if !entry.loaded {
            return Err((Unloaded, format!("`{}` is not loaded", entry.name)));
        }
        let app = app_of(req, entry).map_err(|why| (UnknownApp, why))?;
        self.check_input(req, entry)?;
        Ok((model, app))
    }

    /// A request arriving at `now` with `planned` ns to its planned
    /// deadline is shed `Overloaded` at the door while the oldest request
    /// on its way to the scheduler has waited as long: queued behind it,
    /// this one would reach the scheduler past its deadline, to be dropped
    /// there after costing the queue and the scheduler their share. Under
    /// a standing backlog (a burst the core did not absorb) that cost is
    /// what kept the backlog standing: every request reached the scheduler
    /// too late and was dropped, while new ones queued (measured: the
    /// stress harness at 1,150,000 r/s held 200,000 to 630,000 requests,
    /// 165 to 550 ms, on their way for the whole run;
    /// perf/results/overload.txt).
    fn reaches_scheduler_in_time(&self, now: Nanos, planned: Nanos) -> Result<(), (fb::ErrorCode, String)> {
        let waited = self.waiting_since.map_or(0, |since| now.saturating_sub(since));
        if waited < planned {
            return Ok(());
        }
        let why = format!(
            "requests wait {} µs to reach the scheduler, longer than this one's SLO leaves ({} µs)",
            waited / 1_000,
            planned / 1_000
        );
        Err((fb::ErrorCode::Overloaded, why))
    }

    /// The SLO, the input tensor for `entry`, and room to hold it.
    fn check_input(&self, req: &ClientRequest<'_>, entry: &ModelEntry) -> Result<(), (fb::ErrorCode, String)> {
        use fb::ErrorCode::*;
        let name = &entry.name;
        if req.slo_ns == 0 {
            return Err((DeadlineInPast, "slo_ns is 0: the deadline has already passed".into()));
        }
        let want = entry.input_floats;
        let (1, Some(t)) = (req.tensors, &req.input) else {
            return Err((BadTensor, format!("{} input tensors, `{name}` takes one", req.tensors)));
        };
        if t.dtype != fb::DType::F32 {
            return Err((BadTensor, format!("input is {:?}, `{name}` takes F32", t.dtype)));
        }
        let data = &t.data[..];
        // The decoder has checked that the bytes match the shape; a tensor
        // built in process is checked here too. A shape whose product
        // overflows fits no model.
        if t.elements != Some(want as i64) || data.len() != want * 4 {
            let elements = t.elements.map_or_else(|| "too many to count".into(), |e| e.to_string());
            return Err((
                BadTensor,
                format!("input has {elements} floats ({} bytes), `{name}` takes {want}", data.len()),
            ));
        }
        if let Some(d) = &entry.dynamic {
            // The work is the first float; the rest is not looked at here.
            let first = data.first_chunk::<4>().map(|b| f32::from_le_bytes(*b));
            d.work.check(first.as_slice()).map_err(|why| (BadTensor, format!("`{name}`: {why}")))?;
        }
        if self.unreachable.contains(&entry.subcluster) {
            return Err((Unavailable, "the scheduler is unreachable; the frontend is reconnecting".into()));
        }
        if self.held.len() >= self.capacity {
            return Err((Overloaded, format!("frontend holds {} requests, its limit", self.capacity)));
        }
        if self.waiting >= self.max_waiting {
            let why = format!("{} messages wait to reach the scheduler, the most this frontend queues", self.waiting);
            return Err((Overloaded, why));
        }
        Ok(())
    }

    /// A backend asks for the inputs of its batch: those still held, in
    /// order, addressed back to it. A request's input is fetched once (its
    /// plan runs once), so its bytes move out of the store rather than
    /// being copied; a request no longer held, or whose input a backend
    /// has taken already (a plan or fetch delivered twice), is left out.
    pub fn inputs(&mut self, fetch: &fb::FetchInputs) -> Envelope {
        let ids = fetch.requests.as_deref().unwrap_or(&[]);
        // Given back by the backend once it has the inputs (`pool`).
        let (mut requests, mut tensors) = (pool::with_room(ids.len()), pool::with_room(ids.len()));
        for &id in ids {
            if let Some(h) = self.held.get_mut(id).filter(|h| h.fetched_by.is_none()) {
                // A registered input is copied out of its slot (it stays
                // there for a READ that may still come).
                let input = match (h.slot, self.store.as_ref()) {
                    (Some(at), Some(store)) => match store.get(id, at) {
                        Ok(bytes) => bytes,
                        Err(_) => continue,
                    },
                    _ => std::mem::take(&mut h.input),
                };
                h.fetched_by = Some(fetch.backend);
                requests.push(id);
                // No shape (PROTOCOL.md, "Input fetch"): checked at
                // admission, and one allocation less per request.
                tensors.push(fb::Tensor { name: None, dtype: fb::DType::F32, shape: None, data: Some(input) });
            }
        }
        let inputs = fb::Inputs {
            batch_id: fetch.batch_id,
            requests: Some(requests),
            tensors: Some(tensors),
            backend: fetch.backend,
            frontend: self.index,
        };
        Envelope { to: Addr::Backend(fetch.backend), msg: Message::Inputs(inputs) }
    }

    /// The request `id`, once: a second answer, or one for a request this
    /// frontend never held (a misrouted or forged id from a peer), is
    /// refused and counted.
    fn take(&mut self, id: u64) -> Option<Held> {
        let h = self.held.remove(id);
        match (&h, self.store.as_mut()) {
            (None, _) => self.stats.duplicates += 1,
            (Some(Held { slot: Some(at), .. }), Some(store)) => store.release(*at),
            _ => {}
        }
        h
    }

    /// Hints the held records of `ids` into the cache before they are
    /// taken one by one (`crate::prefetch`).
    fn prefetch(&self, ids: &[u64]) {
        for &id in ids {
            self.held.prefetch(id);
        }
    }

    /// A batch's results: one ok answer per request still held.
    pub fn on_results(&mut self, now: Nanos, r: fb::Results, table: &ModelTable, out: &mut Vec<Answer>) {
        // The lists go back to the pool once read; the outputs move into
        // the answers.
        let ids = r.requests.unwrap_or_default();
        let mut outputs = r.outputs.unwrap_or_default();
        let (seen, solo) = (r.seen_ns.unwrap_or_default(), r.solo_ns.unwrap_or_default());
        let (mut each_output, mut each_seen, mut each_solo) = (outputs.drain(..), seen.iter(), solo.iter());
        let around = r.started_ns.saturating_sub(r.exec_at_ns).saturating_add(now.saturating_sub(r.finished_ns));
        if let Some(o) = &mut self.overload {
            o.observe(now, around);
        }
        self.prefetch(&ids);
        let mut held = false;
        for &id in &ids {
            let (output, seen_ns, solo_ns) =
                (each_output.next(), each_seen.next().copied().unwrap_or(0), each_solo.next().copied().unwrap_or(0));
            let Some(h) = self.take(id).filter(|h| !h.answered) else { continue };
            held = true;
            if let Some(stage) = h.stage.as_deref() {
                let output = output.and_then(|t| t.data).unwrap_or_default();
                self.stage_ended(now, *stage, Ok(output), table, out);
                continue;
            }
            let subnets = table.models.get(h.model as usize).map_or(&[][..], |m| &m.subnets);
            // A subnet is reported only for a supernet; a plan naming none
            // ran its most accurate, as the simulator counts it.
            let subnet = r.subnet.or(subnets.len().checked_sub(1).map(|s| s as u16)).filter(|_| !subnets.is_empty());
            let accuracy = subnet.and_then(|s| subnets.get(usize::from(s))).map_or(0.0, |s| s.accuracy as f32);
            self.stats.ok += 1;
            self.stats.late += u64::from(now > h.deadline);
            let timing = fb::Timing {
                queue_ns: now.saturating_sub(h.arrival).saturating_sub(r.exec_ns),
                exec_ns: r.exec_ns,
                batch_size: r.batch_size,
                received_ns: h.arrival,
                seen_ns,
                exec_at_ns: r.exec_at_ns,
                started_ns: r.started_ns,
                finished_ns: r.finished_ns,
                written_ns: now,
                origin_unix_ns: self.origin_unix_ns,
            };
            let answer = fb::InferResponse {
                id: h.client_id,
                status: fb::Status::Ok,
                timing: Some(timing),
                outputs: Some({
                    let mut list = pool::tensors();
                    list.extend(output);
                    list
                }),
                app: h.app,
                subnet,
                accuracy,
                solo_ns,
                ..Default::default()
            };
            self.outcomes.count(h.model as usize, &answer, now > h.deadline);
            out.push((h.conn, answer));
        }
        // One sample per batch (`reserve.rs`), if it answered any request.
        if held {
            self.reserve.observe(around);
        }
        drop(each_output);
        pool::give(outputs);
        pool::give(ids);
        pool::give(seen);
        pool::give(solo);
    }

    /// A query's stage request ended at `now`: with its output, or dropped
    /// for a reason. The first miss answers the client; the instance's
    /// spawns go to the scheduler; its end answers the client if nothing
    /// missed.
    fn stage_ended(
        &mut self,
        now: Nanos,
        st: StageOf,
        outcome: Result<Vec<u8>, fb::DropReason>,
        table: &ModelTable,
        out: &mut Vec<Answer>,
    ) {
        let inst = self.queries.get_mut(&st.instance).expect("a stage request's instance runs until its last ends");
        let q = &table.queries[inst.query as usize];
        let output = match outcome {
            Ok(o) if now <= st.late_at => Ok(o),
            Ok(_) => Err(fb::DropReason::LateStage),
            Err(reason) => Err(reason),
        };
        if let (Err(reason), false) = (output.as_ref(), inst.failed) {
            inst.failed = true;
            self.stats.dropped += 1;
            let stage = &table.models[q.spec.stages[usize::from(st.stage)].model.index()].name;
            let answer = fb::InferResponse {
                id: inst.client_id,
                status: fb::Status::Dropped,
                drop_reason: *reason,
                stage: Some(stage.clone()),
                ..Default::default()
            };
            self.outcomes.count(table.models.len() + inst.query as usize, &answer, false);
            out.push((inst.conn, answer));
        }
        let spawns = inst.ended(q, table, st.stage, output.ok());
        let (conn, client_id, done) = (inst.conn, inst.client_id, inst.run.done());
        let stages: Vec<_> = spawns.iter().map(|(stage, _)| inst.stage(st.instance, q, *stage)).collect();
        for ((stage, input), (of, planned)) in spawns.into_iter().zip(stages) {
            let model = q.spec.stages[stage].model.0;
            let deadline = of.late_at;
            let held = Held {
                conn,
                client_id,
                model,
                app: 0,
                sub: table.models[model as usize].subcluster,
                arrival: now,
                deadline,
                input,
                stage: Some(Box::new(of)),
                answered: false,
                fetched_by: None,
                slot: None,
            };
            let meta = self.hold(held, planned);
            self.spawned.push(meta);
        }
        if done {
            let inst = self.queries.remove(&st.instance).expect("running");
            if !inst.failed {
                let late = now > inst.arrival.saturating_add(inst.slo);
                self.stats.ok += 1;
                self.stats.late += u64::from(late);
                let key = table.models.len() + inst.query as usize;
                let answer = inst.answer(q, table);
                self.outcomes.count(key, &answer, late);
                out.push((conn, answer));
            }
        }
    }

    /// Requests dropped by the scheduler or lost with a backend.
    pub fn on_dropped(&mut self, now: Nanos, d: fb::Dropped, table: &ModelTable, out: &mut Vec<Answer>) {
        let ids = d.requests.unwrap_or_default();
        self.prefetch(&ids);
        for id in ids {
            let Some(h) = self.take(id).filter(|h| !h.answered) else { continue };
            if let Some(stage) = h.stage.as_deref() {
                self.stage_ended(now, *stage, Err(d.reason), table, out);
                continue;
            }
            self.stats.dropped += 1;
            let answer = fb::InferResponse {
                id: h.client_id,
                status: fb::Status::Dropped,
                drop_reason: d.reason,
                message: d.message.clone(),
                ..Default::default()
            };
            self.outcomes.count(h.model as usize, &answer, false);
            out.push((h.conn, answer));
        }
    }

    /// A message from another role at `now`: answers for clients go to
    /// `answers`, what it causes for other roles (a batch's inputs, query
    /// stages spawned) to `send`. False, and nothing done, for a kind no
    /// role sends a frontend.
    pub fn on_message(
        &mut self,
        now: Nanos,
        msg: Message,
        table: &ModelTable,
        answers: &mut Vec<Answer>,
        mut send: impl FnMut(Envelope),
    ) -> bool {
        match msg {
            Message::Results(r) => self.on_results(now, r, table, answers),
            Message::Dropped(d) => self.on_dropped(now, d, table, answers),
            Message::FetchInputs(f) => {
                send(self.inputs(&f));
                pool::give_some(f.requests);
            }
            Message::RdmaConnect(c) if !c.answer => send(answer(self.store.as_deref_mut(), self.index, &c)),
            _ => return false,
        }
        for meta in self.spawned.drain(..) {
            send(to_scheduler(meta, table));
        }
        true
    }

    /// When `on_timeout` next has work: the next look for requests held
    /// past their grace, while any are held.
    pub fn next_timeout(&self) -> Option<Nanos> {
        (!self.held.is_empty()).then_some(self.next_sweep)
    }

    /// Answers `Lost` every request held `grace` past its deadline. Looks
    /// every quarter grace (at least every millisecond): a request is
    /// answered at most a quarter grace later than its grace allows.
    pub fn on_timeout(&mut self, now: Nanos, table: &ModelTable, out: &mut Vec<Answer>) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + (self.grace / 4).max(1_000_000);
        let grace = self.grace;
        let lost = self.held_where(|h| h.deadline.saturating_add(grace) <= now);
        let why = format!("no answer from the cluster within {} ms after its deadline", grace / 1_000_000);
        self.lose(now, lost, why, table, out);
    }

    /// A peer role became unreachable at `now`. The scheduler: every
    /// request whose input no backend has taken is answered `Lost` (its
    /// metadata or plan may be gone with it; the rest are in backends'
    /// hands). A backend: every request whose input it took. A frontend:
    /// nothing here depends on it.
    pub fn peer_lost(&mut self, now: Nanos, peer: Addr, table: &ModelTable, out: &mut Vec<Answer>) {
        let (lost, why) = match peer {
            Addr::Scheduler(k) => {
                if !self.unreachable.contains(&k) {
                    self.unreachable.push(k);
                }
                let untaken = |h: &Held| h.sub == k && h.fetched_by.is_none() && h.slot.is_none();
                (self.held_where(untaken), "the scheduler became unreachable".into())
            }
            Addr::Backend(b) => {
                if let Some(store) = self.store.as_mut() {
                    store.forget(b);
                }
                (self.held_where(|h| h.fetched_by == Some(b)), format!("backend {b} became unreachable holding it"))
            }
            Addr::Frontend(_) => return,
        };
        self.lose(now, lost, why, table, out);
    }

    /// A peer role is reachable (again): the scheduler takes
    /// requests again.
    pub fn peer_joined(&mut self, peer: Addr) {
        if let Addr::Scheduler(k) = peer {
            self.unreachable.retain(|&u| u != k);
        }
    }

    /// The ids of held requests `pick` chooses, oldest first.
    fn held_where(&self, pick: impl Fn(&Held) -> bool) -> Vec<u64> {
        self.held.iter().filter(|(_, h)| pick(h)).map(|(id, _)| id).collect()
    }

    fn lose(&mut self, now: Nanos, ids: Vec<u64>, why: String, table: &ModelTable, out: &mut Vec<Answer>) {
        if ids.is_empty() {
            return;
        }
        let d = fb::Dropped { requests: Some(ids), reason: fb::DropReason::Lost, message: Some(why) };
        self.on_dropped(now, d, table, out);
    }

    /// Answers every request still held as dropped (the engine is stopping).
    pub fn drop_all(&mut self, now: Nanos, table: &ModelTable, out: &mut Vec<Answer>) {
        let ids = self.held_where(|_| true);
        self.on_dropped(
            now,
            fb::Dropped { requests: Some(ids), reason: fb::DropReason::Shed, message: None },
            table,
            out,
        );
        // A failed query spawns nothing, so nothing is left.
        debug_assert!(self.held.is_empty() && self.queries.is_empty() && self.spawned.is_empty());
    }

    /// Model `model` was unloaded (the table says so from now on): every
    /// request of it held here is answered `Unloaded` at once. Its batch
    /// may still run; the request stays held until its results or drop
    /// come, and they end it without a second answer. A query's stage
    /// requests are the query's: they run on, and the query ends as usual.
    pub fn unload(&mut self, model: u32, name: &str, out: &mut Vec<Answer>) {
        for h in self.held.values_mut().filter(|h| h.model == model && h.stage.is_none() && !h.answered) {
            h.answered = true;
            self.stats.errors += 1;
            let answer = error(h.client_id, fb::ErrorCode::Unloaded, format!("`{name}` was unloaded"));
            self.outcomes.count(model as usize, &answer, false);
            out.push((h.conn, answer));
        }
    }

    /// Whether the next arrival at `now` is turned away while the engine
    /// runs behind its plans (`overload.rs`; never unless
    /// `shedding_when_behind`). Ask once per arrival, before reading more
    /// of it than `RequestHead`: turned away, it costs little.
    pub fn turning_away(&mut self, now: Nanos) -> bool {
        self.overload.as_mut().is_some_and(|o| o.turn_away(now))
    }

    /// Whether an arrival with SLO `slo` that waited `waited` before the
    /// frontend read it is turned away as aged (never unless
    /// `shedding_aged`). Ask once per arrival, in the order they came (one
    /// past the share turns those after it away too, `Aged`), before
    /// reading more of it than its head.
    pub fn aged(&mut self, waited: Nanos, slo: Nanos) -> bool {
        self.aged.as_mut().is_some_and(|a| a.turns_away(waited, slo))
    }

    /// The answer to a request turned away (`turning_away`, `aged`), read
    /// no further than its head: counted as received and answered
    /// `Overloaded`.
    pub fn turned_away(&mut self, head: &RequestHead<'_>, why: Away, table: &ModelTable) -> fb::InferResponse {
        self.stats.received += 1;
        self.stats.errors += 1;
        self.stats.turned_away += 1;
        let answer = error(head.id, fb::ErrorCode::Overloaded, why.why().to_string());
        self.outcomes.count(key_of(head.model, head.query, table), &answer, false);
        answer
    }

    /// Counts an answer that found its client gone.
    pub fn orphan(&mut self) {
        self.stats.orphaned += 1;
    }
}

/// The `Tally` key of a request refused at admission: its model, its
/// query, or the key of requests naming nothing known.
fn key_of(model: Option<&str>, query: Option<&str>, table: &ModelTable) -> usize {
    let (m, q) = (table.models.len(), table.queries.len());
    let query = query.and_then(|n| table.find_query(n)).map(|i| m + i as usize);
    let model = || model.and_then(|n| table.find(n)).map(|i| i as usize);
    query.or_else(model).unwrap_or(m + q)
}

/// The app a request names, by index or by name (both: they must agree).
fn app_of(req: &ClientRequest<'_>, entry: &crate::models::ModelEntry) -> Result<u32, String> {
    let name = &entry.name;
    let by_index = || match entry.apps.get(req.app as usize) {
        Some(_) => Ok(req.app),
        None => Err(format!("`{name}` has no app {} (it serves apps 0..{})", req.app, entry.apps.len())),
    };
    let Some(app) = req.app_name.as_deref() else { return by_index() };
    match entry.apps.iter().position(|a| a == app) {
        Some(i) if req.app == 0 || req.app as usize == i => Ok(i as u32),
        Some(i) => Err(format!("app `{}` is app {i} of `{name}`, the request says app {}", clip(app), req.app)),
        None => Err(format!("`{name}` has no app `{}` (it serves {})", clip(app), entry.apps.join(", "))),
    }
}

/// A one-dimensional f32 tensor over little-endian bytes.
pub fn f32_tensor(data: Vec<u8>) -> fb::Tensor {
    debug_assert_eq!(data.len() % 4, 0);
    fb::Tensor { name: None, dtype: fb::DType::F32, shape: Some(vec![(data.len() / 4) as i64]), data: Some(data) }
}

/// A tensor's bytes as f32s (little-endian).
pub fn f32s(data: &[u8]) -> Vec<f32> {
    le_floats(data).collect()
}

/// A tensor's little-endian bytes as f32s in place: on a little-endian
/// host, where the bytes are aligned for f32 (a buffer from the allocator
/// is); None otherwise (read them with `le_floats`).
pub fn as_le_floats(data: &[u8]) -> Option<&[f32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: every bit pattern is a valid f32; `align_to` puts in `mid`
    // only what is aligned for f32, and the floats borrow the bytes.
    let (pre, mid, post) = unsafe { data.align_to::<f32>() };
    (pre.is_empty() && post.is_empty()).then_some(mid)
}

/// A tensor's bytes read as f32s (little-endian), one at a time.
pub fn le_floats(data: &[u8]) -> impl Iterator<Item = f32> + '_ {
    data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// f32s as a tensor's bytes (little-endian).
pub fn le_bytes(xs: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(xs.len() * 4);
    for x in xs {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}
