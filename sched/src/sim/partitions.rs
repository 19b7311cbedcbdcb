//! Emulated GPU partitions. A scheduler that splits GPUs says which backend
//! runs on which partition (`Scheduler::partitions`, later
//! `Output::Layout` when it re-partitions); every other scheduler gets one
//! backend per whole GPU.
//!
//! A batch of model m on a partition of p% runs `L(b, p)` from the
//! scenario's measured profiles. If the other partition of the same GPU is
//! running a batch (model m', batch b') at the instant this batch starts,
//! the batch runs `L(b, p) * factor(m, b, p, m', b')` instead — the
//! measured co-run slowdown where the pair was profiled, the fitted
//! interference model's prediction elsewhere (`glet/oracle.rs`).
//!
//! The approximation: a batch's duration is fixed when it starts, from
//! what its sibling runs at that instant. A batch that starts while its
//! sibling is idle runs at solo speed even if the sibling starts a batch
//! halfway through; the sibling's batch, starting second, takes the whole
//! slowdown. Under load both partitions run back to back, nearly every
//! batch starts while its sibling runs, and each takes the measured co-run
//! latency — which is what `interference.csv` measured: both partitions
//! busy for the whole batch. Only batches already sent to the sibling count,
//! so the result depends on nothing but the order of events, which the
//! simulator keeps deterministic.

use crate::glet::PartitionData;
use crate::time::Nanos;
use crate::types::Partition;

/// Which partition each backend runs on and who its sibling is. A
/// backend of 0% holds no partition (a re-partitioning policy's spare
/// slot): it has no sibling and is nobody's.
#[derive(Clone, Debug)]
pub struct Layout {
    slots: Vec<Partition>,
    sibling: Vec<Option<usize>>,
}

impl Layout {
    /// One backend per whole GPU.
    pub fn whole(gpus: u32) -> Self {
        Self::new((0..gpus).map(|gpu| Partition { gpu, percent: 100 }).collect(), gpus)
    }

    /// `slots[i]` is backend i's partition. Panics (a scheduler bug) unless
    /// every GPU is below `gpus` and holds at most two partitions whose
    /// sizes add to at most 100.
    pub fn new(slots: Vec<Partition>, gpus: u32) -> Self {
        let mut sibling = vec![None; slots.len()];
        for (i, s) in slots.iter().enumerate() {
            assert!(s.gpu < gpus, "partition on GPU {} of {gpus}", s.gpu);
            assert!(s.percent <= 100, "partition of {}%", s.percent);
            if s.percent == 0 {
                continue;
            }
            let same: Vec<usize> =
                (0..slots.len()).filter(|&j| slots[j].gpu == s.gpu && slots[j].percent > 0).collect();
            assert!(same.len() <= 2, "GPU {} split into {} partitions; at most two", s.gpu, same.len());
            let total: u32 = same.iter().map(|&j| slots[j].percent).sum();
            assert!(total <= 100, "GPU {} partitions add to {total}%", s.gpu);
            sibling[i] = same.into_iter().find(|&j| j != i);
        }
        Self { slots, sibling }
    }

    /// The backends whose partition differs in `next` (a re-partitioning:
    /// same backends, each on the same GPU), and every other backend of
    /// their GPUs: what must be idle for the change to be sound.
    pub fn touched_by(&self, next: &[Partition]) -> Vec<usize> {
        assert_eq!(next.len(), self.slots.len(), "a re-partitioning keeps the backends");
        let gpus: Vec<u32> = self
            .slots
            .iter()
            .zip(next)
            .inspect(|(a, b)| assert_eq!(a.gpu, b.gpu, "a backend moved to another GPU"))
            .filter(|(a, b)| a != b)
            .map(|(a, _)| a.gpu)
            .collect();
        (0..self.slots.len()).filter(|&i| gpus.contains(&self.slots[i].gpu)).collect()
    }

    /// How many backends (partitions) it lays out.
    pub fn backends(&self) -> usize {
        self.slots.len()
    }

    pub fn percent(&self, backend: usize) -> u32 {
        self.slots[backend].percent
    }

    pub fn partition(&self, backend: usize) -> Partition {
        self.slots[backend]
    }

    pub fn sibling(&self, backend: usize) -> Option<usize> {
        self.sibling[backend]
    }

    /// Busy time of a backend, in whole-GPU time: a partition of p% busy
    /// for t counts p/100 of t.
    pub fn gpu_time(&self, backend: usize, busy: Nanos) -> Nanos {
        busy * self.slots[backend].percent as Nanos / 100
    }
}

/// (planned, real) time of a batch on a partition below 100%: planned is
/// L(b, p) alone, what a scheduler can know in advance; real adds the
/// slowdown from what the sibling runs at the start.
pub fn batch_times(
    data: &PartitionData,
    row: usize,
    batch: u32,
    percent: u32,
    sibling_running: Option<(usize, u32)>,
) -> (Nanos, Nanos) {
    let solo = data.solo(row, batch, percent).unwrap_or_else(|| panic!("no L({batch}, {percent}) for profile {row}"));
    let real = data.batch_time(row, batch, percent, sibling_running).expect("solo exists");
    assert!(real >= solo);
    (solo, real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_pair_up_per_gpu() {
        let l = Layout::new(
            vec![
                Partition { gpu: 0, percent: 40 },
                Partition { gpu: 1, percent: 100 },
                Partition { gpu: 0, percent: 60 },
            ],
            2,
        );
        assert_eq!((l.sibling(0), l.sibling(1), l.sibling(2)), (Some(2), None, Some(0)));
        assert_eq!(l.gpu_time(0, 1000), 400);
    }

    #[test]
    #[should_panic(expected = "add to 120%")]
    fn oversubscribed_gpus_are_scheduler_bugs() {
        let _ = Layout::new(vec![Partition { gpu: 0, percent: 60 }, Partition { gpu: 0, percent: 60 }], 1);
    }
}
