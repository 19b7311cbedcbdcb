//! The frontend shard: the TCP listener, one task pair per client
//! connection (a reader running the connection's state machine, a writer
//! flushing its answers), and the pump that exchanges envelopes with the
//! scheduler shard.
//!
//! A connection's life: frames are read into a `FrameBuf` and handled one
//! by one — an `InferRequest` is admitted (its metadata queued for the
//! scheduler) or answered with an error at once; a frame whose payload
//! does not decode, or of a kind clients do not send, gets a typed error
//! answer and the connection goes on; a bad header gets a `Malformed`
//! answer and the connection closes (the stream cannot be resynchronised).
//! Answers are appended to the connection's `Outbox`, and the writer sends
//! everything pending in one write. While a client leaves more than
//! `MAX_UNSENT` bytes of answers unread, its reader stops reading
//! (backpressure). When a client goes, its requests still finish; their
//! answers are counted as orphaned.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use baton_net::framing::{FrameBuf, Outbox};
use baton_net::mesh::ShardLinks;
use baton_wire::{fb, Message};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::{TcpListener, TcpStream};

use super::{pause, IDLE, SCHED_SHARD};
use crate::clock::Clock;
use crate::models::ModelTable;
use crate::publish::Published;
use crate::roles::frontend::{Answer, ConnId, Frontend, FrontendStats};
use crate::roles::{Addr, Envelope};

/// Answer bytes a client may leave unread before its requests stop being read.
const MAX_UNSENT: usize = 8 << 20;

pub struct Report {
    pub stats: FrontendStats,
    pub connections: u64,
    pub bad_frames: u64,
    pub held_at_stop: u64,
}

struct Conn {
    out: RefCell<Outbox>,
    /// Wakes the writer; holding one pending wake-up is enough.
    wake: LocalSender<()>,
    closed: Cell<bool>,
}

impl Conn {
    fn send(&self, m: &Message) {
        // Answers are small and bounded by the decoder's limits; one that
        // could not be framed would be a bug in the frontend role.
        self.out.borrow_mut().push(m).expect("answers fit a frame");
        let _ = self.wake.try_send(());
    }
}

struct Shard {
    fe: Frontend,
    table: Arc<Published<ModelTable>>,
    clock: Clock,
    conns: HashMap<ConnId, Rc<Conn>>,
    to_sched: VecDeque<Envelope>,
    connections: u64,
    bad_frames: u64,
}

impl Shard {
    fn answer(&mut self, answers: &mut Vec<Answer>) {
        for (conn, a) in answers.drain(..) {
            match self.conns.get(&conn) {
                Some(c) if !c.closed.get() => c.send(&Message::InferResponse(a)),
                _ => self.fe.orphan(),
            }
        }
    }

    /// One frame from connection `conn`.
    fn on_frame(&mut self, conn: &Conn, id: ConnId, msg: Message) {
        match msg {
            Message::InferRequest(req) => {
                let now = self.clock.now();
                let admitted = self.table.read(|t| self.fe.admit(now, id, req, t));
                match admitted {
                    Ok(meta) => {
                        self.to_sched.push_back(Envelope { to: Addr::Scheduler, msg: Message::RequestMeta(meta) })
                    }
                    Err(e) => conn.send(&Message::InferResponse(e)),
                }
            }
            other => {
                let why = format!("{:?} is not a message clients send", other.kind());
                conn.send(&error_answer(fb::ErrorCode::UnexpectedKind, why));
            }
        }
    }

    fn on_envelope(&mut self, e: Envelope, answers: &mut Vec<Answer>) {
        let now = self.clock.now();
        match e.msg {
            Message::Results(r) => self.fe.on_results(now, r, answers),
            Message::Dropped(d) => self.fe.on_dropped(d, answers),
            Message::FetchInputs(f) => {
                let inputs = self.fe.inputs(&f);
                self.to_sched.push_back(inputs);
            }
            other => unreachable!("the scheduler shard sent a frontend {:?}", other.kind()),
        }
    }
}

fn error_answer(code: fb::ErrorCode, message: String) -> Message {
    Message::InferResponse(fb::InferResponse {
        status: fb::Status::Error,
        error_code: code,
        message: Some(message),
        ..Default::default()
    })
}

