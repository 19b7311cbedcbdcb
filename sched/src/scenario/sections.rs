//! Parsing of the scenario's optional sections: apps (input-dependent
//! execution), subnets (supernets) and queries (multi-model DAGs).

use super::raw::{RawApp, RawQuery, RawStage, RawSubnet};
use super::{err, non_negative, positive, ScenarioError, ScenarioModel};
use crate::arrival::Arrival;
use crate::dist::ExecDist;
use crate::profile::Profile;
use crate::query::{QueryError, QuerySpec, Split, StageSpec, MAX_STAGES};
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
        if q.stages.len() > MAX_STAGES {
            return Err(err(key("stages"), format!("{} stages; a query has at most {MAX_STAGES}", q.stages.len())));
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
            let parents = stage_parents(&skey, &q.stages[..j], s)?;
            let gamma = non_negative(&skey("gamma"), s.gamma, 1.0)?;
            if j == 0 && gamma != 1.0 {
                return Err(err(skey("gamma"), "the root runs once per query; leave gamma out"));
            }
            stages.push(StageSpec { model: ModelId(m as u32), parents, gamma, budget: 0, deadline_offset: 0 });
        }
        let arrival = Arrival::parse(q.arrival.as_deref().unwrap_or("poisson")).map_err(|e| err(key("arrival"), e))?;
        let weight = non_negative(&key("weight"), q.weight, 1.0)?;
        let specs: Vec<ModelSpec> = models.iter().map(|m| m.spec.clone()).collect();
        let mut query = QuerySpec { name: q.name, slo, weight, arrival, split, stages };
        query.split_budgets(&specs).map_err(|e| match e {
            QueryError::NotSeriesParallel => err(key("split"), e.to_string()),
            QueryError::SloTooShort { .. } => err(key("slo_ms"), e.to_string()),
        })?;
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

/// A stage's parents, by index among the `earlier` stages: `parent = "a"`
/// or `parents = ["a", "b"]` (a join), none for the root (stage 0).
fn stage_parents(
    skey: &dyn Fn(&str) -> String,
    earlier: &[RawStage],
    s: &RawStage,
) -> Result<Vec<usize>, ScenarioError> {
    let (names, k) = match (&s.parent, &s.parents) {
        (Some(_), Some(_)) => return Err(err(skey("parents"), "give parent or parents, not both")),
        (Some(p), None) => (std::slice::from_ref(p), "parent"),
        (None, Some(ps)) => (ps.as_slice(), "parents"),
        (None, None) => (&[][..], "parent"),
    };
    match (earlier.is_empty(), names.is_empty()) {
        (true, false) => return Err(err(skey(k), "the first stage is the root")),
        (false, true) => return Err(err(skey(k), "only the first stage (the root) has no parent")),
        _ => {}
    }
    let mut out: Vec<usize> = Vec::with_capacity(names.len());
    for p in names {
        let i = earlier
            .iter()
            .position(|x| &x.model == p)
            .ok_or_else(|| err(skey(k), format!("`{p}` is not an earlier stage")))?;
        if out.contains(&i) {
            return Err(err(skey(k), format!("`{p}` is named twice")));
        }
        out.push(i);
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
        let work = a.work.map(|w| ExecDist::parse(&w).map_err(|e| err(akey("work"), e))).transpose()?;
        out.push(AppSpec { name: a.name, weight, exec, work });
    }
    if out.iter().all(|a| a.weight == 0.0) {
        return Err(err(key("apps"), "at least one app needs a positive weight"));
    }
    Ok(DynamicExec { kappa, apps: out })
}

#[cfg(test)]
mod tests {
    use crate::scenario::builder::ScenarioText;
    use crate::scenario::Scenario;

    /// A detector forking to two recognisers, joined by a ranker.
    const FORK_JOIN: &str = r#"
name = "fj"
[cluster]
gpus = 4
[[models]]
name = "det"
alpha_ms = 4.0
beta_ms = 10.0
[[models]]
name = "car"
alpha_ms = 2.0
beta_ms = 5.0
[[models]]
name = "face"
alpha_ms = 2.5
beta_ms = 6.0
[[models]]
name = "rank"
alpha_ms = 1.0
beta_ms = 3.0
[[queries]]
name = "q"
slo_ms = 300.0
[[queries.stages]]
model = "det"
[[queries.stages]]
model = "car"
parent = "det"
gamma = 2.0
[[queries.stages]]
model = "face"
parents = ["det"]
gamma = 0.5
[[queries.stages]]
model = "rank"
parents = ["car", "face"]
"#;

