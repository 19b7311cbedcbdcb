//! Nexus experiments: `cargo run --release -p baton-perf --bin nexus_bench [-- --quick] [--fork-join]`
//! (`--fork-join`: only the fork-join latency split).

use baton_perf::load_scenario;
use baton_perf::nexus_bench::{early_vs_lazy, epochs, game_scenario, latency_split, plan_vs_bound, prefix_scaling};
use baton_sched::nexus::plan_report;
use baton_sched::scenario::builder::ScenarioText;
use baton_sched::sim::find_goodput;
use baton_sched::{PolicyKind, Scenario};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::args().any(|a| a == "--fork-join") {
        fork_join(quick);
        return;
    }
    let rows = early_vs_lazy(if quick { 5.0 } else { 60.0 }, if quick { 0.03 } else { 0.01 });
    println!("early vs lazy drop, 1 GPU, SLO 100 ms, optimal 500 r/s; highest rate with 99% in SLO");
    println!("{:>8} {:>8} {:>10} {:>10} {:>8}", "alpha ms", "beta ms", "early r/s", "lazy r/s", "early/lazy");
    for r in &rows {
        println!(
            "{:>8.2} {:>8.2} {:>10.1} {:>10.1} {:>8.3}",
            r.alpha_ms, r.beta_ms, r.early_rps, r.lazy_rps, r.early_over_lazy
        );
    }
    plans_and_prefixes(quick);
    re_planning(quick);
    println!("\nlatency split of a two-stage query (SLO 200 ms): queries/s per planned GPU");
    println!("{:>6} {:>18} {:>10} {:>10} {:>7}", "gamma", "DP budgets ms", "DP", "even", "DP/even");
    for r in latency_split(&[0.1, 1.0, 10.0]) {
        println!(
            "{:>6} {:>8.1} + {:>7.1} {:>10.1} {:>10.1} {:>7.2}",
            r.gamma,
            r.dp_budgets_ms.0,
            r.dp_budgets_ms.1,
            r.dp_rps_per_gpu,
            r.even_rps_per_gpu,
            r.dp_rps_per_gpu / r.even_rps_per_gpu
        );
    }
    fork_join(quick);
}

/// The fork-join scenario with its query split by `split` ("dp" or "even").
fn fork_join_scenario(split: &str) -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/nexus-forkjoin.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ScenarioText::from_toml(&text).set("queries[0].split", split).scenario()
}

/// Planned GPUs and the exact lower bound at `rate_qps` queries/s.
fn planned(s: &Scenario, rate_qps: f64) -> (usize, f64) {
    let r = plan_report(&s.cluster, &s.model_rates(rate_qps), true);
    (r.gpus, r.lower_bound_gpus_exact)
}

/// DP against even split on the fork-join query: GPUs planned at fixed
/// query rates, then nexus goodput on the scenario's 16 GPUs.
fn fork_join(quick: bool) {
    let (dp, even) = (fork_join_scenario("dp"), fork_join_scenario("even"));
    let budgets = |s: &Scenario| -> Vec<String> {
        s.queries[0].stages.iter().map(|st| format!("{:.1}", st.budget as f64 / 1e6)).collect()
    };
    println!("\nfork-join query (SSD -> 4 cars + 1 face -> ranker joins them; SLO 300 ms): planned GPUs");
    println!("budgets ms (ssd, car, face, ranker): dp {:?}, even {:?}", budgets(&dp), budgets(&even));
    println!(
        "{:>8} {:>7} {:>7} {:>9} {:>10} {:>10} {:>12}",
        "rate q/s", "DP", "even", "DP bound", "even bound", "DP q/s/GPU", "even q/s/GPU"
    );
    for rate in [50.0, 100.0, 200.0, 500.0, 1_000.0] {
        let ((g_dp, b_dp), (g_even, b_even)) = (planned(&dp, rate), planned(&even, rate));
        println!(
            "{rate:>8.0} {g_dp:>7} {g_even:>7} {b_dp:>9.2} {b_even:>10.2} {:>10.1} {:>12.1}",
            rate / g_dp as f64,
            rate / g_even as f64
        );
    }
    let (mut dp, mut even) = (dp, even);
    if quick {
        dp = baton_perf::quick(dp);
        even = baton_perf::quick(even);
    }
    let tolerance = if quick { 0.05 } else { 0.01 };
    let (g_dp, g_even) = (
        find_goodput(&dp, PolicyKind::Nexus, tolerance).goodput_rps,
        find_goodput(&even, PolicyKind::Nexus, tolerance).goodput_rps,
    );
    println!("nexus goodput on 16 GPUs: DP {g_dp:.1} q/s, even {g_even:.1} q/s, DP/even {:.3}", g_dp / g_even);
}

