//! Model-based tests of the candidate logic: random request streams, grants
//! and timeouts against a trivially correct model of the queue (a sorted
//! Vec), checked after every step.

use std::collections::{BTreeSet, HashMap};

use super::*;
use crate::profile::Profile;
use crate::rng::Rng;
use crate::time::Nanos;
use crate::types::{
    AppId, BackendId, ClusterSpec, DispatchDelay, DropReason, ModelId, ModelSpec, Output, Request, RequestId,
};

fn spec(rng: &mut Rng) -> ClusterSpec {
    let profile = if rng.below(2) == 0 {
        Profile::Linear { alpha: 1 + rng.below(400), beta: rng.below(2_000), max_batch: 1 + rng.below(20) as u32 }
    } else {
        let mut t = vec![100 + rng.below(1_000)];
        for _ in 0..rng.below(16) {
            let last = *t.last().expect("non-empty");
            t.push(last + rng.below(300));
        }
        Profile::table(t).expect("monotone")
    };
    let slo = profile.latency(1) + 500 + rng.below(8_000);
    ClusterSpec {
        models: vec![ModelSpec {
            name: "m".into(),
            profile,
            slo,
            dynamic: None,
            memory_mb: 0.0,
            prefix: None,
            subnets: vec![],
        }],
        backends: 1,
        delay: DispatchDelay { ctrl: rng.below(300), per_request: rng.below(30) },
        queue_capacity: 1 + rng.below(40) as usize,
        gpu_memory_mb: None,
        prefixes: vec![],
    }
}

/// The reference: what must be true of a candidate for the queue `model`
/// (sorted by (deadline, id)) at `now`, with a backend free at `free_at`.
fn largest_prefix(spec: &ClusterSpec, model: &[(Nanos, u64)], now: Nanos, free_at: Nanos) -> u32 {
    let p = &spec.models[0].profile;
    let dl = model[0].0;
    let n = (model.len() as u32).min(p.max_batch());
    (1..=n).filter(|&b| (now + spec.delay.of(b)).max(free_at) + p.latency(b) <= dl).max().unwrap_or(0)
}

/// The trivially correct model of one model's queue: requests sorted by
/// (deadline, id), and how each one ended.
struct Reference {
    spec: ClusterSpec,
    queue: Vec<(Nanos, u64)>,
    ended: HashMap<u64, &'static str>,
}

/// Checks everything the shard said after one step against the reference
/// (and updates it); returns the last candidate reported, if any, and how
/// many backends were freed.
fn check_outputs(
    shard: &mut ModelShard,
    r: &mut Reference,
    now: Nanos,
    free_at: Option<Nanos>,
    seed: u64,
) -> (Option<Option<Candidate>>, u32) {
    let profile = &r.spec.models[0].profile;
    let (mut last_candidate, mut freed) = (None, 0);
    while let Some(o) = shard.poll_output() {
        match o {
            ShardOutput::Decision(Output::Dropped { request, reason }) => {
                let id = request.0;
                assert!(r.ended.insert(id, reason.as_str()).is_none(), "seed {seed}: {id} ended twice");
                let at = r.queue.iter().position(|x| x.1 == id).expect("dropped a queued request");
                let (dl, _) = r.queue.remove(at);
                if reason == DropReason::Shed {
                    assert!(free_at.is_some(), "seed {seed}: shed without a granted backend");
                }
                if reason == DropReason::DeadlineUnreachable {
                    let start = (now + r.spec.delay.of(1)).max(free_at.unwrap_or(0));
                    assert!(start + profile.latency(1) > dl, "seed {seed}: dropped a reachable request");
                }
            }
            ShardOutput::Decision(Output::Dispatch(plan)) => {
                let bs = plan.requests.len() as u32;
                let want = largest_prefix(&r.spec, &r.queue, now, free_at.expect("only grants dispatch"));
                assert_eq!(bs, want, "seed {seed}: batch is not the largest feasible prefix");
                let earliest = r.queue[0].0;
                assert!(plan.exec_at + profile.latency(bs) <= earliest, "seed {seed}: planned past a deadline");
                for (i, id) in plan.requests.iter().enumerate() {
                    assert_eq!(r.queue[i].1, id.0, "seed {seed}: batch is not the queue's prefix");
                    assert!(r.ended.insert(id.0, "served").is_none(), "seed {seed}: {} ended twice", id.0);
                }
                r.queue.drain(..bs as usize);
            }
            ShardOutput::ToRank(ToRank::Candidate { candidate, .. }) => last_candidate = Some(candidate),
            ShardOutput::ToRank(ToRank::BackendFree { free_at: f, .. }) => {
                freed += 1;
                assert!(f >= now);
            }
            ShardOutput::ToRank(
                ToRank::BatchDone { .. } | ToRank::BackendFailed { .. } | ToRank::BackendJoined { .. },
            ) => {
                panic!("model shards never report completions or failures")
            }
            ShardOutput::Decision(Output::Layout(_)) => panic!("Symphony runs whole GPUs"),
        }
    }
    (last_candidate, freed)
}

