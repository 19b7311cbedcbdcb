//! Nexus's batch-policy experiment (its Figures 5 and 9): one GPU, SLO
//! 100 ms, the optimal throughput fixed at 500 r/s (a batch of 25 takes
//! 50 ms: `beta = 50 - 25*alpha`), alpha varied; the highest Poisson rate
//! at which 99% of requests finish in SLO, early drop against lazy drop.

use serde::Serialize;

use baton_sched::nexus::{plan_report, DropPolicy, Nexus};
use baton_sched::sim::{find_goodput, find_goodput_with};
use baton_sched::{PolicyKind, Scenario, Scheduler};

pub const ALPHAS_MS: [f64; 6] = [0.2, 0.5, 0.8, 1.2, 1.6, 1.9];

#[derive(Clone, Debug, Serialize)]
pub struct DropRow {
    pub alpha_ms: f64,
    pub beta_ms: f64,
    pub early_rps: f64,
    pub lazy_rps: f64,
    pub early_over_lazy: f64,
}

pub fn early_vs_lazy(duration_s: f64, rel_tolerance: f64) -> Vec<DropRow> {
    ALPHAS_MS
        .iter()
        .map(|&alpha| {
            let beta = 50.0 - 25.0 * alpha;
            let s = Scenario::parse(&format!(
                "name = \"nexus-drop-a{alpha}\"\nseed = 5\nduration_s = {duration_s}\nwarmup_s = 1\n[cluster]\ngpus = 1\n\
                 [[models]]\nname = \"m\"\nalpha_ms = {alpha}\nbeta_ms = {beta}\nslo_ms = 100.0\narrival = \"poisson\"\n"
            ))
            .expect("valid scenario");
            let early = find_goodput(&s, PolicyKind::Nexus, rel_tolerance).goodput_rps;
            let lazy = find_goodput(&s, PolicyKind::NexusLazy, rel_tolerance).goodput_rps;
            DropRow { alpha_ms: alpha, beta_ms: beta, early_rps: early, lazy_rps: lazy, early_over_lazy: early / lazy }
        })
        .collect()
}

/// ResNet-50 as a shared prefix (Table 4's profile less a last layer) and
/// each variant's own fully connected layer.
const PREFIX: (f64, f64) = (1.043, 5.022);
const SUFFIX: (f64, f64) = (0.010, 0.050);

/// A game-like workload (Nexus section 7): `variants` ResNet-50 variants
/// sharing a prefix and `lenets` LeNet digit models, Zipf-0.9 rates, SLO
/// 50 ms, Poisson arrivals.
pub fn game_scenario(variants: usize, lenets: usize, gpus: u32) -> Scenario {
    Scenario::parse(&game_text(variants, lenets, gpus, true)).expect("valid game scenario")
}

/// The game scenario's text; with `shared` false the variants are whole
/// models (prefix plus suffix) that share nothing.
pub fn game_text(variants: usize, lenets: usize, gpus: u32, shared: bool) -> String {
    let mut t = format!(
        "name = \"game\"\nseed = 9\nduration_s = 10\nwarmup_s = 1\n[cluster]\ngpus = {gpus}\nctrl_delay_us = 0\n"
    );
    if shared {
        t += &format!("[[prefixes]]\nname = \"resnet50\"\nalpha_ms = {}\nbeta_ms = {}\n", PREFIX.0, PREFIX.1);
    }
    let mut rank = 0;
    let mut zipf = || {
        rank += 1;
        1.0 / (rank as f64).powf(0.9)
    };
    for i in 0..variants {
        let (of, (alpha, beta)) = match shared {
            true => ("prefix_of = \"resnet50\"\n", SUFFIX),
            false => ("", (PREFIX.0 + SUFFIX.0, PREFIX.1 + SUFFIX.1)),
        };
        t += &format!(
            "[[models]]\nname = \"resnet50-game{i}\"\n{of}alpha_ms = {alpha}\nbeta_ms = {beta}\nslo_ms = 50.0\nweight = {}\n",
            zipf()
        );
    }
    for i in 0..lenets {
        t += &format!(
            "[[models]]\nname = \"lenet{i}\"\nalpha_ms = 0.02\nbeta_ms = 0.25\nslo_ms = 50.0\nweight = {}\n",
            zipf()
        );
    }
    t
}

#[derive(Clone, Debug, Serialize)]
pub struct PlanRow {
    pub rate_rps: f64,
    pub gpus: usize,
    pub gpus_without_prefix_batching: usize,
    pub lower_bound_gpus: f64,
    pub batch_oblivious_gpus: u32,
    pub over_bound: f64,
}

