//! Rewrites the results regions of perf/README.md from perf/results/:
//! `cargo run -p baton-perf --bin render_readme [-- --check]`. With
//! `--check` it writes nothing and exits 1 if the README is stale.

use baton_perf::readme::{readme_path, render, results_dir};

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let path = readme_path();
    let old = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let new = render(&old, &results_dir()).unwrap_or_else(|e| {
        eprintln!("render_readme: {e}");
        std::process::exit(2)
    });
    if new == old {
        println!("{}: up to date", path.display());
    } else if check {
        eprintln!("{}: stale; run `cargo run -p baton-perf --bin render_readme`", path.display());
        std::process::exit(1);
    } else {
        std::fs::write(&path, new).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        println!("{}: rewritten from {}", path.display(), results_dir().display());
    }
}
