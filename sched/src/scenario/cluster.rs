//! The scenario's sections around its models: `[cluster]`, `[[prefixes]]`,
//! `[[faults]]`, `[[stalls]]` and `[policy]`. Every error names the key at fault.

use std::sync::Arc;

use super::partitions::{self, Read};
use super::raw::{RawCluster, RawFault, RawPolicy, RawPrefix, RawStall};
use super::{err, non_negative, positive, ScenarioError, SimKnobs, Stall, DEFAULT_MAX_BATCH};
use crate::glet::PartitionData;
use crate::policy::PolicyKind;
use crate::profile::Profile;
use crate::time::{ms_to_nanos, us_to_nanos, Nanos};
use crate::types::{BackendId, DispatchDelay, PrefixGroup};

const DEFAULT_QUEUE_CAPACITY: i64 = 1 << 16;

/// `[cluster]`, checked.
pub(super) struct Cluster {
    pub(super) gpus: u32,
    pub(super) delay: DispatchDelay,
    pub(super) knobs: SimKnobs,
    pub(super) queue_capacity: usize,
    pub(super) gpu_memory_mb: Option<f64>,
    pub(super) partitions: Option<Arc<PartitionData>>,
}

pub(super) fn parse_cluster(c: RawCluster, read: Read<'_>) -> Result<Cluster, ScenarioError> {
    if c.gpus < 1 || c.gpus > 1_000_000 {
        return Err(err("cluster.gpus", format!("must be between 1 and 1000000, got {}", c.gpus)));
    }
    let delay = DispatchDelay {
        ctrl: us_to_nanos(non_negative("cluster.ctrl_delay_us", c.ctrl_delay_us, 0.0)?),
        per_request: us_to_nanos(non_negative("cluster.data_delay_us", c.data_delay_us, 0.0)?),
    };
    let exec_jitter = non_negative("cluster.exec_jitter", c.exec_jitter, 0.0)?;
    if exec_jitter >= 1.0 {
        return Err(err("cluster.exec_jitter", format!("must be below 1, got {exec_jitter}")));
    }
    let model_shards = c.model_shards.unwrap_or(4);
    if !(1..=1024).contains(&model_shards) {
        return Err(err("cluster.model_shards", format!("must be between 1 and 1024, got {model_shards}")));
    }
    if let Some(g) = c.gpu_memory_mb {
        positive("cluster.gpu_memory_mb", g)?;
    }
    let queue_capacity = c.queue_capacity.unwrap_or(DEFAULT_QUEUE_CAPACITY);
    if !(1..=1 << 24).contains(&queue_capacity) {
        return Err(err("cluster.queue_capacity", format!("must be between 1 and 16777216, got {queue_capacity}")));
    }
    let msg_delay = us_to_nanos(non_negative("cluster.msg_delay_us", c.msg_delay_us, 0.0)?);
    let partitions = match &c.partition_profiles {
        Some(dir) => Some(partitions::load(dir, read)?),
        None => None,
    };
    Ok(Cluster {
        gpus: c.gpus as u32,
        delay,
        knobs: SimKnobs { exec_jitter, model_shards: model_shards as usize, msg_delay },
        queue_capacity: queue_capacity as usize,
        gpu_memory_mb: c.gpu_memory_mb,
        partitions,
    })
}

/// `[[prefixes]]`: groups without members yet (models join them).
pub(super) fn parse_prefixes(raw: Vec<RawPrefix>) -> Result<Vec<PrefixGroup>, ScenarioError> {
    let mut prefixes: Vec<PrefixGroup> = Vec::with_capacity(raw.len());
    for (i, p) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("prefixes[{i}].{k}");
        if prefixes.iter().any(|x| x.name == p.name) {
            return Err(err(key("name"), format!("duplicate prefix name `{}`", p.name)));
        }
        let a = non_negative(&key("alpha_ms"), Some(p.alpha_ms), 0.0)?;
        let b = non_negative(&key("beta_ms"), Some(p.beta_ms), 0.0)?;
        let profile =
            Profile::linear_ms(a, b, DEFAULT_MAX_BATCH as u32).map_err(|e| err(key("alpha_ms"), e.to_string()))?;
        prefixes.push(PrefixGroup { name: p.name, prefix: profile, members: vec![] });
    }
    Ok(prefixes)
}

/// `[[faults]]`: backends that fail for good, in time order.
pub(super) fn parse_faults(raw: Vec<RawFault>, gpus: u32) -> Result<Vec<(Nanos, BackendId)>, ScenarioError> {
    let mut faults = Vec::with_capacity(raw.len());
    for (i, f) in raw.into_iter().enumerate() {
        let at = ms_to_nanos(non_negative(&format!("faults[{i}].at_s"), Some(f.at_s), 0.0)? * 1e3);
        if f.backend < 0 || f.backend >= gpus as i64 {
            return Err(err(format!("faults[{i}].backend"), format!("no backend {} among {gpus} GPUs", f.backend)));
        }
        faults.push((at, BackendId(f.backend as u32)));
    }
    faults.sort();
    Ok(faults)
}

/// `[[stalls]]`: pauses of the engine's host, in time order, none
/// overlapping another, each over by the run's `end`.
pub(super) fn parse_stalls(raw: Vec<RawStall>, end: Nanos) -> Result<Vec<Stall>, ScenarioError> {
    let mut stalls = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        let from = ms_to_nanos(non_negative(&format!("stalls[{i}].at_s"), Some(s.at_s), 0.0)? * 1e3);
        let to = from.saturating_add(ms_to_nanos(positive(&format!("stalls[{i}].for_ms"), s.for_ms)?));
        if to > end {
            let why = format!("ends {} ms after the run's end (warmup_s + duration_s)", (to - end) as f64 / 1e6);
            return Err(err(format!("stalls[{i}].for_ms"), why));
        }
        stalls.push((i, Stall { from, to }));
    }
    stalls.sort_by_key(|(_, s)| s.from);
    if let Some(w) = stalls.windows(2).find(|w| w[1].1.from < w[0].1.to) {
        return Err(err(format!("stalls[{}].at_s", w[1].0), format!("overlaps stalls[{}]", w[0].0)));
    }
    Ok(stalls.into_iter().map(|(_, s)| s).collect())
}

/// `[policy]`: the policy (Symphony without one) and its re-planning epoch.
pub(super) fn parse_policy(raw: Option<RawPolicy>) -> Result<(PolicyKind, Option<Nanos>), ScenarioError> {
    let Some(p) = raw else { return Ok((PolicyKind::Symphony, None)) };
    let epoch = match p.epoch_s {
        Some(e) => Some(ms_to_nanos(positive("policy.epoch_s", e)? * 1e3)),
        None => None,
    };
    Ok((PolicyKind::parse(&p.name).map_err(|e| err("policy.name", e))?, epoch))
}
