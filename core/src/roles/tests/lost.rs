//! What each role does when messages or peers are lost: nothing is held
//! forever (the rules `chaos` checks at scale).

use baton_sched::PolicyKind;
use baton_wire::{fb, Message};

use super::super::backend::BackendRole;
use super::super::frontend::{f32_tensor, le_bytes, le_floats, Frontend};
use super::super::scheduler::SchedulerRole;
use super::super::{frontend_of, Addr, Envelope};
use super::{request, Cluster, FLOATS};

fn answers_of(out: &[(u64, fb::InferResponse)]) -> Vec<(u64, fb::Status, fb::DropReason, fb::ErrorCode)> {
    out.iter().map(|(_, a)| (a.id, a.status, a.drop_reason, a.error_code)).collect()
}

#[test]
fn a_request_whose_answer_never_comes_is_answered_lost_after_its_grace() {
    let Cluster { table, .. } = Cluster::new(PolicyKind::Symphony, 16);
    let mut fe = Frontend::new(1, 16, 0, 0).with_grace(10_000_000);
    // Its metadata is lost on the way to the scheduler: nothing else comes.
    fe.admit(0, 7, request(3, "m", 25.0, &[0.0; FLOATS]), &table).expect("admitted");
    let mut out = Vec::new();
    let mut now = 0;
    while out.is_empty() {
        now = fe.next_timeout().expect("a held request is looked at again");
        fe.on_timeout(now, &table, &mut out);
        assert!(now < 100_000_000, "held forever");
    }
    // Deadline 25 ms + grace 10 ms, looked at every 2.5 ms.
    assert!((35_000_000..=37_500_000).contains(&now), "answered at {now}");
    assert_eq!(answers_of(&out), vec![(3, fb::Status::Dropped, fb::DropReason::Lost, fb::ErrorCode::UnknownModel)]);
    assert_eq!((fe.held(), fe.next_timeout()), (0, None));
}

#[test]
fn losing_the_scheduler_answers_what_no_backend_took_and_refuses_until_it_is_back() {
    let Cluster { table, .. } = Cluster::new(PolicyKind::Symphony, 16);
    let mut fe = Frontend::new(1, 16, 0, 0);
    let a = fe.admit(0, 7, request(1, "m", 25.0, &[0.0; FLOATS]), &table).expect("admitted");
    fe.admit(0, 7, request(2, "m", 25.0, &[0.0; FLOATS]), &table).expect("admitted");
    // A backend takes request 1's input; request 2 waits at the scheduler.
    fe.inputs(&fb::FetchInputs { batch_id: 5, requests: Some(vec![a.id]), backend: 0 });
    let mut out = Vec::new();
    fe.peer_lost(1, Addr::Scheduler(0), &table, &mut out);
    assert_eq!(answers_of(&out), vec![(2, fb::Status::Dropped, fb::DropReason::Lost, fb::ErrorCode::UnknownModel)]);
    let refused = fe.admit(2, 7, request(3, "m", 25.0, &[0.0; FLOATS]), &table).expect_err("no scheduler");
    assert_eq!(refused.error_code, fb::ErrorCode::Unavailable);
    // Then the backend holding request 1 goes too.
    out.clear();
    fe.peer_lost(3, Addr::Backend(0), &table, &mut out);
    assert_eq!(answers_of(&out), vec![(1, fb::Status::Dropped, fb::DropReason::Lost, fb::ErrorCode::UnknownModel)]);
    fe.peer_joined(Addr::Scheduler(0));
    fe.admit(4, 7, request(4, "m", 25.0, &[0.0; FLOATS]), &table).expect("admitted again");
}