pub async fn run(
    listen: SocketAddr,
    addr_tx: mpsc::Sender<std::io::Result<SocketAddr>>,
    table: Arc<Published<ModelTable>>,
    capacity: usize,
    mut links: ShardLinks<Envelope>,
    clock: Clock,
    stop: Arc<AtomicBool>,
) -> Report {
    let listener = match TcpListener::bind(listen).and_then(|l| Ok((l.local_addr()?, l))) {
        Ok((addr, l)) => {
            let _ = addr_tx.send(Ok(addr));
            l
        }
        Err(e) => {
            let _ = addr_tx.send(Err(std::io::Error::other(e.to_string())));
            return Report { stats: FrontendStats::default(), connections: 0, bad_frames: 0, held_at_stop: 0 };
        }
    };
    let shard = Rc::new(RefCell::new(Shard {
        fe: Frontend::new(0, capacity),
        table,
        clock,
        conns: HashMap::new(),
        to_sched: VecDeque::new(),
        connections: 0,
        bad_frames: 0,
    }));
    glommio::spawn_local(accept(listener, Rc::clone(&shard))).detach();

    let mut incoming = Vec::new();
    let mut answers = Vec::new();
    while !stop.load(Ordering::Acquire) {
        links.poll(4096, |_, e| incoming.push(e));
        let mut busy = !incoming.is_empty();
        {
            let mut s = shard.borrow_mut();
            for e in incoming.drain(..) {
                s.on_envelope(e, &mut answers);
            }
            s.answer(&mut answers);
            if !s.to_sched.is_empty() {
                let _ = links.send_batch(SCHED_SHARD, &mut s.to_sched);
                busy = true;
            }
        }
        pause(busy, None).await;
    }
    // Stopping: what is still held is answered, so no client waits forever.
    let (report, conns) = {
        let mut s = shard.borrow_mut();
        let held = s.fe.held() as u64;
        s.fe.drop_all(&mut answers);
        s.answer(&mut answers);
        let conns: Vec<Rc<Conn>> = s.conns.values().cloned().collect();
        (Report { stats: s.fe.stats, connections: s.connections, bad_frames: s.bad_frames, held_at_stop: held }, conns)
    };
    // Give the writers a moment to flush the last answers.
    for _ in 0..100 {
        if conns.iter().all(|c| c.out.borrow().is_empty() || c.closed.get()) {
            break;
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    report
}

async fn accept(listener: TcpListener, shard: Rc<RefCell<Shard>>) {
    let mut next: ConnId = 0;
    loop {
        let Ok(stream) = listener.accept().await else { continue };
        let _ = stream.set_nodelay(true);
        next += 1;
        shard.borrow_mut().connections += 1;
        glommio::spawn_local(connection(stream, next, Rc::clone(&shard))).detach();
    }
}

async fn connection(stream: TcpStream, id: ConnId, shard: Rc<RefCell<Shard>>) {
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let (wake, woken) = local_channel::new_bounded(1);
    let conn = Rc::new(Conn { out: RefCell::new(Outbox::default()), wake, closed: Cell::new(false) });
    shard.borrow_mut().conns.insert(id, Rc::clone(&conn));

    let flusher = {
        let conn = Rc::clone(&conn);
        glommio::spawn_local(async move {
            let mut spare = Vec::new();
            while woken.recv().await.is_some() {
                let bytes = {
                    let mut out = conn.out.borrow_mut();
                    out.recycle(std::mem::take(&mut spare));
                    out.take()
                };
                if !bytes.is_empty() && writer.write_all(&bytes).await.is_err() {
                    break;
                }
                spare = bytes;
                if conn.closed.get() && conn.out.borrow().is_empty() {
                    break;
                }
            }
            conn.closed.set(true);
            let _ = writer.close().await;
        })
    };

    let mut buf = FrameBuf::default();
    'read: loop {
        while conn.out.borrow().len_bytes() > MAX_UNSENT {
            glommio::timer::sleep(IDLE).await;
        }
        let n = match reader.read(buf.spare()).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.filled(n);
        loop {
            match buf.next_frame() {
                Ok(None) => break,
                Ok(Some(Ok(msg))) => shard.borrow_mut().on_frame(&conn, id, msg),
                Ok(Some(Err(e))) => {
                    shard.borrow_mut().bad_frames += 1;
                    conn.send(&error_answer(fb::ErrorCode::Malformed, e.to_string()));
                }
                Err(e) => {
                    shard.borrow_mut().bad_frames += 1;
                    conn.send(&error_answer(fb::ErrorCode::Malformed, format!("{e}; closing the connection")));
                    break 'read;
                }
            }
        }
    }
    // The client is gone or sent a bad header: flush what is pending, close.
    shard.borrow_mut().conns.remove(&id);
    conn.closed.set(true);
    let _ = conn.wake.try_send(());
    drop(conn);
    flusher.await;
}
