//! Nexus experiments: `cargo run --release -p baton-perf --bin nexus_bench [-- --quick]`.

use baton_perf::load_scenario;
use baton_perf::nexus_bench::{early_vs_lazy, epochs, game_scenario, latency_split, plan_vs_bound, prefix_scaling};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
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
