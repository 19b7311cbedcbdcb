//! A shard's sockets on an io_uring of their own, polled by the shard's
//! pump every round: a frontend shard's clients, and a role process's
//! peers (its router's ring; the frontend process's two rings signal one
//! eventfd).
//!
//! Why not glommio's sockets: glommio reaps completions only when its
//! executor passes through its reactor, and each pass re-arms its preempt
//! and throughput timers (three `io_uring_enter` calls). A busy pump turns
//! through the reactor every 20 µs or so (`lead.rs`), so a request that
//! had arrived waited for the next turn, and its answer's write for the one
//! after: on the 2-core VM a trace put ~30 µs of ingress p50 between the
//! kernel's completion and the frontend's read (perf/README.md item 3).
//! Here the kernel writes a completion into memory the pump reads: looking
//! costs no system call, and a round's sends and re-armed reads go to the
//! kernel in one `io_uring_enter` (`flush`).
//!
//! Each socket has at most one receive and one send in flight:
//! - a receive into its `FrameBuf`'s spare room (the kernel copies the
//!   bytes there; the buffer is not touched while the receive is in
//!   flight). Its completion hands the frames to the owner (`Event::Read`),
//!   and the receive is armed again — unless the client leaves more than
//!   `max_unsent` bytes of answers unread (backpressure: it waits on the
//!   `paused` list until the answers drain) or the connection is closing;
//! - a send of what its `Outbox` gathered (one buffer, taken whole; the
//!   outbox fills its other buffer meanwhile), resumed where a short send
//!   stopped.
//!
//! A connection closes when the client does (a receive of 0 bytes or an
//! error: `Event::Ended`), or when the owner closes it (`Conn::close`:
//! what is pending is sent first) or aborts it (`Conn::abort`: shut down at
//! once). Either way the socket is shut down both ways once nothing is left
//! to send, which ends the receive; when neither operation is in flight the
//! descriptor is closed and its slot freed (`Event::Gone`).
//!
//! Memory the kernel writes or reads (a `FrameBuf`, a send's buffer) lives
//! in its slot until the operation's completion is reaped, and a slot is
//! freed only then; dropping the ring with operations in flight shuts the
//! sockets down and waits for them (`Drop`).
//!
//! The kernel's part of a completion runs only when this thread enters the
//! ring (`IORING_SETUP_DEFER_TASKRUN`): a flag in the ring's memory says
//! when there is some (`ready`), and `reap` enters then. A parked shard is
//! woken by the ring's eventfd, which the kernel signals when such work
//! arrives, only while the shard parks (`arm_wake`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::Duration;

use io_uring::{opcode, types, IoUring};

use super::conn::{Conn, Dirty};
use crate::framing::FrameBuf;

/// Submission entries; at most two operations per socket are in flight,
/// and a full queue is submitted and reused.
const ENTRIES: u32 = 256;
/// Completion entries (the kernel keeps what overflows, and `reap` takes it).
const CQ_ENTRIES: u32 = 4096;

/// The operation a completion is for: the low bit of its `user_data`, the
/// socket's slot above it.
const RECV: u64 = 0;
const SEND: u64 = 1;

/// What happened on the ring's sockets, for its owner (`reap`).
pub enum Event<'a> {
    /// Bytes arrived on connection `id`: its whole frames are in `buf`.
    Read { id: u64, conn: &'a Rc<Conn>, buf: &'a mut FrameBuf },
    /// Connection `id`'s client closed (or its socket failed): nothing more
    /// is read; what is pending is still sent, then the socket closes.
    Ended { id: u64 },
    /// Connection `id`'s socket is closed and its slot free.
    Gone { id: u64 },
}

/// One socket and what is in flight on it.
struct Slot {
    /// The owner's number for the connection.
    id: u64,
    conn: Rc<Conn>,
    fd: OwnedFd,
    buf: FrameBuf,
    /// A receive is in flight (into `buf`).
    reading: bool,
    /// No receive is armed again: the client closed, the socket failed, or
    /// the connection is closing.
    ended: bool,
    /// Bytes in flight to the socket, and how many of them went already.
    sending: Option<(Vec<u8>, usize)>,
    /// The socket was shut down (once).
    shut: bool,
}

