//! Prefix batching (Nexus) through the three roles: requests of a group's
//! members share batches that run the trunk once and each member's head.

use baton_wire::fb;

use super::*;

/// Three variants of one network sharing its prefix, on two GPUs.
const GROUP: &str = r#"
name = "prefix"
seed = 5
[cluster]
gpus = 2
ctrl_delay_us = 0
[[prefixes]]
name = "trunk"
alpha_ms = 1.0
beta_ms = 5.0
[[models]]
name = "v0"
prefix_of = "trunk"
alpha_ms = 0.01
beta_ms = 0.05
slo_ms = 50.0
[[models]]
name = "v1"
prefix_of = "trunk"
alpha_ms = 0.01
beta_ms = 0.05
slo_ms = 50.0
[[models]]
name = "v2"
prefix_of = "trunk"
alpha_ms = 0.01
beta_ms = 0.05
slo_ms = 50.0
[policy]
name = "nexus"
"#;

/// Requests of the three variants, round robin, 1 ms apart: each is
/// answered once with its own model's output (the emulated trunk's heads
/// add their index), and batches mix variants (answers of one batch —
/// the same start and finish — name more than one model).
#[test]
fn a_prefix_batch_serves_each_member_with_its_own_head() {
    let mut c = Cluster::planned(GROUP, PolicyKind::Nexus, 1 << 20, 1_000.0);
    let n = 600u64;
    let requests = (0..n)
        .map(|i| (i * 1_000_000, request(i, ["v0", "v1", "v2"][i as usize % 3], 50.0, &[i as f32, 1.0, 2.0, 3.0])));
    c.run(requests.collect());
    assert_eq!(c.answers.len() as u64, n);
    for (_, a) in &c.answers {
        assert_eq!(a.status, fb::Status::Ok, "{a:?}");
        let head = (a.id % 3) as f32;
        let out = f32s(a.outputs.as_ref().unwrap()[0].data.as_ref().unwrap());
        assert_eq!(out[0], a.id as f32 + 6.0 + head, "request {} answered with another head's output", a.id);
    }
    let sizes: u32 = c.done.iter().map(|d| d.batch_size).sum();
    assert_eq!(sizes as u64, n, "every request ran once");
    let mut variants_of_batch = std::collections::HashMap::<(u64, u64), Vec<u64>>::new();
    for (_, a) in &c.answers {
        let t = a.timing.as_ref().expect("an ok answer says its batch's times");
        variants_of_batch.entry((t.started_ns, t.finished_ns)).or_default().push(a.id % 3);
    }
    let mixed = variants_of_batch.values().filter(|v| v.iter().any(|&x| x != v[0])).count();
    assert!(mixed > variants_of_batch.len() / 2, "{mixed} of {} batches mix variants", variants_of_batch.len());
    assert_eq!(c.sched.stats.refused, 0);
}
