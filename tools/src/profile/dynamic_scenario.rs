//! What `baton profile --executor cpu` (or `--executor cuda --dynamic`)
//! measured, and the scenarios it writes from it: the static models' l(b)
//! tables, the supernet's subnet tables, and the variable-length encoder as
//! an Orloj dynamic model (its apps' solo-time distributions, the lengths
//! their clients send, kappa); and the supernet alone under SlackFit.

use super::ms;
use std::ops::RangeInclusive;
use std::time::Duration;

use super::fit::{mean_sd, quantile, KappaFit};
use baton_sched::dist::{mixture_quantile, ExecDist};

/// l(b) of an ordinary model, b = 1..=B.
#[derive(Clone, Debug, PartialEq)]
pub struct FixedTable {
    pub name: String,
    pub latency: Vec<Duration>,
}

/// One subnet's l(b) and the accuracy the scenario gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct SubnetTable {
    pub name: String,
    pub accuracy: f64,
    pub latency: Vec<Duration>,
}

/// An app of the dynamic model: its clients send lengths uniform over
/// `lengths`; `samples` are (length, solo ms) of inputs run alone.
#[derive(Clone, Debug, PartialEq)]
pub struct AppProfile {
    pub name: String,
    pub weight: f64,
    pub lengths: RangeInclusive<usize>,
    pub samples: Vec<(usize, f64)>,
}

impl AppProfile {
    pub fn solo_ms(&self) -> Vec<f64> {
        self.samples.iter().map(|s| s.1).collect()
    }
}

