//! Nexus experiments: `cargo run --release -p baton-perf --bin nexus_bench [-- --quick]`.

use baton_perf::nexus_bench::early_vs_lazy;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rows = early_vs_lazy(if quick { 5.0 } else { 60.0 }, if quick { 0.03 } else { 0.01 });
    println!("early vs lazy drop, 1 GPU, SLO 100 ms, optimal 500 r/s; highest rate with 99% in SLO");
    println!("{:>8} {:>8} {:>10} {:>10} {:>8}", "alpha ms", "beta ms", "early r/s", "lazy r/s", "early/lazy");
    for r in &rows {
        println!("{:>8.2} {:>8.2} {:>10.1} {:>10.1} {:>8.3}", r.alpha_ms, r.beta_ms, r.early_rps, r.lazy_rps, r.early_over_lazy);
    }
}
