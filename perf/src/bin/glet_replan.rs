//! How long one glet re-plan takes: `cargo run --release -p baton-perf
//! --bin glet_replan -- FILE RATE`. The engine re-plans on its scheduler's
//! shard (`[policy] epoch_s`, `sched/src/glet/epochs.rs`), so every request
//! waits that long at each re-plan; the simulator's virtual time does not
//! see it. Plans the file's partition-policy demands (its policy, glet if
//! it names none of the partition policies) at RATE scaled by 0.5 to 1.5,
//! repeatedly for 300 ms each, and prints the mean time a plan.

use std::time::{Duration, Instant};

use baton_perf::load_scenario;
use baton_sched::build::serving;
use baton_sched::glet::{plan_for_gpus, Demand, Planner};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, rate] = &args[..] else { return Err("usage: glet_replan FILE RATE".into()) };
    let rate: f64 = rate.parse().map_err(|e| format!("RATE: {e}"))?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("RATE: a positive rate in requests/s, got {rate}"));
    }
    let scenario = load_scenario(std::path::Path::new(file))?;
    let planner = Planner::of(scenario.policy).unwrap_or(Planner::Glet);
    let serving = serving(planner, &scenario, rate)?;
    let gpus = scenario.cluster.backends as usize;
    for scale in [0.5, 0.8, 1.0, 1.2, 1.5] {
        let demands: Vec<Demand> =
            serving.demands.iter().map(|d| Demand { rate_rps: d.rate_rps * scale, ..*d }).collect();
        let (start, mut plans) = (Instant::now(), 0u32);
        while start.elapsed() < Duration::from_millis(300) {
            std::hint::black_box(plan_for_gpus(planner, serving.data, &demands, gpus));
            plans += 1;
        }
        let ms = start.elapsed().as_secs_f64() * 1e3 / f64::from(plans);
        println!("{file} at {:.1} r/s: {ms:.2} ms a plan ({plans} plans)", rate * scale);
    }
    Ok(())
}
