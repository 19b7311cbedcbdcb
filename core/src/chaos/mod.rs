//! A seeded cluster simulator over the real role engines, in the manner of
//! FoundationDB's simulator and TigerBeetle's VOPR: several frontends, the
//! scheduler and several backends — the same `roles` state machines and
//! `baton-sched` policies the engine runs — driven in one thread on a
//! simulated network and clock, under faults drawn from one seed. A run
//! replays bit for bit from its seed (`Config::from_seed`, `run`).
//!
//! # The world
//! - Roles talk over connections, one per pair that talks (frontend and
//!   scheduler, backend and scheduler, backend and frontend). A pair is
//!   connected while both are up and the link between them is not cut.
//!   Each end hears that the connection broke, or came back, a detection
//!   delay later (`Notice`); what was in flight when it broke is lost.
//! - On a live connection each message is delayed (a base, an exponential
//!   jitter, now and then a long stall, so messages overtake each other),
//!   and may be lost or delivered twice.
//! - Clients send open-loop Poisson requests to a frontend chosen at random;
//!   one sent to a frontend that is down is refused by the transport.
//! - Faults in the fault phase: roles crash and restart (a restarted role
//!   is a new object, as a new process is), links are cut and healed, the
//!   backends' executors fail or stall batches. Then a drain phase: links
//!   healed, roles restarted, the network and executors well behaved, no
//!   new requests, until every request is answered or the drain's time is
//!   up.
//!
//! # What each role does when a peer disappears (the production code's
//! rules, which this checks)
//! | role | loses | does |
//! |---|---|---|
//! | frontend | the scheduler | answers `Lost` every request no backend has taken the input of; refuses new ones `Unavailable` until it is back |
//! | frontend | a backend | answers `Lost` every request whose input that backend took |
//! | scheduler | a backend | fails it (the policy stops using it; requests of its batches in flight dropped `BackendFailed`; Symphony split over shards keeps no such ledger: their frontends answer them); it rejoins when it connects again, or speaks again after going silent |
//! | scheduler | a frontend | nothing: its queued requests still run, without the inputs the backend cannot fetch |
//! | backend | a frontend | stops waiting for its inputs: the batch runs without them |
//! | backend | the scheduler | nothing: batches it holds run, results go to frontends |
//!
//! and whatever is lost silently is caught by time: a frontend answers
//! `Lost` what it holds past its deadline plus a grace, a backend runs a
//! batch without the inputs that have not come within its patience, and
//! the scheduler fails a backend whose batch is long overdue.
//!
//! # The checkers (`ledger.rs`), apart from the system
//! Every request a client sent is answered exactly once: ok, dropped with
//! a reason, an error, or — when its frontend crashed — the transport's
//! closed connection. An ok answer carries its own request's output. An ok
//! answer after its deadline is counted late by the frontend. Nothing is
//! held when the drain ends. A frontend never holds more than its
//! capacity, a backend never queues more than its limit.

mod faults;
mod ledger;
mod sched;
mod world;

use baton_sched::time::Nanos;
use baton_sched::PolicyKind;

pub use ledger::Tally;

/// Everything a run does, drawn from its seed.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub policy: PolicyKind,
    /// Symphony split over this many model shards and a rank shard, as
    /// `baton serve --model-shards` runs it (0: the policy whole).
    pub model_shards: usize,
    pub frontends: u32,
    pub backends: u32,
    /// Models: (l(1) intercept ms, slope ms per request, SLO ms).
    pub models: Vec<(f64, f64, f64)>,
    /// Client requests per second in the fault phase.
    pub rate: f64,
    /// The fault phase's length, then the drain's longest.
    pub faults_for: Nanos,
    pub drain_for: Nanos,
    pub net: NetFaults,
    /// Role crashes (each followed by a restart) and link cuts (each healed).
    pub crashes: u32,
    pub cuts: u32,
    /// Per batch: the executor fails it, or stalls it by up to `stall_max`.
    pub p_exec_fail: f64,
    pub p_exec_stall: f64,
    pub stall_max: Nanos,
    /// The roles' limits, smaller than production's so a run stays short.
    pub capacity: usize,
    pub max_jobs: usize,
    pub grace: Nanos,
    pub patience: Nanos,
    pub silence: Nanos,
}

#[derive(Clone, Copy, Debug)]
pub struct NetFaults {
    pub p_loss: f64,
    pub p_dup: f64,
    /// Every message's least delay, and the mean of its exponential jitter.
    pub base: Nanos,
    pub jitter: Nanos,
    /// Now and then a message stalls up to `long_max` (it is overtaken).
    pub p_long: f64,
    pub long_max: Nanos,
    /// How long after a connection breaks or comes back each end hears.
    pub detect: Nanos,
}

