//! glet experiments: `cargo run --release -p baton-perf --bin glet_bench`.

use baton_perf::glet_bench::{interference_fit, versus_ideal, MODELS};

fn main() {
    let r = interference_fit();
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
    println!("on paper, rates {{0, 100, 200}} r/s over {MODELS:?}, SLO 5x batch-1 latency:");
    for gpus in [1, 2, 3, 4] {
        let c = versus_ideal(gpus);
        let common = if c.ideal_max_rps > 0.0 {
            format!(
                "highest common rate glet {:.1} r/s, ideal {:.1} r/s ({:.1}%)",
                c.glet_max_rps,
                c.ideal_max_rps,
                100.0 * c.glet_max_rps / c.ideal_max_rps
            )
        } else {
            "all five together do not fit (two partitions per GPU)".to_string()
        };
        println!(
            "  {gpus} GPU(s): glet schedules {} of {} combinations, the exhaustive ideal {}; {common}",
            c.glet_schedulable, c.combinations, c.ideal_schedulable
        );
    }
}
