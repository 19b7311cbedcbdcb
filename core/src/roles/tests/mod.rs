//! The three roles wired together in process on a virtual clock: every
//! message is delivered at once, time jumps to the next timer. Checks the
//! end-to-end contract without threads or sockets.

use std::collections::VecDeque;

use baton_sched::scenario::Scenario;
use baton_sched::time::{ms_to_nanos, Nanos};
use baton_sched::PolicyKind;
use baton_wire::message::RequestHead;
use baton_wire::{fb, Message};

use super::backend::BackendRole;
use super::frontend::{f32_tensor, f32s, Answer, Away, Frontend};
use super::scheduler::SchedulerRole;
use super::{Addr, Envelope};
use crate::models::ModelTable;

pub(super) const SCENARIO: &str = r#"
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
    /// Every `BatchDone` the scheduler received.
    done: Vec<fb::BatchDone>,
    /// A backend that starts leaving the cluster at a time, if one does.
    leaves: Option<(Nanos, u32)>,
}

impl Cluster {
    fn new(policy: PolicyKind, capacity: usize) -> Self {
        Self::of(SCENARIO, policy, capacity)
    }

    fn of(text: &str, policy: PolicyKind, capacity: usize) -> Self {
        Self::planned(text, policy, capacity, 0.0)
    }

    /// A static planner's policy plans for `rate` r/s.
    fn planned(text: &str, policy: PolicyKind, capacity: usize, rate: f64) -> Self {
        let scenario = Scenario::parse(text).unwrap();
        let table = ModelTable::from_scenario(&scenario, FLOATS).unwrap();
        let sched = SchedulerRole::new(baton_sched::build::scheduler(policy, &scenario, rate), table.clone(), 2);
        let backends =
            (0..2).map(|b| BackendRole::new(b, Box::new(table.emulated_executor(0.0, u64::from(b))))).collect();
        let fe = Frontend::new(1, capacity, 0, 0);
        Self { fe, table, sched, backends, answers: Vec::new(), done: Vec::new(), leaves: None }
    }

    /// Delivers `out` and everything it causes, at `now`.
    fn deliver(&mut self, now: Nanos, out: Vec<Envelope>) {
        let mut queue: VecDeque<Envelope> = out.into();
        while let Some(e) = queue.pop_front() {
            let mut next = Vec::new();
            match (e.to, e.msg) {
                (Addr::Scheduler(0), m) => {
                    if let Message::BatchDone(d) = &m {
                        self.done.push(d.clone());
                    }
                    self.sched.on_message(now, m, &mut next)
                }
                (Addr::Backend(b), m) => self.backends[b as usize].on_message(now, m, &mut next),
                (Addr::Frontend(1), Message::FetchInputs(f)) => next.push(self.fe.inputs(&f)),
                (Addr::Frontend(1), Message::Results(r)) => self.fe.on_results(now, r, &self.table, &mut self.answers),
                (Addr::Frontend(1), Message::Dropped(d)) => self.fe.on_dropped(now, d, &self.table, &mut self.answers),
                (to, m) => panic!("unexpected {m:?} to {to:?}"),
            }
            // Query stages spawned by what the frontend got.
            next.extend(self.fe.spawned().map(|m| Envelope { to: Addr::Scheduler(0), msg: Message::RequestMeta(m) }));
            queue.extend(next);
        }
    }

    fn next_timer(&self) -> Option<Nanos> {
        let leaves = self.leaves.map(|l| l.0);
        self.backends.iter().filter_map(|b| b.next_wake()).chain(self.sched.next_timeout()).chain(leaves).min()
    }

