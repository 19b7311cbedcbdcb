//! One `[[models]]` entry: where its latencies come from (decided once, as
//! a `Source`), then its SLO, weight, memory, arrival law and prefix group.
//! Every error names the key at fault.

use super::partitions;
use super::raw::RawModel;
use super::sections::{parse_apps, parse_subnets};
use super::{err, non_negative, positive, ScenarioError, ScenarioModel, DEFAULT_MAX_BATCH};
use crate::arrival::Arrival;
use crate::dist::{mixture_quantile, ExecDist};
use crate::glet::PartitionData;
use crate::profile::Profile;
use crate::time::{ms_to_nanos, Nanos};
use crate::types::{DispatchDelay, DynamicExec, ModelId, ModelSpec, PrefixGroup, PrefixId, Subnet};

/// What every model's parse shares: the cluster's parts a model is checked
/// against, and the prefix groups it may join.
pub(super) struct Context<'a> {
    pub(super) delay: DispatchDelay,
    pub(super) gpu_memory_mb: Option<f64>,
    pub(super) partitions: Option<&'a PartitionData>,
    pub(super) prefixes: &'a mut [PrefixGroup],
}

/// Where a model's latencies come from: exactly one of these per model.
enum Source {
    /// `profile = "..."`: a row of the measured partition profiles, and its
    /// whole-GPU profile.
    Partition { row: usize, whole: Profile },
    /// `supernet` or `[[models.subnets]]`.
    Subnets(Vec<Subnet>),
    /// `[[models.apps]]`: input-dependent execution times.
    Apps(DynamicExec),
    /// `alpha_ms` and `beta_ms` (a prefix member's are its suffix's).
    Linear { alpha_ms: f64, beta_ms: f64 },
    /// `latency_ms`: l(b) for b = 1, 2, ...
    Table(Vec<f64>),
}

/// Parses model `i`; `earlier` are the models before it and `stage_slo_ms`
/// the SLO of the query it is a stage of, if any.
pub(super) fn parse_model(
    i: usize,
    m: RawModel,
    earlier: &[ScenarioModel],
    stage_slo_ms: Option<f64>,
    cx: &mut Context<'_>,
) -> Result<ScenarioModel, ScenarioError> {
    let key = |k: &str| format!("models[{i}].{k}");
    if earlier.iter().any(|x| x.spec.name == m.name) {
        return Err(err(key("name"), format!("duplicate model name `{}`", m.name)));
    }
    let max_batch = m.max_batch.unwrap_or(DEFAULT_MAX_BATCH);
    let source = source(&key, &m, cx.partitions, max_batch)?;
    let group = prefix_group(&key, &m, &source, cx.prefixes)?;
    let profile = source.profile(&key, max_batch, group.map(|g| &cx.prefixes[g].prefix))?;
    let dynamic = match &source {
        Source::Apps(d) => Some(d),
        _ => None,
    };
    let slo = slo(&key, &m, stage_slo_ms, dynamic, &profile)?;
    if slo < profile.latency(1) + cx.delay.of(1) {
        let ms = slo as f64 / 1e6;
        return Err(err(
            key("slo_ms"),
            format!("{ms:.3} ms is below l(1) plus the dispatch delay: no request could ever meet it"),
        ));
    }
    let weight = non_negative(&key("weight"), m.weight, if stage_slo_ms.is_some() { 0.0 } else { 1.0 })?;
    let memory_mb = non_negative(&key("memory_mb"), m.memory_mb, 0.0)?;
    if let Some(gpu) = cx.gpu_memory_mb.filter(|&gpu| memory_mb > gpu) {
        return Err(err(key("memory_mb"), format!("{memory_mb} MB does not fit a {gpu} MB GPU")));
    }
    let arrival = Arrival::parse(m.arrival.as_deref().unwrap_or("poisson")).map_err(|e| err(key("arrival"), e))?;
    let prefix = match (group, &source) {
        (Some(g), &Source::Linear { alpha_ms, beta_ms }) => {
            join_prefix(&key, ModelId(i as u32), g, slo, earlier, cx.prefixes)?;
            let suffix = Profile::linear_ms(alpha_ms, beta_ms, max_batch as u32)
                .map_err(|e| err(key("alpha_ms"), e.to_string()))?;
            Some((PrefixId(g as u32), suffix))
        }
        (Some(_), _) => unreachable!("`prefix_group` admits only alpha_ms/beta_ms members"),
        (None, _) => None,
    };
    let (dynamic, subnets, partition_profile) = match source {
        Source::Apps(d) => (Some(d), vec![], None),
        Source::Subnets(s) => (None, s, None),
        Source::Partition { row, .. } => (None, vec![], Some(row)),
        Source::Linear { .. } | Source::Table(_) => (None, vec![], None),
    };
    Ok(ScenarioModel {
        spec: ModelSpec { name: m.name, profile, slo, dynamic, memory_mb, prefix, subnets },
        weight,
        arrival,
        partition_profile,
    })
}