#[test]
fn candidates_match_the_reference_and_every_request_ends_once() {
    for seed in 0..300 {
        let mut rng = Rng::new(seed);
        let spec = spec(&mut rng);
        let rule = if rng.below(2) == 0 { CandidateRule::NonWorkConserving } else { CandidateRule::WorkConserving };
        let mut shard = ModelShard::new(&spec, &[ModelId(0)], rule);
        let profile = spec.models[0].profile.clone();
        let slo = spec.models[0].slo;
        let mut reference = Reference { spec: spec.clone(), queue: Vec::new(), ended: HashMap::new() };
        let mut accepted = BTreeSet::new();
        let mut now: Nanos = 0;
        let mut next_id = 0u64;
        for _ in 0..400 {
            now += rng.below(slo / 3 + 1);
            // Fire due timers first, as the wiring does.
            if shard.next_timeout().is_some_and(|t| t <= now) {
                shard.on_timeout(now);
            }
            let free_at = match rng.below(4) {
                0 => {
                    let free_at = now + rng.below(slo);
                    shard.on_message(now, ToModel::Grant { model: ModelId(0), backend: BackendId(0), free_at });
                    Some(free_at)
                }
                _ => {
                    let id = next_id;
                    next_id += 1;
                    let deadline = now + slo - rng.below(slo / 4);
                    accepted.insert(id);
                    reference.queue.push((deadline, id));
                    reference.queue.sort_unstable();
                    shard.on_request(
                        now,
                        Request { id: RequestId(id), model: ModelId(0), app: AppId(0), arrival: now, deadline },
                    );
                    None
                }
            };
            let (last_candidate, freed) = check_outputs(&mut shard, &mut reference, now, free_at, seed);
            if free_at.is_some() {
                assert_eq!(freed, 1, "seed {seed}: a grant is answered with exactly one BackendFree");
            }
            // The reported candidate describes the queue as it now stands.
            let model = &reference.queue;
            match last_candidate.flatten() {
                None => assert!(model.is_empty() || last_candidate.is_none(), "seed {seed}: queue without candidate"),
                Some(c) => {
                    assert_eq!(c.bs, largest_prefix(&spec, model, now, 0), "seed {seed}: candidate size");
                    assert!(c.exec_at >= now + spec.delay.of(c.bs));
                    assert!(c.exec_at <= c.invalid_after, "seed {seed}: candidate past its validity");
                    assert_eq!(c.invalid_after + profile.latency(c.bs), model[0].0);
                }
            }
        }
        // Drain: time passes, every request left must be dropped by its timer.
        while let Some(t) = shard.next_timeout() {
            shard.on_timeout(t);
            while let Some(o) = shard.poll_output() {
                if let ShardOutput::Decision(Output::Dropped { request, .. }) = o {
                    assert!(reference.ended.insert(request.0, "expired").is_none(), "seed {seed}: ended twice");
                }
            }
        }
        let ended_ids: BTreeSet<u64> = reference.ended.keys().copied().collect();
        assert_eq!(ended_ids, accepted, "seed {seed}: not every request ended exactly once");
        assert_eq!(shard.pending(), 0);
    }
}

