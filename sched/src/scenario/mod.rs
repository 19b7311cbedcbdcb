//! Scenario files (`../shared/design/evaluation.md`): one TOML file describes
//! one experiment for the simulator, the load generator and the perf
//! harnesses. Parsing is strict: unknown keys and impossible values are
//! errors that name the key, and nothing runs half-configured. This module
//! parses text; reading the file is the caller's business.

pub mod builder;
mod cluster;
mod model;
mod partitions;
mod raw;
mod sections;

use std::sync::Arc;

use cluster::{parse_cluster, parse_faults, parse_policy, parse_prefixes, parse_stalls};
use model::{parse_model, Context};
use partitions::Read;
use raw::RawScenario;
use sections::parse_queries;

use crate::arrival::Arrival;
use crate::glet::PartitionData;
use crate::policy::PolicyKind;
use crate::query::QuerySpec;
use crate::time::{ms_to_nanos, Nanos};
use crate::trace::parse_azure_csv;
use crate::types::{BackendId, ClusterSpec, ModelSpec};

#[derive(Clone, Debug)]
pub struct ScenarioModel {
    pub spec: ModelSpec,
    /// Share of the aggregate offered rate (relative to the sum of weights).
    pub weight: f64,
    pub arrival: Arrival,
    /// The model's row in `Scenario::partitions`, if it has `profile = "..."`.
    pub partition_profile: Option<usize>,
}

/// Knobs of the simulated cluster beyond `ClusterSpec`.
#[derive(Clone, Debug)]
pub struct SimKnobs {
    /// Relative jitter of batch execution: each batch runs `l(b)*(1+u)`,
    /// u uniform in [-jitter, +jitter].
    pub exec_jitter: f64,
    /// Model shards Symphony splits its models over.
    pub model_shards: usize,
    /// Delay of each message between model shards and the rank shard.
    pub msg_delay: Nanos,
}

/// A pause of the engine's host from `from` to `to` (`[[stalls]]`): its
/// scheduler, frontends and the hosts of its backends stop, the GPUs run
/// on. What falls within it — arrivals, completions, timers — is handled
/// at `to`, in order, each arrival keeping its own deadline and each
/// answer leaving at `to`: the simulator holds its clock (`sim/mod.rs`),
/// the engine's scheduler-side shards sleep through it
/// (`core/src/runtime/stall.rs`). A policy with no margin can collapse
/// after one, and this project's VM pauses the engine for milliseconds
/// now and then (`perf/results/stalls.txt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stall {
    pub from: Nanos,
    pub to: Nanos,
}

impl Stall {
    /// When something due at `t` is handled: the end of the stall in
    /// `stalls` (time order, disjoint) that holds `t`, else `t`.
    pub fn held(stalls: &[Stall], t: Nanos) -> Nanos {
        let i = stalls.partition_point(|s| s.to <= t);
        stalls.get(i).filter(|s| s.from <= t).map_or(t, |s| s.to)
    }
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    pub duration: Nanos,
    pub warmup: Nanos,
    /// The aggregate offered rate used when none is given on the command line.
    pub rate_rps: Option<f64>,
    pub cluster: ClusterSpec,
    pub knobs: SimKnobs,
    pub models: Vec<ScenarioModel>,
    /// Multi-model queries; their stage models' SLOs are their budgets.
    pub queries: Vec<QuerySpec>,
    /// Backends that fail for good, and when (time order).
    pub faults: Vec<(Nanos, BackendId)>,
    /// Pauses of the engine's host (time order, disjoint).
    pub stalls: Vec<Stall>,
    /// Re-planning epoch of planning policies (`[policy] epoch_s`).
    pub policy_epoch: Option<Nanos>,
    pub policy: PolicyKind,
    /// Measured GPU-partition profiles (`[cluster] partition_profiles`).
    pub partitions: Option<Arc<PartitionData>>,
}

/// A scenario that cannot run, with the key at fault.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioError {
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "`{}`: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for ScenarioError {}

