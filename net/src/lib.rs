//! # baton-net — transports
//!
//! **Owns:** the bounded lock-free SPSC ring (`ring`, loom-checked), the
//! in-process transport built on it — a mesh of rings between shards with
//! backpressure (`mesh`) — and framing for byte streams such as TCP
//! (`framing`: `FrameBuf` turns received bytes into verified messages,
//! `Outbox` gathers encoded frames for one write), and TCP on io_uring
//! (`tcp`, glommio): a connection's gathered writes, accepting with a
//! backoff, and the cluster secret's greeting between role processes. The
//! KServe v2 gateway (`kserve`, HTTP/REST and gRPC on a tokio thread of its
//! own) hands calls to a frontend through the `Door` trait. One-sided input
//! fetch (`rdma`): the data path behind two traits, a loopback fabric for
//! one process, and libibverbs behind the cargo feature `rdma`.
//!
//! **Is not:** a codec (that is `baton-wire`) nor a scheduler.

pub mod client;
pub mod framing;
#[cfg(feature = "kserve")]
pub mod kserve;
pub mod mesh;
pub mod rdma;
pub mod ring;
mod sync;
#[cfg(feature = "tcp")]
pub mod tcp;
