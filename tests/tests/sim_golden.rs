//! The simulator's output for every shipped scenario, bit for bit, against
//! the JSON stored under `tests/golden/sim/`. A refactoring of `sched` that
//! changes no decision leaves every file equal; one that does fails here and
//! names the scenario.
//!
//! Each scenario runs whole, under its own policy and seed, twice: at its
//! `rate_rps` (without one, at 60% of its capacity bound), and shortened as
//! `quick` does (3 s measured) overloaded at 1.5 times its capacity bound,
//! where drops and shedding decide. `BATON_BLESS=1 cargo test -p baton-tests --test
//! sim_golden` rewrites the files after a change that is meant to alter
//! decisions (say why in the commit).
//!
//! Policies no shipped file names run too: every policy of `all()` on three
//! scenarios (Symphony's, Orloj's and SuperServe's), shortened, at the
//! first rate and at 1.2 times the capacity bound, under
//! `golden/sim/policies/`.

use std::path::{Path, PathBuf};

use baton_perf::{load_scenario, quick, shipped_scenarios};
use baton_sched::sim::run;
use baton_sched::PolicyKind;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/sim")
}

/// The runs one scenario file stands for, as pretty JSON.
fn simulate(path: &Path) -> String {
    let s = load_scenario(path).unwrap_or_else(|e| panic!("{e}"));
    let bound = s.capacity_bound_rps();
    let rates = [s.rate_rps.unwrap_or(0.6 * bound), 1.5 * bound];
    let reports = [run(&s, s.policy, rates[0]), run(&quick(s.clone()), s.policy, rates[1])];
    serde_json::to_string_pretty(&reports).expect("a report serializes") + "\n"
}

/// Compares `now` with the stored file, or stores it when blessing; false
/// if they differ.
fn check(golden: &Path, now: &str) -> bool {
    if std::env::var_os("BATON_BLESS").is_some() {
        std::fs::create_dir_all(golden.parent().expect("a folder")).expect("golden folder");
        std::fs::write(golden, now).unwrap_or_else(|e| panic!("{}: {e}", golden.display()));
        return true;
    }
    let then = std::fs::read_to_string(golden)
        .unwrap_or_else(|e| panic!("{}: {e} (new scenario? run with BATON_BLESS=1)", golden.display()));
    then == now
}

#[test]
fn every_policy_simulates_as_recorded() {
    let shipped = shipped_scenarios();
    let mut differ = Vec::new();
    for stem in ["table4-resnet50", "orloj-bimodal", "superserve-maf"] {
        let path = shipped.iter().find(|p| p.ends_with(format!("{stem}.toml"))).expect("a shipped scenario");
        let s = quick(load_scenario(path).unwrap_or_else(|e| panic!("{e}")));
        let bound = s.capacity_bound_rps();
        let rates = [s.rate_rps.unwrap_or(0.6 * bound), 1.2 * bound];
        let reports: Vec<_> = PolicyKind::all().flat_map(|p| rates.map(|rate| run(&s, p, rate))).collect();
        let now = serde_json::to_string_pretty(&reports).expect("a report serializes") + "\n";
        if !check(&golden_dir().join(format!("policies/{stem}.json")), &now) {
            differ.push(stem);
        }
    }
    assert!(differ.is_empty(), "some policy's output changed on {differ:?} (BATON_BLESS=1 if intended)");
}

#[test]
fn every_shipped_scenario_simulates_as_recorded() {
    let dir = golden_dir();
    let files = shipped_scenarios();
    assert!(!files.is_empty(), "no shipped scenarios");
    let mut differ = Vec::new();
    for path in &files {
        let stem = path.file_stem().expect("a file name").to_string_lossy().into_owned();
        let golden = dir.join(format!("{stem}.json"));
        if !check(&golden, &simulate(path)) {
            differ.push(stem);
        }
    }
    // Every golden file still has its scenario: a deleted scenario's file goes too.
    let stale: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|g| g.extension().is_some_and(|x| x == "json"))
        .filter(|g| !files.iter().any(|f| f.file_stem() == g.file_stem()))
        .map(|g| g.display().to_string())
        .collect();
    assert!(stale.is_empty(), "golden files without a scenario: {stale:?}");
    assert!(differ.is_empty(), "the simulator's output changed for {differ:?} (BATON_BLESS=1 if intended)");
}
