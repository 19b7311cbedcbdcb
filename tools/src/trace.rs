//! `baton trace --out FILE [--functions N] [--seed S]`: writes a synthetic
//! day of invocations in the Azure Functions 2019 schema (sched's
//! `trace.rs`), for scenarios' `arrival = "trace:FILE"`.

use std::path::PathBuf;

use baton_sched::trace::{generate_azure_csv, parse_azure_csv};

#[derive(clap::Args)]
pub struct Args {
    /// Where to write the CSV.
    #[arg(long)]
    out: PathBuf,
    /// How many functions (rows).
    #[arg(long, default_value_t = 200)]
    functions: usize,
    #[arg(long, default_value_t = 2019)]
    seed: u64,
}

pub fn run(a: Args) -> Result<(), String> {
    if a.functions == 0 || a.functions > 1_000_000 {
        return Err(format!("--functions: must be between 1 and 1000000, got {}", a.functions));
    }
    let csv = generate_azure_csv(a.seed, a.functions);
    let shape = parse_azure_csv(&csv).map_err(|e| format!("generated trace does not parse: {e}"))?;
    std::fs::write(&a.out, csv).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let mean = shape.iter().sum::<f64>() / shape.len() as f64;
    let peak = shape.iter().copied().fold(0.0, f64::max);
    println!(
        "wrote {}: {} functions, {} minutes, {:.0} invocations/min on average, peak {:.0} ({:.1}x)",
        a.out.display(),
        a.functions,
        shape.len(),
        mean,
        peak,
        peak / mean
    );
    Ok(())
}
