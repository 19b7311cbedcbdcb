//! A policy's decisions as messages: each dispatch becomes a `BatchPlan`
//! for its backend (numbered; batch ids are unique across the scheduler's
//! shards because each numbers from its own base), and drops become
//! `Dropped` lists grouped per frontend and reason, chunked within the wire
//! decoder's id limit so they also cross TCP. A dispatch the engine cannot
//! carry out as the policy decided it is refused (`Refused`), never sent
//! changed.

use std::collections::HashMap;

use baton_sched::time::Nanos;
use baton_sched::types::{BatchPlan, DropReason, Output};
use baton_wire::{fb, Limits, Message};

use super::{frontend_of, Addr, Envelope};

pub fn wire_reason(r: DropReason) -> fb::DropReason {
    match r {
        DropReason::DeadlineUnreachable => fb::DropReason::CannotMeetDeadline,
        DropReason::Shed => fb::DropReason::Shed,
        DropReason::QueueFull => fb::DropReason::QueueFull,
        DropReason::NoBackend => fb::DropReason::NoBackend,
        DropReason::BackendFailed => fb::DropReason::BackendFailed,
    }
}

/// A dispatch refused instead of sent: it runs a subnet of a supernet or
/// a prefix group's shared prefix. The engine serves neither (the model
/// table refuses supernets and prefix groups), and a wire `BatchPlan` has
/// no field for a prefix and no "none" value for `subnet`, so sending the
/// plan would run the model's own profile in their place. Its requests are
/// answered `NoBackend`; the plan comes back so the caller can return its
/// backend to the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub plan: BatchPlan,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.plan;
        write!(f, "a batch of model {} ", p.model.0)?;
        match (p.subnet, p.prefix) {
            (Some(s), _) => write!(f, "on subnet {s}: the engine runs no subnets"),
            _ => write!(f, "sharing a prefix: the engine runs no prefix batches"),
        }
    }
}

impl std::error::Error for Refused {}

pub struct Decisions {
    /// l(b) of each model, b = 1.., for a plan's expected finish.
    latency: Vec<Vec<Nanos>>,
    next_batch: u64,
    drops: Vec<(u32, fb::DropReason, Vec<u64>)>,
    /// When the scheduler saw each request it holds (for its answer's
    /// timing); an entry leaves with the request's dispatch or drop.
    seen: HashMap<u64, Nanos>,
    pub batches: u64,
    pub dropped: u64,
}

impl Decisions {
    /// Batch ids start at `first_batch`.
    pub fn new(latency: Vec<Vec<Nanos>>, first_batch: u64) -> Self {
        assert!(latency.iter().all(|l| !l.is_empty()), "every model has l(1)");
        Self { latency, next_batch: first_batch, drops: Vec::new(), seen: HashMap::new(), batches: 0, dropped: 0 }
    }

    /// The scheduler sees request `id` at `now`.
    pub fn saw(&mut self, id: u64, now: Nanos) {
        self.seen.insert(id, now);
    }

    /// Requests seen and not yet dispatched or dropped.
    pub fn holding(&self) -> usize {
        self.seen.len()
    }

    /// l(1) of `model`.
    pub fn solo(&self, model: usize) -> Nanos {
        self.latency[model][0]
    }

    /// Turns one decision into messages; a dispatch's plan comes back with
    /// its batch id. Drops wait in groups until `flush`.
    pub fn push(&mut self, o: Output, out: &mut Vec<Envelope>) -> Result<Option<(u64, BatchPlan)>, Refused> {
        match o {
            Output::Dispatch(plan) if plan.subnet.is_some() || plan.prefix.is_some() => {
                for r in &plan.requests {
                    self.drop(r.0, fb::DropReason::NoBackend);
                }
                Err(Refused { plan })
            }
            Output::Dispatch(plan) => {
                let batch_id = self.next_batch;
                self.next_batch += 1;
                self.batches += 1;
                let requests: Vec<u64> = plan.requests.iter().map(|r| r.0).collect();
                let frontends = requests.iter().map(|&r| frontend_of(r)).collect();
                let seen = requests.iter().map(|r| self.seen.remove(r).unwrap_or(0)).collect();
                let l = self.latency[plan.model.index()].get(requests.len() - 1).copied().unwrap_or(0);
                let msg = fb::BatchPlan {
                    batch_id,
                    model: plan.model.0,
                    backend: plan.backend.0,
                    exec_at_ns: plan.exec_at,
                    expected_finish_ns: plan.exec_at + l,
                    subnet: 0,
                    requests: Some(requests),
                    frontends: Some(frontends),
                    seen_ns: Some(seen),
                };
                out.push(Envelope { to: Addr::Backend(plan.backend.0), msg: Message::BatchPlan(msg) });
                Ok(Some((batch_id, plan)))
            }
            Output::Dropped { request, reason } => {
                self.drop(request.0, wire_reason(reason));
                Ok(None)
            }
        }
    }

    pub fn drop(&mut self, request: u64, reason: fb::DropReason) {
        self.dropped += 1;
        self.seen.remove(&request);
        let fe = frontend_of(request);
        match self.drops.iter_mut().find(|d| d.0 == fe && d.1 == reason) {
            Some(d) => d.2.push(request),
            None => self.drops.push((fe, reason, vec![request])),
        }
    }

    /// Sends the grouped drops.
    pub fn flush(&mut self, out: &mut Vec<Envelope>) {
        for (fe, reason, ids) in self.drops.drain(..) {
            out.extend(ids.chunks(Limits::default().max_ids).map(|c| Envelope {
                to: Addr::Frontend(fe),
                msg: Message::Dropped(fb::Dropped { requests: Some(c.to_vec()), reason }),
            }));
        }
    }
}
