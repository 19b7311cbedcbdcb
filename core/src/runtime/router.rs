//! Roles in separate processes: the `Router` of a process maps each remote
//! role (`Addr`) to the TCP connection that reaches it, and collects what
//! peers send into one inbox for the pump.
//!
//! The peers' sockets live on a socket ring of the router's own
//! (`baton_net::tcp::peers`), which the pump polls every round
//! (`Link::poll`) and whose sends it submits once a round
//! (`Link::submit`); a parked pump is woken by the ring's eventfd
//! (`Link::arm_wake`).
//!
//! Every connection between roles starts with a greeting of `Hello` frames
//! that names the speakers (one per backend when a process hosts several)
//! and authenticates both ends with the cluster secret (`baton_net::tcp::auth`;
//! the connecting side in `baton_net::tcp::greeting`, the accepting side
//! in `baton_net::tcp::peers`); the
//! scheduler's carries the cluster clock's origin. What stays here is what
//! needs the roles: where a frame goes (`addressee`) and what a missing
//! peer means for the requests sent to it. Roles accept each other
//! on listeners apart from clients' (`accept_peers`). Frames after the
//! greeting are routed by content: requests and completions to the
//! scheduler, plans and inputs to the backend they name, fetches, results
//! and drops to the frontend holding the requests.
//!
//! Nothing is lost when a peer is missing: a batch plan for a backend that
//! is not connected is answered to its frontends as dropped
//! (`BackendFailed`); any other message that cannot be delivered is
//! counted in `undeliverable`.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{OwnedFd, RawFd};
use std::rc::Rc;

use baton_net::framing::FrameBuf;
use baton_net::tcp::auth::ClusterKey;
use baton_net::tcp::conn::Conn;
use baton_net::tcp::peers::{PeerEvent, Peers};
use baton_wire::{fb, Message};
use glommio::net::TcpListener;

use super::park::Bell;
use crate::roles::backend::drop_plan;
use crate::roles::{frontend_of, Addr, Envelope};

pub struct Router {
    peers: RefCell<HashMap<Addr, Rc<Conn>>>,
    /// The peers' connections (see the top of the file).
    net: Rc<Peers>,
    pub inbox: RefCell<Vec<Envelope>>,
    pub undeliverable: Cell<u64>,
    /// Peer connections opened (true) and closed (false) since the pump
    /// last looked, for the local roles (`ShardMsg::Peer`).
    pub notices: RefCell<Vec<(Addr, bool)>>,
    /// Frames from authenticated peers that did not decode, or that no
    /// role here takes.
    pub bad_frames: Cell<u64>,
    /// The sub-cluster of the scheduler this process hosts, if it does:
    /// it must hear of a backend whose connection closed.
    pub hosts_scheduler: Option<u32>,
    /// Wakes the pump when the inbox gets something (`park.rs`).
    pub bell: RefCell<Option<Bell>>,
    /// Bytes a peer may leave unread before its connection is cut.
    max_unread: usize,
    /// Peer connections cut for leaving more than `max_unread` unread.
    pub cut_peers: Cell<u64>,
    /// Sub-clusters whose scheduler this process has reached.
    schedulers: RefCell<Vec<u32>>,
}

/// The role a message between roles is for, by its content — and, for a
/// backend's status, by where it arrives: a process without the
/// scheduler hears one only as the scheduler's answer to a backend
/// leaving.
pub fn addressee(m: &Message, hosts_scheduler: Option<u32>) -> Option<Addr> {
    let first =
        |ids: &Option<Vec<u64>>| ids.as_deref().and_then(|v| v.first()).map(|&r| Addr::Frontend(frontend_of(r)));
    match m {
        Message::BackendStatus(s) if hosts_scheduler.is_none() => Some(Addr::Backend(s.backend)),
        Message::RequestMeta(_) | Message::BatchDone(_) | Message::BackendStatus(_) => {
            Some(Addr::Scheduler(hosts_scheduler.unwrap_or(0)))
        }
        Message::BatchPlan(p) => Some(Addr::Backend(p.backend)),
        Message::Inputs(i) => Some(Addr::Backend(i.backend)),
        Message::FetchInputs(f) => first(&f.requests),
        Message::Results(r) => first(&r.requests),
        Message::Dropped(d) => first(&d.requests),
        Message::RdmaConnect(c) if c.answer => Some(Addr::Backend(c.backend)),
        Message::RdmaConnect(c) => Some(Addr::Frontend(c.frontend)),
        // Totals for `/metrics`, sent to every frontend; the frontend
        // process takes them whatever its index.
        Message::Stats(_) => Some(Addr::Frontend(0)),
        _ => None,
    }
}

pub fn role_addr(h: &fb::Hello) -> Addr {
    match h.role {
        fb::Role::Frontend => Addr::Frontend(h.index),
        fb::Role::Scheduler => Addr::Scheduler(h.index),
        fb::Role::Backend => Addr::Backend(h.index),
    }
}

impl Router {
    /// The router of a process, which hosts the scheduler of a sub-cluster
    /// or not, cutting
    /// a peer that leaves more than `max_unread` bytes unread: it is not
    /// reading, so it is as good as gone, and what this process sends it
    /// is not buffered without bound. Fails if the kernel gives no ring.
    pub fn new(hosts_scheduler: Option<u32>, max_unread: usize) -> std::io::Result<Self> {
        Ok(Self {
            peers: RefCell::default(),
            net: Rc::new(Peers::new()?),
            inbox: RefCell::default(),
            undeliverable: Cell::default(),
            notices: RefCell::default(),
            bad_frames: Cell::default(),
            hosts_scheduler,
            bell: RefCell::default(),
            max_unread,
            cut_peers: Cell::default(),
            schedulers: RefCell::default(),
        })
    }

