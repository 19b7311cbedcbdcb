//! One TCP connection's write side: answers and messages are appended to
//! its `Outbox` and everything pending goes in one write — by a writer
//! task of its own (`spawn`: peers), or by the socket ring that reads it
//! (`on_ring`: a frontend's clients, `uring.rs`).
//! Reading is the owner's business (clients and peers read differently).

use std::cell::{Cell, RefCell};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Duration;

use crate::framing::Outbox;
use baton_wire::{fb, FrameError, Message};
use futures_lite::io::WriteHalf;
use futures_lite::AsyncWriteExt;
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use glommio::task::JoinHandle;

pub struct Conn {
    pub out: RefCell<Outbox>,
    wake: Wake,
    pub closed: Cell<bool>,
    /// The socket, for `abort`; set by an owner that keeps it open for as
    /// long as the connection is registered anywhere.
    socket: Cell<Option<RawFd>>,
}

/// Who sends what a connection's `Outbox` holds, and how it is told.
enum Wake {
    /// A writer task; holding one pending wake-up is enough.
    Task(LocalSender<()>),
    /// A socket ring: the connection's token goes on its list of those with
    /// something to send (or to close), once until the ring takes it.
    Ring { token: u32, dirty: Dirty, listed: Cell<bool> },
}

/// A socket ring's list of connections to look at (`Conn::on_ring`).
pub type Dirty = Rc<RefCell<Vec<u32>>>;

impl Conn {
    fn new(wake: Wake) -> Conn {
        Conn { out: RefCell::new(Outbox::default()), wake, closed: Cell::new(false), socket: Cell::new(None) }
    }

    /// A connection whose bytes the socket ring that owns `token` sends:
    /// each change for it puts `token` on `dirty`.
    pub fn on_ring(token: u32, dirty: Dirty) -> Rc<Conn> {
        Rc::new(Conn::new(Wake::Ring { token, dirty, listed: Cell::new(false) }))
    }

    /// The ring took this connection off its list (`on_ring`).
    pub fn unlist(&self) {
        if let Wake::Ring { listed, .. } = &self.wake {
            listed.set(false);
        }
    }

    fn wake(&self) {
        match &self.wake {
            Wake::Task(tx) => {
                let _ = tx.try_send(());
            }
            Wake::Ring { token, dirty, listed } => {
                if !listed.replace(true) {
                    dirty.borrow_mut().push(*token);
                }
            }
        }
    }

    /// A connection whose writer task flushes `writer`; the task ends when
    /// the connection closes (after flushing) or a write fails.
    pub fn spawn(mut writer: WriteHalf<TcpStream>) -> (Rc<Conn>, JoinHandle<()>) {
        let (wake, woken) = local_channel::new_bounded(1);
        let conn = Rc::new(Conn::new(Wake::Task(wake)));
        let c = Rc::clone(&conn);
        let task = glommio::spawn_local(async move {
            let mut spare = Vec::new();
            while woken.recv().await.is_some() {
                let bytes = {
                    let mut out = c.out.borrow_mut();
                    out.recycle(std::mem::take(&mut spare));
                    out.take()
                };
                if !bytes.is_empty() && writer.write_all(&bytes).await.is_err() {
                    break;
                }
                spare = bytes;
                if c.closed.get() && c.out.borrow().is_empty() {
                    break;
                }
            }
            c.closed.set(true);
            let _ = writer.close().await;
        })
        .detach();
        (conn, task)
    }

    /// Queues `m` for the writer; a message too large for one frame is
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
/// that failed so far.
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

/// Closes `conns`, each after flushing what it holds, and waits (at most
/// about 100 ms) for their writers to send it and shut their sockets; then
/// shuts down what is left (a peer still reading slowly loses the rest),
/// so that no task is left holding a socket open when the shard stops.
pub async fn close_all(conns: &[Rc<Conn>]) {
    for c in conns {
        c.close();
    }
    for _ in 0..100 {
        if conns.iter().all(|c| c.out.borrow().is_empty()) {
            break;
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    // One more turn for the writers to shut their sockets.
    glommio::timer::sleep(Duration::from_millis(2)).await;
    for c in conns {
        c.abort();
    }
    // And one for the readers and writers to see it and end.
    glommio::timer::sleep(Duration::from_millis(2)).await;
}
