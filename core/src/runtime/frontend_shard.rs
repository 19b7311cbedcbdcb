//! The frontend shard: the TCP listener (an accept task), the client
//! connections on a socket ring of their own that the pump polls every
//! round (`baton_net::tcp::uring`: no wait for a pass through glommio's
//! reactor to read a request or to write its answer), and the pump that
//! exchanges envelopes with the scheduler shard.
//!
//! A connection's life: frames are read into a `FrameBuf` and handled one
//! by one — an `InferRequest` is admitted (its metadata queued for the
//! scheduler) or answered with an error at once; a frame whose payload
//! does not decode, or of a kind clients do not send, gets a typed error
//! answer and the connection goes on; a bad header gets a `Malformed`
//! answer and the connection closes (the stream cannot be resynchronised).
//! Answers are appended to the connection's `Outbox`, and the ring sends
//! everything pending in one write. While a client leaves more than
//! `MAX_UNSENT` bytes of answers unread, its socket is not read
//! (backpressure); beyond `max_unread` (answers to requests it sent before
//! that), it is not reading at all: the connection is aborted — what it
//! holds dropped, the connection reset — so one client cannot make the
//! frontend buffer without bound, and its answers are orphaned. When a client goes, its requests still finish; their
//! answers are counted as orphaned. Roles never come in here: a
//! frontend process takes its backends on a listener of their own, and
//! only once they prove they hold the cluster secret (`router.rs`).

use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use baton_net::framing::FrameBuf;
use baton_net::tcp::uring::{take_socket, Event, Sockets};
use baton_sched::time::Nanos;
use baton_wire::message::{request_head, RequestHead, View};
use baton_wire::{fb, Kind, Message};
use glommio::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;

use super::gateway::{self, Ask, Inbox, GATEWAY};
use super::lead::{self, Lead, Round};
use super::link::{Link, Outbound, ShardMsg};
use super::park::{Bell, Doorbell, Rhythm};
use super::router::Router;
use super::sched_shard::{self, Hosting};
use super::Progress;
use crate::clock::Clock;
use crate::metrics::Snapshot;
use crate::models::ModelTable;
use crate::pool;
use crate::publish::Published;
use crate::roles::backend::BackendStats;
use crate::roles::frontend::{Answer, Away, ConnId, Frontend, FrontendStats};
use crate::roles::request::ClientRequest;
use crate::roles::{Addr, Envelope};
use baton_net::tcp::conn::{self, Conn};

/// Answer bytes a client may leave unread before its requests stop being read.
const MAX_UNSENT: usize = 8 << 20;

#[derive(Default)]
pub struct Report {
    pub stats: FrontendStats,
    pub connections: u64,
    /// Connections answered `Overloaded` and closed: `max_connections` were open.
    pub refused_connections: u64,
    /// Accepts that failed (out of descriptors) and were retried.
    pub accept_failures: u64,
    /// Connections aborted for leaving more than `max_unread` bytes unread.
    pub unread_closed: u64,
    pub bad_frames: u64,
    pub held_at_stop: u64,
    /// What the scheduler-side shards this shard drove report.
    pub hosted: Vec<sched_shard::Report>,
}

struct Shard {
    fe: Frontend,
    table: Arc<Published<ModelTable>>,
    clock: Clock,
    conns: FxHashMap<ConnId, Rc<Conn>>,
    outbound: Outbound,
    connections: u64,
    refused_connections: u64,
    accept_failures: u64,
    max_unread: usize,
    unread_closed: u64,
    bad_frames: u64,
    /// Wakes the pump when another task (the listener's) leaves it work.
    bell: Bell,
    /// Connections open, and where the gauges are published (this shard's
    /// `slot` of them).
    open: u64,
    progress: Arc<Progress>,
    slot: usize,
    /// Answers given since the tally was last copied to `progress`, and
    /// when to copy it next (only with several frontend shards).
    tally_dirty: bool,
    tally_due: Nanos,
    /// What the KServe gateway asks, when it runs (`gateway.rs`).
    gateway: Option<Inbox>,
    /// Connections accepted and not yet on the socket ring, with their numbers.
    accepted: Vec<(ConnId, OwnedFd)>,
}

