//! Orloj's finish-rate grid and static check:
//! `cargo run --release -p baton-perf --bin orloj_grid [-- --quick]`.

use baton_perf::orloj_grid::{run_grid, static_check};
use baton_perf::{load_scenario, quick};

fn main() {
    let is_quick = std::env::args().any(|a| a == "--quick");
    let cells = run_grid(if is_quick { 3.0 } else { 20.0 });
    let names: Vec<String> = cells[0].finish.iter().map(|f| f.0.clone()).collect();
    print!("{:<14} {:>5} {:>8}", "shape", "SLO", "load r/s");
    for n in &names {
        print!(" {n:>10}");
    }
    println!(" {:>10}", "orloj gain");
    for c in &cells {
        print!("{:<14} {:>4.1}x {:>8.1}", c.shape, c.slo_multiple, c.offered_rps);
        for (_, f) in &c.finish {
            print!(" {f:>10.3}");
        }
        println!(" {:>9.2}x", c.orloj_gain);
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/scenarios/table4-resnet50.toml");
    let mut s = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
    if is_quick {
        s = quick(s);
    }
    let c = static_check(&s, if is_quick { 0.03 } else { 0.01 });
    println!(
        "static ({}): symphony {:.1} r/s, orloj {:.1} r/s, orloj/symphony {:.3}",
        c.scenario, c.symphony_rps, c.orloj_rps, c.ratio
    );
}
