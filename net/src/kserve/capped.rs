//! The gRPC listener's accepted connections, at most `max` open at once:
//! tonic serves whatever stream of connections it is given, so the cap is
//! kept here. A connection beyond it is closed at once (the client sees
//! the connection end: gRPC's UNAVAILABLE), and a failed accept (out of
//! descriptors) pauses the stream instead of ending it or spinning.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How long a failed accept pauses the stream.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);

pub struct Capped {
    listener: TcpListener,
    max: usize,
    open: Arc<AtomicUsize>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Capped {
    pub fn new(listener: TcpListener, max: usize) -> Self {
        Self { listener, max, open: Arc::default(), pause: None }
    }
}

impl Stream for Capped {
    type Item = std::io::Result<Counted>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(p) = self.pause.as_mut() {
                if p.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.pause = None;
            }
            match self.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => self.pause = Some(Box::pin(tokio::time::sleep(ACCEPT_PAUSE))),
                // Dropped: closed at once.
                Poll::Ready(Ok(_)) if self.open.load(Ordering::Acquire) >= self.max => {}
                Poll::Ready(Ok((stream, _))) => {
                    let _ = stream.set_nodelay(true);
                    self.open.fetch_add(1, Ordering::AcqRel);
                    return Poll::Ready(Some(Ok(Counted { stream, open: Arc::clone(&self.open) })));
                }
            }
        }
    }
}

/// An open connection, counted until dropped.
pub struct Counted {
    stream: TcpStream,
    open: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Connected for Counted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
