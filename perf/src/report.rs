//! The scenarios shipped with Baton, for harnesses and tests that run them all.

use std::path::{Path, PathBuf};

pub use baton_tools::scenarios::{load_scenario, print_report, BUILTIN_SCENARIO, SERVE_SCENARIO};

/// The scenarios shipped under `perf/scenarios/` and the built-in ones
/// under `tools/scenarios/`, sorted by file name.
pub fn shipped_scenarios() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<PathBuf> = [root.join("scenarios"), root.join("../tools/scenarios")]
        .iter()
        .flat_map(|dir| std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    v.sort_by_key(|p| p.file_name().map(|n| n.to_owned()));
    v
}
