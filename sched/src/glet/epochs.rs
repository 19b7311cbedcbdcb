//! glet re-planning at run time (seeds/003, section 4: "the task scheduler
//! is periodically triggered to check if the rescheduling is required";
//! the dynamic partition reorganizer then prepares the new partitions).
//!
//! Every epoch (`[policy] epoch_s`) the policy measures each model's rate
//! over the epoch that ended. If the plan in force still covers every
//! measured rate it stays; otherwise the planner plans the measured rates
//! for the cluster (scaled to fill it, `cluster.rs`; a plan that fits
//! nothing keeps the old one, as Algorithm 2 falls back to the previous
//! period's) and Nexus's runtime switches to it (`Nexus::repartition`).
//!
//! Backends are fixed slots: backend 2g and 2g + 1 are the two partitions
//! GPU g can hold (a percent of 0: none). A new plan's GPUs are matched to
//! the physical ones so that as few as possible change: a planned GPU goes
//! first to a GPU already split the same way (only its sessions and routes
//! change, nothing waits), then to the GPUs left, in order. A GPU whose
//! split changes is reorganized as soon as both its partitions are idle:
//! glet prepares the new partitions in the background (shadow processes),
//! so the switch itself costs no more than the drain, which this model
//! keeps; requests routed to the new partitions queue meanwhile.
//!
//! Asked to (`Scheduler::offload`: the engine), the policy hands the
//! re-plan out (`crate::offload`) and serves on with the plan in force
//! until it comes back; the epochs that end meanwhile re-plan nothing.

use std::sync::Arc;

use super::cluster::{plan_for_gpus, runtime_profiles, Planner};
use super::oracle::PartitionData;
use super::parts::GletPlan;
use super::planner::Demand;
use super::serve::Serving;
use crate::epoch::{EpochCounter, MIN_PLANNED_RPS};
use crate::nexus::{BackendPlan, DropPolicy, Nexus, Plan};
use crate::offload::{Offload, Offloaded};
use crate::profile::Profile;
use crate::time::Nanos;
use crate::types::{BackendId, BatchDone, Output, Partition, Request, Scheduler};

/// A partition plan laid out on the slots: Nexus's plan, each backend's
/// partition and its sessions' profiles, all indexed by backend.
#[derive(Clone, Debug, PartialEq)]
pub struct OnSlots {
    pub plan: Plan,
    pub slots: Vec<Partition>,
    pub profiles: Vec<Vec<Profile>>,
}

/// Lays `plan` (its sessions' profiles in `used()` order) out on the slots
/// of `current.len() / 2` GPUs, changing as few GPUs' splits as it can
/// (module doc).
pub fn on_slots(plan: &GletPlan, profiles: Vec<Vec<Profile>>, current: &[Partition]) -> OnSlots {
    assert!(current.len().is_multiple_of(2), "two slots per GPU");
    let gpus = current.len() / 2;
    assert!(plan.gpus() <= gpus, "a plan for {} GPUs on {gpus}", plan.gpus());
    let split = |percents: &mut Vec<u32>| {
        percents.retain(|&p| p > 0);
        percents.sort_unstable();
    };
    let mut planned: Vec<Vec<usize>> = vec![Vec::new(); plan.gpus()];
    for (i, p) in plan.parts.iter().enumerate() {
        planned[p.gpu].push(i);
    }
    let mut wanted: Vec<Vec<u32>> =
        planned.iter().map(|ix| ix.iter().map(|&i| plan.parts[i].percent).collect()).collect();
    wanted.iter_mut().for_each(split);
    let mut has: Vec<Vec<u32>> = (0..gpus).map(|g| vec![current[2 * g].percent, current[2 * g + 1].percent]).collect();
    has.iter_mut().for_each(split);
    let mut physical: Vec<Option<usize>> = vec![None; planned.len()];
    let mut taken = vec![false; gpus];
    for (j, w) in wanted.iter().enumerate() {
        if let Some(g) = (0..gpus).find(|&g| !taken[g] && has[g] == *w) {
            (physical[j], taken[g]) = (Some(g), true);
        }
    }
    for slot in physical.iter_mut().filter(|p| p.is_none()) {
        let g = (0..gpus).find(|&g| !taken[g]).expect("a plan fits the GPUs");
        (*slot, taken[g]) = (Some(g), true);
    }
    let mut by_part: Vec<Option<Vec<Profile>>> = vec![None; plan.parts.len()];
    for ((i, _), p) in plan.used().zip(profiles) {
        by_part[i] = Some(p);
    }
    let idle = BackendPlan { sessions: vec![], duty_cycle: 0 };
    let mut out = OnSlots {
        plan: Plan { backends: vec![idle; 2 * gpus], rate_scale: plan.rate_scale },
        slots: current.to_vec(),
        profiles: vec![Vec::new(); 2 * gpus],
    };
    for (j, parts) in planned.iter().enumerate() {
        let g = physical[j].expect("assigned");
        assert!(parts.len() <= 2, "GPU {j} split into {} partitions", parts.len());
        let mut sides = [2 * g, 2 * g + 1];
        if parts.len() == 2 && has[g] == wanted[j] && current[2 * g].percent != plan.parts[parts[0]].percent {
            // The same split: each partition where its size already is.
            sides.swap(0, 1);
        }
        if has[g] != wanted[j] {
            out.slots[2 * g + 1].percent = 0;
        }
        for (&i, &b) in parts.iter().zip(&sides) {
            let part = &plan.parts[i];
            out.slots[b] = Partition { gpu: g as u32, percent: part.percent };
            if let Some(node) = &part.node {
                out.plan.backends[b] = node.clone();
                out.profiles[b] = by_part[i].take().expect("a used part has profiles");
            }
        }
    }
    out
}