fn err(key: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError { key: key.into(), message: message.into() }
}

const DEFAULT_MAX_BATCH: i64 = 256;

/// No number in a scenario is larger: a million milliseconds, requests per
/// second, megabytes or seconds is far beyond any real setting, and keeps
/// every derived time (`alpha*b + beta` in nanoseconds up to the largest
/// batch) inside 64 bits.
const MAX_VALUE: f64 = 1e6;

fn non_negative(key: &str, v: Option<f64>, default: f64) -> Result<f64, ScenarioError> {
    let v = v.unwrap_or(default);
    if !(v.is_finite() && (0.0..=MAX_VALUE).contains(&v)) {
        return Err(err(key, format!("must be a number in [0, {MAX_VALUE}], got {v}")));
    }
    Ok(v)
}

fn positive(key: &str, v: f64) -> Result<f64, ScenarioError> {
    if !(v.is_finite() && v > 0.0 && v <= MAX_VALUE) {
        return Err(err(key, format!("must be a number in (0, {MAX_VALUE}], got {v}")));
    }
    Ok(v)
}

impl Scenario {
    /// Parses a scenario that names no other file (`partition_profiles`
    /// needs `parse_with`).
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Self::parse_with(text, &|f| Err(format!("no folder to read `{f}` from: the scenario was parsed from text")))
    }

    /// Parses a scenario; `read` returns the text of a file named relative
    /// to the scenario's folder (the caller does the I/O).
    pub fn parse_with(text: &str, read: Read<'_>) -> Result<Scenario, ScenarioError> {
        // toml names the offending key (and its line) in its message.
        let raw: RawScenario =
            toml::from_str(text).map_err(|e| err("", format!("invalid scenario: {}", e.to_string().trim_end())))?;
        Self::from_raw(raw, read)
    }

    /// Checks and assembles the parsed file, section by section.
    fn from_raw(raw: RawScenario, read: Read<'_>) -> Result<Scenario, ScenarioError> {
        if raw.name.trim().is_empty() {
            return Err(err("name", "must not be empty"));
        }
        let duration_s = positive("duration_s", raw.duration_s.unwrap_or(30.0))?;
        let warmup_s = non_negative("warmup_s", raw.warmup_s, 2.0)?;
        if let Some(r) = raw.rate_rps {
            positive("rate_rps", r)?;
        }
        let cluster = parse_cluster(raw.cluster, read)?;
        if raw.models.is_empty() {
            return Err(err("models", "at least one model is required"));
        }
        let mut prefixes = parse_prefixes(raw.prefixes.unwrap_or_default())?;
        let raw_queries = raw.queries.unwrap_or_default();
        let mut models: Vec<ScenarioModel> = Vec::with_capacity(raw.models.len());
        let mut cx = Context {
            delay: cluster.delay,
            gpu_memory_mb: cluster.gpu_memory_mb,
            partitions: cluster.partitions.as_deref(),
            prefixes: &mut prefixes,
        };
        for (i, m) in raw.models.into_iter().enumerate() {
            // A query stage's SLO comes from the query's split.
            let stage_slo_ms =
                raw_queries.iter().find(|q| q.stages.iter().any(|s| s.model == m.name)).map(|q| q.slo_ms);
            let model = parse_model(i, m, &models, stage_slo_ms, &mut cx)?;
            models.push(model);
        }
        let queries = parse_queries(raw_queries, &mut models, &cluster.delay)?;
        let faults = parse_faults(raw.faults.unwrap_or_default(), cluster.gpus)?;
        let end = ms_to_nanos((warmup_s + duration_s) * 1e3);
        let stalls = parse_stalls(raw.stalls.unwrap_or_default(), end)?;
        if models.iter().all(|m| m.weight == 0.0) && queries.iter().all(|q| q.weight == 0.0) {
            return Err(err("models.weight", "at least one model or query needs a positive weight"));
        }
        let (policy, policy_epoch) = parse_policy(raw.policy)?;
        let scenario = Scenario {
            name: raw.name,
            seed: raw.seed.unwrap_or(1),
            duration: ms_to_nanos(duration_s * 1e3),
            warmup: ms_to_nanos(warmup_s * 1e3),
            rate_rps: raw.rate_rps,
            cluster: ClusterSpec {
                models: models.iter().map(|m| m.spec.clone()).collect(),
                backends: cluster.gpus,
                delay: cluster.delay,
                queue_capacity: cluster.queue_capacity,
                gpu_memory_mb: cluster.gpu_memory_mb,
                prefixes,
            },
            knobs: cluster.knobs,
            models,
            queries,
            faults,
            stalls,
            policy_epoch,
            policy,
            partitions: cluster.partitions,
        };
        scenario.supports(policy).map_err(|e| err("policy.name", e))?;
        Ok(scenario)
    }

    /// Replaces the stalls with `(at_s, for_ms)` pairs, checked as
    /// `[[stalls]]` entries are (`baton sim --stall`).
    pub fn set_stalls(&mut self, stalls: &[(f64, f64)]) -> Result<(), ScenarioError> {
        let raw = stalls.iter().map(|&(at_s, for_ms)| raw::RawStall { at_s, for_ms }).collect();
        self.stalls = parse_stalls(raw, self.warmup + self.duration)?;
        Ok(())
    }

    /// Why this scenario cannot run `policy`, if it cannot: the partition
    /// policies need measured partition profiles for every model.
    pub fn supports(&self, policy: PolicyKind) -> Result<(), String> {
        if !policy.needs_partition_profiles() {
            return Ok(());
        }
        if self.partitions.is_none() {
            return Err(format!("policy {} needs `cluster.partition_profiles`", policy.as_str()));
        }
        match self.models.iter().find(|m| m.partition_profile.is_none()) {
            Some(m) => Err(format!("policy {} needs a `profile` for model {}", policy.as_str(), m.spec.name)),
            None => Ok(()),
        }
    }

    /// Reads every `trace:<file>` arrival through `read` (which resolves
    /// the name and does the I/O) and attaches its per-minute shape.
    pub fn attach_traces(&mut self, read: &dyn Fn(&str) -> Result<String, String>) -> Result<(), ScenarioError> {
        let laws =
            self.models.iter_mut().enumerate().map(|(i, m)| (format!("models[{i}].arrival"), &mut m.arrival)).chain(
                self.queries.iter_mut().enumerate().map(|(i, q)| (format!("queries[{i}].arrival"), &mut q.arrival)),
            );
        for (key, law) in laws {
            if let Arrival::Trace { file, shape } = law {
                let text = read(file).map_err(|e| err(key.clone(), e))?;
                let minutes = parse_azure_csv(&text).map_err(|e| err(key.clone(), format!("{file}: {e}")))?;
                *shape = Some(minutes.into());
            }
        }
        Ok(())
    }

    /// Per-model offered rates for an aggregate rate: each model's direct
    /// share plus what queries feed its stages. Planners plan for these.
    pub fn model_rates(&self, rate_rps: f64) -> Vec<f64> {
        let mut rates = self.direct_rates(rate_rps);
        for (q, qr) in self.queries.iter().zip(self.query_rates(rate_rps)) {
            for (s, st) in q.stages.iter().enumerate() {
                rates[st.model.index()] += qr * q.multiplier(s);
            }
        }
        rates
    }

    fn total_weight(&self) -> f64 {
        self.models.iter().map(|m| m.weight).sum::<f64>() + self.queries.iter().map(|q| q.weight).sum::<f64>()
    }

    /// Per-model rates of requests sent to the model directly.
    pub fn direct_rates(&self, rate_rps: f64) -> Vec<f64> {
        let total = self.total_weight();
        self.models.iter().map(|m| rate_rps * m.weight / total).collect()
    }

    /// Per-query arrival rates.
    pub fn query_rates(&self, rate_rps: f64) -> Vec<f64> {
        let total = self.total_weight();
        self.queries.iter().map(|q| rate_rps * q.weight / total).collect()
    }

    /// An upper bound on the aggregate rate the cluster could ever serve:
    /// every backend running each model's largest SLO-feasible batch back to
    /// back, shares kept. Bisection for goodput starts below it.
    pub fn capacity_bound_rps(&self) -> f64 {
        let gpu_seconds_per_unit_rate: f64 = self
            .models
            .iter()
            .zip(self.model_rates(1.0))
            .map(|(m, share)| {
                let p = &m.spec.profile;
                let b = p.max_batch_within(m.spec.slo, 0, p.max_batch()).max(1);
                share / p.throughput_rps(b)
            })
            .sum();
        self.cluster.backends as f64 / gpu_seconds_per_unit_rate
    }
}