/// Gateway asks handled in one round, at most: the sockets get their turn.
const ASKS_PER_ROUND: usize = 4096;

/// How often, at most, a busy frontend shard copies its answers' tally for
/// `/metrics` when there are several.
const TALLY_PERIOD: Nanos = 10_000_000;

impl Shard {
    /// Publishes the gauges (requests held, connections open).
    fn publish(&self) {
        self.progress.set_frontend(self.slot, self.fe.held() as u64, self.open);
    }

    /// Copies the tally for the first shard's `/metrics` when there are
    /// several frontend shards: at most every `TALLY_PERIOD` while busy,
    /// and before the shard may park (`idle`), so a scrape sees every
    /// answer of an idle shard.
    fn publish_tally(&mut self, idle: bool) {
        if !self.tally_dirty || self.progress.frontends.len() < 2 {
            return;
        }
        let now = self.clock.now();
        if idle || now >= self.tally_due {
            self.progress.set_tally(self.slot, &self.fe.outcomes);
            self.tally_dirty = false;
            self.tally_due = now + TALLY_PERIOD;
        }
    }

    fn answer(&mut self, answers: &mut Vec<Answer>) {
        self.tally_dirty |= !answers.is_empty();
        // Encoded where they lie (an answer is 200 bytes: moving each out
        // of the list and into a `Message` cost as much as its encoding's
        // copies), then cleared.
        for (conn, a) in answers.iter_mut() {
            let conn = *conn;
            if conn == GATEWAY {
                let reply = self.gateway.as_mut().and_then(|g| g.replies.remove(&a.id));
                if reply.is_none_or(|r| r.send(std::mem::take(a)).is_err()) {
                    self.fe.orphan();
                }
                continue;
            }
            match self.conns.get(&conn) {
                Some(c) if c.out.borrow().len_bytes() > self.max_unread => {
                    let c = Rc::clone(c);
                    self.cut_off(conn, &c);
                    self.fe.orphan();
                }
                Some(c) if !c.closed.get() => {
                    if let Err(e) = c.send_answer(a) {
                        // The outputs do not fit a frame: the answer becomes an error.
                        let why = format!("the answer does not fit a frame: {e}");
                        let mut err = error_answer(fb::ErrorCode::Internal, why);
                        if let Message::InferResponse(r) = &mut err {
                            r.id = a.id;
                        }
                        send_small(c, &err);
                    }
                    pool::give_answer(a);
                }
                _ => self.fe.orphan(),
            }
        }
        answers.clear();
    }

    /// Aborts connection `id`, whose client left more than `max_unread`
    /// bytes of answers unread: what it holds is dropped, so one client
    /// cannot make the frontend buffer without bound.
    fn cut_off(&mut self, id: ConnId, conn: &Conn) {
        conn.abort();
        self.conns.remove(&id);
        self.unread_closed += 1;
    }

    /// A request arriving at `now`, turned away unread while the engine
    /// runs behind (`Frontend::turning_away`): its head is all that is
    /// read, so a request turned away costs a fraction of one served.
    /// False to read it whole (also when its head does not read: the
    /// whole read then answers the typed error).
    fn turned_away(&mut self, now: Nanos, conn: &Conn, payload: &[u8], table: &ModelTable) -> bool {
        if !self.fe.turning_away(now) {
            return false;
        }
        let Some(head) = request_head(payload) else { return false };
        let answer = self.fe.turned_away(&head, Away::Behind, table);
        send_small(conn, &Message::InferResponse(answer));
        true
    }

