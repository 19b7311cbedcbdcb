//! Roles in separate processes: the `Router` of a process maps each remote
//! role (`Addr`) to the TCP connection that reaches it, and collects what
//! peers send into one inbox for the pump.
//!
//! Every connection between roles starts with `Hello` frames naming the
//! speaker (one per backend when a process hosts several). The scheduler
//! answers each peer with its own `Hello`, carrying the cluster clock's
//! origin. Frames after the greeting are routed by content: requests and
//! completions to the scheduler, plans and inputs to the backend they
//! name, fetches, results and drops to the frontend holding the requests.
//!
//! Nothing is lost when a peer is missing: a batch plan for a backend that
//! is not connected is answered to its frontends as dropped
//! (`BackendFailed`); any other message that cannot be delivered is
//! counted in `undeliverable`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use baton_net::framing::FrameBuf;
use baton_wire::{fb, Message};
use futures_lite::io::ReadHalf;
use futures_lite::AsyncReadExt;
use glommio::net::TcpStream;

use super::conn::{self, Conn};
use super::park::Bell;
use crate::roles::backend::drop_plan;
use crate::roles::{frontend_of, Addr, Envelope};

#[derive(Default)]
pub struct Router {
    peers: RefCell<HashMap<Addr, Rc<Conn>>>,
    pub inbox: RefCell<Vec<Envelope>>,
    pub undeliverable: Cell<u64>,
    /// Peer connections opened (true) and closed (false) since the pump
    /// last looked, for the local roles (`ShardMsg::Peer`).
    pub notices: RefCell<Vec<(Addr, bool)>>,
    /// Frames from peers that did not decode, or came before a greeting.
    pub bad_frames: Cell<u64>,
    /// Whether this process hosts the scheduler, which must hear of a
    /// backend whose connection closed.
    pub hosts_scheduler: bool,
    /// Wakes the pump when the inbox gets something (`park.rs`).
    pub bell: RefCell<Option<Bell>>,
}

/// The role a message between roles is for, by its content.
pub fn addressee(m: &Message) -> Option<Addr> {
    let first =
        |ids: &Option<Vec<u64>>| ids.as_deref().and_then(|v| v.first()).map(|&r| Addr::Frontend(frontend_of(r)));
    match m {
        Message::RequestMeta(_) | Message::BatchDone(_) | Message::BackendStatus(_) => Some(Addr::Scheduler),
        Message::BatchPlan(p) => Some(Addr::Backend(p.backend)),
        Message::Inputs(i) => Some(Addr::Backend(i.backend)),
        Message::FetchInputs(f) => first(&f.requests),
        Message::Results(r) => first(&r.requests),
        Message::Dropped(d) => first(&d.requests),
        _ => None,
    }
}

pub fn role_addr(h: &fb::Hello) -> Addr {
    match h.role {
        fb::Role::Frontend => Addr::Frontend(h.index),
        fb::Role::Scheduler => Addr::Scheduler,
        fb::Role::Backend => Addr::Backend(h.index),
    }
}

impl Router {
    /// The router of the scheduler's process.
    pub fn for_scheduler() -> Self {
        Self { hosts_scheduler: true, ..Default::default() }
    }

    /// Whether a connection to `addr` is open.
    pub fn reaches(&self, addr: Addr) -> bool {
        self.peers.borrow().get(&addr).is_some_and(|c| !c.closed.get())
    }

    /// Puts `e` in the inbox and wakes the pump if it has parked.
    fn deliver(&self, e: Envelope) {
        self.inbox.borrow_mut().push(e);
        self.wake();
    }

    fn wake(&self) {
        if let Some(bell) = &*self.bell.borrow() {
            bell.ring();
        }
    }

    /// A peer role is reachable through `conn`. The local roles hear of
    /// it; a local scheduler hears a backend's connection as the backend
    /// saying it is healthy (one that had failed — a restarted process —
    /// is used again).
    pub fn register(&self, addr: Addr, conn: Rc<Conn>) {
        self.peers.borrow_mut().insert(addr, conn);
        self.notices.borrow_mut().push((addr, true));
        if let (Addr::Backend(backend), true) = (addr, self.hosts_scheduler) {
            let status = fb::BackendStatus { backend, healthy: true, ..Default::default() };
            self.deliver(Envelope { to: Addr::Scheduler, msg: Message::BackendStatus(status) });
        }
        self.wake();
    }

