//! perf/README.md quotes only what perf/results/ holds: its results
//! regions are what `render_readme` renders from the stored results.

use baton_perf::readme::{readme_path, render, results_dir};

#[test]
fn perf_readme_agrees_with_the_stored_results() {
    let path = readme_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rendered = render(&text, &results_dir()).unwrap_or_else(|e| panic!("{e}"));
    if rendered != text {
        let diff: Vec<String> = text
            .lines()
            .zip(rendered.lines())
            .filter(|(a, b)| a != b)
            .take(5)
            .map(|(a, b)| format!("  README:   {a}\n  results:  {b}"))
            .collect();
        panic!(
            "perf/README.md disagrees with perf/results/; run `cargo run -p baton-perf --bin render_readme`\n{}",
            diff.join("\n")
        );
    }
    for name in [
        "sched_speed",
        "hull_bench",
        "subnetact_bench",
        "orloj_grid",
        "flat_top",
        "engine_bench",
        "cuda_serve_h100",
        "engine_seeds",
    ] {
        assert!(text.contains(&format!("<!-- results:{name} -->")), "perf/README.md lost its `{name}` region");
    }
}
