//! # baton-perf — harnesses that measure Baton
//!
//! Paper reproductions in the simulator, side-by-side policy comparisons,
//! scheduler micro-benchmarks and their plots. Every harness is a binary
//! under `src/bin/` with a `--quick` mode that the test suite runs, so the
//! harnesses never rot; the full runs are commands, never timed tests.
//! Results are ratios from one invocation: both sides of a comparison run
//! on the same scenario and seed. `readme` renders perf/README.md's tables
//! from the stored results (`render_readme`). The load generator, scenario
//! files and the policy comparison belong to the product (`baton_tools`,
//! the `baton` commands' library); harnesses use them from there.

pub mod cuda_bench;
pub mod engine_bench;
pub mod flat_top;
pub mod glet_bench;
pub mod glet_sim;
pub mod hostile;
pub mod hull_bench;
pub mod nexus_bench;
pub mod orloj_grid;
pub mod plot;
pub mod readme;
pub mod report;
pub mod sched_speed;
pub mod subclusters;
pub mod subnetact_bench;
pub mod superserve_bench;
pub mod wire_bench;

pub use baton_tools::policies::{
    compare_policies, default_policies, format_comparison, staggered_bound_rps, ComparisonRow,
};
pub use baton_tools::{gap, load, overhead};
pub use report::{load_scenario, print_report, shipped_scenarios, BUILTIN_SCENARIO, SERVE_SCENARIO};

/// The folder a harness writes its files to: `--out DIR` among `args`,
/// else `perf/results/`.
pub fn out_dir(args: &[String]) -> std::path::PathBuf {
    args.iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results"))
}

/// Shortens a scenario for `--quick` runs: a few simulated seconds.
pub fn quick(mut s: baton_sched::Scenario) -> baton_sched::Scenario {
    s.warmup = s.warmup.min(500 * baton_sched::time::NANOS_PER_MS);
    s.duration = s.duration.min(3 * baton_sched::time::NANOS_PER_S);
    s
}
