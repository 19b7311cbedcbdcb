//! The scheduler role: the adapter between wire messages and a
//! `baton-sched` policy (the same `Scheduler` object the simulator drives).
//! It turns `RequestMeta` into requests, `BatchDone` into completions, a
//! failed `BackendStatus` into a backend failure, and the policy's outputs
//! into `BatchPlan`s for backends and `Dropped` lists for frontends. It owns
//! no policy logic: it only remembers each batch in flight, because a
//! completion names its batch and the policy wants its members back.
//!
//! Reduced: the whole policy runs on one shard (Symphony's model shards and
//! rank shard inside it exchange messages in process); requests carry app
//! 0, since the engine refuses models with input-dependent times.

use std::collections::HashMap;

use baton_sched::time::Nanos;
use baton_sched::types::{
    AppId, BackendId, BatchDone, BatchPlan, Completed, DropReason, ModelId, Output, Request, RequestId, Scheduler,
};
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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    pub requests: u64,
    pub batches: u64,
    pub dropped: u64,
    /// Messages the scheduler does not take, or that name what it does not
    /// know (a model, a backend, a batch): ignored, counted.
    pub rejected: u64,
}

pub struct SchedulerRole {
    policy: Box<dyn Scheduler>,
    models: u32,
    backends: u32,
    /// l(b) of each model, b = 1..: l(1) is a static model's solo time.
    latency: Vec<Vec<Nanos>>,
    inflight: HashMap<u64, BatchPlan>,
    next_batch: u64,
    completed: Vec<Completed>,
    pub stats: SchedulerStats,
}

impl SchedulerRole {
    pub fn new(policy: Box<dyn Scheduler>, latency: Vec<Vec<Nanos>>, backends: u32) -> Self {
        assert!(latency.iter().all(|l| !l.is_empty()), "every model has l(1)");
        Self {
            policy,
            models: latency.len() as u32,
            backends,
            latency,
            inflight: HashMap::new(),
            next_batch: 0,
            completed: Vec::new(),
            stats: SchedulerStats::default(),
        }
    }

    /// Handles one message at `now`; what the policy decides goes to `out`.
    pub fn on_message(&mut self, now: Nanos, msg: Message, out: &mut Vec<Envelope>) {
        match msg {
            Message::RequestMeta(m) if m.model < self.models => {
                self.stats.requests += 1;
                let req = Request {
                    id: RequestId(m.id),
                    model: ModelId(m.model),
                    app: AppId(0),
                    arrival: m.arrival_ns,
                    deadline: m.deadline_ns,
                };
                self.policy.on_request(now, req);
            }
            Message::BatchDone(d) => match self.inflight.remove(&d.batch_id) {
                Some(plan) => {
                    self.completed.clear();
                    let solo = self.latency[plan.model.index()][0];
                    self.completed.extend(plan.requests.iter().map(|&request| Completed {
                        request,
                        app: AppId(0),
                        solo,
                    }));
                    let done = BatchDone {
                        backend: plan.backend,
                        model: plan.model,
                        started: d.started_ns,
                        members: &self.completed,
                    };
                    self.policy.on_batch_done(now, &done);
                }
                None => self.stats.rejected += 1,
            },
            Message::BackendStatus(s) if !s.healthy && s.backend < self.backends => {
                self.backend_failed(now, BackendId(s.backend), out);
            }
            _ => self.stats.rejected += 1,
        }
        self.drain(out);
    }

    /// `backend` is gone: the policy stops using it, and the batches it
    /// held will never complete — their requests are dropped here (a
    /// result that did reach a frontend first wins there; the frontend
    /// refuses the second answer).
    fn backend_failed(&mut self, now: Nanos, backend: BackendId, out: &mut Vec<Envelope>) {
        self.policy.on_backend_failed(now, backend);
        let lost: Vec<u64> = self.inflight.iter().filter(|(_, p)| p.backend == backend).map(|(&id, _)| id).collect();
        let mut drops: Vec<(u32, Vec<u64>)> = Vec::new();
        for id in lost {
            let plan = self.inflight.remove(&id).expect("listed");
            for r in plan.requests {
                let fe = frontend_of(r.0);
                match drops.iter_mut().find(|d| d.0 == fe) {
                    Some(d) => d.1.push(r.0),
                    None => drops.push((fe, vec![r.0])),
                }
            }
        }
        for (fe, ids) in drops {
            self.stats.dropped += ids.len() as u64;
            let reason = fb::DropReason::BackendFailed;
            out.extend(ids.chunks(Limits::default().max_ids).map(|c| Envelope {
                to: Addr::Frontend(fe),
                msg: Message::Dropped(fb::Dropped { requests: Some(c.to_vec()), reason }),
            }));
        }
    }

    /// Fires the policy's timers due at `now`.
    pub fn on_timeout(&mut self, now: Nanos, out: &mut Vec<Envelope>) {
        self.policy.on_timeout(now);
        self.drain(out);
    }

    pub fn next_timeout(&self) -> Option<Nanos> {
        self.policy.next_timeout()
    }

    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    fn drain(&mut self, out: &mut Vec<Envelope>) {
        // Drops are grouped per (frontend, reason) within one drain.
        let mut drops: Vec<(u32, fb::DropReason, Vec<u64>)> = Vec::new();
        while let Some(o) = self.policy.poll_output() {
            match o {
                Output::Dispatch(plan) => {
                    let batch_id = self.next_batch;
                    self.next_batch += 1;
                    self.stats.batches += 1;
                    let requests: Vec<u64> = plan.requests.iter().map(|r| r.0).collect();
                    let frontends = requests.iter().map(|&r| frontend_of(r)).collect();
                    let msg = fb::BatchPlan {
                        batch_id,
                        model: plan.model.0,
                        backend: plan.backend.0,
                        exec_at_ns: plan.exec_at,
                        expected_finish_ns: plan.exec_at
                            + self.latency[plan.model.index()].get(requests.len() - 1).copied().unwrap_or(0),
                        subnet: plan.subnet.map_or(0, u32::from),
                        requests: Some(requests),
                        frontends: Some(frontends),
                    };
                    out.push(Envelope { to: Addr::Backend(plan.backend.0), msg: Message::BatchPlan(msg) });
                    self.inflight.insert(batch_id, plan);
                }
                Output::Dropped { request, reason } => {
                    self.stats.dropped += 1;
                    let (fe, why) = (frontend_of(request.0), wire_reason(reason));
                    match drops.iter_mut().find(|d| d.0 == fe && d.1 == why) {
                        Some(d) => d.2.push(request.0),
                        None => drops.push((fe, why, vec![request.0])),
                    }
                }
            }
        }
        for (fe, reason, ids) in drops {
            // Within the decoder's id limit, so the list also crosses TCP.
            out.extend(ids.chunks(Limits::default().max_ids).map(|c| Envelope {
                to: Addr::Frontend(fe),
                msg: Message::Dropped(fb::Dropped { requests: Some(c.to_vec()), reason }),
            }));
        }
    }
}