/// glet's runtime re-planning every epoch: Nexus's runtime on partitions,
/// re-partitioned when the measured rates outgrow the plan.
#[derive(Debug)]
pub struct Replanning {
    nexus: Nexus,
    planner: Planner,
    data: Arc<PartitionData>,
    /// Each model's profile row and SLO; the rate is the last planned for.
    demands: Vec<Demand>,
    /// What the plan in force serves per model (scaled), and its layout.
    planned_rps: Vec<f64>,
    slots: Vec<Partition>,
    /// Each model's arrivals over the epoch in progress.
    epochs: EpochCounter,
    /// Epochs that re-planned.
    pub replans: u64,
    /// Whether re-plans are handed out (`Scheduler::offload`).
    offloading: bool,
    /// A re-plan handed out, until it is taken.
    handed: Option<Offload>,
    /// Whether a re-plan is out and not yet back.
    out: bool,
}

/// A re-plan's result: the plan laid out on the slots and the rates it
/// serves, or None when no plan fits (the plan in force stays).
struct Replan(Option<(OnSlots, Vec<f64>)>);

impl Replanning {
    /// Serving `serving`'s demands, re-planning every `epoch`; `data` is
    /// the profiles `serving` borrows.
    pub fn new(serving: &Serving<'_>, data: Arc<PartitionData>, epoch: Nanos) -> Self {
        assert!(std::ptr::eq(&*data, serving.data), "the profiles the serving plans with");
        assert!(epoch > 0);
        let gpus = serving.cluster.backends as usize;
        let plan = serving.plan().unwrap_or_default();
        let profiles = runtime_profiles(serving.planner, serving.data, &serving.demands, &plan);
        let none = (0..2 * gpus).map(|b| Partition { gpu: (b / 2) as u32, percent: 0 }).collect::<Vec<_>>();
        let laid = on_slots(&plan, profiles, &none);
        let n = serving.demands.len();
        let nexus = Nexus::partitioned(
            serving.cluster,
            laid.plan,
            laid.slots.clone(),
            laid.profiles,
            DropPolicy::Early,
            serving.seed,
        );
        Self {
            nexus,
            planner: serving.planner,
            data,
            demands: serving.demands.clone(),
            planned_rps: plan.planned_rates(n),
            slots: laid.slots,
            epochs: EpochCounter::new(n, epoch),
            replans: 0,
            offloading: false,
            handed: None,
            out: false,
        }
    }

    /// The epoch that ended at `now` measured `rates`: re-plan if the plan
    /// in force no longer covers them (and no re-plan is out).
    fn new_epoch(&mut self, now: Nanos, rates: Vec<f64>) {
        if self.out || rates.iter().zip(&self.planned_rps).all(|(m, p)| m <= p) {
            return;
        }
        for (d, r) in self.demands.iter_mut().zip(rates) {
            d.rate_rps = r;
        }
        let (planner, data, demands, slots) =
            (self.planner, Arc::clone(&self.data), self.demands.clone(), self.slots.clone());
        let replan = move || {
            Replan(plan_for_gpus(planner, &data, &demands, slots.len() / 2).map(|plan| {
                let profiles = runtime_profiles(planner, &data, &demands, &plan);
                (on_slots(&plan, profiles, &slots), plan.planned_rates(demands.len()))
            }))
        };
        match self.offloading {
            true => (self.handed, self.out) = (Some(Offload::new(replan)), true),
            false => self.apply(now, replan()),
        }
    }

