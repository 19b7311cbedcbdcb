//! The greeting between roles over TCP (`auth` says what is proven): a
//! role connecting to a peer (`connect`, retried while the peer is not up)
//! and the time an accepting role gives a peer to greet (`GREETING`,
//! `within`). What the greeted connection carries is the owner's business
//! (the engine's peer router).

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use baton_wire::{fb, Limits, Message};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

use super::auth::{Answer, AuthError, ClusterKey};
use super::uring::take_socket;
use crate::framing::{FrameBuf, Outbox};

/// How long an accepted role has to greet with a good proof.
pub const GREETING: Duration = Duration::from_secs(5);

/// `f`'s output, or `None` once `deadline` passes.
pub async fn within<T>(deadline: std::time::Instant, f: impl std::future::Future<Output = T>) -> Option<T> {
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    futures_lite::future::or(async { Some(f.await) }, async {
        glommio::timer::sleep(left).await;
        None
    })
    .await
}

/// A connection to a peer role, greeted: its socket (for a ring to adopt,
/// `uring::Sockets::adopt`), what was read past the greeting, and the
/// peer's own greeting.
pub type Greeted = (OwnedFd, FrameBuf, fb::Hello);

/// Connects to a peer role at `addr` and greets it (`baton_net::tcp::auth`) as the
/// roles `hellos` name, trying again (at pauses doubling from 20 ms to 1 s)
/// for `patience` while it is not up or the greeting fails (a peer restarting, a link down; also a peer with
/// another secret, which is only told apart by never succeeding). Each
/// greeting must end within `GREETING`.
pub async fn connect(
    addr: SocketAddr,
    key: &ClusterKey,
    hellos: &[fb::Hello],
    patience: Duration,
) -> std::io::Result<Greeted> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        match greet(addr, key, hellos).await {
            Ok(g) => return Ok(g),
            Err(e) if start.elapsed() >= patience => return Err(e),
            Err(_) => {
                glommio::timer::sleep(pause.min(patience.saturating_sub(start.elapsed()))).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// One attempt of `connect`. A failed one closes the connection.
async fn greet(addr: SocketAddr, key: &ClusterKey, hellos: &[fb::Hello]) -> std::io::Result<Greeted> {
    let mut stream = TcpStream::connect(addr).await?;
    let _ = stream.set_nodelay(true);
    let mut buf = FrameBuf::new(Limits::between_roles());
    let greeting = async {
        let challenge = next_hello(&mut stream, &mut buf).await?;
        let (answer, proven) = Answer::new(key, &challenge, hellos).map_err(std::io::Error::other)?;
        let mut out = Outbox::default();
        for h in proven {
            out.push(&Message::Hello(h)).expect("a Hello fits a frame");
        }
        stream.write_all(&out.take()).await?;
        let reply = next_hello(&mut stream, &mut buf).await?;
        answer.check(&reply).map_err(std::io::Error::other)?;
        Ok::<_, std::io::Error>(reply)
    };
    match within(std::time::Instant::now() + GREETING, greeting).await {
        Some(Ok(reply)) => Ok((take_socket(stream)?, buf, reply)),
        Some(Err(e)) => Err(e),
        None => Err(std::io::Error::other(format!("the peer did not greet within {GREETING:?}"))),
    }
}

/// The next frame, which must be a greeting.
async fn next_hello(stream: &mut TcpStream, buf: &mut FrameBuf) -> std::io::Result<fb::Hello> {
    loop {
        match buf.next_frame() {
            Ok(Some(Ok(Message::Hello(h)))) => return Ok(h),
            Ok(Some(_)) | Err(_) => return Err(std::io::Error::other(AuthError::Unproven)),
            Ok(None) => match stream.read(buf.spare()).await? {
                0 => {
                    let why = "the peer closed during the greeting (does it hold the same cluster secret?)";
                    return Err(std::io::Error::other(why));
                }
                n => buf.filled(n),
            },
        }
    }
}