/// Decides where the model's latencies come from; refuses keys of two
/// sources at once.
fn source(
    key: &dyn Fn(&str) -> String,
    m: &RawModel,
    partitions: Option<&PartitionData>,
    max_batch: i64,
) -> Result<Source, ScenarioError> {
    if let Some(name) = &m.profile {
        let (row, whole) = partitions::model_profile(key, partitions, name, m)?;
        return Ok(Source::Partition { row, whole });
    }
    if !(1..=65_536).contains(&max_batch) {
        return Err(err(key("max_batch"), format!("must be between 1 and 65536, got {max_batch}")));
    }
    let apps = match &m.apps {
        Some(apps) => Some(parse_apps(key, apps.clone(), m.kappa)?),
        None if m.kappa.is_some() => return Err(err(key("kappa"), "applies only to models with [[models.apps]]")),
        None => None,
    };
    let subnets = parse_subnets(key, m.supernet.as_deref(), m.subnets.clone(), max_batch as u32)?;
    let timed = m.alpha_ms.is_some() || m.beta_ms.is_some() || m.latency_ms.is_some();
    if !subnets.is_empty() {
        if apps.is_some() || m.prefix_of.is_some() {
            return Err(err(key("subnets"), "a supernet model has no apps and shares no prefix"));
        }
        if timed {
            return Err(err(key("alpha_ms"), "a supernet model takes its latencies from its subnets"));
        }
        return Ok(Source::Subnets(subnets));
    }
    if let Some(apps) = apps {
        if timed {
            let msg = "a model with apps takes its times from them, not alpha_ms/beta_ms/latency_ms";
            return Err(err(key("alpha_ms"), msg));
        }
        return Ok(Source::Apps(apps));
    }
    match (m.alpha_ms, m.beta_ms, &m.latency_ms) {
        (Some(a), Some(b), None) => Ok(Source::Linear {
            alpha_ms: non_negative(&key("alpha_ms"), Some(a), 0.0)?,
            beta_ms: non_negative(&key("beta_ms"), Some(b), 0.0)?,
        }),
        (None, None, Some(_)) if m.max_batch.is_some() => {
            Err(err(key("max_batch"), "a latency table sets its own maximum batch"))
        }
        (None, None, Some(table)) => Ok(Source::Table(table.clone())),
        _ => Err(err(key("alpha_ms"), "give alpha_ms and beta_ms, or latency_ms, or [[models.apps]]")),
    }
}