pub struct Sockets {
    ring: IoUring,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Connections whose `Outbox` changed or that close (`Conn::on_ring`).
    dirty: Dirty,
    /// Sockets whose receive waits for their client to read answers.
    paused: Vec<u32>,
    /// Connections closed since the last `reap`, reported by it.
    gone: Vec<u64>,
    /// Sockets adopted with bytes already read (a peer's frames past its
    /// greeting): the next `reap` hands them over before their first receive.
    fresh: Vec<u32>,
    /// Completions taken from the ring, handled after (kept).
    done: Vec<(u64, i32)>,
    /// Operations submitted and not completed yet.
    in_flight: usize,
    /// Entries queued and not yet submitted.
    queued: bool,
    eventfd: OwnedFd,
    max_unsent: usize,
}

impl Sockets {
    /// A ring for sockets whose clients may leave `max_unsent` bytes of
    /// answers unread before their requests stop being read, whose
    /// completions signal the eventfd `wake` (a copy of it: one a shard's
    /// other ring signals, so that one wait serves both) or one of its own.
    pub fn new(max_unsent: usize, wake: Option<RawFd>) -> std::io::Result<Sockets> {
        // The kernel's part of a receive (the copy once bytes arrived) runs
        // when this thread enters the ring, not in an interrupt the sender
        // raises (an IPI: ~30 µs on the 2-core VM, measured); the ring's
        // `taskrun` flag says there is some (`ready`). This thread, which
        // creates the ring, is the only one that ever enters it. A kernel
        // older than 6.1 refuses the flags: the ring then runs that part
        // in the interrupt, and its completions come as they are posted.
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(CQ_ENTRIES)
            .build(ENTRIES)
            .or_else(|_| IoUring::builder().setup_cqsize(CQ_ENTRIES).build(ENTRIES))?;
        // Blocking, so that a read of it through io_uring waits (a
        // non-blocking one would fail at once with EAGAIN).
        // SAFETY: eventfd(2) with valid flags, or fcntl(2) duplicating a
        // descriptor the caller holds open; a non-negative result is a new
        // descriptor that nothing else owns.
        let fd = unsafe {
            match wake {
                Some(other) => libc::fcntl(other, libc::F_DUPFD_CLOEXEC, 0),
                None => libc::eventfd(0, libc::EFD_CLOEXEC),
            }
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned here only.
        let eventfd = unsafe { OwnedFd::from_raw_fd(fd) };
        ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
        let mut ring = ring;
        ring.completion().disable_eventfd();
        Ok(Sockets {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            dirty: Dirty::default(),
            paused: Vec::new(),
            gone: Vec::new(),
            fresh: Vec::new(),
            done: Vec::new(),
            in_flight: 0,
            queued: false,
            eventfd,
            max_unsent,
        })
    }
}

impl Sockets {
    /// Takes connection `id`'s socket `fd` (a connected TCP socket, owned
    /// from now on here) and starts reading it into `buf` (which may hold
    /// bytes read before: the next `reap` hands them over first); what is
    /// queued on the returned connection is sent from here.
    pub fn adopt(&mut self, id: u64, fd: OwnedFd, buf: FrameBuf) -> std::io::Result<Rc<Conn>> {
        // io_uring fails a receive on a non-blocking socket with EAGAIN
        // instead of waiting for bytes: the socket blocks (in the kernel's
        // io_uring only; nothing here calls it directly).
        // SAFETY: fcntl(2) on a descriptor this function owns.
        let blocking = unsafe {
            let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        if !blocking {
            return Err(std::io::Error::last_os_error());
        }
        let token = match self.free.pop() {
            Some(t) => t,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        let conn = Conn::on_ring(token, Rc::clone(&self.dirty));
        conn.watch_socket(fd.as_raw_fd());
        let read_before = buf.partial() > 0;
        let slot =
            Slot { id, conn: Rc::clone(&conn), fd, buf, reading: false, ended: false, sending: None, shut: false };
        let at = &mut self.slots[token as usize];
        assert!(at.is_none(), "a free slot is empty");
        *at = Some(slot);
        match read_before {
            true => self.fresh.push(token),
            false => self.recv(token),
        }
        Ok(conn)
    }

    /// Connections open.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a completion waits to be reaped, or the kernel's part of
    /// one to be run, or completions the full queue left in the kernel
    /// (no system call).
    pub fn ready(&mut self) -> bool {
        self.kernel_holds() || !self.ring.completion().is_empty() || !self.gone.is_empty() || !self.fresh.is_empty()
    }

    /// Whether only an entry into the ring brings completions out: the
    /// kernel's part of some is still to run (`DEFER_TASKRUN`), or the
    /// queue overflowed and the kernel holds the rest.
    fn kernel_holds(&mut self) -> bool {
        let sq = self.ring.submission();
        sq.taskrun() || sq.cq_overflow()
    }

    /// The descriptor a parked shard waits on to be woken by a completion
    /// (signalled only between `arm_wake` and `disarm_wake`).
    pub fn wake_fd(&self) -> RawFd {
        self.eventfd.as_raw_fd()
    }

    /// The shard is about to park: completions signal `wake_fd` from now
    /// on. Look for one after (`ready`), so none is missed in between.
    pub fn arm_wake(&mut self) {
        self.ring.completion().enable_eventfd();
    }

    /// The shard runs: completions no longer signal `wake_fd` (the pump
    /// looks for them every round).
    pub fn disarm_wake(&mut self) {
        self.ring.completion().disable_eventfd();
    }

    /// Hands the owner what completed since the last call (`Event`), arms
    /// the next receives, and frees the slots of closed sockets.
    pub fn reap(&mut self, mut on: impl FnMut(Event<'_>)) {
        for id in self.gone.drain(..) {
            on(Event::Gone { id });
        }
        for token in std::mem::take(&mut self.fresh) {
            if self.slots[token as usize].as_ref().is_some_and(|s| !s.conn.closed.get()) {
                self.hand_over(token, &mut on);
            }
            self.settle(token, &mut on);
        }
        if self.kernel_holds() {
            // Runs the kernel's part of what completed, moves what
            // overflowed into the queue (and submits what is queued).
            self.queued &= self.ring.submit().is_err();
        }
        let mut done = std::mem::take(&mut self.done);
        done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(data, res) in &done {
            self.in_flight -= 1;
            let token = (data >> 1) as u32;
            match data & 1 {
                RECV => self.received(token, res, &mut on),
                _ => self.sent(token, res),
            }
            self.settle(token, &mut on);
        }
        done.clear();
        self.done = done;
    }

    /// Sends what connections queued, resumes paused receives whose
    /// clients caught up, closes what is closing, and submits it all in
    /// one system call.
    pub fn flush(&mut self) {
        let dirty = std::mem::take(&mut *self.dirty.borrow_mut());
        for &token in &dirty {
            let Some(slot) = self.slots[token as usize].as_ref() else { continue };
            slot.conn.unlist();
            if slot.sending.is_none() {
                self.send_next(token);
            }
            self.settle_later(token);
        }
        // The list's allocation goes back for the next round's.
        let mut list = self.dirty.borrow_mut();
        if list.is_empty() {
            *list = dirty;
            list.clear();
        }
        drop(list);
        let mut k = 0;
        while k < self.paused.len() {
            let token = self.paused[k];
            let resume = self.slots[token as usize]
                .as_ref()
                .is_none_or(|s| s.conn.closed.get() || s.conn.out.borrow().len_bytes() <= self.max_unsent);
            if resume {
                self.paused.swap_remove(k);
                self.recv(token);
            } else {
                k += 1;
            }
        }
        if self.queued {
            // A failure (the kernel short of memory, EBUSY with completions
            // to reap first) leaves the entries queued for the next round.
            if self.ring.submit().is_ok() {
                self.queued = false;
            }
        }
    }

    /// A receive on `token` completed with `res`.
    fn received(&mut self, token: u32, res: i32, on: &mut impl FnMut(Event<'_>)) {
        let slot = self.slots[token as usize].as_mut().expect("a slot with an operation in flight is held");
        slot.reading = false;
        if res == -libc::EAGAIN || res == -libc::EINTR {
            return self.recv(token);
        }
        if res <= 0 {
            // The client closed, or the socket failed (reset, shut down).
            if !slot.ended {
                slot.ended = true;
                slot.conn.close();
                on(Event::Ended { id: slot.id });
            }
            return;
        }
        if slot.conn.closed.get() {
            // Closed (or cut off) while the receive was in flight: what it
            // read is not the owner's business any more.
            slot.ended = true;
            return;
        }
        slot.buf.filled(res as usize);
        self.hand_over(token, on);
    }

    /// Hands the owner what `token`'s buffer holds, then reads on, unless
    /// the connection closed meanwhile or its client must catch up first.
    fn hand_over(&mut self, token: u32, on: &mut impl FnMut(Event<'_>)) {
        let slot = self.slots[token as usize].as_mut().expect("a live token");
        on(Event::Read { id: slot.id, conn: &slot.conn, buf: &mut slot.buf });
        if slot.conn.closed.get() {
            slot.ended = true;
        } else if slot.conn.out.borrow().len_bytes() > self.max_unsent {
            self.paused.push(token);
        } else {
            self.recv(token);
        }
    }

    /// A send on `token` completed with `res`.
    fn sent(&mut self, token: u32, res: i32) {
        let slot = self.slots[token as usize].as_mut().expect("a slot with an operation in flight is held");
        let (bytes, at) = slot.sending.take().expect("a send completed");
        if res < 0 && res != -libc::EAGAIN && res != -libc::EINTR {
            // The client is gone: nothing more can be sent.
            slot.conn.abort();
            return;
        }
        let at = at + res.max(0) as usize;
        if at < bytes.len() {
            slot.sending = Some((bytes, at));
            return self.submit_send(token);
        }
        slot.conn.out.borrow_mut().recycle(bytes);
        self.send_next(token);
    }

    /// Starts sending what `token`'s connection has queued, if anything.
    fn send_next(&mut self, token: u32) {
        let slot = self.slots[token as usize].as_mut().expect("a live token");
        debug_assert!(slot.sending.is_none());
        let bytes = slot.conn.out.borrow_mut().take();
        if bytes.is_empty() {
            slot.conn.out.borrow_mut().recycle(bytes);
            return;
        }
        slot.sending = Some((bytes, 0));
        self.submit_send(token);
    }

    /// Closes `token`'s socket once its connection is closing and nothing
    /// is left to send: shut down (which ends a receive in flight), then,
    /// with nothing in flight, closed and its slot freed.
    fn settle(&mut self, token: u32, on: &mut impl FnMut(Event<'_>)) {
        let Some(slot) = self.slots[token as usize].as_mut() else { return };
        if !slot.conn.closed.get() || slot.sending.is_some() || !slot.conn.out.borrow().is_empty() {
            return;
        }
        slot.ended = true;
        if !slot.shut {
            slot.shut = true;
            // SAFETY: shutdown(2) on the descriptor the slot owns; it does
            // not close it, so no operation in flight outlives its socket.
            unsafe {
                libc::shutdown(slot.fd.as_raw_fd(), libc::SHUT_RDWR);
            }
        }
        if slot.reading {
            return;
        }
        let slot = self.slots[token as usize].take().expect("held above");
        slot.conn.unwatch_socket();
        self.paused.retain(|&t| t != token);
        self.fresh.retain(|&t| t != token);
        self.free.push(token);
        on(Event::Gone { id: slot.id });
    }

    fn recv(&mut self, token: u32) {
        let Some(slot) = self.slots[token as usize].as_mut() else { return };
        if slot.reading || slot.ended || slot.conn.closed.get() {
            return;
        }
        slot.reading = true;
        let spare = slot.buf.spare();
        let len = spare.len().min(u32::MAX as usize) as u32;
        let e = opcode::Recv::new(types::Fd(slot.fd.as_raw_fd()), spare.as_mut_ptr(), len)
            .build()
            .user_data(u64::from(token) << 1 | RECV);
        // SAFETY: the receive writes `len` bytes at most into the buffer's
        // spare room, which stays where it is (the slot keeps the buffer,
        // and nothing resizes it) until the completion is reaped; the slot
        // (and its descriptor) outlives the operation (`settle`, `Drop`).
        if !unsafe { self.push(&e) } {
            self.slots[token as usize].as_mut().expect("a live token").reading = false;
            self.failed(token);
        }
    }

    /// An operation on `token` could not be queued (and its flag was
    /// cleared; the other one may still be in flight): the connection is
    /// aborted, its pending answers dropped, as for a client that left.
    fn failed(&mut self, token: u32) {
        let slot = self.slots[token as usize].as_mut().expect("a live token");
        slot.conn.abort();
        slot.ended = true;
        self.settle_later(token);
    }

    /// `settle` outside `reap`: a socket closed is reported by the next.
    fn settle_later(&mut self, token: u32) {
        let mut gone = std::mem::take(&mut self.gone);
        self.settle(token, &mut |e| {
            if let Event::Gone { id } = e {
                gone.push(id);
            }
        });
        self.gone = gone;
    }

    fn submit_send(&mut self, token: u32) {
        let slot = self.slots[token as usize].as_ref().expect("a live token");
        let (bytes, at) = slot.sending.as_ref().expect("bytes to send");
        let rest = &bytes[*at..];
        let len = rest.len().min(u32::MAX as usize) as u32;
        let e = opcode::Send::new(types::Fd(slot.fd.as_raw_fd()), rest.as_ptr(), len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(u64::from(token) << 1 | SEND);
        // SAFETY: the bytes stay in the slot (`sending`), unmoved, until
        // the completion is reaped; the slot outlives the operation.
        if !unsafe { self.push(&e) } {
            self.slots[token as usize].as_mut().expect("a live token").sending = None;
            self.failed(token);
        }
    }

    /// Queues `e`, submitting what is queued first if the queue is full;
    /// false if the kernel takes nothing (out of memory), `e` not queued.
    ///
    /// # Safety
    /// The buffers `e` names must stay valid until its completion.
    unsafe fn push(&mut self, e: &io_uring::squeue::Entry) -> bool {
        for _ in 0..3 {
            // SAFETY: the caller's promise.
            if unsafe { self.ring.submission().push(e) }.is_ok() {
                self.in_flight += 1;
                self.queued = true;
                return true;
            }
            // Full: the kernel copies the entries out as it is entered.
            let _ = self.ring.submit();
        }
        false
    }
}

/// The socket of a glommio `stream` (accepted or connected there), as a
/// descriptor of its own for a ring to adopt; the stream is closed, which
/// leaves the socket open through the copy.
pub fn take_socket(stream: glommio::net::TcpStream) -> std::io::Result<OwnedFd> {
    // SAFETY: fcntl(2) duplicating a descriptor the stream holds open; a
    // non-negative result is a new descriptor owned only here.
    let fd = unsafe { libc::fcntl(stream.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Steps of 1 ms a stopping shard gives its sockets to send what they hold
/// (`close_all`).
const CLOSE_STEPS: usize = 100;

/// Closes every connection on the ring in `sockets` when its shard stops:
/// each closed, what each holds sent for `CLOSE_STEPS` steps of 1 ms at
/// most (a peer that reads slowly loses the rest), then every socket
/// aborted. The ring is borrowed only for a step, never across a wait.
pub async fn close_all(sockets: &std::cell::RefCell<Sockets>) {
    for end in [Conn::close, Conn::abort] {
        for slot in sockets.borrow().slots.iter().flatten() {
            end(&slot.conn);
        }
        for _ in 0..CLOSE_STEPS {
            let closed = {
                let mut s = sockets.borrow_mut();
                s.flush();
                s.reap(|_| {});
                s.is_empty()
            };
            if closed {
                return;
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }
}

impl Drop for Sockets {
    /// The kernel may still write into a slot's buffer or read a send's
    /// bytes while their operations are in flight: every socket is shut
    /// down (which ends them) and the ring waited on until they complete.
    /// If some never do, their memory is leaked rather than freed under
    /// the kernel.
    fn drop(&mut self) {
        for slot in self.slots.iter().flatten() {
            // SAFETY: shutdown(2) on a descriptor the slot owns.
            unsafe {
                libc::shutdown(slot.fd.as_raw_fd(), libc::SHUT_RDWR);
            }
        }
        let wait = types::Timespec::new().nsec(10_000_000);
        for _ in 0..100 {
            if self.in_flight == 0 {
                return;
            }
            let args = types::SubmitArgs::new().timespec(&wait);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            let n = self.ring.completion().count();
            self.in_flight -= n;
        }
        if self.in_flight > 0 {
            std::mem::forget(std::mem::take(&mut self.slots));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_wire::{encode, fb, Message};
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::OwnedFd;

    fn msg(i: u64) -> Message {
        Message::Dropped(fb::Dropped { requests: Some(vec![i; 3]), reason: fb::DropReason::Shed, message: None })
    }

    /// A connected pair: the client's stream (whose reads fail after 5 s
    /// rather than hang a test), and the server side's socket.
    fn pair() -> (TcpStream, OwnedFd) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let (server, _) = l.accept().unwrap();
        (client, OwnedFd::from(server))
    }

    /// What `reap` reports, as (kind, id, frames read), until `until` holds
    /// of everything reported so far (or about 2 s pass).
    fn reap_until(s: &mut Sockets, until: impl Fn(&[(char, u64, usize)]) -> bool) -> Vec<(char, u64, usize)> {
        let mut seen = Vec::new();
        for _ in 0..2000 {
            s.flush();
            s.reap(|e| match e {
                Event::Read { id, buf, .. } => {
                    let mut n = 0;
                    while let Ok(Some(_)) = buf.next_raw() {
                        n += 1;
                    }
                    seen.push(('r', id, n));
                }
                Event::Ended { id } => seen.push(('e', id, 0)),
                Event::Gone { id } => seen.push(('g', id, 0)),
            });
            if until(&seen) {
                return seen;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("not seen in time: {seen:?}");
    }

    fn frames(seen: &[(char, u64, usize)]) -> usize {
        seen.iter().filter(|e| e.0 == 'r').map(|e| e.2).sum()
    }

    #[test]
    fn frames_in_and_answers_out_then_the_client_leaves() {
        let mut s = Sockets::new(1 << 20, None).unwrap();
        let (mut client, fd) = pair();
        let conn = s.adopt(7, fd, FrameBuf::default()).unwrap();
        assert_eq!(s.len(), 1);
        for i in 0..3 {
            client.write_all(&encode(&msg(i)).unwrap()).unwrap();
        }
        let seen = reap_until(&mut s, |seen| frames(seen) == 3);
        assert!(seen.iter().all(|e| e.1 == 7));
        // Two answers queued, sent in one write by the next flush.
        conn.send(&msg(10)).unwrap();
        conn.send(&msg(11)).unwrap();
        s.flush();
        let want = [encode(&msg(10)).unwrap(), encode(&msg(11)).unwrap()].concat();
        let mut got = vec![0; want.len()];
        client.read_exact(&mut got).unwrap();
        assert_eq!(got, want);
        drop(client);
        let seen = reap_until(&mut s, |seen| seen.iter().any(|e| e.0 == 'g'));
        assert_eq!(seen.iter().filter(|e| e.0 == 'e').count(), 1, "ended once: {seen:?}");
        assert!(conn.closed.get());
        assert!(s.is_empty());
    }

    /// A socket adopted with bytes already read from it (a peer's frames
    /// past its greeting) has them handed over first, in order, then
    /// what arrives after (on a ring made to signal another's eventfd).
    #[test]
    fn bytes_read_before_adoption_come_first() {
        let first = Sockets::new(1 << 20, None).unwrap();
        let mut s = Sockets::new(1 << 20, Some(first.wake_fd())).unwrap();
        let (mut client, fd) = pair();
        let mut buf = FrameBuf::default();
        let before = [encode(&msg(0)).unwrap(), encode(&msg(1)).unwrap()].concat();
        buf.spare()[..before.len()].copy_from_slice(&before);
        buf.filled(before.len());
        let _conn = s.adopt(4, fd, buf).unwrap();
        assert!(s.ready(), "the bytes read before wait for the next reap");
        let seen = reap_until(&mut s, |seen| frames(seen) == 2);
        assert_eq!(seen, [('r', 4, 2)], "both frames, before any receive completed");
        client.write_all(&encode(&msg(2)).unwrap()).unwrap();
        reap_until(&mut s, |seen| frames(seen) == 1);
    }

    #[test]
    fn a_close_sends_what_is_pending_first() {
        let mut s = Sockets::new(1 << 20, None).unwrap();
        let (mut client, fd) = pair();
        let conn = s.adopt(1, fd, FrameBuf::default()).unwrap();
        conn.send(&msg(5)).unwrap();
        conn.close();
        reap_until(&mut s, |seen| seen.iter().any(|e| e.0 == 'g'));
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(got, encode(&msg(5)).unwrap(), "the answer, then end of stream");
    }

    #[test]
    fn a_client_that_does_not_read_is_not_read_until_it_does() {
        // Past 1 byte of answers unsent, its requests wait.
        let mut s = Sockets::new(1, None).unwrap();
        let (mut client, fd) = pair();
        let conn = s.adopt(2, fd, FrameBuf::default()).unwrap();
        // Far more than the socket buffers hold: a send stays in flight.
        let big = Message::Dropped(fb::Dropped {
            requests: Some(vec![1; 1 << 20]),
            reason: fb::DropReason::Shed,
            message: None,
        });
        // Into the send (which stalls: the client does not read), then
        // held in the outbox behind it: past the bound.
        for _ in 0..8 {
            conn.send(&big).unwrap();
        }
        s.flush();
        for _ in 0..8 {
            conn.send(&big).unwrap();
        }
        client.write_all(&[encode(&msg(1)).unwrap(), encode(&msg(2)).unwrap()].concat()).unwrap();
        // The read that finds the answers piled up is handled; the next
        // one is not armed.
        let seen = reap_until(&mut s, |seen| frames(seen) >= 1);
        let before = frames(&seen);
        client.write_all(&encode(&msg(3)).unwrap()).unwrap();
        for _ in 0..50 {
            s.flush();
            s.reap(|e| assert!(!matches!(e, Event::Read { .. }), "read while the client does not"));
            std::thread::sleep(Duration::from_millis(1));
        }
        // The client reads everything: its request is read at last.
        let reader = std::thread::spawn(move || {
            let mut sink = vec![0; 1 << 20];
            while client.read(&mut sink).is_ok_and(|n| n > 0) {}
        });
        reap_until(&mut s, |seen| frames(seen) + before == 3);
        conn.abort();
        reap_until(&mut s, |seen| seen.iter().any(|e| e.0 == 'g'));
        reader.join().unwrap();
    }

    #[test]
    fn dropping_the_ring_with_operations_in_flight_closes_the_sockets() {
        let mut s = Sockets::new(1 << 20, None).unwrap();
        let (mut client, fd) = pair();
        let _conn = s.adopt(3, fd, FrameBuf::default()).unwrap();
        s.flush();
        assert_eq!(s.in_flight, 1, "a receive waits for bytes");
        drop(s);
        let mut b = [0u8; 1];
        assert_eq!(client.read(&mut b).unwrap(), 0, "the server's side is shut down");
    }
}
