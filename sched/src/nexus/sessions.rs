//! Nexus plans *sessions*, not models. A model is its own session; with
//! prefix batching, the models of a prefix group form one session whose
//! batches run the shared prefix once and then each present member's
//! suffix on its sub-batch. For planning, that session's profile is
//!
//! ```text
//! l(b) = l_prefix(b) + max_members(alpha_s)*b + sum_members beta_s
//! ```
//!
//! an upper bound on the real time whatever the batch's mix: every member's
//! suffix fixed cost counts as if all were in every batch, and every request
//! at the steepest suffix slope.

use crate::profile::Profile;
use crate::types::{ClusterSpec, ModelId, ModelSpec, PrefixId};

#[derive(Clone, Debug)]
pub struct Sessions {
    /// One spec per session, what the planner packs.
    pub specs: Vec<ModelSpec>,
    /// The prefix group a session runs, if it is one.
    pub prefix: Vec<Option<PrefixId>>,
    /// A member model of each session (the model itself, or the group's first).
    pub representative: Vec<ModelId>,
    /// Model -> its session.
    pub of_model: Vec<usize>,
    /// Requests per second of each session.
    pub rates_rps: Vec<f64>,
}

pub fn sessions(cluster: &ClusterSpec, model_rates_rps: &[f64], prefix_batching: bool) -> Sessions {
    let mut s = Sessions {
        specs: vec![],
        prefix: vec![],
        representative: vec![],
        of_model: vec![usize::MAX; cluster.models.len()],
        rates_rps: vec![],
    };
    if prefix_batching {
        for (g, group) in cluster.prefixes.iter().enumerate() {
            let members = &group.members;
            if members.is_empty() {
                continue;
            }
            let rate: f64 = members.iter().map(|m| model_rates_rps[m.index()]).sum();
            let (mut alpha_s, mut beta_s) = (0, 0);
            for m in members {
                let Some((_, Profile::Linear { alpha, beta, .. })) = &cluster.models[m.index()].prefix else {
                    panic!("prefix members have linear suffixes (scenario.rs checks it)");
                };
                alpha_s = alpha_s.max(*alpha);
                beta_s += *beta;
            }
            let Profile::Linear { alpha, beta, max_batch } = group.prefix else {
                panic!("prefixes are linear (scenario.rs builds them so)");
            };
            let first = &cluster.models[members[0].index()];
            let idx = s.specs.len();
            s.specs.push(ModelSpec {
                name: group.name.clone(),
                profile: Profile::Linear {
                    alpha: alpha + alpha_s,
                    beta: beta + beta_s,
                    max_batch: max_batch.min(first.profile.max_batch()),
                },
                slo: first.slo,
                dynamic: None,
                memory_mb: members.iter().map(|m| cluster.models[m.index()].memory_mb).sum(),
                prefix: None,
                subnets: vec![],
            });
            s.prefix.push(Some(PrefixId(g as u32)));
            s.representative.push(members[0]);
            s.rates_rps.push(rate);
            for m in members {
                s.of_model[m.index()] = idx;
            }
        }
    }
    for (m, spec) in cluster.models.iter().enumerate() {
        if s.of_model[m] != usize::MAX {
            continue;
        }
        s.of_model[m] = s.specs.len();
        s.specs.push(spec.clone());
        s.prefix.push(None);
        s.representative.push(ModelId(m as u32));
        s.rates_rps.push(model_rates_rps[m]);
    }
    s
}
