//! The flat-top sweep with its plots:
//! `cargo run --release -p baton-perf --bin flat_top [-- --quick] [--out DIR]`
//! prints the table and writes flat-top-throughput.svg and flat-top-idle.svg.

use std::path::PathBuf;

use baton_perf::flat_top::run_flat_top;
use baton_perf::{load_scenario, out_dir, quick};
use baton_sched::PolicyKind;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let is_quick = args.iter().any(|a| a == "--quick");
    let out = out_dir(&args);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/flat-top.toml");
    let mut scenario = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
    if is_quick {
        scenario = quick(scenario);
    }
    let policies = PolicyKind::SYMPHONY_SET;
    let ft = run_flat_top(&scenario, &policies, if is_quick { 0.03 } else { 0.01 });
    print!("{}", ft.table());
    let (thr, idle) = ft.plots(&policies);
    std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    for (name, plot) in [("flat-top-throughput.svg", thr), ("flat-top-idle.svg", idle)] {
        let file = out.join(name);
        std::fs::write(&file, plot.to_svg()).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        println!("wrote {}", file.display());
    }
}
