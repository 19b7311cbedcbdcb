//! Scheduler-core speed on one core:
//! `cargo run --release -p baton-perf --bin sched_speed [-- --quick]`.

use baton_perf::sched_speed::{run, SpeedConfig};

fn main() {
    let is_quick = std::env::args().any(|a| a == "--quick");
    let base = if is_quick { SpeedConfig::quick() } else { SpeedConfig::full() };
    // At capacity most requests are batched; far above it most are shed.
    for overload in [1.0, 3.0] {
        report(&run(&SpeedConfig { overload, ..base.clone() }));
    }
}

fn report(r: &baton_perf::sched_speed::SpeedResult) {
    println!("{}", serde_json::to_string_pretty(&r).expect("result serializes"));
    println!(
        "{} models, {} backends, offered {:.0} r/s (virtual): {:.2} M requests/s decided on one core \
         ({:.0} ns each; {:.2} M/s batched, the rest dropped), {:.0} batches/s, mean batch {:.1}; \
         model shard {:.0}% of the time",
        r.models,
        r.backends,
        r.offered_rps_virtual,
        r.requests_per_s / 1e6,
        r.ns_per_request,
        r.batched_requests as f64 / r.wall_s / 1e6,
        r.batches_per_s,
        r.batched_requests as f64 / r.batches.max(1) as f64,
        r.model_shard_share * 100.0
    );
}
