//! SuperServe experiments: `cargo run --release -p baton-perf --bin superserve_bench [-- --quick]`.

use baton_perf::superserve_bench::{bursty_grid, faults};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    println!("bursty grid (default supernet, 8 GPUs, SLO 36 ms): attainment / mean accuracy %");
    for c in bursty_grid(if quick { 3.0 } else { 30.0 }) {
        let cells: Vec<String> =
            c.points.iter().map(|p| format!("{} {:.5}/{:.2}", p.policy, p.attainment, p.mean_accuracy)).collect();
        println!(
            "rate {:>6.0} CV2 {}: {}  [slackfit wins: {}]",
            c.rate_rps,
            c.cv2,
            cells.join("  "),
            c.slackfit_wins(0.999)
        );
    }
    println!("\nfaults: 3,500 q/s, CV2 2; a backend fails every 12 s");
    for p in faults(if quick { 3.0 } else { 12.0 }) {
        println!(
            "{} backends: attainment {:.5}, mean accuracy {:.2}%",
            p.backends_alive, p.attainment, p.mean_accuracy
        );
    }
}
