//! A role process's connections to its peer roles, on a socket ring of
//! their own (`uring`) that the owner's pump polls every round (`poll`:
//! a frame is taken as soon as the pump looks, with no wait for a pass
//! through glommio's reactor) and whose sends it submits once a round
//! (`flush`); a parked pump is woken by the ring's eventfd (`arm_wake`).
//!
//! Sockets come in two ways. A connection this process opened and greeted
//! (`greeting::connect`) is adopted with what was read past the greeting
//! (`adopt_greeted`). A connection accepted on the role listener
//! (`accept`) is challenged at once as the role this process is
//! (`auth::Challenge`): each `Hello` it sends is checked, the first good
//! one answered with this role's proof, and each names a role the
//! connection speaks for (`PeerEvent::Greeted`: a backend process greets
//! once per backend it hosts). Anything else before a good greeting, a
//! bad greeting, or none within `GREETING`, closes the connection and
//! counts it `refused`. On a connection this process opened, a greeting
//! is a bad frame.
//!
//! What a frame means is the owner's business (the engine's router routes
//! them by content); this module only says which connection it came on,
//! and when a connection is gone (`PeerEvent::Closed`, once).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::fd::{OwnedFd, RawFd};
use std::rc::Rc;

use baton_wire::{fb, Limits, Message};
use glommio::net::TcpListener;

use super::auth::{Challenge, ClusterKey};
use super::conn::{accept_backing_off, Backoff, Conn};
use super::greeting::GREETING;
use super::uring::{self, take_socket, Event, Sockets};
use crate::framing::FrameBuf;