    pub fn send(&self, e: Envelope) {
        let peer = self.peers.borrow().get(&e.to).filter(|c| !c.closed.get()).cloned();
        match (peer, e.msg) {
            (Some(c), msg) => {
                if c.send(&msg).is_err() {
                    self.undeliverable.set(self.undeliverable.get() + 1);
                }
            }
            (None, Message::BatchPlan(p)) => {
                // The batch cannot run: its requests end here, dropped.
                let mut out = Vec::new();
                drop_plan(&p, fb::DropReason::BackendFailed, None, |_| true, &mut out);
                for e in out {
                    self.send(e);
                }
            }
            (None, _) => self.undeliverable.set(self.undeliverable.get() + 1),
        }
    }

    /// Reads a peer's frames until it closes: greetings go to `on_hello`
    /// (which registers the speaker), everything else to the inbox.
    pub async fn read_peer(
        self: Rc<Self>,
        mut reader: ReadHalf<TcpStream>,
        mut buf: FrameBuf,
        conn: Rc<Conn>,
        mut greeted: bool,
        on_hello: impl Fn(&Router, &fb::Hello, &Rc<Conn>),
    ) {
        'read: loop {
            loop {
                match buf.next_frame() {
                    Ok(None) => break,
                    Ok(Some(Ok(Message::Hello(h)))) => {
                        greeted = true;
                        on_hello(&self, &h, &conn);
                    }
                    Ok(Some(Ok(msg))) => match addressee(&msg).filter(|_| greeted) {
                        Some(to) => self.deliver(Envelope { to, msg }),
                        None => self.bad_frames.set(self.bad_frames.get() + 1),
                    },
                    Ok(Some(Err(_))) => self.bad_frames.set(self.bad_frames.get() + 1),
                    Err(_) => {
                        self.bad_frames.set(self.bad_frames.get() + 1);
                        break 'read;
                    }
                }
            }
            match reader.read(buf.spare()).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.filled(n),
            }
        }
        conn.close();
        self.gone(&conn);
    }

    /// Closes every peer connection (the process is stopping) and gives the
    /// writers a moment to flush, so peers see the close at once.
    pub async fn close_all(&self) {
        let conns: Vec<Rc<Conn>> = self.peers.borrow_mut().drain().map(|(_, c)| c).collect();
        conn::close_all(&conns).await;
    }

    /// A peer connection closed: forget its roles, tell the local roles
    /// (`ShardMsg::Peer`), and a local scheduler that the backends behind
    /// it failed.
    fn gone(&self, conn: &Rc<Conn>) {
        let mut peers = self.peers.borrow_mut();
        let mut addrs: Vec<Addr> = peers.iter().filter(|(_, c)| Rc::ptr_eq(c, conn)).map(|(&a, _)| a).collect();
        addrs.sort_unstable();
        for a in addrs {
            peers.remove(&a);
            self.notices.borrow_mut().push((a, false));
            self.wake();
            if let (Addr::Backend(backend), true) = (a, self.hosts_scheduler) {
                let status = fb::BackendStatus { backend, healthy: false, ..Default::default() };
                self.deliver(Envelope { to: Addr::Scheduler, msg: Message::BackendStatus(status) });
            }
        }
    }
}

/// Connects to a peer role at `addr`, retrying for `patience` while it is
/// not up yet, greets it with `hellos`, and returns the connection's
/// halves and the first frame it answers with if `await_reply`.
pub async fn connect(
    addr: SocketAddr,
    hellos: &[fb::Hello],
    await_reply: bool,
    patience: Duration,
) -> std::io::Result<(ReadHalf<TcpStream>, Rc<Conn>, FrameBuf, Option<fb::Hello>)> {
    let start = std::time::Instant::now();
    let stream = loop {
        match TcpStream::connect(addr).await {
            Ok(s) => break s,
            Err(e) if start.elapsed() >= patience => return Err(std::io::Error::other(e.to_string())),
            Err(_) => glommio::timer::sleep(Duration::from_millis(20)).await,
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = futures_lite::io::split(stream);
    let (conn, _) = Conn::spawn(writer);
    for h in hellos {
        conn.send(&Message::Hello(h.clone())).expect("a Hello fits a frame");
    }
    let mut buf = FrameBuf::default();
    let mut reply = None;
    while await_reply && reply.is_none() {
        match buf.next_frame() {
            Ok(Some(Ok(Message::Hello(h)))) => reply = Some(h),
            Ok(Some(_)) | Err(_) => return Err(std::io::Error::other("the peer did not answer with a Hello")),
            Ok(None) => match reader.read(buf.spare()).await? {
                0 => return Err(std::io::Error::other("the peer closed before answering")),
                n => buf.filled(n),
            },
        }
    }
    Ok((reader, conn, buf, reply))
}
