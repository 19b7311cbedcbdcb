//! One TCP connection's write side: answers and messages are appended to
//! its `Outbox` and a writer task sends everything pending in one write.
//! Reading is the owner's business (clients and peers read differently).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use baton_net::framing::Outbox;
use baton_wire::{FrameError, Message};
use futures_lite::io::WriteHalf;
use futures_lite::AsyncWriteExt;
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::TcpStream;
use glommio::task::JoinHandle;

pub struct Conn {
    pub out: RefCell<Outbox>,
    /// Wakes the writer; holding one pending wake-up is enough.
    wake: LocalSender<()>,
    pub closed: Cell<bool>,
}

impl Conn {
    /// A connection whose writer task flushes `writer`; the task ends when
    /// the connection closes (after flushing) or a write fails.
    pub fn spawn(mut writer: WriteHalf<TcpStream>) -> (Rc<Conn>, JoinHandle<()>) {
        let (wake, woken) = local_channel::new_bounded(1);
        let conn = Rc::new(Conn { out: RefCell::new(Outbox::default()), wake, closed: Cell::new(false) });
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
        let _ = self.wake.try_send(());
        Ok(())
    }

    /// Flushes what is pending, then closes.
    pub fn close(&self) {
        self.closed.set(true);
        let _ = self.wake.try_send(());
    }
}

/// Closes `conns`, each after flushing what it holds, and waits (at most
/// about 100 ms) for their writers to send it and shut their sockets.
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
}
