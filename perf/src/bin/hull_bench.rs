//! Orloj's queue benchmark: `cargo run --release -p baton-perf --bin hull_bench [-- --quick]`.

use baton_perf::hull_bench::run;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rows = run(&[10, 100, 1_000, 10_000], if quick { 20_000 } else { 2_000_000 });
    println!(
        "{:>8} {:>11} {:>11} {:>11} {:>13} {:>9}",
        "pending", "insert ns", "delete ns", "query ns", "re-sort ns", "speedup"
    );
    for r in &rows {
        println!(
            "{:>8} {:>11.1} {:>11.1} {:>11.1} {:>13.1} {:>8.0}x",
            r.pending, r.insert_ns, r.delete_ns, r.query_ns, r.resort_ns, r.query_speedup
        );
    }
}