#[test]
fn a_moved_model_sends_new_requests_to_its_new_scheduler_and_losing_one_loses_only_its_own() {
    let Cluster { mut table, .. } = Cluster::new(PolicyKind::Symphony, 16);
    let mut fe = Frontend::new(1, 16, 0, 0);
    let before =
        fe.admit_to_scheduler(0, 7, &mut request(1, "m", 25.0, &[0.0; FLOATS]).into(), &table).expect("admitted");
    // The model moves to sub-cluster 1 (a new routing table published).
    table.models[0].subcluster = 1;
    let after =
        fe.admit_to_scheduler(1, 7, &mut request(2, "m", 25.0, &[0.0; FLOATS]).into(), &table).expect("admitted");
    assert_eq!((before.to, after.to), (Addr::Scheduler(0), Addr::Scheduler(1)));
    let mut out = Vec::new();
    fe.peer_lost(2, Addr::Scheduler(1), &table, &mut out);
    assert_eq!(answers_of(&out), vec![(2, fb::Status::Dropped, fb::DropReason::Lost, fb::ErrorCode::UnknownModel)]);
    // Request 1 stays with sub-cluster 0's scheduler, which is up.
    assert_eq!(fe.held(), 1);
    let refused = fe.admit(3, 7, request(3, "m", 25.0, &[0.0; FLOATS]), &table).expect_err("its scheduler is gone");
    assert_eq!(refused.error_code, fb::ErrorCode::Unavailable);
    table.models[0].subcluster = 0;
    fe.admit(4, 7, request(4, "m", 25.0, &[0.0; FLOATS]), &table).expect("sub-cluster 0's scheduler is up");
}

#[test]
fn a_frontend_sheds_while_too_much_waits_to_reach_the_scheduler() {
    let Cluster { table, .. } = Cluster::new(PolicyKind::Symphony, 16);
    let mut fe = Frontend::new(1, 16, 0, 0).with_max_waiting(2);
    let admit = |fe: &mut Frontend, id| fe.admit(0, 7, request(id, "m", 25.0, &[0.0; FLOATS]), &table);
    admit(&mut fe, 1).expect("admitted");
    admit(&mut fe, 2).expect("admitted");
    // Neither has left (the link to the scheduler is full): shed at once.
    let shed = admit(&mut fe, 3).expect_err("two wait already");
    assert_eq!((shed.id, shed.error_code), (3, fb::ErrorCode::Overloaded));
    assert!(shed.message.as_deref().unwrap().contains("wait to reach the scheduler"), "{shed:?}");
    // The shard sent one: room for one more.
    fe.set_waiting(1, None);
    admit(&mut fe, 4).expect("admitted");
    assert_eq!(admit(&mut fe, 5).expect_err("full again").error_code, fb::ErrorCode::Overloaded);
    assert_eq!((fe.held(), fe.stats.received, fe.stats.errors), (3, 5, 2));
}

/// While the oldest request on its way to the scheduler has waited as
/// long as a new one's SLO leaves (25 ms here, nothing reserved), the new
/// one is shed at the door; a shorter wait, or none, admits it.
#[test]
fn a_frontend_sheds_at_the_door_while_requests_wait_longer_than_the_slo_leaves() {
    let Cluster { table, .. } = Cluster::new(PolicyKind::Symphony, 16);
    let mut fe = Frontend::new(1, 16, 0, 0);
    let slo = 25_000_000;
    let admit = |fe: &mut Frontend, now, id| fe.admit(now, 7, request(id, "m", 25.0, &[0.0; FLOATS]), &table);
    fe.set_waiting(1, Some(1_000));
    admit(&mut fe, 1_000 + slo - 1, 1).expect("waited a nanosecond less than the SLO leaves");
    let shed = admit(&mut fe, 1_000 + slo, 2).expect_err("waited as long as the SLO leaves");
    assert_eq!((shed.id, shed.error_code), (2, fb::ErrorCode::Overloaded));
    assert!(shed.message.as_deref().unwrap().contains("longer than this one's SLO leaves"), "{shed:?}");
    fe.set_waiting(0, None);
    admit(&mut fe, 10 * slo, 3).expect("nothing waits");
    assert_eq!((fe.held(), fe.stats.received, fe.stats.errors), (2, 3, 1));
}