#[cfg(test)]
mod tests {
    use super::builder::ScenarioText;
    use super::*;
    use crate::types::ModelId;

    const GOOD: &str = r#"
name = "t"
seed = 7
duration_s = 3
warmup_s = 1
[cluster]
gpus = 8
ctrl_delay_us = 200
[[models]]
name = "ResNet50"
alpha_ms = 1.053
beta_ms = 5.072
slo_ms = 25.0
arrival = "gamma:0.5"
[policy]
name = "clockwork"
"#;

    fn good() -> ScenarioText {
        ScenarioText::from_toml(GOOD)
    }

    #[test]
    fn parses_the_documented_format() {
        let s = good().scenario();
        assert_eq!(s.cluster.backends, 8);
        assert_eq!(s.cluster.delay.ctrl, 200_000);
        assert_eq!(s.models[0].arrival, Arrival::Gamma(0.5));
        assert_eq!(s.policy, PolicyKind::Clockwork);
    }

    const APPS: &str = r#"
name = "orloj"
[cluster]
gpus = 2
[[models]]
name = "bart"
slo_p99_multiple = 1.5
kappa = 0.05
arrival = "gamma:0.5"
[[models.apps]]
name = "summarize"
weight = 0.5
exec_ms = "normal:40,5"
[[models.apps]]
name = "translate"
weight = 0.5
exec_ms = "bimodal:10,1,30,2,0.7"
"#;

