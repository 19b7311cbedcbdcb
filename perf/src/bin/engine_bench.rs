//! The engine end to end: `cargo run --release -p baton-perf --bin engine_bench [-- --quick]`.

use baton_perf::engine_bench::{table4, throughput};
use baton_perf::overhead::one_line;

/// One more run of the same load, next to `serve`'s in-SLO throughput.
fn side_by_side(what: &str, r: &baton_perf::load::LoadReport, serve_rps: f64) {
    println!(
        "  the same load with {what}: in SLO {:.1} r/s (ratio to serve {:.3}), ok {} late {} dropped {} unanswered {}",
        r.goodput_rps,
        r.goodput_rps / serve_rps,
        r.ok,
        r.late,
        r.dropped,
        r.unanswered
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let secs = if quick { 1.0 } else { 10.0 };
    // `--throughput` runs only part 2.
    let only_throughput = std::env::args().any(|a| a == "--throughput");
    let (engine_cores, generator_cores) = baton_perf::engine_bench::placement();
    let any = |c: &[usize]| if c.is_empty() { "any".to_string() } else { format!("{c:?}") };
    println!(
        "engine on cores {}, load generator on cores {}",
        any(engine_cores.as_deref().unwrap_or(&[])),
        any(&generator_cores)
    );
    let e = (!only_throughput).then(|| table4(secs, if quick { 2 } else { 8 }));
    if let Some(e) = &e {
        print_table4(e);
    }
    let t =
        throughput(if quick { 5_000.0 } else { 20_000.0 }, if quick { 1.0 } else { 5.0 }, if quick { 0 } else { 3 });
    println!("highest sustained rate (tiny requests, 16 emulated GPUs): {:.0} r/s", t.sustained_rps);
    println!(
        "  at half ({:.0} r/s): latency p50 {:.3} ms p99 {:.3} ms; mean batch {:.2}",
        t.half.offered_rps, t.half.p50_ms, t.half.p99_ms, t.half.mean_batch
    );
    println!("  {}", one_line(&t.half.overhead));
    if let Some(p) = &t.half_polled {
        println!(
            "  at half, the engine busy-polling ({} µs) and the generator spinning: latency p50 {:.3} ms p99 {:.3} ms",
            baton_perf::engine_bench::LATENCY_POLL.as_micros(),
            p.p50_ms,
            p.p99_ms
        );
        println!("  {}", one_line(&p.overhead));
    }
    if std::env::args().any(|a| a == "--json") {
        println!("{}", serde_json::json!({ "table4": e, "throughput": t }));
    }
}

fn print_table4(e: &baton_perf::engine_bench::EndToEnd) {
    println!(
        "Table 4 ResNet50 goodput (highest rate at <= 1% bad): engine {:.1} r/s, sim {:.1} r/s, ratio {:.3} ({} probes)",
        e.engine_goodput_rps,
        e.sim_goodput_rps,
        e.goodput_ratio,
        e.goodput_probes.len()
    );
    println!(
        "  at sim goodput {:.0} r/s: engine in SLO {:.1} r/s, bad rate {:.4}, ok {} late {} (late by the engine's clock {}) dropped {} of {}; p50 {:.2} ms p99 {:.2} ms; mean batch {:.2}",
        e.rate_rps,
        e.engine.goodput_rps,
        e.engine.bad_rate,
        e.engine.ok,
        e.engine.late,
        e.server_late,
        e.engine.dropped,
        e.engine.sent,
        e.engine.p50_ms,
        e.engine.p99_ms,
        e.engine.mean_batch,
    );
    println!("  {}", one_line(&e.engine.overhead));
    side_by_side("frontend, scheduler and backends over TCP", &e.roles_over_tcp, e.engine.goodput_rps);
    println!("  {}", one_line(&e.roles_over_tcp.overhead));
    println!(
        "  goodput with frontend, scheduler and backends over TCP: {:.1} r/s, ratio to sim {:.3} ({} probes)",
        e.roles_goodput_rps,
        e.roles_goodput_rps / e.sim_goodput_rps,
        e.roles_goodput_probes.len()
    );
    side_by_side("Symphony's model shard on its own shard", &e.split_symphony, e.engine.goodput_rps);
}
