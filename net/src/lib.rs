//! # baton-net — transports (not yet built)
//!
//! **Will own:** framed connections over io_uring TCP (glommio), RDMA verbs
//! (behind the `rdma` cargo feature) and an in-process transport of bounded
//! lock-free rings with the same interface; flow control and backpressure.
//!
//! **Is not:** a codec (that is `baton-wire`) nor a scheduler.
//!
//! Nothing is implemented yet: the transports are the subject of their own issue.
