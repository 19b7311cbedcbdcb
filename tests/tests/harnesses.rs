//! Every perf harness in its quick mode, asserting its output is sane, so
//! none of them rots. The numbers themselves come from the full runs.

use baton_perf::flat_top::run_flat_top;
use baton_perf::sched_speed::{run as sched_speed, SpeedConfig};
use baton_perf::{compare_policies, load_scenario, quick, shipped_scenarios, staggered_bound_rps};
use baton_sched::{PolicyKind, Scenario};

fn scenario(name: &str) -> Scenario {
    let path = shipped_scenarios().into_iter().find(|p| p.ends_with(name)).expect("a shipped scenario");
    quick(load_scenario(&path).expect("shipped scenario parses"))
}

fn goodput(rows: &[baton_perf::ComparisonRow], policy: PolicyKind) -> f64 {
    rows.iter().find(|r| r.policy == policy.as_str()).expect("policy ran").goodput_rps
}

#[test]
fn goodput_table_orders_policies_sanely() {
    for (file, min_vs_clockwork) in [("table4-resnet50.toml", 1.5), ("zoo-1080ti-gt2.toml", 2.0)] {
        let s = scenario(file);
        let rows = compare_policies(&s, &PolicyKind::SYMPHONY_SET, 0.05);
        let sym = goodput(&rows, PolicyKind::Symphony);
        for other in &PolicyKind::SYMPHONY_SET[1..] {
            assert!(sym >= 0.95 * goodput(&rows, *other), "{file}: symphony below {}", other.as_str());
        }
        assert!(sym >= min_vs_clockwork * goodput(&rows, PolicyKind::Clockwork), "{file}: symphony vs clockwork");
        assert!(goodput(&rows, PolicyKind::Nexus) >= 0.95 * goodput(&rows, PolicyKind::Nexus8Fe), "{file}: nexus");
        if let Some(bound) = staggered_bound_rps(&s) {
            assert!(sym <= 1.02 * bound, "{file}: symphony above the analytic bound");
            assert!(sym >= 0.8 * bound, "{file}: symphony far below the analytic bound");
        }
    }
}

#[test]
fn flat_top_holds_for_symphony_and_not_for_clockwork() {
    let s = scenario("flat-top.toml");
    let policies = [PolicyKind::Symphony, PolicyKind::SymphonyFrontrun, PolicyKind::Clockwork];
    let ft = run_flat_top(&s, &policies, 0.05);
    for policy in ["symphony", "symphony-frontrun"] {
        for x in ft.series(policy).filter(|x| x.load_factor > 1.0) {
            assert!(x.in_slo_rps >= 0.95 * x.goodput_rps, "{policy} fell off the top at {}x", x.load_factor);
        }
    }
    // Waiting for full batches makes idle time the autoscaling signal.
    for x in ft.series("symphony-frontrun").filter(|x| x.load_factor < 1.0) {
        let ideal = 1.0 - x.load_factor;
        assert!((x.gpu_idle_fraction - ideal).abs() < 0.1, "idle {} vs (p-o)/p {ideal}", x.gpu_idle_fraction);
    }
    let clockwork_at_3 = ft.series("clockwork").last().expect("points").in_slo_rps;
    let clockwork_peak = ft.series("clockwork").map(|x| x.in_slo_rps).fold(0.0, f64::max);
    assert!(clockwork_at_3 < 0.9 * clockwork_peak, "clockwork did not fall under overload");
    let svg = ft.plots(&policies).0.to_svg();
    assert!(svg.starts_with("<svg") && svg.contains("polyline"));
}

#[test]
fn sched_speed_schedules_and_batches() {
    let r = sched_speed(&SpeedConfig::quick());
    assert!(r.batches > 0 && r.requests_per_s > 0.0);
    assert!(r.batched_requests + r.dropped <= r.requests);
    // Far above capacity, batches stay large: shedding keeps them efficient.
    assert!(r.batched_requests as f64 / r.batches as f64 >= 8.0, "mean batch collapsed");
}

#[test]
fn orloj_grid_beats_the_baselines_where_distributions_matter() {
    let cells = baton_perf::orloj_grid::run_grid(3.0);
    assert_eq!(cells.len(), 16);
    for c in &cells {
        let orloj = c.finish[0].1;
        for (name, f) in &c.finish[1..] {
            // Quick runs are short: allow noise, never a clear loss.
            assert!(orloj >= f - 0.05, "{} {}x: orloj {orloj} below {name} {f}", c.shape, c.slo_multiple);
        }
        if c.shape != "normal" && c.slo_multiple <= 1.5 {
            assert!(c.orloj_gain >= 1.2, "{} {}x: gain only {}", c.shape, c.slo_multiple, c.orloj_gain);
        }
    }
    let s = scenario("table4-resnet50.toml");
    let check = baton_perf::orloj_grid::static_check(&s, 0.05);
    assert!(check.ratio >= 0.9, "orloj at {} of symphony on a static model", check.ratio);
}

