//! # baton-wire — the wire protocol (not yet built)
//!
//! **Will own:** the flatbuffers schema (`*.fbs`) for client and cluster
//! messages, its generated code, framing (length + kind), verification on
//! receipt with depth and table limits, and typed decode errors.
//!
//! **Is not:** a transport (that is `baton-net`): it turns bytes into
//! verified messages and back, nothing more.
//!
//! Nothing is implemented yet: the protocol is the subject of its own issue.