    /// The eventfd the peers' ring signals while the pump parks; a
    /// frontend's client ring signals the same one (`Sockets::new`).
    pub fn wake_fd(&self) -> RawFd {
        self.net.wake_fd()
    }

    /// The pump is about to park: a peer's completion wakes it from now on.
    pub fn arm_wake(&self) {
        self.net.arm_wake();
    }

    pub fn disarm_wake(&self) {
        self.net.disarm_wake();
    }

    /// Whether anything waits for the pump: messages, notices, or
    /// completions on the peers' ring.
    pub fn pending(&self) -> bool {
        !self.inbox.borrow().is_empty() || !self.notices.borrow().is_empty() || self.net.ready()
    }

    /// Takes what the peers' connections did: frames to the inbox by
    /// their content, each role a connection greets for registered, and
    /// the roles of a closed one gone.
    pub fn poll(&self) {
        self.net.poll(|ev| match ev {
            PeerEvent::Greeted { conn, hello } => self.register(role_addr(hello), Rc::clone(conn)),
            PeerEvent::Frame { frame: Some(msg), .. } => match addressee(&msg, self.hosts_scheduler) {
                Some(to) => self.deliver(Envelope { to, msg }),
                None => self.bad_frames.set(self.bad_frames.get() + 1),
            },
            PeerEvent::Frame { frame: None, .. } => self.bad_frames.set(self.bad_frames.get() + 1),
            PeerEvent::Closed { conn } => self.gone(conn),
        });
    }

    /// Sends what the round queued for peers, in one system call.
    pub fn flush(&self) {
        self.net.flush();
    }

    /// A connection this process opened to role `to` and greeted
    /// (`greeting::connect`): registered, and read from now on.
    pub fn attach(&self, to: Addr, fd: OwnedFd, buf: FrameBuf) -> std::io::Result<()> {
        let conn = self.net.adopt_greeted(fd, buf)?;
        self.register(to, conn);
        Ok(())
    }

    /// Accepts roles on `listener` until the process stops, challenging
    /// each as the role `me` (`Peers::accept`).
    pub async fn accept_peers(self: Rc<Self>, listener: TcpListener, key: ClusterKey, me: fb::Hello) {
        let router = Rc::clone(&self);
        Rc::clone(&self.net).accept(listener, key, me, move || router.wake()).await;
    }

    /// Closes every peer connection (the process is stopping), each after
    /// what it holds is sent.
    pub async fn close_all(&self) {
        self.peers.borrow_mut().clear();
        self.net.close_all().await;
    }

    /// Whether a connection to `addr` is open.
    pub fn reaches(&self, addr: Addr) -> bool {
        self.peers.borrow().get(&addr).is_some_and(|c| !c.closed.get())
    }

    /// Sends `m` to every frontend this process is connected to.
    pub fn to_frontends(&self, m: &Message) {
        for (_, c) in self.peers.borrow().iter().filter(|(a, c)| matches!(a, Addr::Frontend(_)) && !c.closed.get()) {
            let _ = c.send(m);
        }
    }

    /// Messages waiting in the outboxes of the connections to schedulers
    /// (looked up by sub-cluster: the peers may be a thousand backends).
    pub fn unsent_to_schedulers(&self) -> usize {
        let peers = self.peers.borrow();
        let out = |k| peers.get(&Addr::Scheduler(k)).map_or(0, |c: &Rc<Conn>| c.out.borrow().frames());
        self.schedulers.borrow().iter().map(|&k| out(k)).sum()
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

    /// What this process's peer connections saw, for its report.
    pub fn report(&self) -> super::EngineReport {
        let (bad_frames, refused_peers, cut_peers) =
            (self.bad_frames.get(), self.net.refused.get(), self.cut_peers.get());
        let accept_failures = self.net.accept_failures.get();
        super::EngineReport { bad_frames, refused_peers, cut_peers, accept_failures, ..Default::default() }
    }

    /// A peer role is reachable through `conn`. The local roles hear of
    /// it; a local scheduler hears a backend's connection as the backend
    /// saying it is healthy (one that had failed — a restarted process —
    /// is used again).
    pub fn register(&self, addr: Addr, conn: Rc<Conn>) {
        if let Addr::Scheduler(k) = addr {
            // The sub-clusters seen, not a range up to the largest: a
            // peer's index costs nothing however large.
            let mut seen = self.schedulers.borrow_mut();
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        self.peers.borrow_mut().insert(addr, conn);
        self.notices.borrow_mut().push((addr, true));
        if let (Addr::Backend(backend), Some(k)) = (addr, self.hosts_scheduler) {
            let status = fb::BackendStatus { backend, healthy: true, ..Default::default() };
            self.deliver(Envelope { to: Addr::Scheduler(k), msg: Message::BackendStatus(status) });
        }
        self.wake();
    }

    pub fn send(&self, e: Envelope) {
        let peer = self.peers.borrow().get(&e.to).filter(|c| !c.closed.get()).cloned();
        match (peer, e.msg) {
            (Some(c), msg) if c.out.borrow().len_bytes() > self.max_unread => {
                // The peer has not read for a long while: gone, as if its
                // connection had closed; the message is sent as to a
                // missing peer.
                c.abort();
                self.cut_peers.set(self.cut_peers.get() + 1);
                self.gone(&c);
                self.send(Envelope { to: e.to, msg });
            }
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
            if let (Addr::Backend(backend), Some(k)) = (a, self.hosts_scheduler) {
                let status = fb::BackendStatus { backend, healthy: false, ..Default::default() };
                self.deliver(Envelope { to: Addr::Scheduler(k), msg: Message::BackendStatus(status) });
            }
        }
    }
}