#[test]
fn a_batch_whose_inputs_never_come_runs_without_them_and_their_frontend_hears() {
    let Cluster { table, .. } = Cluster::new(PolicyKind::Symphony, 16);
    let mut be = BackendRole::new(0, Box::new(table.emulated_executor(0.0, 1))).with_limits(5_000_000, 2);
    // Requests of frontends 1 and 2; frontend 2's inputs are lost.
    let (r1, r2) = (1 << 48 | 7, 2 << 48 | 9);
    let plan =
        |id| fb::BatchPlan { batch_id: id, requests: Some(vec![r1, r2]), exec_at_ns: 1_000_000, ..Default::default() };
    let mut out = Vec::new();
    be.on_message(0, Message::BatchPlan(plan(1)), &mut out);
    be.on_message(0, Message::BatchPlan(plan(1)), &mut out);
    assert_eq!(be.queued(), 1, "a plan delivered twice is queued once");
    let data = f32_tensor(le_bytes(&[1.0; FLOATS]));
    let inputs =
        fb::Inputs { batch_id: 1, requests: Some(vec![r1]), tensors: Some(vec![data]), backend: 0, frontend: 1 };
    be.on_message(0, Message::Inputs(inputs), &mut out);
    out.clear();
    // Two more plans fill the queue: the third is refused.
    be.on_message(0, Message::BatchPlan(plan(2)), &mut out);
    be.on_message(0, Message::BatchPlan(plan(3)), &mut out);
    let full = out.iter().any(|e| matches!(&e.msg, Message::Dropped(d) if d.reason == fb::DropReason::QueueFull));
    let freed = out.iter().any(|e| matches!(&e.msg, Message::BatchDone(d) if d.batch_id == 3 && d.failed));
    assert!(full && freed, "{out:?}");
    out.clear();
    let at = be.next_wake().expect("the batch waits for its patience");
    assert_eq!(at, 6_000_000, "exec_at + patience");
    while let Some(t) = be.next_wake().filter(|&t| t <= 20_000_000) {
        be.poll(t, &mut out);
    }
    let lost: Vec<&Envelope> =
        out.iter().filter(|e| matches!(&e.msg, Message::Dropped(d) if d.reason == fb::DropReason::Lost)).collect();
    // Batch 1 lacks frontend 2's part; batch 2 got no inputs at all.
    let to: Vec<Addr> = lost.iter().map(|e| e.to).collect();
    assert_eq!(to, vec![Addr::Frontend(2), Addr::Frontend(1), Addr::Frontend(2)]);
    let ran: Vec<Vec<u64>> = out
        .iter()
        .filter_map(|e| match &e.msg {
            Message::Results(r) => r.requests.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(ran[0], vec![r1], "batch 1 ran with the input that came");
}

/// A batch mixing two frontends' requests gets their inputs in two
/// messages, the later frontend's first: each request still runs on its
/// own input (the backend finds inputs out of plan order by id).
#[test]
fn a_batch_of_two_frontends_runs_each_request_on_its_own_input() {
    let Cluster { table, .. } = Cluster::new(PolicyKind::Symphony, 16);
    let mut be = BackendRole::new(0, Box::new(table.emulated_executor(0.0, 1)));
    let (a, b) = (|i: u64| 1 << 48 | i, |i: u64| 2 << 48 | i);
    let requests = vec![a(0), b(0), a(1), b(1), a(2)];
    let plan = fb::BatchPlan { batch_id: 1, requests: Some(requests.clone()), exec_at_ns: 0, ..Default::default() };
    let mut out = Vec::new();
    be.on_message(0, Message::BatchPlan(plan), &mut out);
    // Request r's input is FLOATS copies of r's low bits.
    let inputs = |fe: u32, ids: Vec<u64>| {
        let tensors =
            ids.iter().map(|&r| f32_tensor(le_bytes(&[(r & 0xff) as f32 + fe as f32 * 10.0; FLOATS]))).collect();
        Message::Inputs(fb::Inputs {
            batch_id: 1,
            requests: Some(ids),
            tensors: Some(tensors),
            backend: 0,
            frontend: fe,
        })
    };
    be.on_message(0, inputs(2, vec![b(0), b(1)]), &mut out);
    be.on_message(0, inputs(1, vec![a(0), a(1), a(2)]), &mut out);
    while let Some(t) = be.next_wake() {
        be.poll(t, &mut out);
    }
    let mut ran = Vec::new();
    for e in &out {
        if let Message::Results(r) = &e.msg {
            for (&id, t) in r.requests.iter().flatten().zip(r.outputs.iter().flatten()) {
                assert_eq!(e.to, Addr::Frontend(frontend_of(id)), "answered to its own frontend");
                // The emulated model's output: the sum of the request's input.
                let want = FLOATS as f32 * ((id & 0xff) as f32 + frontend_of(id) as f32 * 10.0);
                let got = le_floats(t.data.as_deref().unwrap_or(&[])).next();
                assert_eq!(got, Some(want), "request {id:#x}");
                ran.push(id);
            }
        }
    }
    ran.sort_unstable();
    let mut want = requests;
    want.sort_unstable();
    assert_eq!(ran, want, "every request ran once");
}

#[test]
fn a_backend_silent_past_its_batch_is_failed_and_comes_back_when_it_speaks() {
    let mut c = Cluster::new(PolicyKind::Clockwork, 16);
    let scenario = baton_sched::Scenario::parse(super::SCENARIO).unwrap();
    let policy = baton_sched::build::scheduler(PolicyKind::Clockwork, &scenario, 0.0);
    c.sched = SchedulerRole::new(policy, c.table.clone(), 2).with_silence(50_000_000);
    let meta = c.fe.admit(0, 7, request(1, "m", 25.0, &[0.0; FLOATS]), &c.table).expect("admitted");
    let mut out = Vec::new();
    c.sched.on_message(0, Message::RequestMeta(meta), &mut out);
    let Some(Message::BatchPlan(plan)) = out.iter().map(|e| e.msg.clone()).find(|m| matches!(m, Message::BatchPlan(_)))
    else {
        panic!("dispatched: {out:?}")
    };
    // The plan is lost: the backend never answers.
    out.clear();
    let mut now = 0;
    while c.sched.inflight() > 0 {
        now = c.sched.next_timeout().expect("a batch in flight is watched");
        c.sched.on_timeout(now, &mut out);
        assert!(now < 200_000_000, "watched forever");
    }
    let dropped =
        out.iter().any(|e| matches!(&e.msg, Message::Dropped(d) if d.reason == fb::DropReason::BackendFailed));
    assert!(dropped && now >= 50_000_000, "failed at {now}: {out:?}");
    // It speaks again (a completion the scheduler no longer expects): it is
    // back, and the next request may go to it.
    let done = fb::BatchDone { batch_id: plan.batch_id, backend: plan.backend, ..Default::default() };
    c.sched.on_message(now, Message::BatchDone(done), &mut out);
    assert_eq!(c.sched.stats.rejected, 1);
    out.clear();
    let mut backends = std::collections::BTreeSet::new();
    for i in 0..4 {
        let meta = c.fe.admit(now, 7, request(10 + i, "m", 25.0, &[0.0; FLOATS]), &c.table).expect("admitted");
        c.sched.on_message(now, Message::RequestMeta(meta), &mut out);
        for e in out.drain(..) {
            if let Message::BatchPlan(p) = e.msg {
                backends.insert(p.backend);
                let done = fb::BatchDone { batch_id: p.batch_id, backend: p.backend, ..Default::default() };
                c.sched.on_message(now + 1, Message::BatchDone(done), &mut Vec::new());
            }
        }
        now += 1_000_000;
        if let Some(t) = c.sched.next_timeout().filter(|&t| t <= now) {
            c.sched.on_timeout(t, &mut out);
        }
    }
    assert!(backends.contains(&plan.backend), "the silent backend is used again: {backends:?}");
}
