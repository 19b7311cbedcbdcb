//! `baton compare [FILE] [--json]`: every policy's goodput, side by side,
//! from one invocation on one scenario and seed. With no file it runs the
//! built-in default (Symphony's Table 4 ResNet50 setup).

use std::path::PathBuf;

use baton_sched::Scenario;
use baton_tools::policies::{compare_policies, default_policies, format_comparison};
use baton_tools::scenarios::{load_scenario, BUILTIN_SCENARIO};

#[derive(clap::Args)]
pub struct Args {
    /// Scenario TOML file (default: built-in Table 4 ResNet50, 8 GPUs).
    file: Option<PathBuf>,
    /// Relative precision of each goodput search.
    #[arg(long, default_value_t = 0.01)]
    tolerance: f64,
    /// Simulated seconds per probe, overriding the file's duration_s.
    #[arg(long)]
    duration_s: Option<f64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<(), String> {
    let mut scenario = match &a.file {
        Some(f) => load_scenario(f)?,
        None => Scenario::parse(BUILTIN_SCENARIO).map_err(|e| format!("built-in scenario: {e}"))?,
    };
    if let Some(d) = a.duration_s {
        if !(d.is_finite() && d > 0.0) {
            return Err(format!("--duration-s: must be positive, got {d}"));
        }
        scenario.duration = baton_sched::time::ms_to_nanos(d * 1e3);
    }
    if !(a.tolerance > 0.0 && a.tolerance < 0.5) {
        return Err(format!("--tolerance: must be in (0, 0.5), got {}", a.tolerance));
    }
    eprintln!("baton compare: scenario {} seed {}; one goodput search per policy ...", scenario.name, scenario.seed);
    let rows = compare_policies(&scenario, default_policies(&scenario), a.tolerance);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?);
    } else {
        print!("{}", format_comparison(&scenario, &rows));
    }
    Ok(())
}