    #[test]
    fn parses_apps_and_slo_multiples() {
        let apps = || ScenarioText::from_toml(APPS);
        let s = apps().scenario();
        let d = s.models[0].spec.dynamic.as_ref().unwrap();
        assert_eq!(d.apps.len(), 2);
        assert_eq!(d.kappa, 0.05);
        // P99 of the mix is about the summarize app's 40 + 2.33*5 ms.
        let slo_ms = s.models[0].spec.slo as f64 / 1e6;
        assert!((slo_ms / 1.5 - 51.0).abs() < 2.0, "{slo_ms}");
        // Baselines plan with the mean: 0.5*40 + 0.5*(0.7*10 + 0.3*30) = 28 ms at b = 1.
        assert!((s.models[0].spec.profile.latency(1) as f64 / 1e6 - 28.0).abs() < 0.01);
        apps().set("models[0].apps[0].exec_ms", "normal:40").rejected_at("models[0].apps[0].exec_ms");
        apps().set("models[0].kappa", 2.0).rejected_at("models[0].kappa");
        apps().add("models[0].slo_ms", 3.0).rejected_at("models[0].slo_ms");
        apps().add("models[0].apps[0].exec", 1).rejected_at("exec");
        apps().add("models[0].alpha_ms", 1.0).add("models[0].beta_ms", 1.0).rejected_at("models[0].alpha_ms");
        good().add("models[0].kappa", 0.1).rejected_at("models[0].kappa");
    }

