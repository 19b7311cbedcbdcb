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
//!   and an exhaustive ideal for small instances, on paper.

mod interference;
mod oracle;
mod planner;
mod profiles;

pub use interference::{fit_interference, predicted_latency, FitReport, InterferenceModel};
pub use oracle::{PartitionData, PartitionDataError, MAX_PARTITION_BATCH};
pub use planner::{elastic, ideal, scale, throughput, Demand, GpuPlan, Interference, PartitionPlan};
pub use profiles::{CoRun, PartitionProfiles, ProfileError, BATCHES, PARTITIONS};
