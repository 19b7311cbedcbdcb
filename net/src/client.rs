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
    /// Bytes taken from `out` that a non-blocking write left (`flush_some`),
    /// and how many of them went.
    writing: Vec<u8>,
    written: usize,
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
    let tx = Sender { stream, out: Outbox::default(), writing: Vec::new(), written: 0 };
    Ok((tx, Receiver { stream: reader, buf: FrameBuf::default() }))
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
        self.stream.write_all(&self.writing[self.written..])?;
        self.written = self.writing.len();
        let bytes = self.out.take();
        self.stream.write_all(&bytes)?;
        self.out.recycle(bytes);
        Ok(())
    }

    /// Writes what the socket takes now, in order, without waiting (after
    /// `set_nonblocking(true)`); the rest stays queued for the next call.
    /// Ok(true) once nothing is left.
    pub fn flush_some(&mut self) -> io::Result<bool> {
        loop {
            if self.written == self.writing.len() {
                if self.out.is_empty() {
                    return Ok(true);
                }
                let done = std::mem::replace(&mut self.writing, self.out.take());
                self.out.recycle(done);
                self.written = 0;
            }
            match self.stream.write(&self.writing[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(k) => self.written += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether reads and writes on the connection (both halves) return
    /// `WouldBlock` instead of waiting.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.stream.set_nonblocking(on)
    }

    /// Requests bytes queued and not written yet.
    pub fn queued_bytes(&self) -> usize {
        self.out.len_bytes() + self.writing.len() - self.written
    }

    /// Closes both directions: the receiving half's blocked read returns.
    pub fn close(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl std::os::fd::AsRawFd for Sender {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }
}

impl Receiver {
    /// Reads what has arrived, blocking until something has (`WouldBlock`
    /// instead on a non-blocking connection), and hands each frame to
    /// `each`. Ok(false) once the server closed the connection.
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn request(id: u64) -> fb::InferRequest {
        let data = Some(vec![0u8; 1024]);
        let input = vec![fb::Tensor { name: None, dtype: fb::DType::F32, shape: Some(vec![256]), data }];
        fb::InferRequest { id, inputs: Some(input), ..Default::default() }
    }

    /// A peer that does not read fills the socket: `flush_some` keeps what
    /// did not go, and once the peer reads, everything arrives once, in
    /// the order it was queued.
    #[test]
    fn a_non_blocking_flush_keeps_what_the_socket_did_not_take() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut tx, _rx) = connect(listener.local_addr().unwrap()).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        tx.set_nonblocking(true).unwrap();
        let mut queued = 0u64;
        loop {
            for _ in 0..64 {
                tx.queue(request(queued)).unwrap();
                queued += 1;
            }
            if !tx.flush_some().unwrap() {
                break;
            }
            assert!(queued < 1_000_000, "the socket never filled");
        }
        assert!(tx.queued_bytes() > 0, "a refused write leaves its bytes queued");
        for _ in 0..10 {
            tx.queue(request(queued)).unwrap();
            queued += 1;
        }
        let reading = std::thread::spawn(move || {
            let (mut buf, mut ids) = (FrameBuf::default(), Vec::new());
            while (ids.len() as u64) < queued {
                let n = peer.read(buf.spare()).unwrap();
                assert!(n > 0, "closed after {} requests", ids.len());
                buf.filled(n);
                while let Some(frame) = buf.next_view().unwrap() {
                    match frame.unwrap() {
                        View::InferRequest(r) => ids.push(r.id),
                        other => panic!("not a request: {other:?}"),
                    }
                }
            }
            ids
        });
        while !tx.flush_some().unwrap() {
            std::thread::yield_now();
        }
        assert_eq!(tx.queued_bytes(), 0);
        assert_eq!(reading.join().unwrap(), (0..queued).collect::<Vec<_>>(), "each once, in order");
    }
}
