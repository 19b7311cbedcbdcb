//! # baton-net — transports
//!
//! **Owns (so far):** the bounded lock-free SPSC ring (`ring`) that links
//! shards in-process, loom-checked. **Will own:** framed connections over
//! io_uring TCP (glommio), RDMA verbs (behind the `rdma` cargo feature) and
//! the in-process transport built on these rings, with the same interface;
//! flow control and backpressure.
//!
//! **Is not:** a codec (that is `baton-wire`) nor a scheduler.

pub mod ring;
mod sync;