/// The policies a run draws from: every one that serves plain models.
const POLICIES: [PolicyKind; 5] =
    [PolicyKind::Symphony, PolicyKind::SymphonyWc, PolicyKind::Clockwork, PolicyKind::Clipper, PolicyKind::Nexus];

impl Config {
    /// The run of `seed`: its policy, cluster, load and faults.
    pub fn from_seed(seed: u64) -> Self {
        let mut r = baton_sched::rng::Rng::stream(seed, 0xc4a05);
        let mut between = |lo: f64, hi: f64| lo + (hi - lo) * r.unit();
        let ms = |x: f64| (x * 1e6) as Nanos;
        let policy = POLICIES[(between(0.0, POLICIES.len() as f64) as usize).min(POLICIES.len() - 1)];
        let frontends = between(1.0, 3.999) as u32;
        let backends = between(2.0, 4.999) as u32;
        let models = (0..between(1.0, 3.999) as usize)
            .map(|_| (between(0.2, 2.0), between(0.5, 4.0), between(20.0, 80.0)))
            .collect();
        let quiet = between(0.0, 1.0) < 0.1;
        let chaos = if quiet { 0.0 } else { 1.0 };
        let net = NetFaults {
            p_loss: chaos * between(0.0, 0.01),
            p_dup: chaos * between(0.0, 0.01),
            base: ms(between(0.01, 0.3)),
            jitter: ms(between(0.01, 0.5)),
            p_long: chaos * between(0.0, 0.02),
            long_max: ms(between(1.0, 40.0)),
            detect: ms(between(1.0, 30.0)),
        };
        // Drawn apart, so the other draws of a seed stay as they were.
        let split = baton_sched::rng::Rng::stream(seed, 0x5b117).below(3) as usize;
        Self {
            seed,
            policy,
            model_shards: if policy == PolicyKind::Symphony { split } else { 0 },
            frontends,
            backends,
            models,
            rate: between(100.0, 2_500.0),
            faults_for: ms(2_000.0),
            drain_for: ms(8_000.0),
            net,
            crashes: (chaos * between(0.0, 6.999)) as u32,
            cuts: (chaos * between(0.0, 4.999)) as u32,
            p_exec_fail: chaos * between(0.0, 0.02),
            p_exec_stall: chaos * between(0.0, 0.01),
            stall_max: ms(between(10.0, 600.0)),
            capacity: between(50.0, 2_000.0) as usize,
            max_jobs: between(2.0, 64.0) as usize,
            grace: ms(200.0),
            patience: ms(50.0),
            silence: ms(400.0),
        }
    }

    /// The scenario the roles and the policy are built from.
    fn scenario(&self) -> String {
        let mut text = format!(
            "name = \"chaos-{}\"\nseed = {}\nduration_s = 1\nwarmup_s = 0\n[cluster]\ngpus = {}\n",
            self.seed, self.seed, self.backends
        );
        for (i, (alpha, beta, slo)) in self.models.iter().enumerate() {
            text += &format!(
                "[[models]]\nname = \"m{i}\"\nalpha_ms = {alpha:.3}\nbeta_ms = {beta:.3}\nslo_ms = {slo:.1}\nmax_batch = 16\n"
            );
        }
        text
    }
}

/// What a run did and what the checkers found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub policy: String,
    pub tally: Tally,
    pub faults: FaultCounts,
    /// Checker findings; empty for a run that kept every promise.
    pub violations: Vec<String>,
    /// Virtual time the run took (faults and drain), ns.
    pub ended_at: Nanos,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct FaultCounts {
    pub crashes: u64,
    pub restarts: u64,
    pub cuts: u64,
    pub messages: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub stalled_messages: u64,
    /// Messages lost because their connection broke under them.
    pub broken: u64,
    pub exec_failed: u64,
    pub exec_stalled: u64,
}

impl FaultCounts {
    pub fn add(&mut self, o: &FaultCounts) {
        self.crashes += o.crashes;
        self.restarts += o.restarts;
        self.cuts += o.cuts;
        self.messages += o.messages;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.stalled_messages += o.stalled_messages;
        self.broken += o.broken;
        self.exec_failed += o.exec_failed;
        self.exec_stalled += o.exec_stalled;
    }
}

/// Runs the world of `cfg` to the end of its drain.
pub fn run(cfg: &Config) -> Report {
    world::World::new(cfg).run()
}

/// The command that replays `seed`.
pub fn replay_command(seed: u64) -> String {
    format!("cargo run --release -p baton-perf --bin chaos -- --seed {seed}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_bit_for_bit() {
        let cfg = Config::from_seed(11);
        let (a, b) = (run(&cfg), run(&cfg));
        assert_eq!(format!("{:?}", a.tally), format!("{:?}", b.tally));
        assert_eq!(format!("{:?}", a.faults), format!("{:?}", b.faults));
        assert_eq!(a.ended_at, b.ended_at);
    }
}
