//! The role engines. Each is a state machine driven by messages and the
//! time it is handed (never read), so the same code runs under the shard
//! runtime, over TCP between processes, and in deterministic tests:
//!
//! - `frontend`: admits and validates client requests, holds their inputs,
//!   answers each exactly once;
//! - `scheduler`: feeds requests, completions and timers to a `baton-sched`
//!   policy and turns its decisions into batch plans and drops;
//! - `backend`: fetches a plan's inputs, runs it on its executor at
//!   `exec_at`, returns results to frontends and timings to the scheduler.
//!
//! Roles talk in `wire::Message`s addressed to roles (`Envelope`); the
//! runtime decides whether one travels through an in-process ring or a TCP
//! connection.

pub mod autoscaling;
pub mod backend;
pub mod decisions;
pub mod fetch;
pub mod frontend;
mod held;
pub mod offload;
pub mod outcomes;
pub mod overload;
pub mod queries;
pub mod request;
pub mod reserve;
pub mod scheduler;
pub mod symphony;

use baton_wire::Message;

/// Where a message goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Addr {
    Frontend(u32),
    /// The scheduler of sub-cluster `k` (0 where one scheduler serves
    /// the whole cluster: `serve`, and roles that are not partitioned).
    Scheduler(u32),
    Backend(u32),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    pub to: Addr,
    pub msg: Message,
}

/// A request id as the cluster knows it: the frontend that holds the
/// request in the top 16 bits, that frontend's sequence number below.
pub const FRONTEND_SHIFT: u32 = 48;

pub fn frontend_of(request: u64) -> u32 {
    (request >> FRONTEND_SHIFT) as u32
}

/// A request as `baton-sched` knows it, app included.
pub fn request_of(m: &baton_wire::fb::RequestMeta) -> baton_sched::types::Request {
    use baton_sched::types::{AppId, ModelId, Request, RequestId};
    Request {
        id: RequestId(m.id),
        model: ModelId(m.model),
        app: AppId(m.app),
        arrival: m.arrival_ns,
        deadline: m.deadline_ns,
    }
}

#[cfg(test)]
mod tests;
