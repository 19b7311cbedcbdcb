//! GPU partitions (glet) in the engine: a policy that splits GPUs says
//! which partition each of its backends runs on (`Scheduler::partitions`),
//! and the engine's backends are those partitions, not whole GPUs.
//!
//! With the emulated executor a batch of b on a partition of p% runs the
//! measured L(b, p), slowed by what the other partition of its GPU runs at
//! the instant the batch starts — the simulator's rule, by the same
//! function (`baton_sched::sim::batch_times`, whose doc states the
//! approximation). The partitions of one GPU tell each other what they run
//! through a `Board` of what each is running and until when. Whole-GPU
//! backends of a partitioned plan run the model's own profile, as in the
//! simulator.
//!
//! The board reads `Instant`, not cluster time: it compares the starts of
//! batches of one process's backends with each other and nothing else (the
//! backends of one GPU must share a process; `baton backend` refuses
//! partition policies).
//!
//! A policy that re-plans (`[policy] epoch_s`, `glet/epochs.rs`) announces
//! each new layout (`Output::Layout`) only once the GPUs it changes run
//! nothing; the scheduler role writes it here (`relayout`) before it sends
//! any batch for the new partitions, so each batch is timed on the
//! partition it was planned for. A backend's executor times whatever
//! partition its backend holds when the batch starts.
//!
//! On the CUDA executor a backend's partition is a green context of its
//! GPU, and a re-partitioning moves it to another (`cuda.rs`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_gpu::emulated::{Emulated, EmulatedModel, Pacing};
use baton_gpu::{Batch, ExecError, Executor, ModelInfo};
use baton_sched::glet::{PartitionData, MAX_PARTITION_BATCH};
use baton_sched::scenario::Scenario;
use baton_sched::sim::{batch_times, Layout};
use baton_sched::types::{Partition, Scheduler};

use crate::models::{ModelEntry, Unsupported};

mod cuda;
pub use cuda::OnGreen;

/// What one partition runs: the model's profile row, the batch, and when
/// it ends.
#[derive(Clone, Copy, Debug)]
struct Occupant {
    row: usize,
    batch: u32,
    until: Instant,
}

/// The engine's backends as the plan's partitions.
#[derive(Debug)]
pub struct Partitioned {
    data: Arc<PartitionData>,
    /// Each model's row of the measured profiles.
    rows: Vec<usize>,
    gpus: u32,
    /// The partition each backend holds, and what each runs now (None:
    /// idle or never started).
    board: Mutex<Board>,
    /// On the CUDA executor: the green contexts of each split made so far.
    greens: cuda::Greens,
    /// The policy re-partitions at run time (`[policy] epoch_s`).
    replans: bool,
}

#[derive(Debug)]
struct Board {
    layout: Layout,
    running: Vec<Option<Occupant>>,
}

impl Partitioned {
    /// The partitions `policy` (already built for the scenario) runs on,
    /// or None if it runs whole GPUs.
    pub fn of(scenario: &Scenario, policy: &dyn Scheduler) -> Result<Option<Self>, Unsupported> {
        let Some(slots) = policy.partitions() else { return Ok(None) };
        let data = scenario.partitions.clone().ok_or_else(|| Unsupported("partitions without profiles".into()))?;
        let rows = scenario
            .models
            .iter()
            .map(|m| m.partition_profile.ok_or_else(|| Unsupported(format!("`{}` has no `profile`", m.spec.name))))
            .collect::<Result<Vec<_>, _>>()?;
        if slots.iter().all(|s| s.percent == 0) {
            return Err(Unsupported("the partition plan fits nothing on the cluster at this rate".into()));
        }
        let gpus = scenario.cluster.backends;
        let layout = Layout::new(slots, gpus);
        let running = vec![None; layout.backends()];
        let (board, greens) = (Mutex::new(Board { layout, running }), cuda::Greens::default());
        Ok(Some(Self { data, rows, gpus, board, greens, replans: scenario.policy_epoch.is_some() }))
    }

