//! glet's partitions on the CUDA executor: a backend's partition is a green
//! context of its GPU (`baton_gpu::cuda::partition`), and a policy that
//! re-partitions at run time moves backends from one green context to
//! another.
//!
//! Where a backend runs (`Place`): its GPU whole (a share of 100%, or of
//! 0%: no partition, sent no batch), or one side of a split of the GPU's
//! SMs — the lower-numbered of its two backends takes a group of its share
//! (`First`), its sibling the rest (`Rest`). A split is named by the first
//! side's share, so both backends of a GPU find the same two green contexts.
//! Splits are made the first time a backend needs one and kept for the
//! process (`Greens`): cudarc cannot destroy a green context, and a GPU has
//! at most one split per measured share below 100%.
//!
//! A backend keeps one executor per place it has held (its own weights,
//! buffers and CUDA graphs, captured in that place's context), so that
//! moving back costs nothing. Building one uploads the weights and captures
//! every graph, which takes far longer than a batch; a plan that
//! re-partitions at run time therefore builds, at start, the executor of
//! every place its backend can be given (`Partitioned::places`), so that no
//! re-plan waits for a build. The policy announces a layout only once the
//! GPUs it changes run nothing (`Output::Layout`), but a batch's completion
//! may not yet be collected when the next is launched: batches in flight
//! are collected from the executor each was launched on, in launch order.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baton_gpu::cuda::partition::{device_sms, split, Partition as Green};
use baton_gpu::cuda::{CudaConfig, CudaExecutor, PIPELINE};
use baton_gpu::{Batch, ExecError, Executor, Launched, ModelInfo};
use baton_sched::glet::PARTITIONS;

use super::Partitioned;

/// Where on its GPU a backend runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    Whole,
    /// The group of SMs of the split at this share.
    First(u32),
    /// The rest of the split at this share (the sibling's).
    Rest(u32),
}

/// One split of a GPU: the first side's share and the two green contexts.
#[derive(Debug)]
struct Split {
    gpu: u32,
    share: u32,
    first: Green,
    rest: Green,
}

/// The splits made so far, on every GPU of the process.
#[derive(Debug, Default)]
pub(super) struct Greens(Mutex<Vec<Split>>);

impl Greens {
    /// The green context of `place` (not `Whole`) on `gpu`, splitting the
    /// GPU at that share the first time.
    fn get(&self, gpu: u32, place: Place) -> Result<Green, ExecError> {
        let (share, first) = match place {
            Place::First(s) => (s, true),
            Place::Rest(s) => (s, false),
            Place::Whole => unreachable!("a whole GPU is no green context"),
        };
        let mut splits = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match splits.iter().position(|s| s.gpu == gpu && s.share == share) {
            Some(at) => at,
            None => {
                let sms = device_sms(gpu as usize)? * share;
                let (mine, rest) = split(gpu as usize, sms.div_ceil(100))?;
                splits.push(Split { gpu, share, first: mine, rest });
                splits.len() - 1
            }
        };
        Ok(if first { splits[at].first.clone() } else { splits[at].rest.clone() })
    }

    /// How many splits were made (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Partitioned {
    /// Where backend `backend` runs now: its GPU and its place there.
    pub(super) fn place(&self, backend: usize) -> (u32, Place) {
        let board = self.board();
        let (layout, part) = (&board.layout, board.layout.partition(backend));
        if part.percent == 0 || part.percent >= 100 {
            return (part.gpu, Place::Whole);
        }
        let first = layout.sibling(backend).map_or(backend, |s| backend.min(s));
        (part.gpu, if first == backend { Place::First(part.percent) } else { Place::Rest(layout.percent(first)) })
    }