    /// Puts the connections accepted since the last round on the socket
    /// ring, and handles what its sockets did; whether anything happened.
    fn take_sockets(&mut self, sockets: &mut Sockets, table: &Published<ModelTable>) -> bool {
        let accepted = std::mem::take(&mut self.accepted);
        let mut busy = !accepted.is_empty();
        for (id, fd) in accepted {
            match sockets.adopt(id, fd, FrameBuf::default()) {
                Ok(conn) => {
                    self.conns.insert(id, conn);
                }
                Err(_) => {
                    self.accept_failures += 1;
                    self.open -= 1;
                    self.publish();
                }
            }
        }
        if sockets.ready() {
            busy = true;
            let pinned = table.pin();
            let clock = self.clock.clone();
            let mut at = None;
            let mut now = || *at.get_or_insert_with(|| clock.now());
            sockets.reap(|ev| self.on_socket(&mut now, ev, &pinned));
        }
        busy
    }

    /// What happened on the client sockets (`Sockets::reap`); `now` is read
    /// once, after the ring's completions were taken (every frame read
    /// arrived by then).
    fn on_socket(&mut self, now: &mut dyn FnMut() -> Nanos, ev: Event<'_>, table: &ModelTable) {
        match ev {
            Event::Read { id, conn, buf } => self.on_read(now(), id, conn, buf, table),
            Event::Ended { id } => {
                self.conns.remove(&id);
            }
            Event::Gone { id } => {
                self.conns.remove(&id);
                self.open -= 1;
                self.publish();
            }
        }
    }

    /// The frames a read of connection `id` completed, in order. A bad
    /// header closes the connection after its `Malformed` answer.
    fn on_read(&mut self, now: Nanos, id: ConnId, conn: &Conn, buf: &mut FrameBuf, table: &ModelTable) {
        loop {
            let raw = match buf.next_raw() {
                Ok(Some(raw)) => raw,
                Ok(None) => break,
                Err(e) => {
                    self.bad_frames += 1;
                    send_small(conn, &error_answer(fb::ErrorCode::Malformed, format!("{e}; closing the connection")));
                    self.conns.remove(&id);
                    conn.close();
                    return;
                }
            };
            if raw.kind == Kind::InferRequest && self.turned_away(now, conn, raw.payload, table) {
                continue;
            }
            match raw.view() {
                Ok(msg) => self.on_frame(now, conn, id, msg, table),
                Err(e) => {
                    self.bad_frames += 1;
                    send_small(conn, &error_answer(fb::ErrorCode::Malformed, e.to_string()));
                }
            }
        }
        // The errors and refusals answered here count against the bound as
        // the answers `answer` queues do (a client that floods requests
        // turned away, and reads nothing, is cut off as well).
        if conn.out.borrow().len_bytes() > self.max_unread && !conn.closed.get() {
            self.cut_off(id, conn);
        }
    }

    /// One frame from connection `conn`, read in place at `now`: a request
    /// is admitted from the frame's bytes, by `table` (the read's pin of
    /// the published one).
    fn on_frame(&mut self, now: Nanos, conn: &Conn, id: ConnId, msg: View<'_>, table: &ModelTable) {
        match msg {
            View::InferRequest(req) => {
                let mut req = ClientRequest::from(req);
                let admitted = self.fe.admit_to_scheduler(now, id, &mut req, table);
                match admitted {
                    Ok(meta) => self.outbound.arrivals.push_back(ShardMsg::env(meta)),
                    Err(e) => send_small(conn, &Message::InferResponse(*e)),
                }
            }
            View::Owned(Message::ModelLoad(m)) => self.repository(conn, m.id, m.name, true),
            View::Owned(Message::ModelUnload(m)) => self.repository(conn, m.id, m.name, false),
            other => {
                let kind = match other {
                    View::Owned(m) => m.kind(),
                    _ => Kind::InferResponse,
                };
                let why = format!("{kind:?} is not a message clients send");
                send_small(conn, &error_answer(fb::ErrorCode::UnexpectedKind, why));
            }
        }
    }

