//! glet experiments: `cargo run --release -p baton-perf --bin glet_bench [-- --quick]`.
//! The interference fit and elastic versus the ideal on paper, then the
//! three experiments through the simulator (`glet_sim.rs`).

use baton_perf::glet_bench::{interference_fit, versus_ideal as on_paper, MODELS};
use baton_perf::glet_sim::{
    goodputs, goodputs_without_interference, noint_breaks, versus_ideal, IDEAL_MODELS, SCENARIOS,
};
use baton_sched::PolicyKind;

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
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
    if !quick {
        println!(
            "on paper, one model per partition, rates {{0, 100, 200}} r/s over {MODELS:?}, SLO 5x batch-1 latency:"
        );
        for gpus in [1, 2, 3, 4] {
            let c = on_paper(gpus);
            let common = if c.ideal_max_rps > 0.0 {
                format!("highest common rate elastic {:.1} r/s, ideal {:.1} r/s", c.glet_max_rps, c.ideal_max_rps)
            } else {
                "all five together do not fit (two partitions per GPU)".to_string()
            };
            println!(
                "  {gpus} GPU(s): elastic schedules {} of {} combinations, the exhaustive ideal {}; {common}",
                c.glet_schedulable, c.combinations, c.ideal_schedulable
            );
        }
    }
    let (duration, tolerance) = if quick { (Some(2.0), 0.03) } else { (None, 0.01) };
    let names: &[&str] = if quick { &SCENARIOS[4..6] } else { &SCENARIOS };
    println!("\n1. highest SLO-preserving rate (r/s; every model at most 1% late or dropped), 4 GPUs, simulated:");
    print!("{:<14}", "scenario");
    for p in PolicyKind::GLET_SET {
        print!(" {:>12}", p.as_str());
    }
    println!(" {:>10} {:>12}", "glet/sbp", "glet/greedy");
    let rows = goodputs(names, &PolicyKind::GLET_SET, duration, tolerance);
    let (mut vs_sbp, mut vs_greedy) = (Vec::new(), Vec::new());
    for r in &rows {
        print!("{:<14}", r.scenario);
        for p in PolicyKind::GLET_SET {
            print!(" {:>12.1}", r.of(p));
        }
        let (a, b) =
            (r.of(PolicyKind::Glet) / r.of(PolicyKind::Sbp), r.of(PolicyKind::Glet) / r.of(PolicyKind::GreedyPart));
        vs_sbp.push(a);
        vs_greedy.push(b);
        println!(" {a:>10.3} {b:>12.3}");
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "mean glet/sbp {:.3} ({:+.1}%), glet/greedy-part {:.3} ({:+.1}%)",
        mean(&vs_sbp),
        100.0 * (mean(&vs_sbp) - 1.0),
        mean(&vs_greedy),
        100.0 * (mean(&vs_greedy) - 1.0)
    );
    println!("\n1b. the same on a counterfactual GPU whose partitions never slow each other:");
    let free = goodputs_without_interference(names, &[PolicyKind::Glet, PolicyKind::Sbp], duration, tolerance);
    let mut ratios = Vec::new();
    for r in &free {
        let ratio = r.of(PolicyKind::Glet) / r.of(PolicyKind::Sbp);
        ratios.push(ratio);
        println!(
            "{:<14} glet {:>10.1}  sbp {:>10.1}  glet/sbp {ratio:.3}",
            r.scenario,
            r.of(PolicyKind::Glet),
            r.of(PolicyKind::Sbp)
        );
    }
    println!("mean glet/sbp without interference {:.3} ({:+.1}%)", mean(&ratios), 100.0 * (mean(&ratios) - 1.0));
    let models: Vec<&str> = IDEAL_MODELS.iter().map(|m| m.0).collect();
    println!(
        "\n2. glet versus the exhaustive ideal, every combination of {{0, 100, 200}} r/s over {models:?} \
         (SLO twice the batch-32 latency), simulated:"
    );
    let gpu_counts: &[usize] = if quick { &[2] } else { &[1, 2, 3, 4] };
    for &gpus in gpu_counts {
        let c = versus_ideal(gpus, if quick { 1.0 } else { 5.0 }, tolerance);
        println!(
            "  {gpus} GPU(s): schedulable (planned and <= 1% bad) glet {} / ideal {} of {} (planned on paper: glet {}, \
             ideal {}); all five at one rate: glet {:.1} r/s, ideal {:.1} r/s ({:.1}%)",
            c.glet_schedulable,
            c.ideal_schedulable,
            c.combinations,
            c.glet_planned,
            c.ideal_planned,
            c.glet_goodput_rps,
            c.ideal_goodput_rps,
            100.0 * c.glet_goodput_rps / c.ideal_goodput_rps.max(1e-9)
        );
    }
    println!("\n3. at the highest rate glet-noint plans on paper (4 GPUs), simulated worst per-model bad rate:");
    println!("{:<14} {:>12} {:>12} {:>22}", "scenario", "rate r/s", "glet-noint", "glet");
    for r in noint_breaks(names, duration) {
        let glet = match r.glet_bad_rate {
            None => "refuses the rate".to_string(),
            Some(b) => format!("{:.4}", b),
        };
        println!("{:<14} {:>12.1} {:>12.4} {:>22}", r.scenario, r.noint_max_rps, r.noint_bad_rate, glet);
    }
}
