//! `stress` refuses bad input with its usage and exit 2, never a panic.

use std::process::Command;

fn stress(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stress")).args(args).output().expect("stress runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_input_is_a_usage_error() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/stress-64.toml");
    for (args, says) in [
        (vec![], "no scenario file"),
        (vec!["no-such-file.toml"], "no-such-file.toml"),
        (vec![file, "--gpus", "0"], "--gpus takes a count"),
        (vec![file, "--rates", "fast"], "--rates takes a number"),
        (vec![file, "--secs", "-1", "--rates", "1000"], "--secs takes a number"),
        (vec![file, "--probes"], "--probes takes a value"),
    ] {
        let (code, err) = stress(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says) && err.contains("usage: stress FILE"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