    fn fork_join() -> ScenarioText {
        ScenarioText::from_toml(FORK_JOIN)
    }

    fn rejects(text: &ScenarioText, key: &str, words: &str) {
        let e = text.rejected_at(key);
        assert!(e.contains(words), "error `{e}` does not say `{words}`");
    }

    #[test]
    fn parses_a_join() {
        let s = Scenario::parse(FORK_JOIN).expect("valid");
        let q = &s.queries[0];
        let parents: Vec<&[usize]> = q.stages.iter().map(|st| st.parents.as_slice()).collect();
        assert_eq!(parents, vec![&[][..], &[0], &[0], &[1, 2]]);
        let (car, face, rank) = (&q.stages[1], &q.stages[2], &q.stages[3]);
        assert_eq!(rank.deadline_offset, car.deadline_offset.max(face.deadline_offset) + rank.budget);
        assert!(rank.deadline_offset <= q.slo);
        // Each stage model plans with its budget as its SLO.
        assert_eq!(s.models[3].spec.slo, rank.budget);
        // The ranker runs about once per query, not once per parent request.
        let rates = s.model_rates(100.0);
        assert!((rates[1] - 200.0).abs() < 1e-9 && (rates[3] - 100.0).abs() < 1e-9, "{rates:?}");
    }

    #[test]
    fn rejects_bad_parents_naming_the_key() {
        let rank = "queries[0].stages[3].parents";
        let joined = |parents: &[&str]| fork_join().set(rank, parents.to_vec());
        rejects(&fork_join().add("queries[0].stages[3].parent", "car"), rank, "not both");
        rejects(&joined(&["car", "car"]), rank, "twice");
        rejects(&joined(&["car", "bus"]), rank, "`bus`");
        rejects(&joined(&["car", "rank"]), rank, "earlier");
        rejects(&joined(&[]), rank, "root");
        rejects(&fork_join().set("queries[0].stages[1].parent", "face"), "queries[0].stages[1].parent", "earlier");
        rejects(&fork_join().add("queries[0].stages[0].gamma", 2.0), "stages[0].gamma", "once");
        rejects(&fork_join().add("queries[0].stages[0].parents", vec!["car"]), "stages[0].parents", "root");
    }

    #[test]
    fn the_dp_split_needs_a_fork_join_graph() {
        // car also feeds a sink past the join: a bridge, not series-parallel.
        let bridge = fork_join()
            .push("models", "name = \"log\"\nalpha_ms = 1.0\nbeta_ms = 1.0")
            .push("queries[0].stages", "model = \"log\"\nparent = \"car\"");
        rejects(&bridge, "queries[0].split", "series-parallel");
        // 1 ns models under a 2 ns SLO: each fits alone, three in a row cannot.
        let mut tiny = fork_join().set("queries[0].slo_ms", 0.000002);
        for m in 0..4 {
            for k in ["alpha_ms", "beta_ms"] {
                tiny = tiny.set(&format!("models[{m}].{k}"), 0.0000005);
            }
        }
        rejects(&tiny, "queries[0].slo_ms", "longest path");
        let s = bridge.add("queries[0].split", "even").parse().expect("the even split takes any DAG");
        assert!(s.queries[0].stages.iter().all(|st| st.deadline_offset <= s.queries[0].slo));
    }

    #[test]
    fn caps_the_stages_of_a_query() {
        let mut text = String::from("name = \"big\"\n[cluster]\ngpus = 1\n");
        for i in 0..=crate::query::MAX_STAGES {
            text += &format!("[[models]]\nname = \"m{i}\"\nalpha_ms = 0.001\nbeta_ms = 0.001\n");
        }
        text += "[[queries]]\nname = \"q\"\nslo_ms = 1000.0\n[[queries.stages]]\nmodel = \"m0\"\n";
        for i in 1..=crate::query::MAX_STAGES {
            text += &format!("[[queries.stages]]\nmodel = \"m{i}\"\nparent = \"m{}\"\n", i - 1);
        }
        rejects(&ScenarioText::from_toml(&text), "queries[0].stages", "at most");
    }
}
