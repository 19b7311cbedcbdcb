//! Parsing of the scenario's optional sections: apps (input-dependent
//! execution), subnets (supernets) and queries (multi-model DAGs).

use super::raw::{RawApp, RawQuery, RawSubnet};
use super::{err, non_negative, positive, ScenarioError, ScenarioModel};
use crate::arrival::Arrival;
use crate::dist::ExecDist;
use crate::profile::Profile;
use crate::query::{QuerySpec, Split, StageSpec};
use crate::supernet::{check_pareto, default_supernet};
use crate::time::ms_to_nanos;
use crate::types::{AppSpec, DispatchDelay, DynamicExec, ModelId, ModelSpec, Subnet};

/// Builds the queries, splits their SLOs and gives each stage model its
/// budget as its SLO.
pub(super) fn parse_queries(
    raw: Vec<RawQuery>,
    models: &mut [ScenarioModel],
    delay: &DispatchDelay,
) -> Result<Vec<QuerySpec>, ScenarioError> {
    let mut out: Vec<QuerySpec> = Vec::with_capacity(raw.len());
    let mut used: Vec<String> = Vec::new();
    for (i, q) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("queries[{i}].{k}");
        let slo = ms_to_nanos(positive(&key("slo_ms"), q.slo_ms)?);
        let split = match q.split.as_deref() {
            None | Some("dp") => Split::Dp,
            Some("even") => Split::Even,
            Some(x) => return Err(err(key("split"), format!("`{x}` is not \"dp\" or \"even\""))),
        };
        if q.stages.is_empty() {
            return Err(err(key("stages"), "a query needs at least one stage"));
        }
        let mut stages: Vec<StageSpec> = Vec::with_capacity(q.stages.len());
        for (j, s) in q.stages.iter().enumerate() {
            let skey = |k: &str| key(&format!("stages[{j}].{k}"));
            let m = models
                .iter()
                .position(|x| x.spec.name == s.model)
                .ok_or_else(|| err(skey("model"), format!("no model named `{}`", s.model)))?;
            if used.contains(&s.model) {
                return Err(err(skey("model"), format!("`{}` is already a stage; a model serves one stage", s.model)));
            }
            used.push(s.model.clone());
            let parent = match (&s.parent, j) {
                (None, 0) => None,
                (None, _) => return Err(err(skey("parent"), "only the first stage (the root) has no parent")),
                (Some(_), 0) => return Err(err(skey("parent"), "the first stage is the root")),
                (Some(p), _) => Some(
                    q.stages[..j]
                        .iter()
                        .position(|x| &x.model == p)
                        .ok_or_else(|| err(skey("parent"), format!("`{p}` is not an earlier stage")))?,
                ),
            };
            let gamma = non_negative(&skey("gamma"), s.gamma, 1.0)?;
            stages.push(StageSpec { model: ModelId(m as u32), parent, gamma, budget: 0, deadline_offset: 0 });
        }
        let arrival = Arrival::parse(q.arrival.as_deref().unwrap_or("poisson")).map_err(|e| err(key("arrival"), e))?;
        let weight = non_negative(&key("weight"), q.weight, 1.0)?;
        let specs: Vec<ModelSpec> = models.iter().map(|m| m.spec.clone()).collect();
        let mut query = QuerySpec { name: q.name, slo, weight, arrival, split, stages };
        query.split_budgets(&specs);
        for st in &query.stages {
            let m = &mut models[st.model.index()].spec;
            if st.budget < m.profile.latency(1) + delay.of(1) {
                return Err(err(
                    key("slo_ms"),
                    format!("too tight: stage `{}` gets {} ns, below l(1)", m.name, st.budget),
                ));
            }
            m.slo = st.budget;
        }
        out.push(query);
    }
    Ok(out)
}

/// The subnets of a supernet model: the built-in default, or a list sorted
/// by accuracy that must form a pareto front.
pub(super) fn parse_subnets(
    key: &dyn Fn(&str) -> String,
    supernet: Option<&str>,
    raw: Option<Vec<RawSubnet>>,
    max_batch: u32,
) -> Result<Vec<Subnet>, ScenarioError> {
    let subnets = match (supernet, raw) {
        (None, None) => return Ok(vec![]),
        (Some("default"), None) => default_supernet(max_batch).map_err(|e| err(key("supernet"), e.to_string()))?,
        (Some(other), None) => {
            return Err(err(key("supernet"), format!("`{other}`: the only built-in supernet is \"default\"")))
        }
        (Some(_), Some(_)) => return Err(err(key("subnets"), "give supernet or subnets, not both")),
        (None, Some(list)) => {
            let mut out = Vec::with_capacity(list.len());
            for (j, s) in list.into_iter().enumerate() {
                let skey = |k: &str| key(&format!("subnets[{j}].{k}"));
                let accuracy = non_negative(&skey("accuracy"), Some(s.accuracy), 0.0)?;
                let profile = match (s.alpha_ms, s.beta_ms, s.latency_ms) {
                    (Some(a), Some(b), None) => Profile::linear_ms(
                        non_negative(&skey("alpha_ms"), Some(a), 0.0)?,
                        non_negative(&skey("beta_ms"), Some(b), 0.0)?,
                        max_batch,
                    ),
                    (None, None, Some(t)) => {
                        let mut ns = Vec::with_capacity(t.len());
                        for (b, &l) in t.iter().enumerate() {
                            ns.push(ms_to_nanos(positive(&format!("{}[{b}]", skey("latency_ms")), l)?));
                        }
                        Profile::table(ns)
                    }
                    _ => return Err(err(skey("alpha_ms"), "give alpha_ms and beta_ms, or latency_ms")),
                }
                .map_err(|e| err(skey("alpha_ms"), e.to_string()))?;
                out.push(Subnet { name: s.name, accuracy, profile });
            }
            if out.is_empty() {
                return Err(err(key("subnets"), "at least one subnet is required"));
            }
            out.sort_by(|a, b| a.accuracy.total_cmp(&b.accuracy));
            out
        }
    };
    check_pareto(&subnets).map_err(|i| {
        err(
            key("subnets"),
            format!("`{}` is more accurate but faster than a subnet below it: not a pareto front", subnets[i].name),
        )
    })?;
    Ok(subnets)
}

/// The apps of a model with input-dependent execution times.
pub(super) fn parse_apps(
    key: &dyn Fn(&str) -> String,
    apps: Vec<RawApp>,
    kappa: Option<f64>,
) -> Result<DynamicExec, ScenarioError> {
    let kappa = non_negative(&key("kappa"), kappa, 0.0)?;
    if kappa > 1.0 {
        return Err(err(key("kappa"), format!("must be at most 1, got {kappa}")));
    }
    if apps.is_empty() {
        return Err(err(key("apps"), "at least one app is required"));
    }
    let mut out: Vec<AppSpec> = Vec::with_capacity(apps.len());
    for (j, a) in apps.into_iter().enumerate() {
        let akey = |k: &str| key(&format!("apps[{j}].{k}"));
        if out.iter().any(|x| x.name == a.name) {
            return Err(err(akey("name"), format!("duplicate app name `{}`", a.name)));
        }
        let weight = non_negative(&akey("weight"), a.weight, 1.0)?;
        let exec = ExecDist::parse(&a.exec_ms).map_err(|e| err(akey("exec_ms"), e))?;
        out.push(AppSpec { name: a.name, weight, exec });
    }
    if out.iter().all(|a| a.weight == 0.0) {
        return Err(err(key("apps"), "at least one app needs a positive weight"));
    }
    Ok(DynamicExec { kappa, apps: out })
}
