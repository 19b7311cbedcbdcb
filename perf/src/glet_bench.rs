//! glet's measured partition profiles (`perf/data/partition-profiles`, from
//! the Gpulet repository) and the interference model fitted on them.

use std::path::Path;

use baton_sched::glet::{fit_interference, FitReport, PartitionProfiles};

/// Loads the three CSVs of a partition-profile folder.
pub fn load_profiles(dir: &Path) -> Result<PartitionProfiles, String> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| format!("{}: {e}", dir.join(f).display()));
    PartitionProfiles::parse(&read("inference.csv")?, &read("interference.csv")?, &read("mem_util.csv")?)
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// The shipped profiles.
pub fn shipped_profiles() -> PartitionProfiles {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/partition-profiles");
    load_profiles(&dir).unwrap_or_else(|e| panic!("{e}"))
}

pub fn interference_fit() -> FitReport {
    fit_interference(&shipped_profiles()).expect("the measured pairs determine the model")
}
