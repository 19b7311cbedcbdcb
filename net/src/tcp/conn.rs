//! One TCP connection's write side: answers and messages are appended to
//! its `Outbox`, and the socket ring that holds the socket (`uring.rs`)
//! sends everything pending in one write. Reading is the owner's business
//! (clients and peers read differently).

use std::cell::{Cell, RefCell};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Duration;

use crate::framing::Outbox;
use baton_wire::{fb, FrameError, Message};
use glommio::net::{TcpListener, TcpStream};

pub struct Conn {
    pub out: RefCell<Outbox>,
    /// The connection's number on its ring, and the ring's list of those
    /// with something to send (or to close), on which it goes once until
    /// the ring takes it off (`unlist`).
    token: u32,
    dirty: Dirty,
    listed: Cell<bool>,
    pub closed: Cell<bool>,
    /// The socket, for `abort`; set by an owner that keeps it open for as
    /// long as the connection is registered anywhere.
    socket: Cell<Option<RawFd>>,
}

/// A socket ring's list of connections to look at (`Conn::on_ring`).
pub type Dirty = Rc<RefCell<Vec<u32>>>;

impl Conn {
    /// A connection whose bytes the socket ring that owns `token` sends:
    /// each change for it puts `token` on `dirty`.
    pub fn on_ring(token: u32, dirty: Dirty) -> Rc<Conn> {
        Rc::new(Conn {
            out: RefCell::new(Outbox::default()),
            token,
            dirty,
            listed: Cell::new(false),
            closed: Cell::new(false),
            socket: Cell::new(None),
        })
    }

    /// The ring took this connection off its list (`on_ring`).
    pub fn unlist(&self) {
        self.listed.set(false);
    }

    fn wake(&self) {
        if !self.listed.replace(true) {
            self.dirty.borrow_mut().push(self.token);
        }
    }

    /// Queues `m` for the ring to send; a message too large for one frame is
    /// refused (nothing queued) for the caller to answer otherwise.
    pub fn send(&self, m: &Message) -> Result<(), FrameError> {
        self.out.borrow_mut().push(m)?;
        self.wake();
        Ok(())
    }

    /// `send` of an answer held by reference.
    pub fn send_answer(&self, a: &fb::InferResponse) -> Result<(), FrameError> {
        self.out.borrow_mut().push_answer(a)?;
        self.wake();
        Ok(())
    }

    /// `fd` is the connection's socket, which the owner keeps open until
    /// it calls `unwatch_socket` (so `abort` may shut it down meanwhile).
    pub fn watch_socket(&self, fd: RawFd) {
        self.socket.set(Some(fd));
    }

    /// The owner is about to close the socket: `abort` no longer touches it.
    pub fn unwatch_socket(&self) {
        self.socket.set(None);
    }

    /// Closes at once, dropping what is pending: the peer does not read, so
    /// flushing would wait for ever. The socket is shut down both ways, which
    /// ends a write the peer is not reading and the owner's read, and its
    /// close resets the connection: a peer blocked writing into a full
    /// window learns at once that nobody reads (a plain close after the
    /// last byte was read would leave it probing the zero window).
    pub fn abort(&self) {
        self.closed.set(true);
        self.out.borrow_mut().take();
        if let Some(fd) = self.socket.take() {
            let reset = libc::linger { l_onoff: 1, l_linger: 0 };
            // SAFETY: `fd` was set by `watch_socket`, whose caller keeps the
            // stream (and so the descriptor) open until it calls
            // `unwatch_socket`, which clears it; so it is still this
            // connection's socket, and `take` makes this the only call.
            // setsockopt(2) reads a `linger` that lives across the call;
            // shutdown(2) does not close the descriptor, so it cannot be
            // reused under a reader.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&reset as *const libc::linger).cast(),
                    std::mem::size_of::<libc::linger>() as libc::socklen_t,
                );
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
        self.wake();
    }

    /// Flushes what is pending, then closes.
    pub fn close(&self) {
        self.closed.set(true);
        self.wake();
    }
}

/// The pauses between failed accepts: doubling from the first to the last.
const MIN_ACCEPT_PAUSE: Duration = Duration::from_millis(1);
const MAX_ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// An accept loop's state between accepts: its pause, and the accepts
/// that failed since the loop last took the count.
#[derive(Default)]
pub struct Backoff {
    pause: Duration,
    pub failures: u64,
}

/// The next connection on `listener`. An accept that fails (out of file
/// descriptors, of memory for sockets) is retried after a pause that
/// doubles up to `MAX_ACCEPT_PAUSE`, instead of at once in a spin, and the
/// loop goes on: it ends only with its task.
pub async fn accept_backing_off(listener: &TcpListener, b: &mut Backoff) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok(s) => {
                b.pause = Duration::ZERO;
                return s;
            }
            Err(_) => {
                b.failures += 1;
                b.pause = (b.pause * 2).clamp(MIN_ACCEPT_PAUSE, MAX_ACCEPT_PAUSE);
                glommio::timer::sleep(b.pause).await;
            }
        }
    }
}
