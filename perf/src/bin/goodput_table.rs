//! Goodput of every policy on every shipped scenario, side by side, from one
//! invocation: `cargo run --release -p baton-perf --bin goodput_table [-- --quick] [--json]`.

use baton_perf::{compare_policies, default_policies, format_comparison, load_scenario, quick, shipped_scenarios};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let is_quick = args.iter().any(|a| a == "--quick");
    let json = args.iter().any(|a| a == "--json");
    let filter: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let tolerance = if is_quick { 0.03 } else { 0.01 };
    let mut all = Vec::new();
    for path in shipped_scenarios() {
        let name = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let mut scenario = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
        if is_quick {
            scenario = quick(scenario);
        }
        let rows = compare_policies(&scenario, default_policies(&scenario), tolerance);
        if !json {
            println!("{}", format_comparison(&scenario, &rows));
        }
        all.extend(rows);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&all).expect("rows serialize"));
    }
}