/// GPUs Nexus plans for a workload against the lower bound (both with a
/// shared prefix as one session, query stages at their split budgets) and
/// the batch-oblivious allocator.
pub fn plan_vs_bound(s: &Scenario, rates: &[f64]) -> Vec<PlanRow> {
    rates
        .iter()
        .map(|&rate| {
            let r = plan_report(&s.cluster, &s.model_rates(rate), true);
            let without = plan_report(&s.cluster, &s.model_rates(rate), false);
            PlanRow {
                rate_rps: rate,
                gpus: r.gpus,
                gpus_without_prefix_batching: without.gpus,
                lower_bound_gpus: r.lower_bound_gpus_exact,
                batch_oblivious_gpus: r.batch_oblivious_gpus,
                over_bound: r.gpus as f64 / r.lower_bound_gpus_exact,
            }
        })
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct PrefixRow {
    pub variants: usize,
    pub batched_rps: f64,
    pub unbatched_rps: f64,
}

/// Nexus's Figure 14(a): one GPU, k equally popular variants sharing a
/// prefix; goodput with the prefix batched against every variant apart.
pub fn prefix_scaling(max_variants: usize, duration_s: f64, rel_tolerance: f64) -> Vec<PrefixRow> {
    (1..=max_variants)
        .map(|k| {
            let mut s = game_scenario(k, 0, 1);
            s.duration = baton_sched::time::ms_to_nanos(duration_s * 1e3);
            for m in &mut s.models {
                m.weight = 1.0;
            }
            let goodput = |prefix_batching: bool| {
                let build = |rate: f64| -> Box<dyn Scheduler> {
                    Box::new(Nexus::new(
                        &s.cluster,
                        &s.model_rates(rate),
                        1,
                        DropPolicy::Early,
                        prefix_batching,
                        None,
                        s.seed,
                    ))
                };
                find_goodput_with(&s, "nexus", &build, rel_tolerance).goodput_rps
            };
            PrefixRow { variants: k, batched_rps: goodput(true), unbatched_rps: goodput(false) }
        })
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct SplitRow {
    pub gamma: f64,
    pub dp_budgets_ms: (f64, f64),
    pub dp_rps_per_gpu: f64,
    pub even_rps_per_gpu: f64,
}

/// Nexus's Figure 4 shape: a two-stage query (ResNet50 then
/// InceptionResNetV2 on `gamma` items per request, 1080Ti profiles), SLO
/// 200 ms; query throughput per planned GPU with the dynamic-program split
/// against an even split, planned at 2,000 queries/s.
pub fn latency_split(gammas: &[f64]) -> Vec<SplitRow> {
    let scenario = |gamma: f64, split: &str| {
        Scenario::parse(&format!(
            "name = \"split\"\n[cluster]\ngpus = 1\n\
             [[models]]\nname = \"a\"\nalpha_ms = 2.050\nbeta_ms = 5.378\n\
             [[models]]\nname = \"b\"\nalpha_ms = 5.090\nbeta_ms = 18.368\n\
             [[queries]]\nname = \"q\"\nslo_ms = 200.0\nsplit = \"{split}\"\n\
             [[queries.stages]]\nmodel = \"a\"\n[[queries.stages]]\nmodel = \"b\"\nparent = \"a\"\ngamma = {gamma}\n"
        ))
        .expect("valid split scenario")
    };
    const QPS: f64 = 2_000.0;
    gammas
        .iter()
        .map(|&gamma| {
            let per_gpu = |s: &Scenario| QPS / plan_report(&s.cluster, &s.model_rates(QPS), true).gpus as f64;
            let dp = scenario(gamma, "dp");
            let even = scenario(gamma, "even");
            let b = |s: &Scenario, i: usize| s.queries[0].stages[i].budget as f64 / 1e6;
            SplitRow {
                gamma,
                dp_budgets_ms: (b(&dp, 0), b(&dp, 1)),
                dp_rps_per_gpu: per_gpu(&dp),
                even_rps_per_gpu: per_gpu(&even),
            }
        })
        .collect()
}

#[derive(Clone, Debug, Serialize)]
pub struct EpochRow {
    /// None: the plan is made once.
    pub epoch_s: Option<f64>,
    pub goodput_rps: f64,
}

/// Re-planning at run time against planning once: goodput of `nexus` on
/// `scenario` for each epoch length.
pub fn epochs(scenario: &Scenario, epochs_s: &[Option<f64>], rel_tolerance: f64) -> Vec<EpochRow> {
    epochs_s
        .iter()
        .map(|&epoch_s| {
            let mut s = scenario.clone();
            s.policy_epoch = epoch_s.map(|e| (e * 1e9) as baton_sched::time::Nanos);
            EpochRow { epoch_s, goodput_rps: find_goodput(&s, PolicyKind::Nexus, rel_tolerance).goodput_rps }
        })
        .collect()
}
