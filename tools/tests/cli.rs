//! The `baton` command line as users meet it: the documented flags work,
//! JSON carries the documented fields, and bad scenarios are rejected with a
//! message naming the key, before anything runs.

use std::path::PathBuf;
use std::process::{Command, Output};

fn baton(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_baton")).args(args).output().expect("baton runs")
}

fn scenario(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../perf/scenarios").join(name).display().to_string()
}

fn write_temp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("baton-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp file");
    path.display().to_string()
}

#[test]
fn sim_json_has_the_documented_fields() {
    let out = baton(&["sim", &scenario("table4-resnet50.toml"), "--rate", "3000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in ["offered_rps", "goodput_rps", "bad_rate", "gpu_idle_fraction"] {
        assert!(v[key].is_number(), "missing {key}");
    }
    let m = &v["models"][0];
    for key in ["p99_ms", "bad_rate", "mean_batch"] {
        assert!(m[key].is_number(), "missing models[0].{key}");
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("seed 7"), "the seed is printed");
}

#[test]
fn find_goodput_and_policy_override() {
    let out =
        baton(&["sim", &scenario("table4-inceptionresnetv2.toml"), "--find-goodput", "--policy", "nexus", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["policy"], "nexus");
    assert!(v["goodput_rps"].as_f64().expect("number") > 100.0);
}

#[test]
fn bad_input_is_rejected_with_the_key_named() {
    let good = std::fs::read_to_string(scenario("table4-resnet50.toml")).expect("readable");
    let cases = [
        ("unknown.toml", good.replace("seed = 7", "seed = 7\ncolour = \"red\""), "colour"),
        ("zero-gpus.toml", good.replace("gpus = 8", "gpus = 0"), "cluster.gpus"),
        ("tight-slo.toml", good.replace("slo_ms = 25.0", "slo_ms = 2.0"), "slo_ms"),
        ("bad-arrival.toml", good.replace("\"poisson\"", "\"gamma:0\""), "arrival"),
    ];
    for (name, text, key) in cases {
        let out = baton(&["sim", &write_temp(name, &text), "--rate", "100"]);
        assert_eq!(out.status.code(), Some(2), "{name} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{name}: `{err}` does not name {key}");
        assert!(out.stdout.is_empty(), "{name}: nothing runs half-configured");
    }
    let out = baton(&["sim", &scenario("table4-resnet50.toml"), "--rate", "100", "--policy", "fifo"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policy"));
    let out = baton(&["sim", &scenario("table4-resnet50.toml"), "--rate", "-5"]);
    assert_ne!(out.status.code(), Some(0));
    let out = baton(&["sim", "/nonexistent/scenario.toml", "--rate", "100"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn trace_writes_an_azure_schema_file_that_scenarios_read() {
    let dir = std::env::temp_dir().join(format!("baton-cli-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let csv = dir.join("day.csv");
    let out = baton(&["trace", "--out", csv.to_str().expect("utf-8"), "--functions", "30", "--seed", "5"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&csv).expect("written");
    assert!(text.starts_with("HashOwner,HashApp,HashFunction,Trigger,1,2,3"));
    assert_eq!(text.lines().count(), 31);
    let scenario = dir.join("s.toml");
    std::fs::write(
        &scenario,
        "name = \"t\"\nduration_s = 2\nwarmup_s = 0.5\n[cluster]\ngpus = 2\n[[models]]\nname = \"m\"\n\
         supernet = \"default\"\nmax_batch = 16\nslo_ms = 36.0\narrival = \"trace:day.csv\"\n",
    )
    .expect("written");
    let out = baton(&["sim", scenario.to_str().expect("utf-8"), "--rate", "500", "--policy", "slackfit", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v["mean_accuracy"].as_f64().expect("supernet runs report accuracy") >= 73.0);
    std::fs::write(dir.join("day.csv"), "not,a,trace\n").expect("written");
    let out = baton(&["sim", scenario.to_str().expect("utf-8"), "--rate", "500"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("models[0].arrival"));
}

#[test]
fn partition_policies_plan_and_simulate_glet_scenarios() {
    let out = baton(&["plan", &scenario("glet-scen3.toml"), "--policy", "glet", "--rate", "2000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v["rate_scale"].as_f64().expect("a plan") >= 1.0, "2000 r/s is schedulable on 4 GPUs");
    let parts = v["partitions"].as_array().expect("partitions");
    for gpu in 0..4 {
        let sum: u64 = parts.iter().filter(|p| p["gpu"] == gpu).map(|p| p["percent"].as_u64().expect("size")).sum();
        assert!(sum <= 100, "GPU {gpu} split into {sum}%");
    }
    let out = baton(&["sim", &scenario("glet-scen3.toml"), "--policy", "sbp", "--rate", "2000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A partition policy on a scenario without partition profiles is refused before running.
    let out = baton(&["sim", &scenario("table4-resnet50.toml"), "--policy", "glet", "--rate", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("partition_profiles"));
    let out = baton(&["plan", &scenario("table4-resnet50.toml"), "--policy", "greedy-part", "--rate", "100"]);
    assert_eq!(out.status.code(), Some(2));
}