    /// Fires every timer due at `now`.
    fn fire(&mut self, now: Nanos) {
        let mut out = Vec::new();
        if let Some((_, b)) = self.leaves.filter(|l| l.0 <= now) {
            self.backends[b as usize].leave(&mut out);
            self.leaves = None;
        }
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
                        let env = Envelope { to: Addr::Scheduler(0), msg: Message::RequestMeta(meta) };
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
        ..Default::default()
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
fn a_backend_that_fails_loses_nothing_whether_the_policy_heeds_it_or_not() {
    // Symphony ignores failures (it keeps granting the dead backend until a
    // batch it sent there never completes); SlackFit stops using it.
    for policy in [PolicyKind::Symphony, PolicyKind::Clockwork, PolicyKind::SlackFit] {
        let mut c = Cluster::new(policy, 100_000);
        c.backends[0].fail_at(300_000_000);
        let n = 1_000;
        c.run(load(800.0, n));
        let s = c.fe.stats;
        assert_eq!((s.received, s.answered(), s.duplicates, c.fe.held()), (n, n, 0, 0), "{policy:?}: {s:?}");
        let mut seen = vec![false; n as usize];
        for (_, a) in &c.answers {
            assert!(!std::mem::replace(&mut seen[a.id as usize], true), "request {} answered twice", a.id);
        }
        // Backend 0 served until it failed, the other after it.
        let late_ok = c.answers.iter().filter(|a| a.1.status == fb::Status::Ok && a.1.id > 400).count();
        assert!(c.backends[0].stats.batches > 0 && late_ok > 100, "{policy:?}: {late_ok}");
        assert!(c.done.iter().all(|d| d.backend == 1 || d.started_ns < 300_000_000), "no batch done after the fault");
    }
}

#[test]
fn a_backend_that_leaves_runs_what_it_was_sent_and_gets_nothing_more() {
    for policy in [PolicyKind::Symphony, PolicyKind::Clockwork, PolicyKind::SlackFit] {
        let mut c = Cluster::new(policy, 100_000);
        c.leaves = Some((300_000_000, 0));
        let n = 450;
        c.run(load(150.0, n));
        let s = c.fe.stats;
        assert_eq!((s.received, s.answered(), s.duplicates, c.fe.held()), (n, n, 0, 0), "{policy:?}: {s:?}");
        // Nothing lost to the leave: each request ran (one GPU holds 150 r/s
        // under each policy).
        let ok = c.answers.iter().filter(|a| a.1.status == fb::Status::Ok).count() as u64;
        assert_eq!(ok, n, "{policy:?}");
        // Backend 0 served until it left, reported every batch it ran, and
        // was sent none after the scheduler's answer (its last plans were
        // made before the leave, so they start within an SLO of it).
        let from_0: Vec<&fb::BatchDone> = c.done.iter().filter(|d| d.backend == 0).collect();
        assert!(c.backends[0].gone() && !from_0.is_empty(), "{policy:?}");
        assert_eq!(from_0.len() as u64, c.backends[0].stats.batches, "{policy:?}");
        assert!(from_0.iter().all(|d| d.started_ns < 325_000_000), "{policy:?}: a batch planned after the leave");
        assert!(c.done.iter().any(|d| d.backend == 1 && d.started_ns > 2_000_000_000), "{policy:?}");
    }
}

#[test]
fn a_request_naming_an_app_its_model_lacks_is_refused_not_served_as_app_0() {
    let mut c = Cluster::new(PolicyKind::Symphony, 10);
    let mut other_app = request(0, "m", 25.0, &[0.0; FLOATS]);
    other_app.app = 1;
    c.run(vec![(0, other_app), (0, request(1, "m", 25.0, &[0.0; FLOATS]))].into());
    let a = &c.answers.iter().find(|a| a.1.id == 0).unwrap().1;
    assert_eq!((a.status, a.error_code), (fb::Status::Error, fb::ErrorCode::UnknownApp));
    assert!(a.message.as_deref().unwrap().contains("no app 1"), "{:?}", a.message);
    assert_eq!(c.answers.iter().find(|a| a.1.id == 1).unwrap().1.status, fb::Status::Ok);
    // Metadata naming another app that reaches the scheduler (from a peer
    // over TCP) is rejected, not queued as app 0.
    let before = c.sched.stats;
    let meta =
        fb::RequestMeta { id: 99, frontend: 1, model: 0, app: 1, arrival_ns: 0, deadline_ns: 1 << 40, input: None };
    let mut out = Vec::new();
    c.sched.on_message(0, Message::RequestMeta(meta), &mut out);
    assert_eq!((c.sched.stats.rejected, c.sched.stats.requests), (before.rejected + 1, before.requests));
}

/// A policy that dispatches every request at once on backend 0, as `prefix`.
struct PrefixPolicy {
    prefix: Option<baton_sched::types::PrefixId>,
    out: VecDeque<baton_sched::types::Output>,
    done: u32,
}

impl baton_sched::types::Scheduler for PrefixPolicy {
    fn on_request(&mut self, now: Nanos, req: baton_sched::types::Request) {
        use baton_sched::types::{BackendId, BatchPlan, Output};
        let plan = BatchPlan {
            model: req.model,
            backend: BackendId(0),
            exec_at: now,
            requests: vec![req.id],
            prefix: self.prefix,
            subnet: None,
        };
        self.out.push_back(Output::Dispatch(plan));
    }
    fn on_batch_done(&mut self, _: Nanos, _: &baton_sched::types::BatchDone<'_>) {
        self.done += 1;
    }
    fn on_backend_failed(&mut self, _: Nanos, b: baton_sched::types::BackendId) {
        panic!("no faults here, yet backend {} failed", b.0);
    }
    fn on_backend_joined(&mut self, _: Nanos, b: baton_sched::types::BackendId) {
        panic!("no faults here, yet backend {} came back", b.0);
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
fn a_plan_sharing_a_prefix_is_refused_not_sent_as_the_whole_model() {
    let meta =
        fb::RequestMeta { id: 5, frontend: 1, model: 0, app: 0, arrival_ns: 0, deadline_ns: 1 << 40, input: None };
    let table = ModelTable::from_scenario(&Scenario::parse(SCENARIO).unwrap(), FLOATS).unwrap();
    for prefix in [None, Some(baton_sched::types::PrefixId(0))] {
        let policy = PrefixPolicy { prefix, out: VecDeque::new(), done: 0 };
        let mut sched = SchedulerRole::new(Box::new(policy), table.clone(), 1);
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
        if prefix.is_none() {
            assert_eq!((plans, drops.len(), sched.stats.refused, sched.inflight()), (1, 0, 0, 1));
        } else {
            assert_eq!((plans, sched.stats.refused, sched.inflight()), (0, 1, 0), "{prefix:?}");
            assert_eq!(drops, vec![(fb::DropReason::NoBackend, vec![5])], "answered once, typed");
        }
    }
}

const DYNAMIC: &str = r#"
name = "dynamic"
seed = 3
duration_s = 2
warmup_s = 0
[cluster]
gpus = 2
[[models]]
name = "d"
kappa = 0.1
max_batch = 8
slo_ms = 50.0
[[models.apps]]
name = "short"
exec_ms = "normal:1,0.1"
[[models.apps]]
name = "long"
exec_ms = "normal:4,0.4"
[policy]
name = "orloj"
"#;

/// A request of the dynamic model `d` whose input says it takes `solo_us`.
fn dynamic(id: u64, app: u32, app_name: Option<&str>, solo_us: f32) -> fb::InferRequest {
    let mut r = request(id, "d", 50.0, &[solo_us, 0.0, 0.0, 0.0]);
    (r.app, r.app_name) = (app, app_name.map(str::to_string));
    r
}

#[test]
fn a_dynamic_model_is_served_with_its_apps_and_the_policy_learns_each_members_solo_time() {
    let mut c = Cluster::of(DYNAMIC, PolicyKind::Orloj, 1_000);
    // Apps by index and by name, mixed on one connection.
    let reqs = (0..400u64).map(|i| {
        let long = i % 3 == 0;
        let req = match (long, i % 2) {
            (true, 0) => dynamic(i, 1, None, 4_000.0),
            (true, _) => dynamic(i, 0, Some("long"), 4_000.0),
            (false, 0) => dynamic(i, 0, None, 1_000.0),
            (false, _) => dynamic(i, 0, Some("short"), 1_000.0),
        };
        (i * 400_000, req)
    });
    c.run(reqs.collect());
    assert_eq!(c.answers.len(), 400, "every request answered once");
    let ok: Vec<_> = c.answers.iter().map(|a| &a.1).filter(|a| a.status == fb::Status::Ok).collect();
    assert!(ok.len() >= 390, "{} of 400 ok", ok.len());
    for a in &ok {
        let (app, solo) = if a.id % 3 == 0 { (1, 4_000_000) } else { (0, 1_000_000) };
        assert_eq!((a.app, a.solo_ns, a.subnet), (app, solo, None), "answer {}", a.id);
        // The batch ran g(b, longest member) = longest (1 + 0.1 (b - 1)).
        let t = a.timing.unwrap();
        let g = |x: f64| (x * (1.0 + 0.1 * (t.batch_size - 1) as f64)).round() as u64;
        assert!(t.exec_ns == g(1e6) || t.exec_ns == g(4e6), "batch of {} ran {} ns", t.batch_size, t.exec_ns);
    }
    // Every finished batch told the scheduler its members' solo times.
    assert!(!c.done.is_empty());
    for d in &c.done {
        let (ids, solo) = (d.requests.as_deref().unwrap(), d.solo_ns.as_deref().unwrap());
        assert_eq!(ids.len(), d.batch_size as usize);
        assert!(solo.iter().all(|&s| s == 1_000_000 || s == 4_000_000), "{solo:?}");
    }
}

#[test]
fn bad_apps_and_bad_work_get_typed_errors_and_the_next_request_is_served() {
    use fb::ErrorCode::{BadTensor, UnknownApp};
    let mut c = Cluster::of(DYNAMIC, PolicyKind::Orloj, 1_000);
    let bad = [
        (dynamic(0, 2, None, 1_000.0), UnknownApp, "no app 2"),
        (dynamic(1, 0, Some("medium"), 1_000.0), UnknownApp, "no app `medium`"),
        (dynamic(2, 1, Some("short"), 1_000.0), UnknownApp, "is app 0"),
        (dynamic(3, 0, None, 0.0), BadTensor, "not in (0"),
        (dynamic(4, 0, None, -5.0), BadTensor, "not in (0"),
        (dynamic(5, 0, None, f32::NAN), BadTensor, "not in (0"),
        (dynamic(6, 0, None, 1e9), BadTensor, "not in (0"),
    ];
    let mut reqs: VecDeque<_> = bad.iter().map(|(r, _, _)| (0, r.clone())).collect();
    reqs.push_back((0, dynamic(7, 1, Some("long"), 2_000.0)));
    c.run(reqs);
    for (r, code, why) in &bad {
        let a = &c.answers.iter().find(|a| a.1.id == r.id).unwrap().1;
        assert_eq!((a.status, a.error_code), (fb::Status::Error, *code), "request {}", r.id);
        assert!(a.message.as_deref().unwrap().contains(why), "{:?} lacks {why}", a.message);
    }
    let good = &c.answers.iter().find(|a| a.1.id == 7).unwrap().1;
    assert_eq!((good.status, good.app, good.solo_ns), (fb::Status::Ok, 1, 2_000_000));
    assert_eq!((c.answers.len(), c.sched.stats.requests), (8, 1));
}

const SUPERNET: &str = r#"
name = "supernet"
seed = 3
duration_s = 2
warmup_s = 0
[cluster]
gpus = 2
[[models]]
name = "s"
supernet = "default"
max_batch = 16
slo_ms = 36.0
[policy]
name = "slackfit"
"#;

#[test]
fn a_supernet_runs_the_subnet_the_policy_chose_and_answers_say_which() {
    let mut c = Cluster::of(SUPERNET, PolicyKind::SlackFit, 10_000);
    let reqs = (0..3_000u64).map(|i| (i * 100_000, request(i, "s", 36.0, &[i as f32, 0.0, 0.0, 0.0])));
    c.run(reqs.collect());
    assert_eq!(c.answers.len(), 3_000);
    let subnets = &c.table.models[0].subnets;
    let mut used = std::collections::BTreeSet::new();
    for a in c.answers.iter().map(|a| &a.1).filter(|a| a.status == fb::Status::Ok) {
        let s = a.subnet.expect("a supernet's answer names its subnet") as usize;
        assert_eq!(a.accuracy, subnets[s].accuracy as f32);
        let t = a.timing.unwrap();
        assert_eq!(t.exec_ns, subnets[s].latency[t.batch_size as usize - 1], "subnet {s}'s l(b)");
        assert_eq!(a.outputs.as_ref().unwrap().len(), 1);
        used.insert(s);
    }
    assert!(used.len() >= 2, "SlackFit moves between subnets with the load: {used:?}");
}

mod lost;
mod prefix;
mod queries;

/// A drop's cause (the executor's error) reaches the client's answer.
#[test]
fn a_drop_passes_its_cause_to_the_client() {
    let Cluster { mut fe, table, .. } = Cluster::new(PolicyKind::Symphony, 16);
    let meta = fe.admit(0, 7, request(3, "m", 25.0, &[0.0, 1.0, 2.0, 3.0]), &table).expect("admitted");
    let why = "batch of 9 exceeds the maximum 8";
    let d = fb::Dropped { requests: Some(vec![meta.id]), reason: fb::DropReason::BadPlan, message: Some(why.into()) };
    let mut out = Vec::new();
    fe.on_dropped(1, d, &table, &mut out);
    let [(7, a)] = &out[..] else { panic!("one answer to connection 7: {out:?}") };
    assert_eq!(
        (a.id, a.status, a.drop_reason, a.message.as_deref()),
        (3, fb::Status::Dropped, fb::DropReason::BadPlan, Some(why))
    );
}

/// A client that measured its network path says so, and the frontend
/// plans its request that much earlier (its floor is 0 in these tests),
/// the client's deadline unchanged.
#[test]
fn a_clients_measured_path_is_kept_back_when_its_request_is_planned() {
    let mut c = Cluster::new(PolicyKind::Symphony, 100);
    let (now, slo) = (1_000, ms_to_nanos(25.0));
    let plain = c.fe.admit(now, 7, request(0, "m", 25.0, &[0.0; FLOATS]), &c.table).unwrap();
    let told = fb::InferRequest { path_ns: 180_000, ..request(1, "m", 25.0, &[0.0; FLOATS]) };
    let told = c.fe.admit(now, 7, told, &c.table).unwrap();
    assert_eq!((plain.deadline_ns, told.deadline_ns), (now + slo, now + slo - 180_000));
    // Bounded: no more than a tenth of the SLO.
    let greedy = fb::InferRequest { path_ns: slo, ..request(2, "m", 25.0, &[0.0; FLOATS]) };
    assert_eq!(c.fe.admit(now, 7, greedy, &c.table).unwrap().deadline_ns, now + slo - slo / 10);
}

/// Turning arrivals away while behind (`overload.rs`): off, no request is
/// turned away however late its batch runs; on, once every batch of an
/// interval ran behind its plan, a share of arrivals is refused
/// `Overloaded` at once, read no further than its head (as the frontend
/// shard asks before it reads a request whole); either way every request
/// is answered once, and the turned away are counted apart.
#[test]
fn a_frontend_behind_its_plans_turns_arrivals_away_only_when_asked() {
    let table = Cluster::new(PolicyKind::Symphony, 16).table;
    for on in [false, true] {
        let mut fe = Frontend::new(1, 1 << 20, 0, 0).shedding_when_behind(on);
        let (mut answers, mut refused) = (Vec::new(), 0u64);
        // 50 ms of arrivals 10 µs apart, each one's batch 2 ms behind plan.
        let n = 5_000u64;
        for i in 0..n {
            let now = 3_000_000 + i * 10_000;
            if fe.turning_away(now) {
                let head = RequestHead { id: i, model: Some("m"), query: None };
                let e = fe.turned_away(&head, Away::Behind, &table);
                assert_eq!((e.id, e.error_code), (i, fb::ErrorCode::Overloaded), "{:?}", e.message);
                refused += 1;
                continue;
            }
            match fe.admit(now, 7, request(i, "m", 25.0, &[0.0; FLOATS]), &table) {
                Ok(meta) => {
                    let r = fb::Results {
                        requests: Some(vec![meta.id]),
                        batch_size: 1,
                        exec_at_ns: now - 2_000_000,
                        started_ns: now,
                        finished_ns: now,
                        ..Default::default()
                    };
                    fe.on_results(now, r, &table, &mut answers);
                }
                Err(e) => panic!("admitted requests are not refused: {:?}", e.message),
            }
        }
        assert_eq!(answers.len() as u64 + refused, n, "each answered once");
        assert_eq!((fe.stats.turned_away, fe.stats.errors, fe.stats.received), (refused, refused, n));
        match on {
            false => assert_eq!(refused, 0),
            // Intervals end at 10, 20, 30 and 40 ms: 5%, 10%, 15% and 20%
            // of the arrivals after each.
            true => assert!((400..=600).contains(&refused), "{refused} turned away"),
        }
    }
}

/// An input's bytes are read as f32s in place where they are aligned, and
/// give the same floats as reading them one by one; misaligned, they are
/// not read in place.
#[test]
fn aligned_input_bytes_are_read_as_floats_in_place() {
    use super::frontend::{as_le_floats, le_bytes, le_floats};
    let xs = [1.5f32, -2.0, f32::MIN_POSITIVE, 3.25e7];
    let bytes = le_bytes(&xs);
    let in_place = as_le_floats(&bytes).expect("an allocator's buffer is aligned for f32");
    assert_eq!(in_place, xs);
    assert_eq!(in_place.as_ptr() as *const u8, bytes.as_ptr(), "no copy");
    assert!(le_floats(&bytes).eq(xs.iter().copied()));
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&bytes);
    assert_eq!(as_le_floats(&shifted[1..]), None, "misaligned bytes are read one by one");
}