    #[test]
    fn names_the_key_at_fault() {
        good().add("sede", 3).rejected_at("sede");
        good().set("cluster.gpus", 0).rejected_at("cluster.gpus");
        good().add("cluster.gpu", 1).rejected_at("gpu");
        good().set("models[0].slo_ms", 5.0).rejected_at("models[0].slo_ms");
        good().set("models[0].slo_ms", -1.0).rejected_at("models[0].slo_ms");
        good().set("models[0].arrival", "gamma:-2").rejected_at("models[0].arrival");
        good().set("models[0].arrival", "bursty").rejected_at("models[0].arrival");
        good().set("policy.name", "fifo").rejected_at("policy.name");
        good().remove("models[0].beta_ms").rejected_at("models[0].alpha_ms");
        good().set("duration_s", 0).rejected_at("duration_s");
        good().add("models[0].wieght", 2).rejected_at("wieght");
    }

    #[test]
    fn each_model_takes_its_latencies_from_one_source() {
        let table = || good().remove("models[0].alpha_ms").remove("models[0].beta_ms");
        let s = table().add("models[0].latency_ms", vec![1.0, 1.5, 2.0]).scenario();
        assert_eq!(s.models[0].spec.profile.max_batch(), 3);
        table().add("models[0].latency_ms", vec![1.0]).add("models[0].max_batch", 4).rejected_at("models[0].max_batch");
        good().add("models[0].latency_ms", vec![1.0]).rejected_at("models[0].alpha_ms");
        good().add("models[0].supernet", "default").rejected_at("models[0].alpha_ms");
        good().add("models[0].prefix_of", "p").rejected_at("models[0].prefix_of");
        let shared =
            good().push("prefixes", "name = \"p\"\nalpha_ms = 0.5\nbeta_ms = 2.0").add("models[0].prefix_of", "p");
        let s = shared.scenario();
        // Alone, a prefix member runs prefix and suffix back to back.
        assert_eq!(s.models[0].spec.profile.latency(1), crate::time::ms_to_nanos(1.053 + 5.072 + 0.5 + 2.0));
        assert_eq!(s.cluster.prefixes[0].members, vec![ModelId(0)]);
    }

    #[test]
    fn stalls_are_sorted_disjoint_and_hold_what_falls_in_them() {
        let stall = |at_s: f64, for_ms: f64| format!("at_s = {at_s}\nfor_ms = {for_ms}");
        let s = good().push("stalls", &stall(2.0, 5.0)).push("stalls", &stall(1.0, 1.0)).scenario();
        let ms = crate::time::ms_to_nanos;
        assert_eq!(
            s.stalls,
            vec![Stall { from: ms(1000.0), to: ms(1001.0) }, Stall { from: ms(2000.0), to: ms(2005.0) }]
        );
        assert_eq!(Stall::held(&s.stalls, ms(999.0)), ms(999.0));
        assert_eq!(Stall::held(&s.stalls, ms(1000.0)), ms(1001.0), "from its start");
        assert_eq!(Stall::held(&s.stalls, ms(1001.0)), ms(1001.0), "to its end");
        assert_eq!(Stall::held(&s.stalls, ms(2004.0)), ms(2005.0));
        assert_eq!(Stall::held(&s.stalls, ms(3000.0)), ms(3000.0));
        good().push("stalls", &stall(1.0, 0.0)).rejected_at("stalls[0].for_ms");
        good().push("stalls", &stall(-1.0, 1.0)).rejected_at("stalls[0].at_s");
        good().push("stalls", &stall(1.0, 5.0)).push("stalls", &stall(1.004, 1.0)).rejected_at("stalls[1].at_s");
        good().push("stalls", &stall(3.9, 200.0)).rejected_at("stalls[0].for_ms");
        good().push("stalls", &stall(1e5, 1.0)).rejected_at("stalls[0].for_ms");
        let mut s = good().scenario();
        s.set_stalls(&[(1.0, 2.0)]).unwrap();
        assert_eq!(s.stalls, vec![Stall { from: ms(1000.0), to: ms(1002.0) }]);
        assert!(s.set_stalls(&[(1.0, 2.0), (1.001, 1.0)]).unwrap_err().to_string().contains("stalls[1].at_s"));
        good().push("stalls", "at_s = 1.0\nms = 3").rejected_at("ms");
    }
}