#[test]
fn non_work_conserving_waits_for_the_batch_to_grow() {
    const MS: Nanos = 1_000_000;
    let profile = Profile::Linear { alpha: MS, beta: 5 * MS, max_batch: 64 };
    let spec = ClusterSpec {
        models: vec![ModelSpec {
            name: "m".into(),
            profile,
            slo: 25 * MS,
            dynamic: None,
            memory_mb: 0.0,
            prefix: None,
            subnets: vec![],
        }],
        backends: 1,
        delay: DispatchDelay::default(),
        queue_capacity: 64,
        gpu_memory_mb: None,
        prefixes: vec![],
    };
    let candidate_after_warmup = |rule| {
        let mut s = ModelShard::new(&spec, &[ModelId(0)], rule);
        // 1000 r/s for 60 ms, each served at once: lambda = 1000 r/s, beta*lambda = 5.
        for i in 0..60 {
            let now = i * MS;
            s.on_request(
                now,
                Request { id: RequestId(i), model: ModelId(0), app: AppId(0), arrival: now, deadline: now + 25 * MS },
            );
            s.on_message(now, ToModel::Grant { model: ModelId(0), backend: BackendId(0), free_at: now });
        }
        while s.poll_output().is_some() {}
        let now = 60 * MS;
        s.on_request(
            now,
            Request { id: RequestId(60), model: ModelId(0), app: AppId(0), arrival: now, deadline: now + 25 * MS },
        );
        std::iter::from_fn(|| s.poll_output())
            .find_map(|o| match o {
                ShardOutput::ToRank(ToRank::Candidate { candidate, .. }) => candidate,
                _ => None,
            })
            .expect("a candidate")
    };
    // One request, fewer than beta*lambda: wait until frontrun_at = dl - l(2) = 85 - 7 ms.
    assert_eq!(candidate_after_warmup(CandidateRule::NonWorkConserving).exec_at, 78 * MS);
    assert_eq!(candidate_after_warmup(CandidateRule::WorkConserving).exec_at, 60 * MS);
}

#[test]
fn the_rule_runs_at_once_from_beta_lambda_on() {
    let r = CandidateRule::NonWorkConserving;
    assert_eq!(r.exec_at(4, 100, Some(300), 5.0), 300);
    assert_eq!(r.exec_at(5, 100, Some(300), 5.0), 100);
    assert_eq!(r.exec_at(4, 100, None, 5.0), 100, "a batch that cannot grow runs at once");
    assert_eq!(r.exec_at(4, 400, Some(300), 5.0), 400, "never before it can start");
    assert_eq!(CandidateRule::WorkConserving.exec_at(1, 100, Some(300), 5.0), 100);
}

#[test]
fn rank_grants_a_free_backend_and_parks_when_none_is() {
    let delay = DispatchDelay { ctrl: 10, per_request: 0 };
    let mut rank = RankShard::new(2, 1, delay);
    let c = |exec_at| Some(Candidate { bs: 4, exec_at, invalid_after: exec_at + 50 });
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c(100) });
    assert_eq!(rank.next_timeout(), Some(90));
    rank.on_timeout(90);
    assert_eq!(rank.poll_output(), Some(ToModel::Grant { model: ModelId(0), backend: BackendId(0), free_at: 0 }));
    // The only backend is granted: model 1 parks until it is back.
    rank.on_message(ToRank::Candidate { model: ModelId(1), candidate: c(120) });
    rank.on_timeout(110);
    assert_eq!(rank.poll_output(), None);
    rank.on_message(ToRank::BackendFree { backend: BackendId(0), free_at: 160, dispatched: true });
    assert_eq!(rank.next_timeout(), Some(150));
    rank.on_timeout(150);
    assert_eq!(rank.poll_output(), Some(ToModel::Grant { model: ModelId(1), backend: BackendId(0), free_at: 160 }));
    // Too late for a parked candidate: it is told, not granted.
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c(170) });
    rank.on_timeout(160);
    rank.on_message(ToRank::BackendFree { backend: BackendId(0), free_at: 500, dispatched: true });
    rank.on_timeout(490);
    assert_eq!(rank.poll_output(), Some(ToModel::Invalidated { model: ModelId(0), free_at: 500 }));
    assert_eq!(rank.next_timeout(), None);
    // Two batches were sent; when the last is done early, the backend is free then.
    rank.on_message(ToRank::BatchDone { backend: BackendId(0), at: 300 });
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c(420) });
    rank.on_timeout(410);
    assert_eq!(rank.poll_output(), None, "one batch is still out: the prediction stands");
    rank.on_message(ToRank::BatchDone { backend: BackendId(0), at: 415 });
    rank.on_timeout(415);
    assert_eq!(rank.poll_output(), Some(ToModel::Grant { model: ModelId(0), backend: BackendId(0), free_at: 415 }));
}

