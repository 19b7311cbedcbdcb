//! # baton-tools — the `baton` commands' library
//!
//! What the `baton` binary is made of beyond its command-line parsing, and
//! what harnesses (`baton-perf`) and tests reuse: the open-loop load
//! generator over the binary protocol (`load`, on `baton_net::client`) and
//! its overhead parts (`overhead`), scenario files and the built-in
//! scenarios (`scenarios`), and the policies' goodput side by side
//! (`policies`), and a supervisor that follows the autoscaler's advice
//! with backend processes (`supervise`). The product depends on no
//! harness.

pub mod faultproxy;
pub mod gap;
pub mod goodput;
pub mod load;
pub mod overhead;
pub mod partitioned;
pub mod policies;
pub mod repartition;
pub mod role_guard;
pub mod scenarios;
pub mod supervise;
