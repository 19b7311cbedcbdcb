//! Symphony's autoscaler over a day-shaped load (`scenarios/autoscale-day.toml`):
//! `cargo run --release -p baton-perf --bin autoscale_day [-- --out DIR]`
//! runs it twice on the same file, rate and seed — Symphony's flat-top
//! rule alone, and with peak sizing (`baton_sched::autoscale`) — and
//! prints each period of the sized run (offered load, its busiest
//! second, GPUs serving, bad rate, idle fraction, advice), the totals of
//! both — GPU-seconds used against the pool held all day, the day's bad
//! rate, how much the load swings from one period to the next — beside
//! the whole pool serving without scaling, and writes autoscale-day.svg:
//! GPUs serving under each rule against the GPUs the offered load needs.

use std::path::PathBuf;

use baton_perf::plot::{Plot, Series};
use baton_perf::{load_scenario, out_dir};
use baton_sched::autoscale::{AutoscaleConfig, PeakSizing};
use baton_sched::scenario::Scenario;
use baton_sched::sim::{run, run_autoscaled, Period};
use baton_sched::time::NANOS_PER_S;
use baton_sched::PolicyKind;

/// The busiest second of the last three periods (30 s: half an hour of
/// the trace).
const SIZING: PeakSizing = PeakSizing { window: NANOS_PER_S, memory: 6 };

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = out_dir(&args);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/autoscale-day.toml");
    let scenario = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
    let rate = scenario.rate_rps.expect("the scenario has a rate");
    let pool = scenario.cluster.backends as usize;
    let paper = AutoscaleConfig {
        period: 10 * NANOS_PER_S,
        threshold: 0.01,
        headroom: 0.1,
        min_gpus: 1,
        max_gpus: pool,
        initial: pool / 2,
        sizing: None,
    };
    let sized = AutoscaleConfig { sizing: Some(SIZING), ..paper };
    println!(
        "# {}: seed {}, mean {rate} r/s, pool {pool} GPUs, period {} s, threshold {}, headroom {}, start {} GPUs; \
         peak sizing: {} s windows, the last {} periods",
        scenario.name,
        scenario.seed,
        paper.period / NANOS_PER_S,
        paper.threshold,
        paper.headroom,
        paper.initial,
        SIZING.window / NANOS_PER_S,
        SIZING.memory
    );
    let flat_top = day(&scenario, rate, paper);
    let peaks = day(&scenario, rate, sized);
    println!("# periods under peak sizing");
    println!(
        "{:>8} {:>10} {:>10} {:>5} {:>9} {:>6} {:>5}",
        "start_s", "offered", "peak", "gpus", "bad", "idle", "next"
    );
    for p in &peaks {
        let s = &p.signals;
        println!(
            "{:>8.0} {:>10.0} {:>10.0} {:>5} {:>9.5} {:>6.3} {:>5}",
            p.start_s,
            p.offered_rps,
            s.peak_rps,
            s.gpus,
            s.bad_rate(),
            s.idle_fraction,
            p.next_gpus
        );
    }
    let per_gpu = summary("flat-top rule", &flat_top, &paper, pool).max(summary("peak sizing", &peaks, &sized, pool));
    let mut swings: Vec<f64> =
        peaks.windows(2).map(|w| (w[1].offered_rps / w[0].offered_rps.max(1.0) - 1.0).abs()).collect();
    swings.sort_by(f64::total_cmp);
    let offered = peaks.iter().map(|p| p.offered_rps);
    println!(
        "load per period: {:.0} to {:.0} r/s (busiest second {:.0} r/s); change from one period to the next: median {:.1}%, largest {:.1}%",
        offered.clone().fold(f64::INFINITY, f64::min),
        offered.fold(0.0, f64::max),
        peaks.iter().map(|p| p.signals.peak_rps).fold(0.0, f64::max),
        100.0 * swings[swings.len() / 2],
        100.0 * swings.last().copied().unwrap_or(0.0)
    );
    let fixed = run(&scenario, PolicyKind::Symphony, rate);
    println!(
        "fixed pool of {pool}: bad rate {:.5}, GPU idle {:.3}, unanswered {}",
        fixed.bad_rate, fixed.gpu_idle_fraction, fixed.checks.unanswered
    );
    let gpus = |name: &str, periods: &[Period], dashed| Series {
        name: name.into(),
        points: periods.iter().map(|p| (p.start_s, p.signals.gpus as f64)).collect(),
        dashed,
    };
    let plot = Plot {
        title: format!("{}: GPUs serving vs the load (one trace minute per second)", scenario.name),
        x_label: "time (s; a day compressed)".into(),
        y_label: "GPUs".into(),
        series: vec![
            gpus("peak sizing", &peaks, false),
            gpus("flat-top rule", &flat_top, false),
            Series {
                name: format!("mean load / {per_gpu:.0} r/s"),
                points: peaks.iter().map(|p| (p.start_s, p.offered_rps / per_gpu)).collect(),
                dashed: true,
            },
            Series {
                name: format!("busiest second / {per_gpu:.0} r/s"),
                points: peaks.iter().map(|p| (p.start_s, p.signals.peak_rps / per_gpu)).collect(),
                dashed: true,
            },
        ],
    };
    std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let file = out.join("autoscale-day.svg");
    std::fs::write(&file, plot.to_svg()).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    println!("wrote {}", file.display());
}

fn day(scenario: &Scenario, rate: f64, cfg: AutoscaleConfig) -> Vec<Period> {
    let (report, periods) = run_autoscaled(scenario, PolicyKind::Symphony, rate, cfg).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.checks.unanswered, 0, "every request ends once");
    periods
}

/// Prints a run's totals; returns the highest good rate per GPU it
/// reached in a period whose bad rate was under the threshold.
fn summary(name: &str, periods: &[Period], cfg: &AutoscaleConfig, pool: usize) -> f64 {
    let span = cfg.period as f64 / NANOS_PER_S as f64;
    let gpu_s: f64 = periods.iter().map(|p| p.signals.gpus as f64 * span).sum();
    let held = pool as f64 * span * periods.len() as f64;
    let (bad, ended) = periods.iter().fold((0, 0), |(b, e), p| (b + p.signals.bad, e + p.signals.ended));
    let over = periods.iter().filter(|p| p.signals.bad_rate() > cfg.threshold).count();
    let per_gpu = periods
        .iter()
        .filter(|p| p.signals.bad_rate() <= cfg.threshold)
        .map(|p| p.offered_rps / p.signals.gpus as f64)
        .fold(0.0, f64::max);
    println!(
        "{name}: GPU-seconds {gpu_s:.0} of {held:.0} held by a fixed pool ({:.1}%); day's bad rate {:.5} ({bad} of {ended}); \
         periods above {}: {over} of {}; unanswered 0; highest good rate per GPU {per_gpu:.0} r/s",
        100.0 * gpu_s / held,
        bad as f64 / ended.max(1) as f64,
        cfg.threshold,
        periods.len(),
    );
    per_gpu
}