    /// Every place backend `backend` can be given by a re-partitioning
    /// (its GPU stays the same): whole, the first side of a split at each
    /// measured share, and, unless it is its GPU's lowest-numbered
    /// backend, the rest beside a lower-numbered sibling of each share.
    fn places(&self, backend: usize) -> Vec<Place> {
        let layout = self.board().layout.clone();
        let gpu = layout.partition(backend).gpu;
        let lowest = (0..layout.backends()).find(|&b| layout.partition(b).gpu == gpu) == Some(backend);
        let shares = PARTITIONS.iter().copied().filter(|&p| p < 100);
        let mut out = vec![Place::Whole];
        out.extend(shares.clone().map(Place::First));
        if !lowest {
            out.extend(shares.map(Place::Rest));
        }
        out
    }

    /// Backend `backend`'s CUDA executor, built for the place it holds now
    /// and, on a plan that re-partitions, for every place it can be given.
    /// No GPU: `ExecError::NoDevice`.
    pub fn cuda_executor(self: &Arc<Self>, cfg: &CudaConfig, backend: u32) -> Result<OnGreen, ExecError> {
        let backend = backend as usize;
        let mut exec =
            OnGreen { plan: Arc::clone(self), cfg: *cfg, backend, execs: Vec::new(), order: VecDeque::new() };
        exec.at(self.place(backend).1)?;
        if self.replans {
            let start = Instant::now();
            for place in self.places(backend) {
                exec.at(place)?;
            }
            let took = start.elapsed();
            eprintln!("backend {backend}: {} CUDA executors, one per place, built in {took:.1?}", exec.execs.len());
        }
        Ok(exec)
    }
}

/// A backend on the green context of whatever partition it holds.
pub struct OnGreen {
    plan: Arc<Partitioned>,
    cfg: CudaConfig,
    backend: usize,
    /// One executor per place held so far.
    execs: Vec<(Place, CudaExecutor)>,
    /// The executor (index into `execs`) of each batch in flight, oldest
    /// first.
    order: VecDeque<usize>,
}

impl OnGreen {
    /// The index of `place`'s executor, built if this is its first use.
    fn at(&mut self, place: Place) -> Result<usize, ExecError> {
        if let Some(at) = self.execs.iter().position(|e| e.0 == place) {
            return Ok(at);
        }
        let gpu = self.plan.board().layout.partition(self.backend).gpu;
        let cfg = CudaConfig { ordinal: gpu as usize, ..self.cfg };
        let exec = match place {
            Place::Whole => CudaExecutor::new(&cfg)?,
            _ => CudaExecutor::on_partition(&cfg, &self.plan.greens.get(gpu, place)?)?,
        };
        self.execs.push((place, exec));
        Ok(self.execs.len() - 1)
    }

    /// The executor of the place the backend holds now.
    fn current(&mut self) -> Result<usize, ExecError> {
        let (_, place) = self.plan.place(self.backend);
        self.at(place)
    }
}

impl Executor for OnGreen {
    /// The models as the executor of the backend's place describes them
    /// (each executor measures a dynamic model's solo times on its own
    /// SMs); the first built while that place's is not.
    fn models(&self) -> &[ModelInfo] {
        let (_, place) = self.plan.place(self.backend);
        let at = self.execs.iter().position(|e| e.0 == place).unwrap_or(0);
        self.execs[at].1.models()
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        if !self.order.is_empty() {
            return Err(ExecError::Device(format!("{} batches are in flight; poll them first", self.order.len())));
        }
        let at = self.current()?;
        self.execs[at].1.run(batch, outputs)
    }

