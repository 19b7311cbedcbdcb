//! The backend role: one per GPU (or GPU partition). It receives batch
//! plans in the order the scheduler sent them, fetches each plan's inputs
//! from the frontends holding them, starts the batch at
//! `max(exec_at, previous batch's end)` — the rule the simulator's
//! emulated backends follow — and when its executor is done sends each
//! frontend its results and the scheduler a `BatchDone`.
//!
//! Executors that return the device time instead of spending it (the
//! emulated one with deferred pacing) are waited out on the role's clock;
//! a batch an executor leaves in flight (the CUDA executor's asynchronous
//! launch) is polled every `POLL_NS` until the device is done. Either way
//! `next_wake` says when to call `poll`.

use std::collections::VecDeque;

use baton_gpu::{Batch, Executor, Launched};
use baton_sched::time::Nanos;
use baton_wire::{fb, Message};

use super::frontend::{f32_tensor, f32s, le_bytes};
use super::{frontend_of, Addr, Envelope};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    pub batches: u64,
    pub requests: u64,
    pub failed_batches: u64,
    /// How late batches started after their `exec_at`: sum and maximum.
    pub start_lag_ns: u64,
    pub max_start_lag_ns: u64,
    /// Messages that are not for this backend or name no batch it holds.
    pub rejected: u64,
}

struct Job {
    plan: fb::BatchPlan,
    /// Inputs received so far, by request id.
    inputs: Vec<(u64, Vec<u8>)>,
    /// Frontends yet to send their part of the inputs.
    awaiting: usize,
}

/// How often, at most, a batch in flight on a device is polled (the shard
/// owning the device polls every round while one is in flight).
const POLL_NS: Nanos = 5_000;

struct Running {
    plan: fb::BatchPlan,
    start: Nanos,
    /// When the batch is done; while `in_flight`, when to poll it next.
    finish: Nanos,
    in_flight: bool,
    requests: Vec<u64>,
    outputs: Vec<Vec<f32>>,
    failed: bool,
}

pub struct BackendRole {
    id: u32,
    exec: Box<dyn Executor>,
    jobs: VecDeque<Job>,
    running: Option<Running>,
    pub stats: BackendStats,
}

/// The distinct frontends of a plan's requests, in first-seen order.
fn frontends(plan: &fb::BatchPlan) -> Vec<u32> {
    let mut fes: Vec<u32> = Vec::new();
    for &r in plan.requests.as_deref().unwrap_or(&[]) {
        let fe = frontend_of(r);
        if !fes.contains(&fe) {
            fes.push(fe);
        }
    }
    fes
}

