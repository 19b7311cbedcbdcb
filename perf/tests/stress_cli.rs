//! `stress` refuses bad input with its usage and exit 2, never a panic,
//! and serves any shipped policy's file.

use std::process::Command;

fn stress(args: &[&str]) -> (Option<i32>, String) {
    let (code, _, err) = stress_out(args);
    (code, err)
}

/// Its exit code, standard output and standard error.
fn stress_out(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stress")).args(args).output().expect("stress runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A static planner's file without a `rate_rps` (Nexus's fork-join
/// queries) is planned for the probe's rate: before, Nexus planned for
/// none and every request was dropped `NoBackend`. Slowness can make a
/// request late or shed it, never find it no backend; each is answered
/// once.
#[test]
fn a_static_planner_plans_for_the_rate_offered() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/nexus-forkjoin.toml");
    let (code, out, err) = stress_out(&[file, "--rates", "100", "--secs", "1", "--warmup", "0.5"]);
    assert_eq!(code, Some(0), "{err}");
    let line = out.lines().find(|l| l.contains("rate ")).unwrap_or_else(|| panic!("a probe's line: {out}"));
    assert!(!line.contains("NoBackend"), "{line}");
    assert!(line.contains("unanswered 0 duplicates 0"), "{line}");
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