    /// A client's load (or unload) of model `name`, answered on `conn`
    /// under `id`; an unload answers the model's held requests too.
    fn repository(&mut self, conn: &Conn, id: u64, name: Option<String>, load: bool) {
        let name = name.unwrap_or_default();
        let mut answers = Vec::new();
        let answer = match self.set_loaded(&name, load, &mut answers) {
            Ok(()) => fb::InferResponse { id, status: fb::Status::Ok, ..Default::default() },
            Err(p) => fb::InferResponse {
                id,
                status: fb::Status::Error,
                error_code: fb::ErrorCode::UnknownModel,
                message: Some(p.message),
                ..Default::default()
            },
        };
        self.answer(&mut answers);
        send_small(conn, &Message::InferResponse(answer));
    }

    /// Loads or unloads model `name`; an unload answers its held requests.
    fn set_loaded(
        &mut self,
        name: &str,
        load: bool,
        answers: &mut Vec<Answer>,
    ) -> Result<(), baton_net::kserve::Problem> {
        let changed = gateway::set_loaded(&self.table, name, load)?;
        if let (Some(m), false) = (changed, load) {
            self.fe.unload(m, name, answers);
        }
        Ok(())
    }

    /// What the gateway asks: see `gateway.rs`.
    fn on_ask(&mut self, ask: Ask, answers: &mut Vec<Answer>) {
        let now = self.clock.now();
        match ask {
            Ask::Infer(req, reply) => {
                let id = req.id;
                if self.fe.turning_away(now) {
                    let head = RequestHead { id, model: req.model.as_deref(), query: req.query.as_deref() };
                    let fe = &mut self.fe;
                    let _ = reply.send(self.table.read(|t| fe.turned_away(&head, Away::Behind, t)));
                    return;
                }
                let admitted = self.table.read(|t| self.fe.admit_to_scheduler(now, GATEWAY, &mut req.into(), t));
                match admitted {
                    Ok(meta) => {
                        let g = self.gateway.as_mut().expect("asks come from the gateway");
                        let earlier = g.replies.insert(id, reply);
                        debug_assert!(earlier.is_none(), "the door numbers requests once");
                        self.outbound.arrivals.push_back(ShardMsg::env(meta));
                    }
                    Err(e) => {
                        let _ = reply.send(*e);
                    }
                }
            }
            Ask::Repository(name, load, done) => {
                let _ = done.send(self.set_loaded(&name, load, answers));
            }
            Ask::Scrape(tx) => {
                // Every frontend shard's answers and gauges, this one's as of now.
                self.publish();
                let progress = &self.progress;
                let several = progress.frontends.len() > 1;
                if several {
                    progress.set_tally(self.slot, &self.fe.outcomes);
                }
                let merged = several.then(|| progress.tally());
                let tally = merged.as_ref().unwrap_or(&self.fe.outcomes);
                let (held, open) = (progress.held(), progress.connections_open());
                let snap = self.table.read(|t| Snapshot::take(t, tally, held, open, &progress.gauges, now));
                let _ = tx.send(Ok(snap.render()));
            }
        }
    }

    /// Takes what the gateway asked since the last round.
    /// A peer role's connection opened or closed (`Frontend::peer_lost`).
    fn on_peer(&mut self, peer: Addr, up: bool, answers: &mut Vec<Answer>) {
        if up {
            return self.fe.peer_joined(peer);
        }
        let now = self.clock.now();
        let fe = &mut self.fe;
        self.table.read(|t| fe.peer_lost(now, peer, t, answers));
    }

    /// A backend's or a scheduler's totals from another process, for
    /// `/metrics` (`sched_shard::backend_totals`); each sub-cluster's
    /// scheduler has a slot of its own, summed when rendered.
    fn on_totals(&mut self, st: &fb::Stats) {
        let gauges = &self.progress.gauges;
        match st.backend {
            Some(b) => {
                let mut totals = BackendStats {
                    batches: st.batches,
                    requests: st.requests,
                    busy_ns: st.busy_ns,
                    ..Default::default()
                };
                for (slot, &n) in totals.sizes.iter_mut().zip(st.sizes.as_deref().unwrap_or(&[])) {
                    *slot = n;
                }
                gauges.store_backend(b as usize, &totals);
            }
            None => gauges.store_decisions(st.subcluster as usize, st.decisions),
        }
    }

