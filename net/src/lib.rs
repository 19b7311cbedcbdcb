//! # baton-net — transports
//!
//! **Owns (so far):** the bounded lock-free SPSC ring (`ring`, loom-checked)
//! and the in-process transport built on it: a mesh of rings between shards
//! with backpressure (`mesh`). **Will own:** framed connections over
//! io_uring TCP (glommio) and RDMA verbs (behind the `rdma` cargo feature).
//!
//! **Is not:** a codec (that is `baton-wire`) nor a scheduler.

pub mod framing;
pub mod mesh;
pub mod ring;
mod sync;
