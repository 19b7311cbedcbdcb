//! `baton`: the command-line entry point to Baton.

mod compare;
mod plan;
mod sim;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "baton", version, about = "Baton: centralized DNN inference serving on GPU clusters")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a scenario with the production scheduler: one rate, or a goodput search.
    Sim(sim::Args),
    /// Goodput of every policy side by side on one scenario (default: a built-in one).
    Compare(compare::Args),
    /// Nexus's epoch plan for a scenario at a rate: backends, sessions, routing, GPU counts.
    Plan(plan::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(a) => sim::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Plan(a) => plan::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton: {e}");
            ExitCode::from(2)
        }
    }
}
