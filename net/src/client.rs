//! A client of the binary protocol (`wire/PROTOCOL.md`) over blocking TCP:
//! `connect` gives a connection's two halves, so one thread can send while
//! another reads answers (requests pipeline; answers come in any order,
//! each carrying its request's `id`). `Client` is the simple round trip on
//! top. `baton load` is built on it.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use baton_wire::message::View;
use baton_wire::{fb, FrameError, Message};

use crate::framing::{FrameBuf, Outbox};

/// The sending half: requests are queued, then written together.
pub struct Sender {
    stream: TcpStream,
    out: Outbox,
}

/// The receiving half.
pub struct Receiver {
    stream: TcpStream,
    buf: FrameBuf,
}

/// What the receiving half read: an answer is read in place (verified,
/// not copied; `fb::InferResponse::try_from` makes it owned).
#[derive(Debug)]
pub enum Received<'a> {
    Answer(fb::InferResponseRef<'a>),
    /// A frame that is not an answer, or that does not decode (the server
    /// never sends one; counted by callers that care).
    Other,
}

/// Connects to a frontend (Nagle off: requests go out when flushed).
pub fn connect(addr: SocketAddr) -> io::Result<(Sender, Receiver)> {
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let reader = stream.try_clone()?;
    Ok((Sender { stream, out: Outbox::default() }, Receiver { stream: reader, buf: FrameBuf::default() }))
}

impl Sender {
    /// Queues `req`; refused, with nothing queued, if it does not fit a frame.
    pub fn queue(&mut self, req: fb::InferRequest) -> Result<(), FrameError> {
        self.queue_message(&Message::InferRequest(req))
    }

    /// Queues a message kept by the caller (a generator reusing one
    /// request's buffers); refused as `queue` is.
    pub fn queue_message(&mut self, m: &Message) -> Result<(), FrameError> {
        self.out.push(m)
    }

    /// Writes everything queued in one write.
    pub fn flush(&mut self) -> io::Result<()> {
        let bytes = self.out.take();
        self.stream.write_all(&bytes)?;
        self.out.recycle(bytes);
        Ok(())
    }

    /// Requests bytes queued and not written yet.
    pub fn queued_bytes(&self) -> usize {
        self.out.len_bytes()
    }

    /// Closes both directions: the receiving half's blocked read returns.
    pub fn close(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl Receiver {
    /// Reads what has arrived, blocking until something has, and hands each
    /// frame to `each`. Ok(false) once the server closed the connection.
    pub fn read(&mut self, mut each: impl FnMut(Received<'_>)) -> io::Result<bool> {
        let n = self.stream.read(self.buf.spare())?;
        if n == 0 {
            return Ok(false);
        }
        self.buf.filled(n);
        loop {
            match self.buf.next_view() {
                Ok(None) => return Ok(true),
                Ok(Some(Ok(View::InferResponse(r)))) => each(Received::Answer(r)),
                Ok(Some(_)) => each(Received::Other),
                // A bad header: the stream cannot be read on.
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
        }
    }
}

/// One connection used for one request at a time.
pub struct Client {
    tx: Sender,
    rx: Receiver,
    waiting: std::collections::VecDeque<fb::InferResponse>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> io::Result<Self> {
        let (tx, rx) = connect(addr)?;
        Ok(Self { tx, rx, waiting: Default::default() })
    }

    /// Sends `req` and waits for its answer (the one with its `id`).
    pub fn infer(&mut self, req: fb::InferRequest) -> io::Result<fb::InferResponse> {
        let id = req.id;
        self.tx.queue(req).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        self.tx.flush()?;
        loop {
            if let Some(i) = self.waiting.iter().position(|r| r.id == id) {
                return Ok(self.waiting.remove(i).expect("found"));
            }
            let (waiting, mut bad) = (&mut self.waiting, None);
            let open = self.rx.read(|r| {
                if let Received::Answer(a) = r {
                    match fb::InferResponse::try_from(a) {
                        Ok(a) => waiting.push_back(a),
                        Err(e) => bad = Some(e),
                    }
                }
            })?;
            if let Some(e) = bad {
                return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
            }
            if !open {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
            }
        }
    }
}
