//! TCP on io_uring: what every role's sockets share, whatever they carry.
//! Connections are accepted or opened through glommio, then live on a
//! ring of their shard's own that its pump polls every round (`uring`):
//! a frontend's clients, and each role process's peers (`peers`, which
//! challenges and greets them). A connection's
//! write side gathers frames into one write (`conn`); listeners accept with a backoff when the process runs out of
//! descriptors (`conn::accept_backing_off`); role processes prove to each
//! other that they hold the cluster's secret before anything else passes
//! (`auth`) in a greeting (`greeting`). Reading, and what a frame means, is the owner's business:
//! the engine's frontend shard reads clients, its peer router reads roles.

pub mod auth;
pub mod conn;
pub mod greeting;
pub mod peers;
pub mod uring;