    fn launch(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Launched, ExecError> {
        if self.order.len() == PIPELINE {
            return Err(ExecError::Device(format!("{PIPELINE} batches are already in flight on this backend")));
        }
        let at = self.current()?;
        let launched = self.execs[at].1.launch(batch, outputs)?;
        if launched == Launched::InFlight {
            self.order.push_back(at);
        }
        Ok(launched)
    }

    fn poll(&mut self, outputs: &mut Vec<Vec<f32>>) -> Option<Result<Duration, ExecError>> {
        let at = *self.order.front()?;
        let done = self.execs[at].1.poll(outputs)?;
        self.order.pop_front();
        Some(done)
    }

    fn pipeline_depth(&self) -> usize {
        PIPELINE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_sched::build;
    use baton_sched::types::Partition;
    use baton_sched::PolicyKind;

    /// On the CUDA executor a split GPU's two backends get the two sides
    /// of one split; re-partitioned, each moves to the new split's side and
    /// computes what it computed before; moved back, nothing is rebuilt.
    /// Without a GPU, the typed no-device error.
    #[test]
    fn cuda_backends_follow_their_partitions_across_green_contexts() {
        let s = super::super::tests::glet_game();
        let policy = build::scheduler(PolicyKind::Glet, &s, s.rate_rps.unwrap_or(1000.0));
        let plan = Arc::new(Partitioned::of(&s, policy.as_ref()).expect("plans").expect("partitions"));
        let sibling = |b: u32| plan.board().layout.sibling(b as usize);
        let a = (0..plan.backends()).find(|&b| plan.percent(b) < 100 && sibling(b).is_some()).expect("a split GPU");
        let b = sibling(a).expect("has one") as u32;
        let (a, b) = (a.min(b), a.max(b));
        let cfg = CudaConfig { varlen: None, max_batch: 2, ..CudaConfig::small() };
        let mut ea = match plan.cuda_executor(&cfg, a) {
            Err(ExecError::NoDevice(why)) => return assert!(why.contains("CUDA"), "{why}"),
            Err(e) => panic!("not a device error: {e}"),
            Ok(e) => e,
        };
        let mut eb = plan.cuda_executor(&cfg, b).expect("the sibling's side");
        assert_eq!(plan.greens.len(), 1, "one split per GPU, shared by its two backends");
        let (first, rest) = (plan.place(a as usize).1, plan.place(b as usize).1);
        assert!(matches!((first, rest), (Place::First(p), Place::Rest(q)) if p == q), "{first:?} {rest:?}");
        let x: Vec<f32> = (0..ea.models()[0].input_len).map(|i| (i % 7) as f32 * 0.25).collect();
        let inputs: Vec<&[f32]> = vec![&x; 2];
        let batch = Batch { model: 0, variant: None, heads: None, inputs: &inputs };
        let (mut before, mut out) = (Vec::new(), Vec::new());
        ea.run(&batch, &mut before).expect("runs on the first side");
        eb.run(&batch, &mut out).expect("runs on the rest");
        close(&before, &out);
        // Re-partitioned: `a` to another share, `b` the rest beside it.
        let old = plan.percent(a);
        let new = PARTITIONS.iter().copied().find(|&p| p < 100 && p != old).expect("another share");
        let mut slots: Vec<Partition> =
            (0..plan.backends()).map(|k| plan.board().layout.partition(k as usize)).collect();
        (slots[a as usize].percent, slots[b as usize].percent) = (new, 100 - new);
        plan.relayout(slots.clone());
        assert_eq!(plan.place(a as usize).1, Place::First(new));
        assert_eq!(ea.launch(&batch, &mut out).expect("launches"), Launched::InFlight);
        let done = loop {
            if let Some(done) = ea.poll(&mut out) {
                break done;
            }
        };
        done.expect("runs on the new split");
        close(&before, &out);
        eb.run(&batch, &mut out).expect("runs on the new rest");
        close(&before, &out);
        assert_eq!(plan.greens.len(), 2, "a second split of the GPU");
        // Back to the first layout: the executors already built serve it.
        (slots[a as usize].percent, slots[b as usize].percent) = (old, 100 - old);
        plan.relayout(slots);
        let built = ea.execs.len();
        ea.run(&batch, &mut out).expect("runs on the first side again");
        assert_eq!(ea.execs.len(), built, "nothing rebuilt");
        assert_eq!(plan.greens.len(), 2);
    }

    /// The same batch on different numbers of SMs: equal up to the order
    /// of floating-point sums the libraries pick per SM count.
    fn close(a: &[Vec<f32>], b: &[Vec<f32>]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
            assert!((x - y).abs() <= 1e-4 * (1.0 + x.abs()), "{x} vs {y}");
        }
    }
}