#[test]
fn hull_queue_beats_resorting() {
    let rows = baton_perf::hull_bench::run(&[10, 1_000], 2_000);
    let big = rows.last().expect("rows");
    assert!(big.query_speedup > 5.0, "query only {}x faster than re-sorting 1k", big.query_speedup);
    assert!(rows.iter().all(|r| r.insert_ns > 0.0 && r.delete_ns > 0.0));
}

#[test]
fn nexus_early_drop_prefix_batching_and_plans() {
    for r in baton_perf::nexus_bench::early_vs_lazy(3.0, 0.05) {
        assert!(r.early_rps >= 0.95 * r.lazy_rps, "alpha {}: early {} lazy {}", r.alpha_ms, r.early_rps, r.lazy_rps);
    }
    let rows = baton_perf::nexus_bench::prefix_scaling(4, 2.0, 0.05);
    assert!(rows[3].batched_rps > 1.5 * rows[3].unbatched_rps, "prefix batching gains nothing at 4 variants");
    for r in baton_perf::nexus_bench::latency_split(&[1.0, 10.0]) {
        assert!(r.dp_rps_per_gpu >= r.even_rps_per_gpu, "gamma {}: the DP split lost to the even one", r.gamma);
    }
    let game = baton_perf::nexus_bench::game_scenario(20, 5, 1);
    for p in baton_perf::nexus_bench::plan_vs_bound(&game, &[2_000.0, 20_000.0]) {
        assert!(p.gpus as f64 >= p.lower_bound_gpus, "a plan below the lower bound");
        assert!(p.gpus as u32 <= p.batch_oblivious_gpus, "squishy bin packing worse than batch-oblivious");
        assert!(p.gpus <= p.gpus_without_prefix_batching);
    }
    let shift = baton_perf::load_scenario(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../perf/scenarios/nexus-shift.toml"),
    )
    .expect("shipped scenario parses");
    let rows = baton_perf::nexus_bench::epochs(&shift, &[None, Some(2.0)], 0.05);
    assert!(rows[1].goodput_rps > rows[0].goodput_rps, "re-planning lost to planning once on a shifting mix: {rows:?}");
}

#[test]
fn slackfit_keeps_attainment_and_beats_fixed_accuracy() {
    for c in baton_perf::superserve_bench::bursty_grid(2.0) {
        assert!(c.slackfit_wins(0.99), "rate {} CV2 {}: {:?}", c.rate_rps, c.cv2, c.points);
    }
    let phases = baton_perf::superserve_bench::faults(2.0);
    assert!(phases.iter().all(|p| p.attainment >= 0.99), "{phases:?}");
    assert!(phases.first().expect("phases").mean_accuracy > phases.last().expect("phases").mean_accuracy);
}

#[test]
fn subnetact_shares_weights_and_switches_cheaply() {
    let r = baton_perf::subnetact_bench::run(1);
    assert!(r.memory_ratio > 2.0, "weight sharing saves only {}x", r.memory_ratio);
    assert!(r.grouped_us > 0.0 && r.alternating_us > 0.0 && r.extract_us > 0.0);
}

#[test]
fn glet_interference_model_beats_ignoring_interference() {
    let r = baton_perf::glet_bench::interference_fit();
    assert!(r.held_out_pairs > 500, "the shipped data has thousands of measured pairs");
    assert!(r.p90_error < r.p90_error_ignoring, "the fitted model must predict better than no model");
    let p = baton_perf::glet_bench::shipped_profiles();
    for m in [
        "densenet121",
        "densenet169",
        "densenet201",
        "inception",
        "mobilenet",
        "resnet50",
        "resnet101",
        "resnet152",
        "vgg16",
        "vgg19",
    ] {
        assert!(p.model(m).is_some(), "{m} is not in the profiles");
    }
    let r50 = p.model("resnet50").expect("resnet50 is measured");
    // More SMs never slow a large batch down.
    assert!(p.latency(r50, 64, 100) <= p.latency(r50, 64, 20));
}