impl BackendRole {
    pub fn new(id: u32, exec: Box<dyn Executor>) -> Self {
        Self { id, exec, jobs: VecDeque::new(), running: None, stats: BackendStats::default() }
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn on_message(&mut self, now: Nanos, msg: Message, out: &mut Vec<Envelope>) {
        match msg {
            Message::BatchPlan(p) if p.backend == self.id && !p.requests.as_deref().unwrap_or(&[]).is_empty() => {
                let fes = frontends(&p);
                for &fe in &fes {
                    let ids: Vec<u64> =
                        p.requests.iter().flatten().copied().filter(|&r| frontend_of(r) == fe).collect();
                    let fetch = fb::FetchInputs { batch_id: p.batch_id, requests: Some(ids), backend: self.id };
                    out.push(Envelope { to: Addr::Frontend(fe), msg: Message::FetchInputs(fetch) });
                }
                self.jobs.push_back(Job { plan: p, inputs: Vec::new(), awaiting: fes.len() });
            }
            Message::Inputs(i) => {
                match self.jobs.iter_mut().find(|j| j.plan.batch_id == i.batch_id && j.awaiting > 0) {
                    Some(job) => {
                        job.awaiting -= 1;
                        let tensors = i.tensors.unwrap_or_default().into_iter().map(|t| t.data.unwrap_or_default());
                        job.inputs.extend(i.requests.unwrap_or_default().into_iter().zip(tensors));
                    }
                    None => self.stats.rejected += 1,
                }
            }
            _ => self.stats.rejected += 1,
        }
        self.poll(now, out);
    }

    /// Whether a batch is running on a device that must be polled.
    pub fn in_flight(&self) -> bool {
        self.running.as_ref().is_some_and(|r| r.in_flight)
    }

    /// When `poll` has something to do next, if anything.
    pub fn next_wake(&self) -> Option<Nanos> {
        match &self.running {
            Some(r) => Some(r.finish),
            None => self.jobs.front().filter(|j| j.awaiting == 0).map(|j| j.plan.exec_at_ns),
        }
    }

    /// Finishes the running batch if its time is up, then starts the next
    /// one if its inputs are in and its time has come.
    pub fn poll(&mut self, now: Nanos, out: &mut Vec<Envelope>) {
        loop {
            if let Some(mut r) = self.running.take_if(|r| r.finish <= now) {
                if r.in_flight {
                    match self.exec.poll(&mut r.outputs) {
                        None => {
                            r.finish = now + POLL_NS;
                            self.running = Some(r);
                            return;
                        }
                        Some(done) => {
                            (r.in_flight, r.finish, r.failed) = (false, now, done.is_err());
                        }
                    }
                }
                self.finish(r, out);
            }
            if self.running.is_some() {
                return;
            }
            match self.jobs.front() {
                Some(j) if j.awaiting == 0 && j.plan.exec_at_ns <= now => {}
                _ => return,
            }
            let job = self.jobs.pop_front().expect("checked");
            self.start(now, job);
        }
    }

    fn start(&mut self, now: Nanos, job: Job) {
        let plan = job.plan;
        let lag = now.saturating_sub(plan.exec_at_ns);
        self.stats.start_lag_ns += lag;
        self.stats.max_start_lag_ns = self.stats.max_start_lag_ns.max(lag);
        // Inputs in plan order; a request its frontend no longer held (it
        // has already been answered) is left out of the run.
        let mut requests = Vec::with_capacity(job.inputs.len());
        let mut data: Vec<Vec<f32>> = Vec::with_capacity(job.inputs.len());
        for &id in plan.requests.as_deref().unwrap_or(&[]) {
            if let Some((_, bytes)) = job.inputs.iter().find(|(r, _)| *r == id) {
                requests.push(id);
                data.push(f32s(bytes));
            }
        }
        let inputs: Vec<&[f32]> = data.iter().map(|v| v.as_slice()).collect();
        let mut outputs = Vec::new();
        let (finish, in_flight, failed) = if inputs.is_empty() {
            (now + 1, false, false)
        } else {
            let batch = Batch { model: plan.model, variant: None, inputs: &inputs };
            match self.exec.launch(&batch, &mut outputs) {
                Ok(Launched::Done(d)) => (now + (d.as_nanos() as Nanos).max(1), false, false),
                Ok(Launched::InFlight) => (now + POLL_NS, true, false),
                Err(_) => (now + 1, false, true),
            }
        };
        self.running = Some(Running { plan, start: now, finish, in_flight, requests, outputs, failed });
    }

    fn finish(&mut self, r: Running, out: &mut Vec<Envelope>) {
        self.stats.batches += 1;
        self.stats.requests += r.requests.len() as u64;
        self.stats.failed_batches += u64::from(r.failed);
        let exec_ns = r.finish - r.start;
        let batch_size = r.requests.len() as u32;
        let mut per_fe: Vec<(u32, Vec<u64>, Vec<fb::Tensor>)> = Vec::new();
        for (i, &id) in r.requests.iter().enumerate() {
            let fe = frontend_of(id);
            let k = match per_fe.iter().position(|x| x.0 == fe) {
                Some(k) => k,
                None => {
                    per_fe.push((fe, Vec::new(), Vec::new()));
                    per_fe.len() - 1
                }
            };
            per_fe[k].1.push(id);
            if !r.failed {
                per_fe[k].2.push(f32_tensor(le_bytes(&r.outputs[i])));
            }
        }
        for (fe, ids, outputs) in per_fe {
            let msg = if r.failed {
                Message::Dropped(fb::Dropped { requests: Some(ids), reason: fb::DropReason::BackendFailed })
            } else {
                let results = fb::Results {
                    batch_id: r.plan.batch_id,
                    requests: Some(ids),
                    outputs: Some(outputs),
                    exec_ns,
                    batch_size,
                };
                Message::Results(results)
            };
            out.push(Envelope { to: Addr::Frontend(fe), msg });
        }
        let done = fb::BatchDone {
            batch_id: r.plan.batch_id,
            backend: self.id,
            model: r.plan.model,
            batch_size,
            started_ns: r.start,
            finished_ns: r.finish,
            failed: r.failed,
        };
        out.push(Envelope { to: Addr::Scheduler, msg: Message::BatchDone(done) });
    }
}
