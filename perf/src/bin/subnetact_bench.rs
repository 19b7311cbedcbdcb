//! SubNetAct memory and switch cost: `cargo run --release -p baton-perf --bin subnetact_bench [-- --quick]`.

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let r = baton_perf::subnetact_bench::run(if quick { 2 } else { 20 });
    println!("{}", serde_json::to_string_pretty(&r).expect("serializes"));
    println!(
        "{} subnets: supernet {} parameters vs {} extracted separately ({:.2}x); per batch of 16: {:.1} µs grouped, \
         {:.1} µs alternating subnets (switch {:+.2} µs); copying the largest subnet out: {:.0} µs",
        r.subnets,
        r.supernet_params,
        r.extracted_params,
        r.memory_ratio,
        r.grouped_us,
        r.alternating_us,
        r.switch_us,
        r.extract_us
    );
}