/// What a peer's connection did (`Peers::poll`).
pub enum PeerEvent<'a> {
    /// An accepted connection proved it speaks for the role `hello` names.
    Greeted { conn: &'a Rc<Conn>, hello: &'a fb::Hello },
    /// A frame from a trusted peer; None if it did not decode (or its
    /// header was bad, which closes the connection: `Closed` follows).
    Frame { conn: &'a Rc<Conn>, frame: Option<Message> },
    /// The connection is closed or closing: nothing more comes on it, and
    /// nothing sent on it arrives.
    Closed { conn: &'a Rc<Conn> },
}

/// A peer's connection on the ring.
struct Link {
    conn: Rc<Conn>,
    /// The challenge an accepted connection must answer (None: this
    /// process connected and greeted).
    challenge: Option<Challenge>,
    /// `PeerEvent::Closed` was reported.
    closed: bool,
}

pub struct Peers {
    sockets: RefCell<Sockets>,
    /// Each socket's connection, by its number on the ring.
    links: RefCell<HashMap<u64, Link>>,
    next_link: Cell<u64>,
    /// Connections closed because they did not greet with a good proof of
    /// the cluster secret within `GREETING`.
    pub refused: Cell<u64>,
    /// Accepts on the role listener that failed (and were retried).
    pub accept_failures: Cell<u64>,
}

impl Peers {
    /// Fails if the kernel gives no ring.
    pub fn new() -> std::io::Result<Self> {
        // A peer's frames are always read: what bounds a peer that does not
        // read is the owner cutting it, not a pause in reading it (two
        // peers each waiting for the other to read first would never read
        // again).
        let sockets = Sockets::new(usize::MAX, None)?;
        Ok(Self {
            sockets: RefCell::new(sockets),
            links: RefCell::default(),
            next_link: Cell::new(0),
            refused: Cell::default(),
            accept_failures: Cell::default(),
        })
    }

    /// The eventfd the ring signals while the pump parks (`arm_wake`); a
    /// frontend's client ring signals the same one (`Sockets::new`).
    pub fn wake_fd(&self) -> RawFd {
        self.sockets.borrow().wake_fd()
    }

    /// The pump is about to park: a completion wakes it from now on.
    pub fn arm_wake(&self) {
        self.sockets.borrow_mut().arm_wake();
    }

    pub fn disarm_wake(&self) {
        self.sockets.borrow_mut().disarm_wake();
    }

    /// Whether completions wait on the ring (`Sockets::ready`).
    pub fn ready(&self) -> bool {
        self.sockets.borrow_mut().ready()
    }

    /// Hands `on` what the peers' sockets did since the last call.
    pub fn poll(&self, mut on: impl FnMut(PeerEvent<'_>)) {
        let mut sockets = self.sockets.borrow_mut();
        if sockets.ready() {
            sockets.reap(|ev| self.on_socket(ev, &mut on));
        }
    }

    /// Sends what the round queued for peers, in one system call.
    pub fn flush(&self) {
        self.sockets.borrow_mut().flush();
    }

    /// A connection this process opened and greeted (`greeting::connect`):
    /// its socket and what was read of it past the greeting. Read from
    /// now on.
    pub fn adopt_greeted(&self, fd: OwnedFd, buf: FrameBuf) -> std::io::Result<Rc<Conn>> {
        self.adopt(fd, buf, None).map(|(_, conn)| conn)
    }

    fn adopt(&self, fd: OwnedFd, buf: FrameBuf, challenge: Option<Challenge>) -> std::io::Result<(u64, Rc<Conn>)> {
        let id = self.next_link.get();
        self.next_link.set(id + 1);
        let conn = self.sockets.borrow_mut().adopt(id, fd, buf)?;
        self.links.borrow_mut().insert(id, Link { conn: Rc::clone(&conn), challenge, closed: false });
        Ok((id, conn))
    }

    /// Accepts roles on `listener` until the task is dropped: each
    /// connection is challenged at once as the role `me` (the challenge
    /// goes out at the pump's next `flush`: `wake` wakes it), and closed if
    /// it has not proven itself within `GREETING`.
    pub async fn accept(
        self: Rc<Self>,
        listener: TcpListener,
        key: ClusterKey,
        me: fb::Hello,
        wake: impl Fn() + 'static,
    ) {
        let wake = Rc::new(wake);
        let mut backoff = Backoff::default();
        loop {
            let stream = accept_backing_off(&listener, &mut backoff).await;
            let failed = std::mem::take(&mut backoff.failures);
            self.accept_failures.set(self.accept_failures.get() + failed);
            let _ = stream.set_nodelay(true);
            let challenge = Challenge::new(&key, me.clone());
            let greeting = Message::Hello(challenge.greeting());
            let adopted = take_socket(stream)
                .and_then(|fd| self.adopt(fd, FrameBuf::new(Limits::between_roles()), Some(challenge)));
            let Ok((id, conn)) = adopted else {
                // Out of descriptors for the ring's copy: a failed accept.
                self.accept_failures.set(self.accept_failures.get() + 1);
                continue;
            };
            conn.send(&greeting).expect("a Hello fits a frame");
            let (peers, woken) = (Rc::clone(&self), Rc::clone(&wake));
            glommio::spawn_local(async move {
                glommio::timer::sleep(GREETING).await;
                if peers.greeting_over(id) {
                    woken();
                }
            })
            .detach();
            wake();
        }
    }

    /// `GREETING` has passed since connection `id` was accepted: closed
    /// unless it has proven itself or is closing already (the ring reports
    /// it `Closed` then); whether it was.
    fn greeting_over(&self, id: u64) -> bool {
        let links = self.links.borrow();
        let unproven =
            links.get(&id).filter(|l| !l.conn.closed.get() && l.challenge.as_ref().is_some_and(|c| !c.passed()));
        if let Some(l) = unproven {
            self.refused.set(self.refused.get() + 1);
            l.conn.close();
        }
        unproven.is_some()
    }

    fn on_socket(&self, ev: Event<'_>, on: &mut impl FnMut(PeerEvent<'_>)) {
        match ev {
            Event::Read { id, conn, buf } => self.on_read(id, conn, buf, on),
            Event::Ended { id } => self.closed(id, on),
            Event::Gone { id } => {
                self.closed(id, on);
                self.links.borrow_mut().remove(&id);
            }
        }
    }

    /// Reports connection `id` `Closed`, once.
    fn closed(&self, id: u64, on: &mut impl FnMut(PeerEvent<'_>)) {
        let mut links = self.links.borrow_mut();
        let Some(l) = links.get_mut(&id).filter(|l| !l.closed) else { return };
        l.closed = true;
        let conn = Rc::clone(&l.conn);
        drop(links);
        on(PeerEvent::Closed { conn: &conn });
    }

    /// The frames a read of connection `id` completed, in order (see the
    /// top of the file for greetings).
    fn on_read(&self, id: u64, conn: &Rc<Conn>, buf: &mut FrameBuf, on: &mut impl FnMut(PeerEvent<'_>)) {
        enum Step {
            Greeted(fb::Hello, Option<fb::Hello>),
            Frame(Option<Message>),
            Refuse,
            BadHeader,
        }
        loop {
            let step = {
                let mut links = self.links.borrow_mut();
                let Some(link) = links.get_mut(&id) else { return };
                let trusted = link.challenge.as_ref().is_none_or(Challenge::passed);
                match buf.next_frame() {
                    Ok(None) => return,
                    Ok(Some(Ok(Message::Hello(h)))) if link.challenge.is_some() => {
                        match link.challenge.as_mut().expect("checked").check(&h) {
                            Ok(reply) => Step::Greeted(h, reply),
                            Err(_) => Step::Refuse,
                        }
                    }
                    Ok(_) if !trusted => Step::Refuse,
                    Ok(Some(frame)) => Step::Frame(frame.ok()),
                    Err(_) => Step::BadHeader,
                }
            };
            match step {
                Step::Greeted(hello, reply) => {
                    if let Some(reply) = reply {
                        conn.send(&Message::Hello(reply)).expect("a Hello fits a frame");
                    }
                    on(PeerEvent::Greeted { conn, hello: &hello });
                }
                Step::Frame(frame) => on(PeerEvent::Frame { conn, frame }),
                Step::Refuse | Step::BadHeader => {
                    if let Step::Refuse = step {
                        self.refused.set(self.refused.get() + 1);
                    } else {
                        // The stream cannot be followed any more.
                        on(PeerEvent::Frame { conn, frame: None });
                    }
                    conn.close();
                    return self.closed(id, on);
                }
            }
        }
    }

    /// Closes every connection (the process is stopping), each after what
    /// it holds is sent (`uring::close_all`), so peers see the close at once.
    pub async fn close_all(&self) {
        uring::close_all(&self.sockets).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::auth::Answer;
    use baton_wire::encode;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    fn hello(role: fb::Role, index: u32) -> fb::Hello {
        fb::Hello { role, index, origin_unix_ns: 0, nonce: None, proof: None }
    }

    fn dropped(id: u64) -> Message {
        Message::Dropped(fb::Dropped { requests: Some(vec![id]), reason: fb::DropReason::Shed, message: None })
    }

    /// The next frame on a blocking client socket; None once it is closed.
    fn next(s: &mut TcpStream, buf: &mut FrameBuf) -> Option<Message> {
        loop {
            if let Some(f) = buf.next_frame().expect("valid frames") {
                return Some(f.expect("frames decode"));
            }
            match s.read(buf.spare()) {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.filled(n),
            }
        }
    }

    /// A peer that proves the secret is heard, as every role it greets
    /// for, then frame by frame on the same connection; one that sends
    /// anything before a good greeting is closed, refused, and nothing it
    /// sent is heard.
    #[test]
    fn an_accepted_peer_is_heard_only_once_it_proves_the_secret() {
        let key = ClusterKey::new(b"the peers test's cluster secret").unwrap();
        let ex = glommio::LocalExecutorBuilder::default().make().unwrap();
        ex.run(async move {
            let peers = Rc::new(Peers::new().unwrap());
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let me = hello(fb::Role::Scheduler, 0);
            let accepting = glommio::spawn_local(Rc::clone(&peers).accept(listener, key.clone(), me, || {}));
            let good_peer = std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut buf = FrameBuf::default();
                let Some(Message::Hello(challenge)) = next(&mut s, &mut buf) else { panic!("challenged first") };
                let mine = [hello(fb::Role::Backend, 3), hello(fb::Role::Backend, 4)];
                let (answer, proven) = Answer::new(&key, &challenge, &mine).unwrap();
                for h in proven {
                    s.write_all(&encode(&Message::Hello(h)).unwrap()).unwrap();
                }
                let Some(Message::Hello(reply)) = next(&mut s, &mut buf) else { panic!("answered") };
                answer.check(&reply).expect("the acceptor holds the secret");
                s.write_all(&encode(&dropped(7)).unwrap()).unwrap();
                // Held open until the acceptor closes it.
                next(&mut s, &mut buf)
            });
            let bad_peer = std::thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut buf = FrameBuf::default();
                let Some(Message::Hello(_)) = next(&mut s, &mut buf) else { panic!("challenged first") };
                s.write_all(&encode(&dropped(8)).unwrap()).unwrap();
                next(&mut s, &mut buf)
            });
            let mut seen = Vec::new();
            for _ in 0..5000 {
                peers.flush();
                peers.poll(|ev| match ev {
                    PeerEvent::Greeted { conn, hello } => seen.push(("greeted", Rc::as_ptr(conn), hello.index as u64)),
                    PeerEvent::Frame { conn, frame: Some(Message::Dropped(d)) } => {
                        seen.push(("frame", Rc::as_ptr(conn), d.requests.unwrap()[0]))
                    }
                    PeerEvent::Frame { conn, .. } => seen.push(("other", Rc::as_ptr(conn), 0)),
                    PeerEvent::Closed { conn } => seen.push(("closed", Rc::as_ptr(conn), 0)),
                });
                if seen.len() >= 4 {
                    break;
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            let kinds: Vec<_> = seen.iter().map(|e| (e.0, e.2)).collect();
            assert!(kinds.contains(&("closed", 0)), "the bad peer is closed: {kinds:?}");
            let good: Vec<_> = seen.iter().filter(|e| e.0 != "closed").collect();
            assert_eq!(
                good.iter().map(|e| (e.0, e.2)).collect::<Vec<_>>(),
                [("greeted", 3), ("greeted", 4), ("frame", 7)]
            );
            assert!(good.iter().all(|e| e.1 == good[0].1), "one connection");
            assert_eq!(peers.refused.get(), 1);
            assert_eq!(bad_peer.join().unwrap(), None, "the bad peer heard nothing more");
            peers.close_all().await;
            assert_eq!(good_peer.join().unwrap(), None, "closed at the end");
            drop(accepting);
        });
    }
}
