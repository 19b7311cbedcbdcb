//! What moves when a partition plan replaces the one in force: each model
//! goes where the new plan puts it; each sub-cluster keeps its
//! lowest-numbered GPUs up to its new count, and those let go fill the
//! sub-clusters short of theirs, lowest sub-cluster first — so no GPU
//! moves that need not. The engine's routing table (`core/src/routes.rs`)
//! and the simulator's re-partitioned cluster (`repartitioned.rs`) both
//! take their steps from here.

use crate::partition::Plan;

/// One step from the plan in force to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Model { model: usize, from: u32, to: u32 },
    Gpu { gpu: u32, from: u32, to: u32 },
}

/// `gpus[k]`: sub-cluster k's GPUs now; `was[m]`: model m's sub-cluster
/// now (a model beyond it counts as staying where the plan puts it). The
/// GPUs each sub-cluster holds under `plan` (ascending), and the steps.
/// Panics unless `plan` has as many sub-clusters and GPUs (callers that
/// take plans from outside check first).
pub fn handover(gpus: &[Vec<u32>], was: &[usize], plan: &Plan) -> (Vec<Vec<u32>>, Vec<Change>) {
    let k = gpus.len();
    assert_eq!(plan.subclusters.len(), k, "a plan of as many sub-clusters");
    let have: usize = gpus.iter().map(Vec::len).sum();
    assert_eq!(plan.subclusters.iter().map(|c| c.gpus as usize).sum::<usize>(), have, "a plan of as many GPUs");
    let mut changes = Vec::new();
    let mut next = Vec::with_capacity(k);
    let mut free: Vec<(u32, u32)> = Vec::new();
    for (to, (held, p)) in gpus.iter().zip(&plan.subclusters).enumerate() {
        for &m in &p.models {
            let from = was.get(m).copied().unwrap_or(to) as u32;
            if from != to as u32 {
                changes.push(Change::Model { model: m, from, to: to as u32 });
            }
        }
        let mut kept = held.clone();
        kept.sort_unstable();
        free.extend(kept.split_off((p.gpus as usize).min(kept.len())).into_iter().map(|b| (b, to as u32)));
        next.push(kept);
    }
    free.sort_unstable();
    let mut free = free.into_iter();
    for (to, (held, p)) in next.iter_mut().zip(&plan.subclusters).enumerate() {
        while (held.len() as u32) < p.gpus {
            let (gpu, from) = free.next().expect("as many GPUs let go as wanted");
            held.push(gpu);
            changes.push(Change::Gpu { gpu, from, to: to as u32 });
        }
        held.sort_unstable();
    }
    (next, changes)
}