#[test]
fn glet_elastic_plans_are_valid_and_never_beat_the_exhaustive_ideal() {
    use baton_sched::glet::{elastic, ideal, scale, Demand, Interference};
    let p = baton_perf::glet_bench::shipped_profiles();
    let fit = baton_perf::glet_bench::interference_fit();
    let intf = Interference::Model(&fit.model);
    let mut rng = baton_sched::rng::Rng::new(7);
    let (mut planned, mut refused) = (0, 0);
    for _ in 0..40 {
        let demands: Vec<Demand> = baton_perf::glet_bench::MODELS[..3]
            .iter()
            .map(|m| {
                let model = p.model(m).unwrap();
                let slo = (2 + rng.below(6)) * p.measured(model, 1, 100).unwrap();
                Demand { model, rate_rps: (rng.below(8) * 100) as f64, slo }
            })
            .collect();
        let gpus = 1 + rng.below(3) as usize;
        let e = elastic(&p, intf, &demands, gpus);
        planned += usize::from(e.is_some());
        refused += usize::from(e.is_none());
        if let Some(plan) = &e {
            assert!(plan.gpus.len() <= gpus);
            assert!(plan.meets(&p, intf, &demands), "elastic returned a plan that misses a rate: {plan:?}");
            for g in &plan.gpus {
                assert_eq!(g.parts.iter().map(|x| x.0).sum::<u32>(), 100, "partitions must fill the GPU");
            }
            assert!(ideal(&p, intf, &demands, gpus).is_some(), "ideal must schedule whatever elastic does");
            assert!(scale(&p, intf, &demands, gpus).is_some_and(|s| s.gpus.len() <= plan.gpus.len()));
        }
        if let Some(plan) = ideal(&p, intf, &demands, gpus) {
            assert!(plan.meets(&p, intf, &demands));
        }
    }
    assert!(
        planned > 5 && refused > 5,
        "the instances must exercise both outcomes ({planned} planned, {refused} refused)"
    );
}

#[test]
fn engine_bench_accounts_for_every_request() {
    // Timings here mean nothing (a shared machine); the accounting must hold.
    let e = baton_perf::engine_bench::table4(1.0, 2);
    for r in [&e.engine, &e.roles_over_tcp, &e.split_symphony] {
        assert_eq!((r.unanswered, r.duplicates, r.errors), (0, 0, 0), "{r:?}");
        assert!(r.ok > 0, "{r:?}");
    }
    assert_eq!((e.goodput_probes.len(), e.roles_goodput_probes.len()), (2, 2));
    // Every ok answer carries the engine's timing, and its parts add up:
    // batches start at or after exec_at, answers after batches end.
    assert_eq!(e.engine.overhead.count, e.engine.ok + e.engine.late);
    let t = baton_perf::engine_bench::throughput(5_000.0, 0.5, 0);
    assert!(t.probes.iter().all(|p| p.2.unanswered == 0 && p.2.duplicates == 0));
}

/// glet's experiments in quick mode, through the simulator: on the
/// game-like mix glet's partitions beat squishy bin packing on whole GPUs,
/// and at the highest rate glet-noint plans, the simulated interference
/// breaks its SLO while glet keeps it (or refuses the rate).
#[test]
fn glet_beats_sbp_and_noint_breaks_where_glet_holds() {
    use baton_perf::glet_sim::{goodputs, noint_breaks};
    let rows = goodputs(&["glet-game"], &[PolicyKind::Glet, PolicyKind::Sbp], Some(2.0), 0.03);
    let (glet, sbp) = (rows[0].of(PolicyKind::Glet), rows[0].of(PolicyKind::Sbp));
    assert!(sbp > 1_000.0, "sbp serves the game mix: {sbp}");
    assert!(glet >= 1.1 * sbp, "glet {glet} r/s against sbp {sbp} r/s");
    for r in noint_breaks(&["glet-game"], Some(2.0)) {
        assert!(r.glet_filters(), "{r:?}");
    }
}

#[test]
fn wire_bench_runs_and_round_trips() {
    let r = baton_perf::wire_bench::run(500);
    assert!(r.encode_fresh_ns > 0.0 && r.encode_reused_ns > 0.0 && r.decode_ns > 0.0);
}

#[test]
fn cuda_bench_measures_on_a_gpu_or_says_there_is_none() {
    use baton_gpu::cuda::CudaConfig;
    match baton_perf::cuda_bench::run(&CudaConfig::small(), &[1, 3], &[2], 3) {
        Ok(r) => {
            assert!(r.correctness.iter().all(|c| c.agreement.within_tolerance()));
            assert_eq!(r.launches.len(), 3, "one timing per model");
            assert_eq!(
                r.subnets.len(),
                baton_gpu::supernet::default_subnets(&CudaConfig::small().shapes.supernet).len()
            );
        }
        Err(baton_gpu::ExecError::NoDevice(why)) => assert!(why.contains("CUDA"), "{why}"),
        Err(e) => panic!("{e}"),
    }
}
