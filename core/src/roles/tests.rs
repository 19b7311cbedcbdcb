//! The three roles wired together in process on a virtual clock: every
//! message is delivered at once, time jumps to the next timer. Checks the
//! end-to-end contract without threads or sockets.

use std::collections::VecDeque;

use baton_sched::scenario::Scenario;
use baton_sched::time::{ms_to_nanos, Nanos};
use baton_sched::PolicyKind;
use baton_wire::{fb, Message};

use super::backend::BackendRole;
use super::frontend::{f32_tensor, f32s, Answer, Frontend};
use super::scheduler::SchedulerRole;
use super::{Addr, Envelope};
use crate::models::ModelTable;

const SCENARIO: &str = r#"
name = "roles"
seed = 3
duration_s = 2
warmup_s = 0
[cluster]
gpus = 2
[[models]]
name = "m"
alpha_ms = 1.0
beta_ms = 4.0
slo_ms = 25.0
"#;

const FLOATS: usize = 4;

struct Cluster {
    table: ModelTable,
    fe: Frontend,
    sched: SchedulerRole,
    backends: Vec<BackendRole>,
    answers: Vec<Answer>,
}

impl Cluster {
    fn new(policy: PolicyKind, capacity: usize) -> Self {
        let scenario = Scenario::parse(SCENARIO).unwrap();
        let table = ModelTable::from_scenario(&scenario, FLOATS).unwrap();
        let latency = table.models.iter().map(|m| m.latency.clone()).collect();
        let sched = SchedulerRole::new(baton_sched::build::scheduler(policy, &scenario, 0.0), latency, 2);
        let backends =
            (0..2).map(|b| BackendRole::new(b, Box::new(table.emulated_executor(0.0, u64::from(b))))).collect();
        Self { fe: Frontend::new(1, capacity, 0, 0), table, sched, backends, answers: Vec::new() }
    }

    /// Delivers `out` and everything it causes, at `now`.
    fn deliver(&mut self, now: Nanos, out: Vec<Envelope>) {
        let mut queue: VecDeque<Envelope> = out.into();
        while let Some(e) = queue.pop_front() {
            let mut next = Vec::new();
            match (e.to, e.msg) {
                (Addr::Scheduler, m) => self.sched.on_message(now, m, &mut next),
                (Addr::Backend(b), m) => self.backends[b as usize].on_message(now, m, &mut next),
                (Addr::Frontend(1), Message::FetchInputs(f)) => next.push(self.fe.inputs(&f)),
                (Addr::Frontend(1), Message::Results(r)) => self.fe.on_results(now, r, &mut self.answers),
                (Addr::Frontend(1), Message::Dropped(d)) => self.fe.on_dropped(d, &mut self.answers),
                (to, m) => panic!("unexpected {m:?} to {to:?}"),
            }
            queue.extend(next);
        }
    }

    fn next_timer(&self) -> Option<Nanos> {
        self.backends.iter().filter_map(|b| b.next_wake()).chain(self.sched.next_timeout()).min()
    }

    /// Fires every timer due at `now`.
    fn fire(&mut self, now: Nanos) {
        let mut out = Vec::new();
        if self.sched.next_timeout().is_some_and(|t| t <= now) {
            self.sched.on_timeout(now, &mut out);
        }
        for b in &mut self.backends {
            b.poll(now, &mut out);
        }
        self.deliver(now, out);
    }

    /// Sends `requests` (arrival time, request) and runs until nothing is left.
    fn run(&mut self, mut requests: VecDeque<(Nanos, fb::InferRequest)>) {
        let mut now = 0;
        loop {
            let t = [requests.front().map(|r| r.0), self.next_timer()].into_iter().flatten().min();
            let Some(t) = t else { break };
            now = now.max(t);
            while requests.front().is_some_and(|r| r.0 <= now) {
                let (_, req) = requests.pop_front().unwrap();
                match self.fe.admit(now, 7, req, &self.table) {
                    Ok(meta) => {
                        let env = Envelope { to: Addr::Scheduler, msg: Message::RequestMeta(meta) };
                        self.deliver(now, vec![env]);
                    }
                    Err(e) => self.answers.push((7, *e)),
                }
            }
            self.fire(now);
        }
    }
}

fn request(id: u64, model: &str, slo_ms: f64, input: &[f32]) -> fb::InferRequest {
    fb::InferRequest {
        id,
        model: Some(model.into()),
        slo_ns: ms_to_nanos(slo_ms),
        app: 0,
        inputs: Some(vec![f32_tensor(input.iter().flat_map(|x| x.to_le_bytes()).collect())]),
    }
}