    /// Answers `Lost` what has been held past its grace at `now`, when it
    /// is time to look.
    fn expire(&mut self, now: Nanos, answers: &mut Vec<Answer>) {
        if self.fe.next_timeout().is_some_and(|t| t <= now) {
            let fe = &mut self.fe;
            self.table.read(|t| fe.on_timeout(now, t, answers));
        }
    }

    fn on_asks(&mut self, answers: &mut Vec<Answer>) -> bool {
        let asks: Vec<Ask> = match &self.gateway {
            Some(g) => g.rx.try_iter().take(ASKS_PER_ROUND).collect(),
            None => return false,
        };
        let any = !asks.is_empty();
        for ask in asks {
            self.on_ask(ask, answers);
        }
        any
    }

    fn asked(&self) -> bool {
        self.gateway.as_ref().is_some_and(|g| !g.rx.is_empty())
    }

    /// A message from the cluster, taken at `now`, read by `table`.
    fn on_envelope(&mut self, now: Nanos, e: Envelope, table: &ModelTable, answers: &mut Vec<Answer>) {
        let s = &mut *self;
        let out = &mut s.outbound.under_way;
        let send = |e| out.push_back(ShardMsg::env(e));
        if !s.fe.on_message(now, e.msg, table, answers, send) {
            s.bad_frames += 1;
        }
    }
}

/// Sends an answer without outputs: a few dozen bytes always fit a frame.
fn send_small(conn: &Conn, m: &Message) {
    conn.send(m).expect("an answer without outputs fits a frame");
}

fn error_answer(code: fb::ErrorCode, message: String) -> Message {
    Message::InferResponse(fb::InferResponse {
        status: fb::Status::Error,
        error_code: code,
        message: Some(message),
        ..Default::default()
    })
}

/// What a frontend shard is given.
pub struct Setup {
    /// The frontend's number in the cluster (`Addr::Frontend`).
    pub index: u32,
    /// Its slot among this process's frontend shards (`Progress`).
    pub slot: usize,
    /// Registered memory for inputs (one-sided fetch), if on.
    pub store: Option<Box<dyn baton_net::rdma::InputStore>>,
    pub listen: SocketAddr,
    pub addr_tx: mpsc::Sender<std::io::Result<SocketAddr>>,
    pub table: Arc<Published<ModelTable>>,
    pub capacity: usize,
    /// Messages that may wait to reach the scheduler before new requests
    /// are shed (`Frontend::with_max_waiting`).
    pub max_waiting: usize,
    /// Turn arrivals away while the engine runs behind (`EngineConfig`).
    pub shed_when_behind: bool,
    /// Connections open at most (clients and peers); more are refused.
    pub max_connections: u64,
    /// Answer bytes a client may leave unread before it is cut off.
    pub max_unread: usize,
    pub reserve_floor: Nanos,
    pub clock: Clock,
    pub stop: Arc<AtomicBool>,
    pub progress: Arc<Progress>,
    /// The shard's doorbell and busy-poll budget (`park.rs`).
    pub doorbell: Doorbell,
    pub poll: Duration,
    /// The KServe gateway's inbox, when one runs.
    pub gateway: Option<Inbox>,
}

