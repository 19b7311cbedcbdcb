//! `baton`: the command-line entry point to Baton.

mod cluster;
mod compare;
mod partition;
mod plan;
mod profile;
mod serve;
mod sim;
mod topology;
mod trace;

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
    /// Split the scenario's models over K sub-clusters (one scheduler each) and share out its GPUs.
    Partition(partition::Args),
    /// Measure the CUDA (or, with --executor cpu, the CPU) executor's models: l(b), and for the
    /// variable-length encoder its solo times and kappa, as a scenario file.
    Profile(profile::Args),
    /// Write a synthetic day of invocations in the Azure Functions 2019 schema.
    Trace(trace::Args),
    /// Serve a scenario's models on emulated GPUs (or the CUDA or CPU executor): every role in one process, over TCP.
    Serve(serve::ServeArgs),
    /// The frontend role alone: clients' connections, over TCP to the scheduler and backends.
    Frontend(serve::FrontendArgs),
    /// The scheduler role alone: the policy, over TCP to frontends and backends.
    Scheduler(serve::SchedulerArgs),
    /// Backend roles alone: emulated (or CUDA) GPUs, over TCP to the scheduler and frontends.
    Backend(serve::BackendArgs),
    /// Serve a scenario partitioned into K sub-clusters, a scheduler each, re-planned every epoch
    /// if asked (Symphony's control plane on one host).
    Cluster(cluster::Args),
    /// What placement sees of this machine: NUMA nodes, cores, GPUs' and NICs' nodes, per view.
    Topology(topology::Args),
    /// Open-loop load generator against a running server.
    Load(serve::LoadArgs),
    /// Start a server, drive it with the load generator, compare with `baton sim`.
    Demo(serve::DemoArgs),
}

fn main() -> ExitCode {
    // SAFETY: first thing in main, before any thread exists or any output is
    // written; restoring the default SIGPIPE disposition makes `baton ... |
    // head` end quietly, as Unix tools do, instead of panicking on a closed
    // stdout. `signal` with SIG_DFL has no other effect.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(a) => sim::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Plan(a) => plan::run(a),
        Command::Partition(a) => partition::run(a),
        Command::Profile(a) => profile::run(a),
        Command::Trace(a) => trace::run(a),
        Command::Serve(a) => serve::serve(a),
        Command::Frontend(a) => serve::frontend(a),
        Command::Scheduler(a) => serve::scheduler(a),
        Command::Backend(a) => serve::backend(a),
        Command::Load(a) => serve::load(a),
        Command::Cluster(a) => cluster::run(a),
        Command::Topology(a) => topology::run(a),
        Command::Demo(a) => serve::demo(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("baton: {e}");
            ExitCode::from(2)
        }
    }
}
