//! A policy's decisions as messages: each dispatch becomes a `BatchPlan`
//! for its backend (numbered; batch ids are unique across the scheduler's
//! shards because each numbers from its own base), and drops become
//! `Dropped` lists grouped per frontend and reason, chunked within the wire
//! decoder's id limit so they also cross TCP. A plan names the subnet
//! it runs (SuperServe). A dispatch the engine cannot carry out as the
//! policy decided it is refused (`Refused`), never sent changed.
//!
//! It also remembers, for each request between its arrival and its
//! dispatch or drop, when the scheduler saw it and its app: the first for
//! the answer's timing, the second for the policy's completion record
//! (Orloj learns per app).

use baton_sched::time::Nanos;
use baton_sched::types::{AppId, BatchPlan, DropReason, Output, Request, RequestId};
use baton_wire::{fb, Limits, Message};
use rustc_hash::FxHashMap;

use super::{frontend_of, Addr, Envelope};
use crate::models::ModelTable;
use crate::pool;

pub fn wire_reason(r: DropReason) -> fb::DropReason {
    match r {
        DropReason::DeadlineUnreachable => fb::DropReason::CannotMeetDeadline,
        DropReason::Shed => fb::DropReason::Shed,
        DropReason::QueueFull => fb::DropReason::QueueFull,
        DropReason::NoBackend => fb::DropReason::NoBackend,
        DropReason::BackendFailed => fb::DropReason::BackendFailed,
    }
}

/// A dispatch refused instead of sent: it runs a prefix group the model
/// table does not have, or holds a request of a model outside its group —
/// a policy's bug, which sending would turn into a wrong run. Its requests
/// are answered `NoBackend`; the plan comes back so the caller can return
/// its backend to the policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub plan: BatchPlan,
    /// Its members' apps, in plan order.
    pub apps: Vec<AppId>,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a batch of model {} sharing a prefix group the table does not hold it in", self.plan.model.0)
    }
}

impl std::error::Error for Refused {}

/// A plan sent: its batch id, and its members' apps in plan order.
#[derive(Clone, Debug, PartialEq)]
pub struct Sent {
    pub batch_id: u64,
    pub plan: BatchPlan,
    pub apps: Vec<AppId>,
    /// Each member's deadline, if kept (`Decisions::keep_deadlines`).
    pub deadlines: Vec<Nanos>,
}

/// What the scheduler remembers of a request it holds.
#[derive(Clone, Copy, Debug)]
struct Seen {
    at: Nanos,
    deadline: Nanos,
    app: AppId,
    model: u32,
    /// Where its input lies for an RDMA READ, if registered.
    input: Option<fb::InputAt>,
}

pub struct Decisions {
    /// The models: l(b) for a plan's expected finish, apps per model.
    table: ModelTable,
    next_batch: u64,
    drops: Vec<(u32, fb::DropReason, Vec<u64>)>,
    /// When the scheduler saw each request it holds (for its answer's
    /// timing), its app and its model (a prefix batch's heads); an entry
    /// leaves with the request's dispatch or drop.
    seen: FxHashMap<u64, Seen>,
    pub batches: u64,
    pub dropped: u64,
    pub relayouts: u64,
    /// Whether a dispatch says its members' deadlines (`Sent::deadlines`;
    /// else empty: no allocation per batch for nobody).
    pub keep_deadlines: bool,
}

impl Decisions {
    /// Batch ids start at `first_batch`.
    pub fn new(table: ModelTable, first_batch: u64) -> Self {
        assert!(table.models.iter().all(|m| !m.latency.is_empty()), "every model has l(1)");
        let (drops, seen) = (Vec::new(), FxHashMap::default());
        let (batches, dropped, relayouts) = (0, 0, 0);
        Self { table, next_batch: first_batch, drops, seen, batches, dropped, relayouts, keep_deadlines: false }
    }

