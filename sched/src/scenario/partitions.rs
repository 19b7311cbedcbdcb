//! Measured GPU-partition profiles in a scenario (glet):
//!
//! ```toml
//! [cluster]
//! partition_profiles = "../data/partition-profiles"  # relative to the scenario file
//! [[models]]
//! name = "ResNet50"
//! profile = "resnet50"   # rows of the profiles, instead of alpha_ms/beta_ms
//! slo_ms = 26.7
//! ```
//!
//! The folder holds `inference.csv`, `interference.csv` and `mem_util.csv`
//! (`glet/profiles.rs`). A model with `profile` gets L(b, p) on every
//! partition and, as its whole-GPU profile (what every other policy plans
//! with), L(b, 100) for b in 1..=64.

use std::sync::Arc;

use super::raw::RawModel;
use super::{err, ScenarioError};
use crate::glet::{PartitionData, PartitionProfiles};
use crate::profile::Profile;

/// Reads a file named relative to the scenario's folder.
pub(super) type Read<'a> = &'a dyn Fn(&str) -> Result<String, String>;

const KEY: &str = "cluster.partition_profiles";

/// Reads and checks the three CSVs of `dir`.
pub(super) fn load(dir: &str, read: Read<'_>) -> Result<Arc<PartitionData>, ScenarioError> {
    if dir.trim().is_empty() {
        return Err(err(KEY, "must name a folder"));
    }
    let file = |f: &str| {
        let path = format!("{}/{f}", dir.trim_end_matches('/'));
        read(&path).map_err(|e| err(KEY, format!("cannot read {path}: {e}")))
    };
    let profiles =
        PartitionProfiles::parse(&file("inference.csv")?, &file("interference.csv")?, &file("mem_util.csv")?)
            .map_err(|e| err(KEY, format!("{dir}/{e}")))?;
    PartitionData::new(profiles).map(Arc::new).map_err(|e| err(KEY, format!("{dir}: {e}")))
}

/// The profile row index and whole-GPU profile of a model with
/// `profile = name`; an error names the key that conflicts or is missing.
pub(super) fn model_profile(
    key: &dyn Fn(&str) -> String,
    data: Option<&PartitionData>,
    name: &str,
    m: &RawModel,
) -> Result<(usize, Profile), ScenarioError> {
    let conflicts = [
        ("alpha_ms", m.alpha_ms.is_some()),
        ("beta_ms", m.beta_ms.is_some()),
        ("latency_ms", m.latency_ms.is_some()),
        ("max_batch", m.max_batch.is_some()),
        ("apps", m.apps.is_some()),
        ("kappa", m.kappa.is_some()),
        ("prefix_of", m.prefix_of.is_some()),
        ("supernet", m.supernet.is_some()),
        ("subnets", m.subnets.is_some()),
    ];
    if let Some((k, _)) = conflicts.iter().find(|c| c.1) {
        return Err(err(key(k), "a model with `profile` takes its latencies from the partition profiles"));
    }
    let Some(data) = data else {
        return Err(err(key("profile"), "needs `cluster.partition_profiles`, the folder of measured profiles"));
    };
    let Some(index) = data.profiles.model(name) else {
        let known = data.profiles.models.join(", ");
        return Err(err(key("profile"), format!("no model `{name}` in the partition profiles; known: {known}")));
    };
    let whole = data
        .solo_profile(index, 100)
        .ok_or_else(|| err(key("profile"), format!("`{name}` is not measured on a whole GPU for batches 1 to 64")))?;
    Ok((index, whole))
}

#[cfg(test)]
mod tests {
    use crate::scenario::builder::ScenarioText;
    use crate::scenario::Scenario;

    /// Reads files relative to the shipped scenarios' folder.
    fn read(f: &str) -> Result<String, String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../perf/scenarios");
        std::fs::read_to_string(dir.join(f)).map_err(|e| e.to_string())
    }

    const GOOD: &str = r#"
name = "p"
[cluster]
gpus = 2
partition_profiles = "../data/partition-profiles"
[[models]]
name = "r"
profile = "resnet50"
slo_ms = 26.7
[[models]]
name = "v"
profile = "vgg16"
slo_ms = 38.1
[policy]
name = "glet"
"#;

    fn good() -> ScenarioText {
        ScenarioText::from_toml(GOOD).reading(std::rc::Rc::new(read))
    }

    #[test]
    fn a_profile_gives_the_whole_gpu_latencies() {
        let s = good().scenario();
        let data = s.partitions.as_deref().unwrap();
        let row = s.models[0].partition_profile.unwrap();
        assert_eq!(data.profiles.models[row], "resnet50");
        let p = &s.models[0].spec.profile;
        assert_eq!(p.max_batch(), 64);
        for b in [1, 7, 32, 64] {
            assert_eq!(Some(p.latency(b)), data.solo(row, b, 100));
        }
    }

    #[test]
    fn partition_keys_are_checked() {
        good().set("models[0].profile", "resnet5").rejected_at("models[0].profile");
        good().set("cluster.partition_profiles", "../data/nowhere").rejected_at("cluster.partition_profiles");
        good().add("models[0].alpha_ms", 1.0).rejected_at("models[0].alpha_ms");
        good().add("models[0].max_batch", 8).rejected_at("models[0].max_batch");
        good().remove("cluster.partition_profiles").rejected_at("models[0].profile");
        good().set("models[0].slo_ms", 4.0).rejected_at("models[0].slo_ms");
        let no_profile =
            good().remove("models[1].profile").add("models[1].alpha_ms", 1.0).add("models[1].beta_ms", 2.0);
        no_profile.rejected_at("policy.name");
        // Without --policy glet, a model without a profile is fine.
        assert!(no_profile.set("policy.name", "nexus").parse().is_ok());
        // Text parsed without a folder cannot name one.
        let e = Scenario::parse(GOOD).expect_err("no folder to read from");
        assert!(e.to_string().contains("cluster.partition_profiles"), "{e}");
    }
}