/// Runs the frontend shard until its stop, driving the scheduler-side
/// shards `hosted` (pinned to its core, with their rings) in its own
/// event loop, round by round beside its pump (`sched_shard::Pump`).
pub async fn run(
    setup: Setup,
    mut link: Link,
    router: Option<Rc<Router>>,
    hosted: Vec<(sched_shard::State, Link)>,
) -> Report {
    let Setup {
        index,
        slot,
        store,
        listen,
        addr_tx,
        table,
        capacity,
        max_waiting,
        shed_when_behind,
        max_connections,
        max_unread,
        reserve_floor,
        clock,
        stop,
        progress,
        doorbell,
        poll,
        gateway,
    } = setup;
    // A frontend process's peers are on its router's ring: both rings
    // signal one eventfd, which a parked shard waits on.
    let mut sockets = match Sockets::new(MAX_UNSENT, router.as_ref().map(|r| r.wake_fd())) {
        Ok(s) => s,
        Err(e) => {
            let _ = addr_tx.send(Err(std::io::Error::other(format!("the client sockets' io_uring: {e}"))));
            return Report::default();
        }
    };
    let mut rhythm = Rhythm::with_sockets(doorbell.on_shard(), poll);
    if let Err(e) = rhythm.woken_by(sockets.wake_fd()) {
        let _ = addr_tx.send(Err(std::io::Error::other(format!("the client sockets' eventfd: {e}"))));
        return Report::default();
    }
    if let Some(r) = &router {
        *r.bell.borrow_mut() = Some(rhythm.bell());
    }
    let mut hosted = Hosting::new(hosted, &clock, &stop, &rhythm.bell(), &progress);
    // Client and peer sockets are polled every round: only the listeners
    // (and a role process's reconnecting tasks) wait for reactor turns.
    let mut lead = Lead::turning_every(lead::RARE_TURN);
    let listener = match TcpListener::bind(listen).and_then(|l| Ok((l.local_addr()?, l))) {
        Ok((addr, l)) => {
            let _ = addr_tx.send(Ok(addr));
            l
        }
        Err(e) => {
            let _ = addr_tx.send(Err(std::io::Error::other(e.to_string())));
            let stats = FrontendStats::default();
            return Report { stats, ..Report::default() };
        }
    };
    let shard = Rc::new(RefCell::new(Shard {
        // Ids from the Unix clock: a restarted frontend's never match a
        // request its last run left in the cluster.
        fe: {
            let fe = Frontend::new(index, capacity, clock.origin_unix_ns(), reserve_floor)
                .starting_at(crate::clock::unix_ns())
                .with_max_waiting(max_waiting)
                .shedding_when_behind(shed_when_behind);
            match store {
                Some(store) => fe.with_store(store),
                None => fe,
            }
        },
        table,
        clock,
        conns: FxHashMap::default(),
        outbound: Outbound::default(),
        connections: 0,
        refused_connections: 0,
        accept_failures: 0,
        max_unread,
        unread_closed: 0,
        bad_frames: 0,
        bell: rhythm.bell(),
        open: 0,
        progress,
        slot,
        tally_dirty: false,
        tally_due: 0,
        gateway,
        accepted: Vec::new(),
    }));
    let accepting = glommio::spawn_local(accept(listener, Rc::clone(&shard), max_connections));

    let clock = shard.borrow().clock.clone();
    let mut incoming = Vec::new();
    let mut answers = Vec::new();
    let table = Arc::clone(&shard.borrow().table);
    while !stop.load(Ordering::Acquire) {
        link.poll(&mut incoming);
        let mut busy = !incoming.is_empty();
        {
            let mut s = shard.borrow_mut();
            busy |= s.take_sockets(&mut sockets, &table);
            // One clock read per round: what it polled had arrived by then.
            let now = s.clock.now();
            // The table pinned once for the round's messages (a pin is a
            // fence: none for a round without any).
            let pinned = (!incoming.is_empty()).then(|| table.pin());
            for m in incoming.drain(..) {
                match m.into_envelope() {
                    Ok(Envelope { msg: Message::Stats(st), .. }) => s.on_totals(&st),
                    Ok(e) => s.on_envelope(now, e, pinned.as_deref().expect("pinned: a message came"), &mut answers),
                    Err(ShardMsg::Peer { peer, up }) => s.on_peer(peer, up, &mut answers),
                    // Symphony's own messages stay on scheduler shards.
                    Err(_) => s.bad_frames += 1,
                }
            }
            busy |= s.on_asks(&mut answers);
            s.expire(now, &mut answers);
            s.answer(&mut answers);
            sockets.flush();
            s.publish();
            if !s.outbound.is_empty() {
                link.flush_outbound(&mut s.outbound);
                busy = true;
            }
            link.submit();
            let waiting = s.outbound.len() + link.unsent_to_schedulers();
            let since = s.outbound.oldest_arrival();
            s.fe.set_waiting(waiting, since);
        }
        let mut round = Round { busy, next: shard.borrow().fe.next_timeout() };
        hosted.round(&mut round, clock.now());
        shard.borrow_mut().publish_tally(!round.busy);
        if lead.again(link.pending()) {
            continue;
        }
        let has_work = || {
            // Completions signal the rings' eventfd while the shard parks.
            sockets.arm_wake();
            link.arm_wake();
            sockets.ready()
                || !shard.borrow().accepted.is_empty()
                || link.pending()
                || !shard.borrow().outbound.is_empty()
                || shard.borrow().asked()
                || hosted.pending()
        };
        lead.end_round(&mut rhythm, &clock, clock.now(), round, has_work).await;
        sockets.disarm_wake();
        link.disarm_wake();
    }
    // Stopping: no client is accepted any more (the listener closes, so a
    // client that connects now is refused rather than left unread), and
    // what is still held is answered, so no client waits forever.
    accepting.cancel().await;
    let report = {
        let mut s = shard.borrow_mut();
        let held = s.fe.held() as u64;
        let now = s.clock.now();
        let s = &mut *s;
        s.table.read(|t| s.fe.drop_all(now, t, &mut answers));
        s.answer(&mut answers);
        Report {
            stats: s.fe.stats,
            connections: s.connections,
            refused_connections: s.refused_connections,
            accept_failures: s.accept_failures,
            unread_closed: s.unread_closed,
            bad_frames: s.bad_frames,
            held_at_stop: held,
            hosted: hosted.reports(),
        }
    };
    // The last answers go out before the connections close.
    baton_net::tcp::uring::close_all(&RefCell::new(sockets)).await;
    report
}

