//! Scenario files (`../shared/design/evaluation.md`): one TOML file describes
//! one experiment for the simulator, the load generator and the perf
//! harnesses. Parsing is strict: unknown keys and impossible values are
//! errors that name the key, and nothing runs half-configured. This module
//! parses text; reading the file is the caller's business.

mod partitions;
mod raw;
mod sections;

use std::sync::Arc;

use partitions::Read;
use raw::RawScenario;
use sections::{parse_apps, parse_queries, parse_subnets};

use crate::dist::{mixture_quantile, ExecDist};
use crate::glet::PartitionData;
use crate::policy::PolicyKind;
use crate::profile::Profile;
use crate::query::QuerySpec;
use crate::time::{ms_to_nanos, us_to_nanos, Nanos};
use crate::trace::parse_azure_csv;
use crate::types::{BackendId, ClusterSpec, DispatchDelay, ModelId, ModelSpec, PrefixGroup, PrefixId};

pub use crate::arrival::Arrival;

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
const DEFAULT_QUEUE_CAPACITY: i64 = 1 << 16;

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

    fn from_raw(raw: RawScenario, read: Read<'_>) -> Result<Scenario, ScenarioError> {
        if raw.name.trim().is_empty() {
            return Err(err("name", "must not be empty"));
        }
        let duration_s = positive("duration_s", raw.duration_s.unwrap_or(30.0))?;
        let warmup_s = non_negative("warmup_s", raw.warmup_s, 2.0)?;
        if let Some(r) = raw.rate_rps {
            positive("rate_rps", r)?;
        }
        let c = raw.cluster;
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
        if raw.models.is_empty() {
            return Err(err("models", "at least one model is required"));
        }
        let partition_data = match &c.partition_profiles {
            Some(dir) => Some(partitions::load(dir, read)?),
            None => None,
        };
        let mut prefixes: Vec<PrefixGroup> = Vec::new();
        for (i, p) in raw.prefixes.unwrap_or_default().into_iter().enumerate() {
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
        let raw_queries = raw.queries.unwrap_or_default();
        // Models that are query stages: their SLO comes from the query's split.
        let stage_slo_ms =
            |name: &str| raw_queries.iter().find(|q| q.stages.iter().any(|s| s.model == name)).map(|q| q.slo_ms);
        let mut models = Vec::with_capacity(raw.models.len());
        for (i, m) in raw.models.into_iter().enumerate() {
            let key = |k: &str| format!("models[{i}].{k}");
            if models.iter().any(|x: &ScenarioModel| x.spec.name == m.name) {
                return Err(err(key("name"), format!("duplicate model name `{}`", m.name)));
            }
            let partition_profile = match &m.profile {
                Some(name) => Some(partitions::model_profile(&key, partition_data.as_deref(), name, &m)?),
                None => None,
            };
            let max_batch = m.max_batch.unwrap_or(DEFAULT_MAX_BATCH);
            if !(1..=65_536).contains(&max_batch) {
                return Err(err(key("max_batch"), format!("must be between 1 and 65536, got {max_batch}")));
            }
            let dynamic = match m.apps {
                Some(apps) => Some(parse_apps(&key, apps, m.kappa)?),
                None if m.kappa.is_some() => {
                    return Err(err(key("kappa"), "applies only to models with [[models.apps]]"))
                }
                None => None,
            };
            let prefix_group = match &m.prefix_of {
                Some(name) => {
                    let g = prefixes
                        .iter()
                        .position(|p| &p.name == name)
                        .ok_or_else(|| err(key("prefix_of"), format!("no [[prefixes]] entry named `{name}`")))?;
                    if dynamic.is_some() || m.latency_ms.is_some() || m.alpha_ms.is_none() || m.beta_ms.is_none() {
                        return Err(err(key("prefix_of"), "a prefix member gives its suffix as alpha_ms and beta_ms"));
                    }
                    Some(g)
                }
                None => None,
            };
            let subnets = parse_subnets(&key, m.supernet.as_deref(), m.subnets, max_batch as u32)?;
            if !subnets.is_empty() && (dynamic.is_some() || prefix_group.is_some()) {
                return Err(err(key("subnets"), "a supernet model has no apps and shares no prefix"));
            }
            let profile = match (&dynamic, m.alpha_ms, m.beta_ms, m.latency_ms) {
                _ if partition_profile.is_some() => partition_profile.as_ref().expect("checked").1.clone(),
                (None, None, None, None) if !subnets.is_empty() => {
                    // Policies that know no subnets run the most accurate one.
                    subnets.last().expect("non-empty").profile.clone()
                }
                (_, _, _, _) if !subnets.is_empty() => {
                    return Err(err(key("alpha_ms"), "a supernet model takes its latencies from its subnets"))
                }
                (Some(d), None, None, None) => {
                    // The single estimate policies without distributions use.
                    let mean = d.mean_solo() / 1e6;
                    Profile::linear_ms(mean * d.kappa, mean * (1.0 - d.kappa), max_batch as u32)
                        .map_err(|e| err(key("apps"), e.to_string()))?
                }
                (Some(_), ..) => {
                    return Err(err(
                        key("alpha_ms"),
                        "a model with apps takes its times from them, not alpha_ms/beta_ms/latency_ms",
                    ))
                }
                (None, Some(a), Some(b), None) => {
                    let a = non_negative(&key("alpha_ms"), Some(a), 0.0)?;
                    let b = non_negative(&key("beta_ms"), Some(b), 0.0)?;
                    // A prefix member alone runs prefix and suffix back to back.
                    let (pa, pb) = match prefix_group.map(|g| &prefixes[g].prefix) {
                        Some(Profile::Linear { alpha, beta, .. }) => (*alpha as f64 / 1e6, *beta as f64 / 1e6),
                        _ => (0.0, 0.0),
                    };
                    Profile::linear_ms(a + pa, b + pb, max_batch as u32)
                        .map_err(|e| err(key("alpha_ms"), e.to_string()))?
                }
                (None, None, None, Some(table)) => {
                    if m.max_batch.is_some() {
                        return Err(err(key("max_batch"), "a latency table sets its own maximum batch"));
                    }
                    let mut ns = Vec::with_capacity(table.len());
                    for (b, &l) in table.iter().enumerate() {
                        ns.push(ms_to_nanos(positive(&format!("{}[{b}]", key("latency_ms")), l)?));
                    }
                    Profile::table(ns).map_err(|e| err(key("latency_ms"), e.to_string()))?
                }
                _ => return Err(err(key("alpha_ms"), "give alpha_ms and beta_ms, or latency_ms, or [[models.apps]]")),
            };
            let stage_slo = stage_slo_ms(&m.name);
            let slo = match (m.slo_ms, m.slo_p99_multiple) {
                (None, None) if stage_slo.is_some() => {
                    // Until the split: the whole query SLO (checked below per stage).
                    ms_to_nanos(positive(&key("slo_ms"), stage_slo.expect("checked"))?)
                }
                (Some(_), _) | (_, Some(_)) if stage_slo.is_some() => {
                    return Err(err(key("slo_ms"), "a query stage's SLO is its share of the query's; leave it out"))
                }
                (Some(ms), None) => ms_to_nanos(positive(&key("slo_ms"), ms)?),
                (None, Some(k)) => {
                    let k = positive(&key("slo_p99_multiple"), k)?;
                    let p99 = match &dynamic {
                        Some(d) => {
                            let parts: Vec<(f64, ExecDist)> = d.apps.iter().map(|a| (a.weight, a.exec)).collect();
                            mixture_quantile(&parts, 0.99)
                        }
                        None => profile.latency(1),
                    };
                    (p99 as f64 * k).round() as Nanos
                }
                _ => return Err(err(key("slo_ms"), "give exactly one of slo_ms and slo_p99_multiple")),
            };
            if slo < profile.latency(1) + delay.of(1) {
                return Err(err(
                    key("slo_ms"),
                    format!(
                        "{:.3} ms is below l(1) plus the dispatch delay: no request could ever meet it",
                        slo as f64 / 1e6
                    ),
                ));
            }
            let weight = non_negative(&key("weight"), m.weight, if stage_slo.is_some() { 0.0 } else { 1.0 })?;
            let memory_mb = non_negative(&key("memory_mb"), m.memory_mb, 0.0)?;
            if let Some(gpu) = c.gpu_memory_mb {
                if memory_mb > gpu {
                    return Err(err(key("memory_mb"), format!("{memory_mb} MB does not fit a {gpu} MB GPU")));
                }
            }
            let arrival =
                Arrival::parse(m.arrival.as_deref().unwrap_or("poisson")).map_err(|e| err(key("arrival"), e))?;
            let prefix = match prefix_group {
                Some(g) => {
                    if let Some(&first) = prefixes[g].members.first() {
                        let first: &ScenarioModel = &models[first.index()];
                        if first.spec.slo != slo {
                            return Err(err(
                                key("slo_ms"),
                                format!("differs from `{}`, which shares its prefix", first.spec.name),
                            ));
                        }
                    }
                    prefixes[g].members.push(ModelId(i as u32));
                    let suffix = Profile::linear_ms(
                        m.alpha_ms.expect("checked above"),
                        m.beta_ms.expect("checked above"),
                        max_batch as u32,
                    )
                    .map_err(|e| err(key("alpha_ms"), e.to_string()))?;
                    Some((PrefixId(g as u32), suffix))
                }
                None => None,
            };
            models.push(ScenarioModel {
                spec: ModelSpec { name: m.name, profile, slo, dynamic, memory_mb, prefix, subnets },
                weight,
                arrival,
                partition_profile: partition_profile.map(|p| p.0),
            });
        }
        let queries = parse_queries(raw_queries, &mut models, &delay)?;
        let mut faults = Vec::new();
        for (i, f) in raw.faults.unwrap_or_default().into_iter().enumerate() {
            let at = ms_to_nanos(non_negative(&format!("faults[{i}].at_s"), Some(f.at_s), 0.0)? * 1e3);
            if f.backend < 0 || f.backend >= c.gpus {
                return Err(err(
                    format!("faults[{i}].backend"),
                    format!("no backend {} among {} GPUs", f.backend, c.gpus),
                ));
            }
            faults.push((at, BackendId(f.backend as u32)));
        }
        faults.sort();
        if models.iter().all(|m| m.weight == 0.0) && queries.iter().all(|q| q.weight == 0.0) {
            return Err(err("models.weight", "at least one model or query needs a positive weight"));
        }
        let (policy, policy_epoch) = match raw.policy {
            Some(p) => {
                let epoch = match p.epoch_s {
                    Some(e) => Some(ms_to_nanos(positive("policy.epoch_s", e)? * 1e3)),
                    None => None,
                };
                (PolicyKind::parse(&p.name).map_err(|e| err("policy.name", e))?, epoch)
            }
            None => (PolicyKind::Symphony, None),
        };
        let scenario = Scenario {
            name: raw.name,
            seed: raw.seed.unwrap_or(1),
            duration: ms_to_nanos(duration_s * 1e3),
            warmup: ms_to_nanos(warmup_s * 1e3),
            rate_rps: raw.rate_rps,
            cluster: ClusterSpec {
                models: models.iter().map(|m| m.spec.clone()).collect(),
                backends: c.gpus as u32,
                delay,
                queue_capacity: queue_capacity as usize,
                gpu_memory_mb: c.gpu_memory_mb,
                prefixes,
            },
            knobs: SimKnobs {
                exec_jitter,
                model_shards: model_shards as usize,
                msg_delay: us_to_nanos(non_negative("cluster.msg_delay_us", c.msg_delay_us, 0.0)?),
            },
            models,
            queries,
            faults,
            policy_epoch,
            policy,
            partitions: partition_data,
        };
        scenario.policy.check(&scenario).map_err(|e| err("policy.name", e))?;
        Ok(scenario)
    }

    /// Per-model offered rates for an aggregate rate, split by weight.
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
    use super::*;

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

    #[test]
    fn parses_the_documented_format() {
        let s = Scenario::parse(GOOD).unwrap();
        assert_eq!(s.cluster.backends, 8);
        assert_eq!(s.cluster.delay.ctrl, 200_000);
        assert_eq!(s.models[0].arrival, Arrival::Gamma(0.5));
        assert_eq!(s.policy, PolicyKind::Clockwork);
    }

    fn rejects(text: &str, key: &str) {
        let e = Scenario::parse(text).expect_err("must be rejected");
        assert!(e.to_string().contains(key), "error `{e}` does not name `{key}`");
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
        let s = Scenario::parse(APPS).unwrap();
        let d = s.models[0].spec.dynamic.as_ref().unwrap();
        assert_eq!(d.apps.len(), 2);
        assert_eq!(d.kappa, 0.05);
        // P99 of the mix is about the summarize app's 40 + 2.33*5 ms.
        let slo_ms = s.models[0].spec.slo as f64 / 1e6;
        assert!((slo_ms / 1.5 - 51.0).abs() < 2.0, "{slo_ms}");
        // Baselines plan with the mean: 0.5*40 + 0.5*(0.7*10 + 0.3*30) = 28 ms at b = 1.
        assert!((s.models[0].spec.profile.latency(1) as f64 / 1e6 - 28.0).abs() < 0.01);
        rejects(&APPS.replace("normal:40,5", "normal:40"), "models[0].apps[0].exec_ms");
        rejects(&APPS.replace("kappa = 0.05", "kappa = 2"), "models[0].kappa");
        rejects(&APPS.replace("slo_p99_multiple = 1.5", "slo_p99_multiple = 1.5\nslo_ms = 3"), "models[0].slo_ms");
        rejects(&APPS.replace("exec_ms = \"normal:40,5\"", "exec_ms = \"normal:40,5\"\nexec = 1"), "exec");
        rejects(&APPS.replace("kappa = 0.05", "kappa = 0.05\nalpha_ms = 1.0\nbeta_ms = 1.0"), "models[0].alpha_ms");
        rejects(&GOOD.replace("slo_ms = 25.0", "slo_ms = 25.0\nkappa = 0.1"), "models[0].kappa");
    }

    #[test]
    fn names_the_key_at_fault() {
        rejects(&GOOD.replace("seed = 7", "seed = 7\nsede = 3"), "sede");
        rejects(&GOOD.replace("gpus = 8", "gpus = 0"), "cluster.gpus");
        rejects(&GOOD.replace("gpus = 8", "gpus = 8\ngpu = 1"), "gpu");
        rejects(&GOOD.replace("slo_ms = 25.0", "slo_ms = 5.0"), "models[0].slo_ms");
        rejects(&GOOD.replace("slo_ms = 25.0", "slo_ms = -1.0"), "models[0].slo_ms");
        rejects(&GOOD.replace("gamma:0.5", "gamma:-2"), "models[0].arrival");
        rejects(&GOOD.replace("gamma:0.5", "bursty"), "models[0].arrival");
        rejects(&GOOD.replace("clockwork", "fifo"), "policy.name");
        rejects(&GOOD.replace("beta_ms = 5.072", ""), "models[0].alpha_ms");
        rejects(&GOOD.replace("duration_s = 3", "duration_s = 0"), "duration_s");
        rejects(&GOOD.replace("alpha_ms = 1.053", "alpha_ms = 1.053\nwieght = 2"), "wieght");
    }
}
