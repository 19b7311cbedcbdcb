//! The hostile-clients harness in its quick mode, as a process (it starts
//! its servers as children of itself): every phase's well-behaved load is
//! answered exactly once, every trickled request is served, and the
//! server's memory stays within reach of its idle size.

use std::process::Command;

#[test]
fn the_hostile_clients_harness_runs_and_accounts_for_every_request() {
    let out = Command::new(env!("CARGO_BIN_EXE_hostile")).args(["--quick", "--json"]).output().expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text.lines().last().expect("a JSON line last");
    let r: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let phases = r["phases"].as_array().expect("phases");
    assert_eq!(phases.len(), 8, "{r}");
    let idle = r["idle_rss_mib"].as_f64().unwrap();
    for p in phases {
        let l = &p["load"];
        assert_eq!((l["unanswered"].as_u64(), l["duplicates"].as_u64()), (Some(0), Some(0)), "{p}");
        assert!(l["ok"].as_u64().unwrap() > 0, "{p}");
        // Bounded, not growing with what the clients do: well under 1 GiB.
        assert!(p["peak_rss_mib"].as_f64().unwrap() < idle + 1024.0, "{p}");
    }
    let trickled = phases.iter().find(|p| p["name"] == "trickled partial frames").unwrap();
    assert!(trickled["hostile"].as_str().unwrap().contains("10 answered ok, 0 otherwise"), "{trickled}");
    assert_eq!(r["overload"].as_array().map(Vec::len), Some(2));
}