/// Accepts connections until the shard stops, backing off on errors
/// (`accept_backing_off`); a connection beyond `max_connections` is
/// answered `Overloaded` and closed.
async fn accept(listener: TcpListener, shard: Rc<RefCell<Shard>>, max_connections: u64) {
    let mut next: ConnId = 0;
    let mut backoff = conn::Backoff::default();
    loop {
        let stream = conn::accept_backing_off(&listener, &mut backoff).await;
        shard.borrow_mut().accept_failures += std::mem::take(&mut backoff.failures);
        if shard.borrow().open >= max_connections {
            shard.borrow_mut().refused_connections += 1;
            let why = format!("{max_connections} connections are open, the most this frontend takes");
            glommio::spawn_local(refuse(stream, error_answer(fb::ErrorCode::Overloaded, why))).detach();
            continue;
        }
        let _ = stream.set_nodelay(true);
        let Ok(fd) = take_socket(stream) else {
            // Out of descriptors for the ring's copy: a failed accept.
            shard.borrow_mut().accept_failures += 1;
            continue;
        };
        next += 1;
        let mut s = shard.borrow_mut();
        s.connections += 1;
        s.open += 1;
        s.publish();
        s.accepted.push((next, fd));
        s.bell.ring();
    }
}

/// Sends `answer` and closes, reading nothing.
async fn refuse(mut stream: TcpStream, answer: Message) {
    use futures_lite::AsyncWriteExt;
    let bytes = baton_wire::encode(&answer).expect("an answer without outputs fits a frame");
    let _ = stream.write_all(&bytes).await;
    let _ = stream.close().await;
}