/// Evenly spaced requests of model `m` at `rate` per second for `n`.
fn load(rate: f64, n: u64) -> VecDeque<(Nanos, fb::InferRequest)> {
    (0..n).map(|i| ((i as f64 * 1e9 / rate) as Nanos, request(i, "m", 25.0, &[i as f32, 1.0, 2.0, 3.0]))).collect()
}

#[test]
fn every_request_is_answered_once_with_its_own_output() {
    // l(b) = 4 + b ms within 25 ms: 2 GPUs serve at most 2 x 21 / 25 ms ≈ 1,700 r/s.
    for (policy, rate) in
        [(PolicyKind::Symphony, 300.0), (PolicyKind::Symphony, 5_000.0), (PolicyKind::Clockwork, 5_000.0)]
    {
        let mut c = Cluster::new(policy, 100_000);
        let n = 2_000;
        c.run(load(rate, n));
        let s = c.fe.stats;
        assert_eq!(s.received, n);
        assert_eq!(s.answered(), n, "{policy:?} at {rate}: {s:?}");
        assert_eq!((s.duplicates, c.fe.held(), c.sched.inflight()), (0, 0, 0));
        let mut seen = vec![false; n as usize];
        for (conn, a) in &c.answers {
            assert_eq!(*conn, 7);
            assert!(!std::mem::replace(&mut seen[a.id as usize], true), "request {} answered twice", a.id);
            if a.status == fb::Status::Ok {
                // The emulated model's output is the sum of the request's own input.
                let out = f32s(a.outputs.as_ref().unwrap()[0].data.as_ref().unwrap());
                assert_eq!(out, vec![a.id as f32 + 6.0; 4], "request {}", a.id);
                let t = a.timing.unwrap();
                assert!(t.batch_size >= 1 && t.exec_ns >= 5_000_000, "{t:?}");
            }
        }
        if rate > 2_000.0 {
            assert!(s.dropped > 0, "{policy:?} overloaded drops nothing: {s:?}");
        } else {
            assert_eq!(s.ok, n, "{policy:?} under capacity: {s:?}");
        }
    }
}

#[test]
fn bad_requests_get_typed_errors_and_nothing_else() {
    let mut c = Cluster::new(PolicyKind::Symphony, 1);
    let mut wrong_dtype = request(3, "m", 25.0, &[0.0; FLOATS]);
    wrong_dtype.inputs.as_mut().unwrap()[0].dtype = fb::DType::I32;
    let mut two = request(4, "m", 25.0, &[0.0; FLOATS]);
    two.inputs.as_mut().unwrap().push(f32_tensor(vec![0; 16]));
    let reqs = vec![
        (0, request(0, "nope", 25.0, &[0.0; FLOATS])),
        (0, request(1, "m", 0.0, &[0.0; FLOATS])),
        (0, request(2, "m", 25.0, &[0.0; FLOATS - 1])),
        (0, wrong_dtype),
        (0, two),
        (0, request(5, "m", 25.0, &[0.0; FLOATS])),
        // The frontend holds one request at most: this one is refused.
        (0, request(6, "m", 25.0, &[0.0; FLOATS])),
    ];
    c.run(reqs.into());
    use fb::ErrorCode::*;
    let want = [UnknownModel, DeadlineInPast, BadTensor, BadTensor, BadTensor];
    for (i, code) in want.iter().enumerate() {
        let a = &c.answers.iter().find(|a| a.1.id == i as u64).unwrap().1;
        assert_eq!((a.status, a.error_code), (fb::Status::Error, *code), "request {i}: {:?}", a.message);
    }
    let six = &c.answers.iter().find(|a| a.1.id == 6).unwrap().1;
    assert_eq!((six.status, six.error_code), (fb::Status::Error, Overloaded));
    let five = &c.answers.iter().find(|a| a.1.id == 5).unwrap().1;
    assert_eq!(five.status, fb::Status::Ok);
    assert_eq!(c.answers.len(), 7);
    assert_eq!(c.fe.stats.errors, 6);
    // A client's model name is quoted back clipped: answers stay small.
    let huge = "é".repeat(100_000);
    let mut d = Cluster::new(PolicyKind::Symphony, 1);
    d.run(vec![(0, request(9, &huge, 25.0, &[0.0; FLOATS]))].into());
    let why = d.answers[0].1.message.as_deref().unwrap();
    assert!(why.starts_with("no model named") && why.len() < 200, "{} bytes", why.len());
}

