//! glet experiments: `cargo run --release -p baton-perf --bin glet_bench`.

fn main() {
    let r = baton_perf::glet_bench::interference_fit();
    println!("{}", serde_json::to_string_pretty(&r).expect("serializes"));
    println!(
        "interference model fitted on {} measured pairs, tested on {} held out: {:.1}% within 10.3% \
         (p50 error {:.1}%, p90 {:.1}%); ignoring interference, p90 error {:.1}%",
        r.train_pairs,
        r.held_out_pairs,
        100.0 * r.within_10_3,
        100.0 * r.p50_error,
        100.0 * r.p90_error,
        100.0 * r.p90_error_ignoring
    );
}