#[test]
fn rank_never_grants_a_failed_backend_again() {
    let delay = DispatchDelay { ctrl: 10, per_request: 0 };
    let mut rank = RankShard::new(1, 2, delay);
    let c = |exec_at| Some(Candidate { bs: 4, exec_at, invalid_after: exec_at + 50 });
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c(100) });
    rank.on_timeout(90);
    assert_eq!(rank.poll_output(), Some(ToModel::Grant { model: ModelId(0), backend: BackendId(0), free_at: 0 }));
    // Backend 0 fails while granted; the shard's answer does not bring it back,
    // nor does a completion it sent before failing.
    rank.on_message(ToRank::BackendFailed { backend: BackendId(0) });
    rank.on_message(ToRank::BackendFree { backend: BackendId(0), free_at: 150, dispatched: true });
    rank.on_message(ToRank::BatchDone { backend: BackendId(0), at: 140 });
    // Backend 1 is busy until 400; then it fails too: nothing is left to grant.
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c(200) });
    rank.on_timeout(190);
    assert_eq!(rank.poll_output(), Some(ToModel::Grant { model: ModelId(0), backend: BackendId(1), free_at: 0 }));
    rank.on_message(ToRank::BackendFree { backend: BackendId(1), free_at: 400, dispatched: true });
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c(300) });
    rank.on_timeout(290);
    assert_eq!(rank.poll_output(), None, "parked: the only live backend frees at 400");
    rank.on_message(ToRank::BackendFailed { backend: BackendId(1) });
    assert_eq!(rank.next_timeout(), None, "no backend left: no timer for the parked candidate");
    rank.on_timeout(1_000);
    assert_eq!(rank.poll_output(), None);
    // Backend 1 comes back at 1,100: too late for the parked candidate,
    // which is told so; the next one gets it.
    rank.on_message(ToRank::BackendJoined { backend: BackendId(1), at: 1_100 });
    rank.on_timeout(1_100);
    assert_eq!(rank.poll_output(), Some(ToModel::Invalidated { model: ModelId(0), free_at: 1_100 }));
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c(1_150) });
    rank.on_timeout(1_150);
    assert_eq!(rank.poll_output(), Some(ToModel::Grant { model: ModelId(0), backend: BackendId(1), free_at: 1_100 }));
    // It fails and comes back while its grant is still out (the shard has
    // not answered): it is free once the shard answers, not before.
    rank.on_message(ToRank::BackendFailed { backend: BackendId(1) });
    rank.on_message(ToRank::BackendJoined { backend: BackendId(1), at: 1_160 });
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c(1_300) });
    rank.on_timeout(1_300);
    assert_eq!(rank.poll_output(), None, "granted still: not free until the shard answers");
    rank.on_message(ToRank::BackendFree { backend: BackendId(1), free_at: 1_250, dispatched: false });
    rank.on_timeout(1_300);
    assert_eq!(rank.poll_output(), Some(ToModel::Grant { model: ModelId(0), backend: BackendId(1), free_at: 1_250 }));
}

#[test]
fn rank_ignores_a_completion_it_did_not_send_and_counts_it() {
    // Over a network a completion can come twice, or from an earlier run's
    // batch (the chaos simulator found the shard asserting on it).
    let mut rank = RankShard::new(1, 1, DispatchDelay { ctrl: 10, per_request: 0 });
    rank.on_message(ToRank::BatchDone { backend: BackendId(0), at: 50 });
    assert_eq!(rank.unexpected_done, 1);
    let c = Some(Candidate { bs: 4, exec_at: 100, invalid_after: 150 });
    rank.on_message(ToRank::Candidate { model: ModelId(0), candidate: c });
    rank.on_timeout(90);
    assert_eq!(rank.poll_output(), Some(ToModel::Grant { model: ModelId(0), backend: BackendId(0), free_at: 0 }));
}