impl Source {
    /// l(b) as every policy plans with it; `prefix` is the profile of the
    /// prefix the model shares, if it shares one.
    fn profile(
        &self,
        key: &dyn Fn(&str) -> String,
        max_batch: i64,
        prefix: Option<&Profile>,
    ) -> Result<Profile, ScenarioError> {
        match self {
            Source::Partition { whole, .. } => Ok(whole.clone()),
            // Policies that know no subnets run the most accurate one.
            Source::Subnets(s) => Ok(s.last().expect("non-empty").profile.clone()),
            Source::Apps(d) => {
                // The single estimate policies without distributions use.
                let mean = d.mean_solo() / 1e6;
                Profile::linear_ms(mean * d.kappa, mean * (1.0 - d.kappa), max_batch as u32)
                    .map_err(|e| err(key("apps"), e.to_string()))
            }
            Source::Linear { alpha_ms, beta_ms } => {
                // A prefix member alone runs prefix and suffix back to back.
                let (pa, pb) = match prefix {
                    Some(Profile::Linear { alpha, beta, .. }) => (*alpha as f64 / 1e6, *beta as f64 / 1e6),
                    _ => (0.0, 0.0),
                };
                Profile::linear_ms(alpha_ms + pa, beta_ms + pb, max_batch as u32)
                    .map_err(|e| err(key("alpha_ms"), e.to_string()))
            }
            Source::Table(table) => {
                let mut ns = Vec::with_capacity(table.len());
                for (b, &l) in table.iter().enumerate() {
                    ns.push(ms_to_nanos(positive(&format!("{}[{b}]", key("latency_ms")), l)?));
                }
                Profile::table(ns).map_err(|e| err(key("latency_ms"), e.to_string()))
            }
        }
    }
}

/// The prefix group the model names, if any; a member gives its suffix as
/// alpha_ms and beta_ms.
fn prefix_group(
    key: &dyn Fn(&str) -> String,
    m: &RawModel,
    source: &Source,
    prefixes: &[PrefixGroup],
) -> Result<Option<usize>, ScenarioError> {
    let Some(name) = &m.prefix_of else { return Ok(None) };
    let g = prefixes
        .iter()
        .position(|p| &p.name == name)
        .ok_or_else(|| err(key("prefix_of"), format!("no [[prefixes]] entry named `{name}`")))?;
    if !matches!(source, Source::Linear { .. }) {
        return Err(err(key("prefix_of"), "a prefix member gives its suffix as alpha_ms and beta_ms"));
    }
    Ok(Some(g))
}

/// The model's SLO: its own (`slo_ms`, or a multiple of its P99 at batch
/// 1), or for a query stage the whole query's until the split gives it its
/// share.
fn slo(
    key: &dyn Fn(&str) -> String,
    m: &RawModel,
    stage_slo_ms: Option<f64>,
    dynamic: Option<&DynamicExec>,
    profile: &Profile,
) -> Result<Nanos, ScenarioError> {
    match (m.slo_ms, m.slo_p99_multiple, stage_slo_ms) {
        (None, None, Some(q)) => Ok(ms_to_nanos(positive(&key("slo_ms"), q)?)),
        (_, _, Some(_)) => Err(err(key("slo_ms"), "a query stage's SLO is its share of the query's; leave it out")),
        (Some(ms), None, None) => Ok(ms_to_nanos(positive(&key("slo_ms"), ms)?)),
        (None, Some(k), None) => {
            let k = positive(&key("slo_p99_multiple"), k)?;
            let p99 = match dynamic {
                Some(d) => {
                    let parts: Vec<(f64, ExecDist)> = d.apps.iter().map(|a| (a.weight, a.exec)).collect();
                    mixture_quantile(&parts, 0.99)
                }
                None => profile.latency(1),
            };
            Ok((p99 as f64 * k).round() as Nanos)
        }
        _ => Err(err(key("slo_ms"), "give exactly one of slo_ms and slo_p99_multiple")),
    }
}

/// Makes `model` a member of prefix group `g`: members share one SLO.
fn join_prefix(
    key: &dyn Fn(&str) -> String,
    model: ModelId,
    g: usize,
    slo: Nanos,
    earlier: &[ScenarioModel],
    prefixes: &mut [PrefixGroup],
) -> Result<(), ScenarioError> {
    if let Some(&first) = prefixes[g].members.first() {
        let first = &earlier[first.index()];
        if first.spec.slo != slo {
            return Err(err(key("slo_ms"), format!("differs from `{}`, which shares its prefix", first.spec.name)));
        }
    }
    prefixes[g].members.push(model);
    Ok(())
}