    /// Switches to a re-plan's plan at `now` (the slots it was laid out on
    /// are the ones in force: they change only here).
    fn apply(&mut self, now: Nanos, Replan(replan): Replan) {
        let Some((laid, planned_rps)) = replan else { return };
        self.planned_rps = planned_rps;
        self.slots = laid.slots.clone();
        self.replans += 1;
        self.nexus.repartition(now, laid.plan, laid.slots, laid.profiles);
    }
}

impl Scheduler for Replanning {
    fn on_request(&mut self, now: Nanos, req: Request) {
        self.epochs.count(now, req.model.index());
        self.nexus.on_request(now, req);
    }

    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        self.nexus.on_batch_done(now, done);
    }

    fn on_backend_failed(&mut self, now: Nanos, backend: BackendId) {
        self.nexus.on_backend_failed(now, backend);
    }

    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId) {
        self.nexus.on_backend_joined(now, backend);
    }

    fn on_timeout(&mut self, now: Nanos) {
        if let Some(rates) = self.epochs.close(now) {
            self.new_epoch(now, rates.into_iter().map(|r| r.max(MIN_PLANNED_RPS)).collect());
        }
    }

    fn next_timeout(&self) -> Option<Nanos> {
        // Epochs run while requests arrive or wait; a quiet cluster sleeps.
        self.epochs.deadline(self.nexus.queued())
    }

    fn poll_output(&mut self) -> Option<Output> {
        self.nexus.poll_output()
    }

    fn partitions(&self) -> Option<Vec<Partition>> {
        self.nexus.partitions()
    }

    fn offload(&mut self) {
        self.offloading = true;
    }

    fn take_offload(&mut self) -> Option<Offload> {
        self.handed.take()
    }

    fn on_offloaded(&mut self, now: Nanos, done: Offloaded) {
        assert!(std::mem::replace(&mut self.out, false), "a re-plan back that was not out");
        self.apply(now, done.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glet::PlannedPart;

    fn part(gpu: usize, percent: u32, used: bool) -> PlannedPart {
        let node = used.then(|| BackendPlan { sessions: vec![], duty_cycle: 1 });
        PlannedPart { gpu, percent, node }
    }

    fn slots(percents: &[u32]) -> Vec<Partition> {
        percents.iter().enumerate().map(|(b, &percent)| Partition { gpu: (b / 2) as u32, percent }).collect()
    }

    fn profiles(plan: &GletPlan) -> Vec<Vec<Profile>> {
        plan.used().map(|_| Vec::new()).collect()
    }

    /// A plan whose GPUs are split as the cluster's already are keeps every
    /// partition where it is, whatever order the planner numbered them in.
    #[test]
    fn the_same_splits_stay_put() {
        let current = slots(&[40, 60, 100, 0, 20, 80]);
        let plan = GletPlan {
            parts: vec![
                part(0, 100, true),
                part(1, 80, true),
                part(1, 20, false),
                part(2, 60, true),
                part(2, 40, true),
            ],
            rate_scale: 1.0,
        };
        let laid = on_slots(&plan, profiles(&plan), &current);
        assert_eq!(laid.slots, current);
        let used: Vec<bool> = laid.plan.backends.iter().map(|b| b.duty_cycle > 0).collect();
        assert_eq!(used, [true, true, true, false, false, true]);
    }

    /// A new split goes to a GPU whose split nobody wants; GPUs the plan
    /// leaves out keep their partitions, idle.
    #[test]
    fn new_splits_take_the_gpus_left() {
        let current = slots(&[40, 60, 100, 0, 20, 80]);
        let plan = GletPlan { parts: vec![part(0, 50, true), part(0, 50, true), part(1, 100, true)], rate_scale: 2.0 };
        let laid = on_slots(&plan, profiles(&plan), &current);
        assert_eq!(laid.slots, slots(&[50, 50, 100, 0, 20, 80]));
        assert_eq!(laid.plan.rate_scale, 2.0);
        let used: Vec<bool> = laid.plan.backends.iter().map(|b| b.duty_cycle > 0).collect();
        assert_eq!(used, [true, true, true, false, false, false]);
    }
}
