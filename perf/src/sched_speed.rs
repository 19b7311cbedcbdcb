//! Scheduler-core speed: Symphony's model shard and rank shard driven
//! directly in one thread (no simulator, no backends, no allocation beyond
//! what the shards do), offered far more than the cluster can serve, so every
//! path (queueing, candidates, grants, pruning, shedding, drops) is hot.
//! Measures scheduled requests per second of wall time on one core and the
//! batch rate that goes with it, and splits the time between the shards.

use std::time::Instant;

use serde::Serialize;

use baton_sched::symphony::{CandidateRule, ModelShard, RankShard, ShardOutput};
use baton_sched::time::{ms_to_nanos, Nanos, NANOS_PER_S};
use baton_sched::{AppId, ClusterSpec, DispatchDelay, ModelId, ModelSpec, Output, Profile, Request, RequestId};

#[derive(Clone, Debug)]
pub struct SpeedConfig {
    pub models: usize,
    pub backends: u32,
    /// Offered load as a multiple of what the backends can serve.
    pub overload: f64,
    pub requests: u64,
}

impl SpeedConfig {
    pub fn full() -> Self {
        Self { models: 64, backends: 1000, overload: 3.0, requests: 10_000_000 }
    }
    pub fn quick() -> Self {
        Self { models: 64, backends: 1000, overload: 3.0, requests: 200_000 }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct SpeedResult {
    pub models: usize,
    pub backends: u32,
    pub offered_rps_virtual: f64,
    pub requests: u64,
    pub batches: u64,
    pub batched_requests: u64,
    pub dropped: u64,
    pub wall_s: f64,
    pub requests_per_s: f64,
    pub batches_per_s: f64,
    pub ns_per_request: f64,
    /// Share of wall time inside the model shard (the rest: rank shard and
    /// the loop that carries messages between them).
    pub model_shard_share: f64,
}

/// Carries messages between the shards until both are quiet.
struct Driver {
    shard: ModelShard,
    rank: RankShard,
    batches: u64,
    batched: u64,
    dropped: u64,
    in_shard: std::time::Duration,
}

impl Driver {
    fn pump(&mut self, now: Nanos, timed: bool) {
        loop {
            let mut moved = false;
            while let Some(o) = self.shard.poll_output() {
                moved = true;
                match o {
                    ShardOutput::ToRank(m) => self.rank.on_message(m),
                    ShardOutput::Decision(Output::Dispatch(p)) => {
                        self.batches += 1;
                        self.batched += p.requests.len() as u64;
                    }
                    ShardOutput::Decision(Output::Dropped { .. }) => self.dropped += 1,
                    ShardOutput::Decision(Output::Layout(_)) => unreachable!("Symphony runs whole GPUs"),
                }
            }
            if self.rank.next_timeout().is_some_and(|t| t <= now) {
                self.rank.on_timeout(now);
            }
            while let Some(m) = self.rank.poll_output() {
                moved = true;
                self.shard_call(timed, |s| s.on_message(now, m));
            }
            if !moved {
                return;
            }
        }
    }

    fn shard_call(&mut self, timed: bool, f: impl FnOnce(&mut ModelShard)) {
        if timed {
            let t = Instant::now();
            f(&mut self.shard);
            self.in_shard += t.elapsed();
        } else {
            f(&mut self.shard);
        }
    }
}

fn spec(cfg: &SpeedConfig) -> ClusterSpec {
    // ResNet50-like models (Table 4), 25 ms SLO.
    let models = (0..cfg.models)
        .map(|i| ModelSpec {
            name: format!("m{i}"),
            profile: Profile::linear_ms(1.053, 5.072, 64).expect("valid profile"),
            slo: ms_to_nanos(25.0),
            dynamic: None,
            memory_mb: 0.0,
            prefix: None,
            subnets: vec![],
        })
        .collect();
    ClusterSpec {
        models,
        backends: cfg.backends,
        delay: DispatchDelay { ctrl: 200_000, per_request: 0 },
        queue_capacity: 1 << 16,
        gpu_memory_mb: None,
        prefixes: vec![],
    }
}

fn run_once(cfg: &SpeedConfig, timed: bool) -> (SpeedResult, std::time::Duration) {
    let spec = spec(cfg);
    let owned: Vec<ModelId> = (0..cfg.models as u32).map(ModelId).collect();
    let capacity_rps = cfg.backends as f64 * spec.models[0].profile.throughput_rps(16);
    let offered = capacity_rps * cfg.overload;
    let gap = NANOS_PER_S as f64 / offered;
    let mut d = Driver {
        shard: ModelShard::new(&spec, &owned, CandidateRule::NonWorkConserving),
        rank: RankShard::new(cfg.models, cfg.backends, spec.delay),
        batches: 0,
        batched: 0,
        dropped: 0,
        in_shard: Default::default(),
    };
    let slo = spec.models[0].slo;
    let start = Instant::now();
    for i in 0..cfg.requests {
        let now = (i as f64 * gap) as Nanos;
        if d.shard.next_timeout().is_some_and(|t| t <= now) {
            d.shard_call(timed, |s| s.on_timeout(now));
        }
        d.pump(now, timed);
        // Models in a fixed scrambled order: every model busy, none in lockstep.
        let model = ModelId(((i.wrapping_mul(0x9E37_79B9) >> 7) % cfg.models as u64) as u32);
        let req = Request { id: RequestId(i), model, app: AppId(0), arrival: now, deadline: now + slo };
        d.shard_call(timed, |s| s.on_request(now, req));
        d.pump(now, timed);
    }
    let wall = start.elapsed();
    let wall_s = wall.as_secs_f64();
    let result = SpeedResult {
        models: cfg.models,
        backends: cfg.backends,
        offered_rps_virtual: offered,
        requests: cfg.requests,
        batches: d.batches,
        batched_requests: d.batched,
        dropped: d.dropped,
        wall_s,
        requests_per_s: cfg.requests as f64 / wall_s,
        batches_per_s: d.batches as f64 / wall_s,
        ns_per_request: wall_s * 1e9 / cfg.requests as f64,
        model_shard_share: 0.0,
    };
    (result, d.in_shard)
}

/// Runs the benchmark: once untimed for the rate, once with the model shard
/// timed per call for the split (that run's overhead is not in the rate).
pub fn run(cfg: &SpeedConfig) -> SpeedResult {
    let (mut r, _) = run_once(cfg, false);
    let (timed, in_shard) = run_once(cfg, true);
    r.model_shard_share = in_shard.as_secs_f64() / timed.wall_s;
    r
}
