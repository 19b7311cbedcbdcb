//! SuperServe experiments: `cargo run --release -p baton-perf --bin superserve_bench [-- --quick]`.

use baton_perf::superserve_bench::{accel_grid, bursty_grid, faults, real_trace, Cell, Point};

fn points(ps: &[Point]) -> String {
    let cells: Vec<String> =
        ps.iter().map(|p| format!("{} {:.5}/{:.2}", p.policy, p.attainment, p.mean_accuracy)).collect();
    cells.join("  ")
}

fn print_cell(head: String, c: &Cell) {
    println!("{head}: {}  [slackfit wins: {}]", points(&c.points), c.slackfit_wins(0.999));
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let secs = if quick { 3.0 } else { 30.0 };
    println!("bursty grid (default supernet, 8 GPUs, SLO 36 ms): attainment / mean accuracy %");
    for c in bursty_grid(secs) {
        print_cell(format!("rate {:>6.0} CV2 {}", c.rate_rps, c.cv2), &c);
    }
    println!("\ntime-varying (2,500 q/s -> lambda2 at tau q/s², CV2 8): attainment / mean accuracy %");
    for c in accel_grid(secs) {
        print_cell(format!("lambda2 {:>5.0} tau {:>5.0}", c.rate_rps, c.cv2), &c);
    }
    let t = real_trace(4_000.0, if quick { 5.0 } else { 60.0 });
    println!("\nreal-shaped trace (Azure schema, generated, 200 functions, mean 4,000 q/s): {}", points(&t.points));
    match t.accuracy_gap {
        Some(g) => println!("slackfit accuracy minus the best baseline at equal or higher attainment: {g:+.2} points"),
        None => println!("no baseline reaches slackfit's attainment"),
    }
    println!("\nfaults: 3,500 q/s, CV2 2; a backend fails every 12 s");
    for p in faults(if quick { 3.0 } else { 12.0 }) {
        println!(
            "{} backends: attainment {:.5}, mean accuracy {:.2}%",
            p.backends_alive, p.attainment, p.mean_accuracy
        );
    }
}