    /// Whether request metadata names a model and one of its apps; a peer
    /// naming anything else is refused, never served as something else.
    pub fn knows(&self, m: &fb::RequestMeta) -> bool {
        self.table.models.get(m.model as usize).is_some_and(|e| (m.app as usize) < e.apps.len())
    }

    /// The scheduler sees request `r` at `now`, its input registered at
    /// `input` if it says so (the plan passes it on to the backend).
    pub fn saw(&mut self, r: &Request, now: Nanos, input: Option<fb::InputAt>) {
        self.seen.insert(r.id.0, Seen { at: now, deadline: r.deadline, app: r.app, model: r.model.0, input });
    }

    /// Requests seen and not yet dispatched or dropped.
    pub fn holding(&self) -> usize {
        self.seen.len()
    }

    /// What a request of a plan takes alone when its backend does not say
    /// (a model whose time does not depend on its input): l(1) of what the
    /// plan runs.
    pub fn table(&self) -> &ModelTable {
        &self.table
    }

    pub fn solo(&self, plan: &BatchPlan) -> Nanos {
        self.table.models[plan.model.index()].latency_of(plan.subnet)[0]
    }

    /// Turns one decision into messages; a dispatch comes back as `Sent`.
    /// Drops wait in groups until `flush`.
    pub fn push(&mut self, o: Output, out: &mut Vec<Envelope>) -> Result<Option<Sent>, Refused> {
        match o {
            Output::Dispatch(plan) => {
                let heads = match plan.prefix {
                    Some(g) => match self.heads(g.0 as usize, &plan.requests) {
                        Some(heads) => Some(heads),
                        None => {
                            let apps = plan.requests.iter().map(|r| self.seen.get(&r.0).map_or(AppId(0), |s| s.app));
                            let apps = apps.collect();
                            for r in &plan.requests {
                                self.drop(r.0, fb::DropReason::NoBackend);
                            }
                            return Err(Refused { plan, apps });
                        }
                    },
                    None => None,
                };
                let batch_id = self.next_batch;
                self.next_batch += 1;
                self.batches += 1;
                // The plan's lists, in buffers the backend gives back when
                // it is done with the plan (`pool`).
                let n = plan.requests.len();
                let (mut requests, mut frontends, mut seen) =
                    (pool::with_room(n), pool::with_room(n), pool::with_room(n));
                let (mut apps, mut deadlines, mut inputs) = (pool::with_room(n), Vec::new(), Vec::new());
                let unseen = Seen { at: 0, deadline: Nanos::MAX, app: AppId(0), model: plan.model.0, input: None };
                let none = fb::InputAt { addr: 0, rkey: 0, len: 0 };
                for (i, r) in plan.requests.iter().enumerate() {
                    let s = self.seen.remove(&r.0).unwrap_or(unseen);
                    requests.push(r.0);
                    frontends.push(frontend_of(r.0));
                    seen.push(s.at);
                    apps.push(s.app);
                    if self.keep_deadlines {
                        deadlines.push(s.deadline);
                    }
                    // Listed for every request once one has an input (those
                    // before it had none).
                    if s.input.is_some() || !inputs.is_empty() {
                        inputs.resize(i, none);
                        inputs.push(s.input.unwrap_or(none));
                    }
                }
                let inputs = (!inputs.is_empty()).then_some(inputs);
                // A prefix batch runs its group's trunk (the plan's expected
                // finish counts the trunk alone); another, its model.
                let (model, latency) = match plan.prefix {
                    Some(g) => (self.table.trunk_id(g.0 as usize), &self.table.prefixes[g.0 as usize].trunk[..]),
                    None => (plan.model.0, self.table.models[plan.model.index()].latency_of(plan.subnet)),
                };
                let l = latency.get(requests.len() - 1).copied().unwrap_or(0);
                let msg = fb::BatchPlan {
                    batch_id,
                    model,
                    backend: plan.backend.0,
                    exec_at_ns: plan.exec_at,
                    expected_finish_ns: plan.exec_at + l,
                    subnet: plan.subnet,
                    requests: Some(requests),
                    frontends: Some(frontends),
                    seen_ns: Some(seen),
                    heads,
                    inputs,
                };
                out.push(Envelope { to: Addr::Backend(plan.backend.0), msg: Message::BatchPlan(msg) });
                Ok(Some(Sent { batch_id, plan, apps, deadlines }))
            }
            Output::Dropped { request, reason } => {
                self.drop(request.0, wire_reason(reason));
                Ok(None)
            }
            Output::Layout(slots) => {
                // The backends' executors share the layout (one process:
                // `partitions.rs`); a policy re-partitions only a table it
                // was given partitions in.
                let p = self.table.partitions.as_ref().expect("a re-partitioning policy runs on partitions");
                p.relayout(slots);
                self.relayouts += 1;
                Ok(None)
            }
        }
    }