#[test]
fn a_scenario_with_faults_is_refused_not_served_without_them() {
    let text = format!("{SCENARIO}[[faults]]\nat_s = 1.0\nbackend = 0\n");
    let scenario = Scenario::parse(&text).unwrap();
    let err = ModelTable::from_scenario(&scenario, FLOATS).unwrap_err();
    assert!(err.to_string().contains("faults"), "{err}");
}

#[test]
fn a_request_naming_an_app_its_model_lacks_is_refused_not_served_as_app_0() {
    let mut c = Cluster::new(PolicyKind::Symphony, 10);
    let mut other_app = request(0, "m", 25.0, &[0.0; FLOATS]);
    other_app.app = 1;
    c.run(vec![(0, other_app), (0, request(1, "m", 25.0, &[0.0; FLOATS]))].into());
    let a = &c.answers.iter().find(|a| a.1.id == 0).unwrap().1;
    assert_eq!((a.status, a.error_code), (fb::Status::Error, fb::ErrorCode::UnknownModel));
    assert!(a.message.as_deref().unwrap().contains("no app 1"), "{:?}", a.message);
    assert_eq!(c.answers.iter().find(|a| a.1.id == 1).unwrap().1.status, fb::Status::Ok);
    // Metadata naming another app that reaches the scheduler (from a peer
    // over TCP) is rejected, not queued as app 0.
    let before = c.sched.stats;
    let meta = fb::RequestMeta { id: 99, frontend: 1, model: 0, app: 1, arrival_ns: 0, deadline_ns: 1 << 40 };
    let mut out = Vec::new();
    c.sched.on_message(0, Message::RequestMeta(meta), &mut out);
    assert_eq!((c.sched.stats.rejected, c.sched.stats.requests), (before.rejected + 1, before.requests));
}

/// A policy that dispatches every request at once on backend 0, on `subnet`.
struct SubnetPolicy {
    subnet: Option<u16>,
    out: VecDeque<baton_sched::types::Output>,
    done: u32,
}

impl baton_sched::types::Scheduler for SubnetPolicy {
    fn on_request(&mut self, now: Nanos, req: baton_sched::types::Request) {
        use baton_sched::types::{BackendId, BatchPlan, Output};
        let plan = BatchPlan {
            model: req.model,
            backend: BackendId(0),
            exec_at: now,
            requests: vec![req.id],
            prefix: None,
            subnet: self.subnet,
        };
        self.out.push_back(Output::Dispatch(plan));
    }
    fn on_batch_done(&mut self, _: Nanos, _: &baton_sched::types::BatchDone<'_>) {
        self.done += 1;
    }
    fn on_timeout(&mut self, _: Nanos) {}
    fn next_timeout(&self) -> Option<Nanos> {
        None
    }
    fn poll_output(&mut self) -> Option<baton_sched::types::Output> {
        self.out.pop_front()
    }
}

#[test]
fn a_plan_running_a_subnet_is_refused_not_sent_as_the_whole_model() {
    let meta = fb::RequestMeta { id: 5, frontend: 1, model: 0, app: 0, arrival_ns: 0, deadline_ns: 1 << 40 };
    for subnet in [None, Some(0), Some(3)] {
        let policy = SubnetPolicy { subnet, out: VecDeque::new(), done: 0 };
        let mut sched = SchedulerRole::new(Box::new(policy), vec![vec![1_000]], 1);
        let mut out = Vec::new();
        sched.on_message(0, Message::RequestMeta(meta.clone()), &mut out);
        let plans = out.iter().filter(|e| matches!(e.msg, Message::BatchPlan(_))).count();
        let drops: Vec<_> = out
            .iter()
            .filter_map(|e| match &e.msg {
                Message::Dropped(d) => Some((d.reason, d.requests.clone().unwrap_or_default())),
                _ => None,
            })
            .collect();
        if subnet.is_none() {
            assert_eq!((plans, drops.len(), sched.stats.refused, sched.inflight()), (1, 0, 0, 1));
        } else {
            assert_eq!((plans, sched.stats.refused, sched.inflight()), (0, 1, 0), "{subnet:?}");
            assert_eq!(drops, vec![(fb::DropReason::NoBackend, vec![5])], "answered once, typed");
        }
    }
}
