//! Prefix batching served by the engine (Nexus's Figure 14(a) shape): one
//! GPU, k equally popular ResNet-50 variants sharing their prefix; goodput
//! with the prefix batched (one scenario with a `[[prefixes]]` group) and
//! with every variant whole and apart (the same models, no group), each
//! found by search in `baton sim` and in the engine (Nexus, the emulated
//! GPU, the client's view):
//! `cargo run --release -p baton-perf --bin engine_prefix -- [--secs S] [--probes N] [K..]`.
//! Check `uptime` first: the engine needs both cores.

use baton_perf::engine_bench::{engine_goodput, probe, sim_goodput};
use baton_perf::nexus_bench::game_text;
use baton_sched::{PolicyKind, Scenario};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str, default: f64| {
        let i = args.iter().position(|a| a == name);
        i.map_or(default, |i| args.get(i + 1).and_then(|v| v.parse().ok()).expect("a number after the flag"))
    };
    let (secs, probes) = (flag("--secs", 5.0), flag("--probes", 5.0) as usize);
    let ks: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || !args[i - 1].starts_with("--")))
        .map(|(_, a)| a.parse().expect("a variant count"))
        .collect();
    let ks = if ks.is_empty() { vec![1, 2, 4, 6, 8, 10] } else { ks };
    println!("variants  sim batched  sim apart  engine batched  engine apart  (goodput r/s; engine/sim)");
    for k in ks {
        let scenario = |shared: bool| {
            let mut s = Scenario::parse(&game_text(k, 0, 1, shared)).expect("valid game scenario");
            s.models.iter_mut().for_each(|m| m.weight = 1.0);
            (s.policy, s.duration, s.warmup) = (PolicyKind::Nexus, (secs * 1e9) as u64, 0);
            s
        };
        // Where the simulator fits nothing the engine is not searched.
        let goodputs = |s: &Scenario| {
            let sim = sim_goodput(s);
            let engine = match sim > 0.0 {
                true => engine_goodput(sim, probes, &|r| probe(s, r, secs)).0,
                false => 0.0,
            };
            (sim, engine)
        };
        let ratio = |e: f64, s: f64| if s > 0.0 { format!("({:.3})", e / s) } else { "(—)".into() };
        let ((sb, eb), (sa, ea)) = (goodputs(&scenario(true)), goodputs(&scenario(false)));
        println!("{k:>8}  {sb:>11.0}  {sa:>9.0}  {eb:>8.0} {}  {ea:>6.0} {}", ratio(eb, sb), ratio(ea, sa));
    }
}