/// Epoch re-planning on a shifting mix and on a stationary one.
fn re_planning(quick: bool) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    for (file, lengths) in [
        ("nexus-shift.toml", vec![None, Some(1.0), Some(2.0), Some(5.0)]),
        ("zoo-1080ti-gt2.toml", vec![None, Some(2.0)]),
    ] {
        let s = load_scenario(&dir.join(file)).unwrap_or_else(|e| panic!("{e}"));
        let s = if quick { baton_perf::quick(s) } else { s };
        println!("\nre-planning at run time, {file}: nexus goodput");
        for r in epochs(&s, &lengths, if quick { 0.05 } else { 0.01 }) {
            let label = r.epoch_s.map_or("planned once".to_string(), |e| format!("epoch {e} s"));
            println!("{label:>14} {:>10.1} r/s", r.goodput_rps);
        }
    }
}

fn plans_and_prefixes(quick: bool) {
    let traffic = load_scenario(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/nexus-traffic.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let workloads = [
        (
            "game (20 ResNet-50 variants sharing a prefix + 5 LeNet, Zipf-0.9, SLO 50 ms), r/s",
            game_scenario(20, 5, 1),
            vec![2_000.0, 5_000.0, 10_000.0, 20_000.0, 50_000.0],
        ),
        (
            "traffic (SSD -> 2 cars, 0.5 faces; SLO 400 ms), queries/s",
            traffic,
            vec![50.0, 100.0, 200.0, 500.0, 1_000.0],
        ),
    ];
    for (name, s, rates) in workloads {
        println!("\n{name}: planned GPUs");
        println!(
            "{:>9} {:>6} {:>14} {:>12} {:>15} {:>10}",
            "rate r/s", "GPUs", "no prefix b.", "lower bound", "batch-oblivious", "over bound"
        );
        for r in plan_vs_bound(&s, &rates) {
            println!(
                "{:>9.0} {:>6} {:>14} {:>12.2} {:>15} {:>9.1}%",
                r.rate_rps,
                r.gpus,
                r.gpus_without_prefix_batching,
                r.lower_bound_gpus,
                r.batch_oblivious_gpus,
                100.0 * (r.over_bound - 1.0)
            );
        }
    }
    println!("\nprefix batching on one GPU (Figure 14a): goodput r/s");
    println!("{:>8} {:>10} {:>10} {:>7}", "variants", "batched", "apart", "ratio");
    for r in prefix_scaling(10, if quick { 3.0 } else { 20.0 }, if quick { 0.03 } else { 0.01 }) {
        let ratio = if r.unbatched_rps >= 1.0 {
            format!("{:>7.2}", r.batched_rps / r.unbatched_rps)
        } else {
            "  (apart: no plan fits one GPU)".to_string()
        };
        println!("{:>8} {:>10.1} {:>10.1} {ratio}", r.variants, r.batched_rps, r.unbatched_rps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smoke run of the fork-join section: the DP split never needs more
    /// GPU time than the even one, and plans stay above their bound.
    #[test]
    fn the_fork_join_split_plans_sanely() {
        let (dp, even) = (fork_join_scenario("dp"), fork_join_scenario("even"));
        for rate in [100.0, 1_000.0] {
            let ((g_dp, b_dp), (g_even, b_even)) = (planned(&dp, rate), planned(&even, rate));
            assert!(b_dp <= b_even, "at {rate} q/s the DP split's bound {b_dp} exceeds the even one's {b_even}");
            assert!(g_dp as f64 >= b_dp && g_even as f64 >= b_even);
        }
    }
}
