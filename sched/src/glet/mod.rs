//! glet (seeds/003; `../shared/design/planners.md`): GPUs split into
//! partitions ("glets") of p% of their SMs, with measured profiles L(b, p)
//! and an interference model for partitions of one GPU running together.
//!
//! - `profiles.rs`: the measured data (`../shared/data/partition-profiles`,
//!   three CSVs: solo latency, co-run latency, DRAM/L2 utilisation), parsed
//!   from text, with L(b, p) interpolated between measured batch sizes;
//! - `interference.rs`: the linear interference model
//!   `factor = c1*L2_m1 + c2*L2_m2 + c3*mem_m1 + c4*mem_m2 + c5`, fitted by
//!   least squares on measured pairs, with its error on held-out pairs;
//! - `planner.rs`: elastic partitioning (Algorithm 1), scaling (Algorithm 2)
//!   and an exhaustive ideal for small instances, on paper, one model per
//!   partition;
//! - `oracle.rs`: what a batch takes on a partition next to a sibling (the
//!   simulator and the interference-aware planners share it);
//! - `parts.rs`: partitioned plans whose partitions run Nexus nodes
//!   (temporal sharing inside a partition), and their validity checks;
//! - `spatial.rs`: elastic partitioning with temporal sharing, and greedy
//!   best-fit partitioning;
//! - `cluster.rs`: the policies glet, glet-noint, greedy-part, sbp and the
//!   exhaustive ideal, planned to fill a fixed cluster;
//! - `serve.rs`: such a plan executed by Nexus's runtime on partitions;
//! - `epochs.rs`: re-planning every epoch, GPUs re-partitioned at run time.

mod cluster;
mod epochs;
mod interference;
mod oracle;
mod parts;
mod planner;
mod profiles;
mod serve;
mod spatial;

pub use cluster::{plan_for_gpus, plan_once, runtime_profiles, Planner};
pub use epochs::{on_slots, OnSlots, Replanning};
pub use interference::{fit_interference, predicted_latency, FitReport, InterferenceModel};
pub use oracle::{PartitionData, PartitionDataError, MAX_PARTITION_BATCH};
pub use parts::{GletPlan, PlannedPart, Planning};
pub use planner::{elastic, ideal, scale, throughput, Demand, GpuPlan, Interference, PartitionPlan};
pub use profiles::{CoRun, PartitionProfiles, ProfileError, BATCHES, PARTITIONS};
pub use serve::Serving;
pub use spatial::{plan_spatial, Spatial};