    /// Each request's head in prefix group `g` (its model's place among the
    /// members); None if the table has no such group or a request's model
    /// is not a member.
    fn heads(&self, g: usize, requests: &[RequestId]) -> Option<Vec<u16>> {
        let members = &self.table.prefixes.get(g)?.members;
        let head = |r: &RequestId| {
            let model = self.seen.get(&r.0)?.model;
            members.iter().position(|&m| m == model).map(|h| h as u16)
        };
        requests.iter().map(head).collect()
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
        let max = Limits::default().max_ids;
        for (fe, reason, mut ids) in self.drops.drain(..) {
            // The list itself goes out in the first message (no copy when
            // one holds it all); the ids past it, in lists of their own.
            while !ids.is_empty() {
                let rest = ids.split_off(ids.len().min(max));
                let requests = std::mem::replace(&mut ids, rest);
                let msg = Message::Dropped(fb::Dropped { requests: Some(requests), reason, message: None });
                out.push(Envelope { to: Addr::Frontend(fe), msg });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::SCENARIO;
    use super::*;
    use baton_sched::scenario::Scenario;

    /// Drops go out grouped per frontend and reason, in the order they
    /// came, in lists of at most the wire's id limit: every id once.
    #[test]
    fn drops_are_grouped_and_chunked_within_the_id_limit() {
        let table = ModelTable::from_scenario(&Scenario::parse(SCENARIO).unwrap(), 1).unwrap();
        let mut d = Decisions::new(table, 0);
        let max = Limits::default().max_ids as u64;
        let other = 1 << super::super::FRONTEND_SHIFT;
        for i in 0..2 * max + 5 {
            d.drop(i, fb::DropReason::CannotMeetDeadline);
        }
        d.drop(other, fb::DropReason::CannotMeetDeadline);
        d.drop(7 * max, fb::DropReason::Shed);
        let mut out = Vec::new();
        d.flush(&mut out);
        let sent: Vec<(Addr, fb::DropReason, Vec<u64>)> = out
            .drain(..)
            .map(|e| match e.msg {
                Message::Dropped(m) => (e.to, m.reason, m.requests.unwrap()),
                m => panic!("not a drop: {m:?}"),
            })
            .collect();
        let sizes: Vec<(Addr, fb::DropReason, usize)> = sent.iter().map(|(a, r, ids)| (*a, *r, ids.len())).collect();
        let late = fb::DropReason::CannotMeetDeadline;
        let (f0, f1) = (Addr::Frontend(0), Addr::Frontend(1));
        let m = max as usize;
        assert_eq!(
            sizes,
            vec![(f0, late, m), (f0, late, m), (f0, late, 5), (f1, late, 1), (f0, fb::DropReason::Shed, 1)]
        );
        let first: Vec<u64> = sent[..3].iter().flat_map(|(_, _, ids)| ids.iter().copied()).collect();
        assert_eq!(first, (0..2 * max + 5).collect::<Vec<_>>(), "every id once, in order");
        assert_eq!(d.dropped, 2 * max + 7);
        d.flush(&mut out);
        assert!(out.is_empty(), "flushed once");
    }
}