/// The shared trunk's and one head's l(b), b = 1..=B, timed apart.
#[derive(Clone, Debug, PartialEq)]
pub struct PrefixProfile {
    pub trunk_name: String,
    /// Heads the trunk has: its variants are `{trunk_name}-0`, ...
    pub heads: u16,
    pub trunk: Vec<Duration>,
    pub head: Vec<Duration>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DynamicProfile {
    /// The scenario's name (`cpu-varlen`, `cuda-varlen`).
    pub name: String,
    /// What ran the models, for the header ("one CPU thread", a GPU's name).
    pub device: String,
    /// The scenario's dispatch delay: the CPU executor's thread is in the
    /// same process, a GPU's batches cross the PCIe bus.
    pub ctrl_delay_us: u64,
    /// The command line that measured it, for the header.
    pub command: String,
    pub reps: usize,
    pub max_batch: u32,
    pub fixed: Vec<FixedTable>,
    /// Ordered from least to most accurate.
    pub subnets: Vec<SubnetTable>,
    pub dynamic: String,
    pub kappa: KappaFit,
    pub apps: Vec<AppProfile>,
    /// The shared trunk (the CPU executor's; the CUDA executor has none).
    pub prefix: Option<PrefixProfile>,
}

/// Variants of the shared trunk the prefix scenario serves.
const PREFIX_VARIANTS: u16 = 4;

/// The prefix scenario: `PREFIX_VARIANTS` variants of the shared trunk on
/// one GPU (the CPU executor's thread), equal Poisson load, one
/// `[[prefixes]]` group under Nexus. The trunk and the head as Symphony's
/// linear fits l(b) = alpha b + beta of their tables (a prefix group's
/// profiles are linear); each variant's SLO `slo_factor` x its whole l(B);
/// the rate 70% of what one core sustains batching B across the variants
/// (the trunk once, each variant's head over its share).
pub fn prefix_scenario_text(p: &DynamicProfile, pp: &PrefixProfile, slo_factor: f64) -> String {
    let linear = |t: &[Duration]| {
        let (a, b) = baton_gpu::cuda::profile::fit(&t.iter().map(|l| ms(*l)).collect::<Vec<_>>());
        (a.max(0.0), b.max(0.0))
    };
    let ((ta, tb), (ha, hb)) = (linear(&pp.trunk), linear(&pp.head));
    let (b, k) = (f64::from(p.max_batch), f64::from(PREFIX_VARIANTS.min(pp.heads)));
    let batch_ms = ta * b + tb + ha * b + hb * k;
    let slo = slo_factor * ((ta + ha) * b + tb + hb).max(CTRL_DELAY_US as f64 / 1e3);
    let (command, trunk, max_batch, reps) = (&p.command, &pp.trunk_name, p.max_batch, p.reps);
    let capacity = b * 1e3 / batch_ms;
    let mut t = format!(
        "# Measured by `baton profile --executor cpu` (`--prefix-out`):\n\
         #   {command}\n\
         # `{trunk}`: a trunk of dense ReLU layers shared by variants `{trunk}-0`.. that differ\n\
         # in their classifier head. The trunk and one head timed apart for b = 1..{max_batch},\n\
         # the median of {reps} runs each; their least-squares fits below. A batch mixing the\n\
         # variants runs the trunk once and each head over its own rows.\n\
         # Rate: 70% of what one core sustains batching {max_batch} across {k} variants ({capacity:.0} r/s).\n\
         name = \"cpu-prefix\"\nseed = 1\nduration_s = 20\nwarmup_s = 2\nrate_rps = {:.0}\n\n\
         [cluster]\ngpus = 1\nctrl_delay_us = {CTRL_DELAY_US}\ndata_delay_us = 0\n\n\
         [[prefixes]]\nname = \"{trunk}\"\nalpha_ms = {ta:.4}\nbeta_ms = {tb:.4}\n",
        0.7 * capacity,
    );
    for h in 0..PREFIX_VARIANTS.min(pp.heads) {
        t += &format!(
            "\n[[models]]\nname = \"{trunk}-{h}\"\nprefix_of = \"{trunk}\"\nalpha_ms = {ha:.4}\nbeta_ms = {hb:.4}\n\
             max_batch = {max_batch}\nslo_ms = {slo:.3}\nweight = 1.0\narrival = \"poisson\"\n"
        );
    }
    t + "\n[policy]\nname = \"nexus\"\n"
}

/// The prefix scenario's dispatch delay (one backend thread in the same
/// process).
const CTRL_DELAY_US: u64 = 100;

/// `tables[v][b]` made what schedulers assume: non-decreasing in b, and
/// (for subnets ordered by accuracy) never faster than a less accurate
/// one at the same b — each entry the running maximum over both.
pub fn monotone(tables: &[Vec<Duration>]) -> Vec<Vec<Duration>> {
    let mut out: Vec<Vec<Duration>> = Vec::with_capacity(tables.len());
    for t in tables {
        let mut row = Vec::with_capacity(t.len());
        for (b, &l) in t.iter().enumerate() {
            let below = out.last().and_then(|p| p.get(b)).copied().unwrap_or_default();
            let left = row.last().copied().unwrap_or_default();
            row.push(l.max(below).max(left));
        }
        out.push(row);
    }
    out
}

/// `[[models.subnets]]` of `subnets`, each with its (monotone) table.
fn subnets_toml(subnets: &[SubnetTable], tables: &[Vec<Duration>]) -> String {
    let mut t = String::new();
    for (s, table) in subnets.iter().zip(tables) {
        t += &format!(
            "\n[[models.subnets]]\nname = \"{}\"\naccuracy = {:.2}\nlatency_ms = [{}]\n",
            s.name,
            s.accuracy,
            list(table)
        );
    }
    t
}

fn list(t: &[Duration]) -> String {
    t.iter().map(|l| format!("{:.4}", ms(*l))).collect::<Vec<_>>().join(", ")
}

/// The scenario: every model on one GPU (or the CPU executor's thread),
/// the static ones with weight 0 (their tables recorded, no requests), the
/// dynamic one with all the load at 70% of what it sustains, under Orloj.
/// Static SLOs: `slo_factor` x l(B); the dynamic model's:
/// `slo_p99_multiple` x the P99 of its apps' solo-time mixture, plus the
/// dispatch delay (which every batch pays, and which on a GPU is of the
/// order of a solo time).
pub fn scenario_text(p: &DynamicProfile, slo_factor: f64, slo_p99_multiple: f64) -> Result<String, String> {
    let fits: Vec<(f64, f64)> = p
        .apps
        .iter()
        .map(|a| mean_sd(&a.solo_ms()).ok_or_else(|| format!("app `{}` has no solo times", a.name)))
        .collect::<Result<_, _>>()?;
    let total_w: f64 = p.apps.iter().map(|a| a.weight).sum();
    if p.apps.is_empty() || total_w.is_nan() || total_w <= 0.0 {
        return Err("the dynamic model needs an app with a positive weight".into());
    }
    // What the executor sustains: alone, 1 / E[solo]; in batches of B, at
    // worst B / (slowest solo x (1 + kappa (B - 1))). The better of the two.
    let mean_solo: f64 = p.apps.iter().zip(&fits).map(|(a, f)| a.weight / total_w * f.0).sum();
    let slowest = p.apps.iter().flat_map(|a| a.solo_ms()).fold(0.0, f64::max);
    let kappa = p.kappa.kappa.clamp(0.0, 1.0);
    let b = f64::from(p.max_batch);
    let capacity = (1e3 / mean_solo).max(b * 1e3 / (slowest * (1.0 + kappa * (b - 1.0))));
    let samples: usize = p.apps.iter().map(|a| a.samples.len()).sum();
    // The SLO as the simulator reads `slo_p99_multiple` (the P99 of the
    // apps' fitted normals), plus the dispatch delay.
    let parts: Vec<(f64, ExecDist)> =
        p.apps.iter().zip(&fits).map(|(a, f)| (a.weight, ExecDist::Normal { mean: f.0, sd: f.1.max(1e-4) })).collect();
    let p99_ms = mixture_quantile(&parts, 0.99) as f64 / 1e6;
    let slo_ms = slo_p99_multiple * p99_ms + p.ctrl_delay_us as f64 / 1e3;
    let clamped = if kappa != p.kappa.kappa {
        format!(" (measured {:.3}; the scenario takes 0..=1)", p.kappa.kappa)
    } else {
        String::new()
    };
    let mut t = format!(
        "# Measured by `baton profile` on {}:\n\
         #   {}\n\
         # Static models: l(b) for b = 1..{}, the median of {} runs per size, written as\n\
         # running maxima (non-decreasing in b, and over the subnets in accuracy order);\n\
         # weight 0: their tables are recorded here, the load goes to `{}`.\n\
         # Supernet accuracies are stand-ins: its weights are random, so no subnet has\n\
         # a measured accuracy; the subnets, in order of compute, take the built-in\n\
         # supernet's spread, 73% to 80% (baton_sched::supernet::default_supernet).\n\
         # `{}`: {samples} inputs, each run alone, lengths uniform over each app's range;\n\
         # exec_ms = normal(mean, sd) of an app's solo times; work = the length its client\n\
         # sends (rounded); kappa {:.4}{clamped}: least squares of T(b, Lmax) / solo(Lmax) - 1\n\
         # against b - 1 over {} batches of mixed lengths (rms {:.3}). Rate: 70% of what\n\
         # the executor sustains ({capacity:.0} r/s).\n\
         name = \"{}\"\nseed = 1\nduration_s = 20\nwarmup_s = 2\nrate_rps = {:.0}\n\n\
         [cluster]\ngpus = 1\nctrl_delay_us = {}\ndata_delay_us = 0\n",
        p.device,
        p.command,
        p.max_batch,
        p.reps,
        p.dynamic,
        p.dynamic,
        kappa,
        p.kappa.points,
        p.kappa.rms,
        p.name,
        0.7 * capacity,
        p.ctrl_delay_us
    );
    let fastest = p.ctrl_delay_us as f64 / 1e3;
    for f in &p.fixed {
        let table = &monotone(std::slice::from_ref(&f.latency))[0];
        let top = table.last().map_or(0.0, |l| ms(*l));
        let slo = slo_factor * top.max(ms(table[0]) + fastest);
        t += &format!(
            "\n[[models]]\nname = \"{}\"\nlatency_ms = [{}]\nslo_ms = {slo:.3}\nweight = 0.0\n",
            f.name,
            list(table)
        );
    }
    if !p.subnets.is_empty() {
        let tables = monotone(&p.subnets.iter().map(|s| s.latency.clone()).collect::<Vec<_>>());
        let top = tables.last().and_then(|t| t.last()).map_or(0.0, |l| ms(*l));
        let slo = slo_factor * top.max(ms(tables[tables.len() - 1][0]) + fastest);
        t += &format!(
            "\n[[models]]\nname = \"supernet\"\nmax_batch = {}\nslo_ms = {slo:.3}\nweight = 0.0\n",
            p.max_batch
        );
        t += &subnets_toml(&p.subnets, &tables);
    }
    t += &format!(
        "\n[[models]]\nname = \"{}\"\n# SLO: {slo_p99_multiple} x the P99 of the apps' solo times ({p99_ms:.4} ms) + the dispatch delay\n\
         slo_ms = {slo_ms:.4}\nkappa = {kappa:.4}\nmax_batch = {}\nweight = 1.0\narrival = \"poisson\"\n",
        p.dynamic, p.max_batch
    );
    for (a, (mean, sd)) in p.apps.iter().zip(&fits) {
        let xs = a.solo_ms();
        let q = |q: f64| quantile(&xs, q).unwrap_or(0.0);
        t += &format!(
            "\n# `{}`: lengths {}..={}, {} solo times: p50 {:.4} ms, p99 {:.4} ms, max {:.4} ms\n\
             [[models.apps]]\nname = \"{}\"\nweight = {}\nexec_ms = \"normal:{mean:.4},{:.4}\"\nwork = \"uniform:{},{}\"\n",
            a.name,
            a.lengths.start(),
            a.lengths.end(),
            xs.len(),
            q(0.5),
            q(0.99),
            q(1.0),
            a.name,
            a.weight,
            sd.max(1e-4),
            *a.lengths.start() as f64 - 0.5,
            *a.lengths.end() as f64 + 0.5
        );
    }
    Ok(t + "\n[policy]\nname = \"orloj\"\n")
}

/// The supernet alone on one GPU under SlackFit, bursty arrivals (bursts
/// of 3x the mean rate, 30% of the time: `bursty:0.3,3`), each subnet's
/// table as in `scenario_text`. SLO: `slo_factor` x the most accurate
/// subnet's l(B) plus the dispatch delay. Rate: 70% of what the least
/// accurate subnet sustains at its largest batch, so that a burst needs
/// the smaller subnets to be met.
pub fn supernet_scenario_text(p: &DynamicProfile, slo_factor: f64) -> Result<String, String> {
    if p.subnets.is_empty() {
        return Err("no supernet was measured".into());
    }
    let tables = monotone(&p.subnets.iter().map(|s| s.latency.clone()).collect::<Vec<_>>());
    let delay = p.ctrl_delay_us as f64 / 1e3;
    let slo = slo_factor * (tables[tables.len() - 1].last().map_or(0.0, |l| ms(*l)) + delay);
    let fastest = tables[0].last().map_or(0.0, |l| ms(*l));
    let rate = 0.7 * f64::from(p.max_batch) * 1e3 / fastest.max(1e-3);
    let mut t = format!(
        "# Measured by `baton profile` on {}:\n\
         #   {}\n\
         # The supernet's subnets (one copy of the weights, each subnet run in place):\n\
         # l(b) for b = 1..{}, the median of {} runs per size, written as running maxima\n\
         # (non-decreasing in b and over the subnets in accuracy order). Accuracies are\n\
         # stand-ins (random weights): the built-in supernet's spread, 73% to 80%.\n\
         # SLO: {slo_factor} x (the most accurate subnet's l({}) + the dispatch delay). Rate: 70% of\n\
         # what the least accurate subnet sustains at batch {} ({:.0} r/s); bursts of 3x.\n\
         name = \"{}-supernet\"\nseed = 1\nduration_s = 20\nwarmup_s = 2\nrate_rps = {rate:.0}\n\n\
         [cluster]\ngpus = 1\nctrl_delay_us = {}\ndata_delay_us = 0\n\n\
         [[models]]\nname = \"supernet\"\nmax_batch = {}\nslo_ms = {slo:.3}\narrival = \"bursty:0.3,3\"\n",
        p.device,
        p.command,
        p.max_batch,
        p.reps,
        p.max_batch,
        p.max_batch,
        rate / 0.7,
        p.name.trim_end_matches("-varlen"),
        p.ctrl_delay_us,
        p.max_batch,
    );
    t += &subnets_toml(&p.subnets, &tables);
    Ok(t + "\n[policy]\nname = \"slackfit\"\n")
}

/// Every solo time, one row each: `app,length,solo_ms`.
pub fn csv(p: &DynamicProfile) -> String {
    let mut t = String::from("app,length,solo_ms\n");
    for a in &p.apps {
        for (len, solo) in &a.samples {
            t += &format!("{},{len},{solo:.6}\n", a.name);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_sched::Scenario;

    fn profile() -> DynamicProfile {
        let us = |x: u64| Duration::from_micros(x);
        let app = |name: &str, lengths: RangeInclusive<usize>, base: f64| AppProfile {
            name: name.into(),
            weight: 0.5,
            samples: lengths.clone().map(|l| (l, base + l as f64 * 0.01)).collect(),
            lengths,
        };
        DynamicProfile {
            name: "cpu-varlen".into(),
            device: "one CPU thread".into(),
            ctrl_delay_us: 100,
            command: "baton profile --executor cpu".into(),
            reps: 5,
            max_batch: 4,
            fixed: vec![FixedTable { name: "resnet-block".into(), latency: vec![us(300), us(600), us(590), us(1200)] }],
            subnets: vec![
                SubnetTable { name: "d2-w64".into(), accuracy: 73.0, latency: vec![us(50), us(100), us(150), us(200)] },
                SubnetTable { name: "d4-w256".into(), accuracy: 80.0, latency: vec![us(90), us(95), us(300), us(400)] },
            ],
            dynamic: "encoder-varlen".into(),
            kappa: KappaFit { kappa: 1.08, points: 30, rms: 0.05 },
            apps: vec![app("short", 1..=16, 0.01), app("long", 49..=64, 0.3)],
            prefix: Some(PrefixProfile {
                trunk_name: "mlp".into(),
                heads: 10,
                trunk: vec![us(200), us(300), us(400), us(500)],
                head: vec![us(10), us(12), us(14), us(16)],
            }),
        }
    }

    #[test]
    fn the_prefix_scenario_is_a_group_of_the_trunks_variants_with_the_fitted_parts() {
        let p = profile();
        let text = prefix_scenario_text(&p, p.prefix.as_ref().unwrap(), 2.0);
        let s = Scenario::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let names: Vec<&str> = s.models.iter().map(|m| m.spec.name.as_str()).collect();
        assert_eq!(names, ["mlp-0", "mlp-1", "mlp-2", "mlp-3"]);
        let g = &s.cluster.prefixes[0];
        assert_eq!((g.name.as_str(), g.members.len()), ("mlp", 4));
        // Fits: the trunk 0.1 b + 0.1 ms, a head 0.002 b + 0.008 ms.
        assert_eq!(g.prefix.latency(2), 300_000);
        let (_, suffix) = s.models[0].spec.prefix.as_ref().expect("a member");
        assert_eq!(suffix.latency(2), 12_000);
        assert_eq!(s.policy, baton_sched::policy::PolicyKind::Nexus);
    }

    #[test]
    fn tables_are_made_monotone_in_batch_and_accuracy() {
        let us = |x: u64| Duration::from_micros(x);
        let m = monotone(&[vec![us(50), us(100)], vec![us(90), us(95)]]);
        assert_eq!(m, vec![vec![us(50), us(100)], vec![us(90), us(100)]]);
    }

    #[test]
    fn the_written_scenario_parses_with_the_measured_numbers() {
        let p = profile();
        let text = scenario_text(&p, 2.0, 1.5).unwrap();
        let s = Scenario::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(s.models.len(), 3);
        assert_eq!(s.models[0].spec.profile.latency(3), 600_000, "running maximum");
        assert_eq!(s.models[1].spec.subnets.len(), 2);
        assert_eq!(s.models[1].spec.subnets[1].profile.latency(2), 100_000, "never below a less accurate subnet");
        let d = s.models[2].spec.dynamic.as_ref().expect("dynamic");
        assert_eq!(d.kappa, 1.0, "clamped");
        assert_eq!(d.apps.len(), 2);
        assert!(text.contains("work = \"uniform:0.5,16.5\"") && text.contains("measured 1.080"), "{text}");
        assert_eq!(s.models[2].weight, 1.0);
        assert_eq!(s.models[0].weight, 0.0);
        let rows = csv(&p);
        assert_eq!(rows.lines().count(), 1 + 32);
        assert!(rows.contains("long,64,0.940000"), "{rows}");
    }

    #[test]
    fn the_supernet_scenario_serves_the_subnets_under_slackfit() {
        let mut p = profile();
        let text = supernet_scenario_text(&p, 2.0).unwrap();
        let s = Scenario::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(s.policy, baton_sched::policy::PolicyKind::SlackFit);
        let m = &s.models[0].spec;
        assert_eq!((m.name.as_str(), m.subnets.len()), ("supernet", 2));
        // 2 x (0.4 ms + 0.1 ms); 0.7 x 4 / 0.2 ms.
        assert_eq!(m.slo, 1_000_000);
        assert_eq!(s.rate_rps.map(f64::round), Some(14_000.0));
        assert_eq!(s.name, "cpu-supernet");
        p.subnets.clear();
        assert!(supernet_scenario_text(&p, 2.0).is_err());
    }

    #[test]
    fn an_app_without_samples_is_an_error() {
        let mut p = profile();
        p.apps[1].samples.clear();
        assert!(scenario_text(&p, 2.0, 1.5).unwrap_err().contains("long"));
    }
}
