//! On a machine without CUDA these check the typed refusal; on a GPU
//! machine they check the models against the CPU reference at every batch
//! size, graphs against eager launches, and the executor's conformance.

use super::check::{compare, compare_varlen, inputs, token_inputs};
use super::*;

/// The executor on device 0, or None (after checking the refusal is the
/// typed "no CUDA device") where there is none.
fn executor(cfg: &CudaConfig) -> Option<CudaExecutor> {
    match CudaExecutor::new(cfg) {
        Ok(e) => Some(e),
        Err(ExecError::NoDevice(why)) => {
            assert!(why.contains("CUDA"), "{why}");
            eprintln!("skipped on this machine: {why}");
            None
        }
        Err(e) => panic!("not a device error: {e}"),
    }
}

#[test]
fn an_absent_device_is_a_typed_error() {
    let cfg = CudaConfig { ordinal: 1 << 20, ..CudaConfig::small() };
    assert!(matches!(CudaExecutor::new(&cfg), Err(ExecError::NoDevice(_))));
}

#[test]
fn the_gpu_models_match_the_cpu_reference_at_every_batch_size() {
    let cfg = CudaConfig::small();
    let Some(mut gpu) = executor(&cfg) else { return };
    let mut cpu = cfg.reference();
    for (m, info) in cpu.models().to_vec().iter().enumerate() {
        for b in 1..=info.max_batch as usize {
            let xs = inputs(b, info.input_len, (m * 100 + b) as u64);
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            // Every variant (a supernet's every subnet, served in place).
            for v in 0..info.variants {
                let a = compare(&mut gpu, &mut cpu, (m as u32, Some(v)), &refs).unwrap();
                assert!(a.within_tolerance(), "{} variant {v} at batch {b}: {a:?}", info.name);
            }
        }
    }
}

#[test]
fn graphs_and_eager_launches_compute_the_same_and_conform() {
    let cfg = CudaConfig::small();
    let Some(mut graph) = executor(&cfg) else { return };
    let mut eager = executor(&CudaConfig { launch: LaunchMode::Eager, ..cfg }).expect("the device opened once");
    let tokens = cfg.varlen.unwrap().tokens;
    for (m, info) in graph.models().to_vec().iter().enumerate() {
        let xs = match info.work {
            Some(_) => token_inputs(tokens, 5, 42),
            None => inputs(5, info.input_len, 42 + m as u64),
        };
        let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let batch = Batch { model: m as u32, variant: None, heads: None, inputs: &refs };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        assert!(graph.run(&batch, &mut a).unwrap() > Duration::ZERO);
        eager.run(&batch, &mut b).unwrap();
        assert_eq!(a, b, "{}: same kernels, same bits", info.name);
    }
    crate::conformance::check_within(&mut graph, "cuda", 1e-5);
    // Launch then poll: up to PIPELINE batches in flight, answered in
    // launch order with their own outputs; one more is refused, and so is
    // a synchronous run until they are polled.
    let xs = inputs(PIPELINE, graph.models()[1].input_len, 3);
    let mut out = Vec::new();
    let mut want = Vec::new();
    for x in &xs {
        let batch = Batch { model: 1, variant: None, heads: None, inputs: &[&x[..]] };
        eager.run(&batch, &mut out).unwrap();
        want.push(out[0].clone());
        assert_eq!(graph.launch(&batch, &mut out), Ok(Launched::InFlight));
    }
    let one = Batch { model: 1, variant: None, heads: None, inputs: &[&xs[0][..]] };
    assert!(matches!(graph.launch(&one, &mut out), Err(ExecError::Device(_))));
    assert!(matches!(graph.run(&one, &mut out), Err(ExecError::Device(_))));
    for w in &want {
        let took = loop {
            if let Some(r) = graph.poll(&mut out) {
                break r.unwrap();
            }
        };
        assert!(took > Duration::ZERO && out.len() == 1 && &out[0] == w);
    }
    assert!(graph.poll(&mut out).is_none());
}

#[test]
fn the_dynamic_model_matches_its_cpu_reference_and_measures_its_solo_times() {
    let cfg = CudaConfig::small();
    let Some(mut gpu) = executor(&cfg) else { return };
    let shape = cfg.varlen.unwrap();
    let cpu = cfg.varlen_reference().unwrap();
    let m = gpu.models().iter().position(|i| i.name == varlen::NAME).unwrap() as u32;
    // Every batch size, lengths spread so that every bucket is some batch's.
    for b in 1..=cfg.max_batch as usize {
        for seed in [0, 5, 9] {
            let xs = token_inputs(shape.tokens, b, seed);
            let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
            let a = compare_varlen(&mut gpu, &cpu, m, &refs).unwrap();
            assert!(a.within_tolerance(), "batch {b}, seed {seed}: {a:?}");
        }
    }
    // One short member alone at each bucket: the padding changes nothing.
    let short = TokenEncoder::input(shape.tokens, 1, 3);
    for len in [1, shape.bucket + 1, shape.tokens.enc.seq] {
        let long = TokenEncoder::input(shape.tokens, len, 4);
        let a = compare_varlen(&mut gpu, &cpu, m, &[&short, &long]).unwrap();
        assert!(a.within_tolerance(), "beside length {len}: {a:?}");
    }
    let Some(Work::Levels { solo }) = &gpu.models()[m as usize].work else { panic!("no solo table") };
    assert_eq!(solo.len(), shape.tokens.enc.seq);
    assert!(solo.iter().all(|t| *t > Duration::ZERO), "{solo:?}");
    assert!(solo.chunks(shape.bucket).all(|k| k.iter().all(|t| t == &k[0])), "one time per bucket: {solo:?}");
}

#[test]
fn a_memory_limit_too_small_is_a_typed_error() {
    let cfg = CudaConfig { memory_limit_mib: 1, ..CudaConfig::small() };
    if executor(&CudaConfig::small()).is_none() {
        return;
    }
    match CudaExecutor::new(&cfg) {
        Err(ExecError::Device(why)) => assert!(why.contains("limit is 1 MiB"), "{why}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("1 MiB cannot hold cuBLAS's workspace"),
    }
}

#[test]
fn a_partition_runs_the_models_on_its_share_of_the_sms() {
    let cfg = CudaConfig::small();
    let Some(mut whole) = executor(&cfg) else { return };
    let total = partition::device_sms(0).unwrap();
    let (half, rest) = partition::split(0, total / 2).unwrap();
    assert!(
        half.sms >= total / 2 && rest.sms > 0 && half.sms + rest.sms <= total,
        "{} + {} of {total}",
        half.sms,
        rest.sms
    );
    let mut part = CudaExecutor::on_partition(&cfg, &half).unwrap();
    for (m, info) in whole.models().to_vec().iter().enumerate().filter(|(_, i)| i.work.is_none()) {
        let xs = inputs(4, info.input_len, m as u64);
        let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let a = compare(&mut part, &mut whole, (m as u32, None), &refs).unwrap();
        assert!(a.within_tolerance(), "{} on {} SMs: {a:?}", info.name, half.sms);
    }
}
