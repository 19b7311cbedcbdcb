//! Hostile and careless clients against `baton serve`'s engine, with
//! well-behaved load meanwhile (`baton_perf::hostile`): the server's memory
//! and the load's in-SLO rate with 10,000 idle connections, a client that
//! never reads (with the bound on unread answers and without), partial
//! frames trickled a byte at a time, and the load at 2x and 5x.
//!
//! `cargo run --release -p baton-perf --bin hostile -- [--scenario FILE]
//! [--rate R] [--secs S] [--idle N] [--trickled N] [--max-unread-bytes B]
//! [--quick] [--json]`
//!
//! Defaults: Table 4's ResNet50 file at 5,000 r/s (about the engine's
//! goodput there, perf/results/engine_bench.txt), 10 s phases, 10,000 idle
//! connections, 200 trickled, the non-reading client cut off past 1 MiB
//! of unread answers (the engine's default is 64 MiB; a lower bound makes
//! the cut come within a phase). Check `uptime` first.

use baton_perf::hostile::{print, run, serve_child, ChildArgs, Config};

fn flag(args: &[String], name: &str) -> Option<String> {
    let i = args.iter().position(|a| a == name)?;
    Some(args.get(i + 1).unwrap_or_else(|| panic!("{name} takes a value")).clone())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--serve-child") {
        let scenario = args[i + 1].clone().into();
        let max_unread = args[i + 2].parse().expect("a byte count");
        return serve_child(&ChildArgs { scenario, max_unread });
    }
    let quick = args.iter().any(|a| a == "--quick");
    let number = |name: &str, default: f64| {
        flag(&args, name).map_or(default, |v| v.parse().unwrap_or_else(|_| panic!("{name} takes a number")))
    };
    let default_file = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/scenarios/table4-resnet50.toml");
    let c = Config {
        scenario: flag(&args, "--scenario").unwrap_or(default_file.into()).into(),
        rate_rps: number("--rate", if quick { 500.0 } else { 5_000.0 }),
        secs: number("--secs", if quick { 1.0 } else { 10.0 }),
        idle_connections: number("--idle", if quick { 500.0 } else { 10_000.0 }) as usize,
        trickled: number("--trickled", if quick { 10.0 } else { 200.0 }) as usize,
        max_unread: number("--max-unread-bytes", (1 << 20) as f64) as usize,
        factors: vec![2.0, 5.0],
    };
    let r = run(&c);
    print(&r);
    if args.iter().any(|a| a == "--json") {
        println!("{}", serde_json::to_string(&r).expect("serialises"));
    }
}