    /// One process's backends share the board; a panic elsewhere leaves
    /// it consistent (each field is written whole).
    fn board(&self) -> std::sync::MutexGuard<'_, Board> {
        self.board.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many backends the plan runs.
    pub fn backends(&self) -> u32 {
        self.board().layout.backends() as u32
    }

    pub fn percent(&self, backend: u32) -> u32 {
        self.board().layout.percent(backend as usize)
    }

    /// The policy re-partitioned (`Output::Layout`): from now on backend i
    /// holds `slots[i]`. The policy saw every batch of the GPUs it changes
    /// end (the simulator checks that rule); what they ran no longer slows
    /// their new partitions, even if this board's clock, which is not the
    /// cluster's, still counts a few microseconds of it.
    pub fn relayout(&self, slots: Vec<Partition>) {
        let mut board = self.board();
        for b in board.layout.touched_by(&slots) {
            board.running[b] = None;
        }
        board.layout = Layout::new(slots, self.gpus);
    }

    /// Backend `backend`'s emulated executor: on a partition, L(b, p) per
    /// model slowed by its sibling; on a whole GPU, `whole` (the models'
    /// own profiles, as in the simulator). Every partition's jitter comes
    /// from `jitter` and `seed`, as `whole`'s does.
    pub fn executor(
        self: &Arc<Self>,
        models: &[ModelEntry],
        whole: Emulated,
        backend: u32,
        jitter: f64,
        seed: u64,
    ) -> OnPartition {
        let models = models.iter().map(|m| (m.name.clone(), m.input_floats, m.output_floats)).collect();
        let (backend, plan) = (backend as usize, Arc::clone(self));
        OnPartition { whole, parts: Vec::new(), models, jitter, seed, backend, plan }
    }

    /// An emulated executor timing L(b, `percent`) for `models`.
    fn on(&self, models: &[(String, usize, usize)], percent: u32, jitter: f64, seed: u64) -> Emulated {
        let emulated = models
            .iter()
            .zip(&self.rows)
            .map(|((name, input, output), &row)| {
                let l = (1..=MAX_PARTITION_BATCH).map_while(|b| self.data.solo(row, b, percent));
                let info = ModelInfo::fixed(name, *input, *output, MAX_PARTITION_BATCH);
                EmulatedModel::fixed(info, l.map(Duration::from_nanos).collect())
            })
            .collect();
        Emulated::new(emulated, jitter, seed).with_pacing(Pacing::Deferred)
    }
}

/// An emulated backend on whatever partition it holds: the executor of
/// that size times L(b, p) (jitter included); the sibling's batch at the
/// start scales it. A whole GPU runs `whole`.
pub struct OnPartition {
    whole: Emulated,
    /// An executor per partition size this backend has held, made when
    /// first needed (jitter and seed as `whole`'s).
    parts: Vec<(u32, Emulated)>,
    /// Each model's name, input and output length.
    models: Vec<(String, usize, usize)>,
    jitter: f64,
    seed: u64,
    backend: usize,
    plan: Arc<Partitioned>,
}

impl Executor for OnPartition {
    fn models(&self) -> &[ModelInfo] {
        self.whole.models()
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        self.run_at(Instant::now(), batch, outputs)
    }
}

impl OnPartition {
    /// Runs `batch` as if it started at `now`.
    fn run_at(&mut self, now: Instant, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        let plan = Arc::clone(&self.plan);
        // One hold of the board for the partition read and the occupant
        // written: a re-layout between them would time the batch on one
        // partition and record it on another. The emulated executors defer
        // their pacing (`Pacing::Deferred`): nothing sleeps while it is held.
        let mut board = plan.board();
        let percent = board.layout.percent(self.backend);
        assert!(percent > 0, "a batch sent to backend {}, which holds no partition", self.backend);
        if percent == 100 {
            drop(board);
            return self.whole.run(batch, outputs);
        }
        let at = match self.parts.iter().position(|p| p.0 == percent) {
            Some(at) => at,
            None => {
                self.parts.push((percent, plan.on(&self.models, percent, self.jitter, self.seed)));
                self.parts.len() - 1
            }
        };
        let solo_run = self.parts[at].1.run(batch, outputs)?;
        let (row, b) = (plan.rows[batch.model as usize], batch.inputs.len() as u32);
        let sibling = board.layout.sibling(self.backend).and_then(|s| board.running[s]).filter(|o| o.until > now);
        let (solo, real) = batch_times(&plan.data, row, b, percent, sibling.map(|o| (o.row, o.batch)));
        let run = solo_run.mul_f64(real as f64 / solo as f64);
        board.running[self.backend] = Some(Occupant { row, batch: b, until: now + run });
        Ok(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_sched::build;
    use baton_sched::PolicyKind;

    pub(super) fn glet_game() -> Scenario {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../perf/scenarios");
        let text = std::fs::read_to_string(dir.join("glet-game.toml")).expect("shipped");
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).map_err(|e| e.to_string());
        Scenario::parse_with(&text, &read).expect("glet-game parses")
    }

    /// The engine's backends are glet's partitions; a partition's batch
    /// takes L(b, p) alone and the measured co-run time next to a busy
    /// sibling — the numbers `batch_times` gives the simulator.
    #[test]
    fn partitions_time_batches_as_the_simulator_does() {
        let s = glet_game();
        let policy = build::scheduler(PolicyKind::Glet, &s, s.rate_rps.unwrap_or(1000.0));
        let plan = Arc::new(Partitioned::of(&s, policy.as_ref()).expect("plans").expect("partitions"));
        let table = crate::models::ModelTable::from_scenario(&s, 4).expect("servable");
        let sibling = |b: u32| plan.board().layout.sibling(b as usize);
        let split = (0..plan.backends()).find(|&b| plan.percent(b) < 100 && sibling(b).is_some());
        let Some(a) = split else { panic!("glet splits some GPU of glet-game") };
        let sib = sibling(a).expect("has one") as u32;
        let mut ea = plan.executor(&table.models, table.emulated_executor(0.0, 1), a, 0.0, 1);
        let mut eb = plan.executor(&table.models, table.emulated_executor(0.0, 2), sib, 0.0, 2);
        let x = [1.0f32; 4];
        let inputs: Vec<&[f32]> = vec![&x; 8];
        let batch = Batch { model: 6, variant: None, heads: None, inputs: &inputs };
        let mut out = Vec::new();
        let t0 = Instant::now();
        let alone = ea.run_at(t0, &batch, &mut out).expect("runs");
        let row = plan.rows[6];
        let (solo, _) = batch_times(&plan.data, row, 8, plan.percent(a), None);
        assert_eq!(alone, Duration::from_nanos(solo));
        // The sibling starts while `a` runs: it takes the co-run time.
        let with = eb.run_at(t0 + alone / 2, &batch, &mut out).expect("runs");
        let (_, real) = batch_times(&plan.data, row, 8, plan.percent(sib), Some((row, 8)));
        let (solo_b, _) = batch_times(&plan.data, row, 8, plan.percent(sib), None);
        let want = Duration::from_nanos(solo_b).mul_f64(real as f64 / solo_b as f64);
        assert_eq!(with, want);
        assert!(real > solo_b, "co-running slows the batch");
        // Once the sibling's batch is over, `a` runs alone again.
        let later = ea.run_at(t0 + alone / 2 + with, &batch, &mut out).expect("runs");
        assert_eq!(later, alone);
        // Re-partitioned into one whole GPU (the policy saw both batches
        // end): `a` runs the model's own profile, as the simulator's whole
        // GPUs do, and nothing of what ran before slows it.
        let mut slots: Vec<Partition> =
            (0..plan.backends()).map(|b| plan.board().layout.partition(b as usize)).collect();
        (slots[a as usize].percent, slots[sib as usize].percent) = (100, 0);
        plan.relayout(slots);
        let whole = ea.run_at(t0 + alone / 2 + with / 2, &batch, &mut out).expect("runs");
        assert_eq!(whole.as_nanos() as u64, s.models[6].spec.profile.latency(8));
        assert_eq!(plan.board().layout.sibling(a as usize), None);
    }
}
