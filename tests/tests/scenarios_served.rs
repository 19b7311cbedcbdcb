//! Every scenario shipped under `perf/scenarios/` is served by the engine:
//! `baton serve --scenario F` starts on it (the emulated GPUs, or the CPU
//! executor for a scenario that names the CPU executor's models), answers
//! a request of each model and query the file sends, and stops holding
//! nothing. A scenario only the CUDA executor serves (its dynamic model's
//! inputs carry lengths that executor measured) runs on it where there is
//! a GPU; without one, it and the CUDA executor are refused with the typed
//! no-device error instead of starting.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use baton_core::models::{ExecutorChoice, ModelTable};
use baton_core::runtime::{start, EngineConfig, EngineError};
use baton_gpu::cuda::CudaConfig;
use baton_gpu::reference::CpuConfig;
use baton_net::framing::FrameBuf;
use baton_perf::report::{load_scenario, shipped_scenarios};
use baton_sched::Scenario;
use baton_wire::{encode, fb, Message};

/// The CPU executor for a scenario of its models, as it measured them
/// (`baton profile --executor cpu` writes such files); emulated GPUs where
/// they serve it; else the CUDA executor (`baton profile --dynamic`).
fn executor_for(s: &Scenario) -> ExecutorChoice {
    let cpu = ExecutorChoice::Cpu(CpuConfig::serving());
    if ModelTable::for_executor(s, &cpu, 0).is_ok() {
        return cpu;
    }
    match ModelTable::from_scenario(s, EngineConfig::default().input_floats) {
        Ok(_) => ExecutorChoice::Emulated,
        Err(_) => ExecutorChoice::Cuda(CudaConfig::serving()),
    }
}

/// Without a GPU, starting on the CUDA executor is the typed no-device error.
fn refused_without_a_gpu(s: &Scenario, cfg: &EngineConfig) {
    match start(s, s.policy, cfg) {
        Err(EngineError::Shard(why)) => assert!(why.contains("device") || why.contains("CUDA"), "{why}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("{}: the CUDA executor started without a GPU", s.name),
    }
}

/// One request per model with traffic and one per query, each with an
/// input of the size the engine's table says (its first float 1: the least
/// work a dynamic model's input may carry); every one answered.
fn one_of_each(addr: std::net::SocketAddr, s: &Scenario, table: &ModelTable) {
    let floats = |m: usize| table.models[m].input_floats;
    let mut targets: Vec<(Option<String>, Option<String>, usize, u64)> = Vec::new();
    for (i, m) in s.models.iter().enumerate().filter(|(_, m)| m.weight > 0.0) {
        targets.push((Some(m.spec.name.clone()), None, floats(i), m.spec.slo));
    }
    for q in &s.queries {
        targets.push((None, Some(q.name.clone()), floats(q.stages[0].model.index()), q.slo));
    }
    let mut c = TcpStream::connect(addr).expect("connects");
    c.set_read_timeout(Some(Duration::from_secs(120))).expect("timeout set");
    for (id, (model, query, n, slo)) in targets.iter().enumerate() {
        let data = (0..*n).flat_map(|i| (i.max(1) as f32).to_le_bytes()).collect::<Vec<u8>>();
        let tensor = fb::Tensor { name: None, dtype: fb::DType::F32, shape: Some(vec![*n as i64]), data: Some(data) };
        let req = fb::InferRequest {
            id: id as u64,
            model: model.clone(),
            query: query.clone(),
            slo_ns: *slo,
            inputs: Some(vec![tensor]),
            ..Default::default()
        };
        c.write_all(&encode(&Message::InferRequest(req)).expect("encodes")).expect("sent");
    }
    let mut buf = FrameBuf::default();
    let mut answered = vec![false; targets.len()];
    while answered.iter().any(|a| !a) {
        match buf.next_frame().expect("valid frames") {
            Some(Ok(Message::InferResponse(r))) => {
                assert_ne!(r.status, fb::Status::Error, "{}: {r:?}", s.name);
                assert!(!std::mem::replace(&mut answered[r.id as usize], true), "{}: answered twice", s.name);
            }
            Some(other) => panic!("{}: {other:?}", s.name),
            None => {
                let n = c.read(buf.spare()).expect("an answer comes");
                assert!(n > 0, "{}: the engine closed the connection", s.name);
                buf.filled(n);
            }
        }
    }
}

#[test]
fn every_shipped_scenario_is_served_by_the_engine() {
    for path in shipped_scenarios() {
        let s = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
        let executor = executor_for(&s);
        let listen = "127.0.0.1:0".parse().unwrap();
        let cfg = EngineConfig { listen, executor, ..Default::default() };
        if matches!(cfg.executor, ExecutorChoice::Cuda(_)) && baton_gpu::cuda::open_context(0).is_err() {
            refused_without_a_gpu(&s, &cfg);
            eprintln!("{}: refused, no GPU", path.display());
            continue;
        }
        let e = start(&s, s.policy, &cfg).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let table = ModelTable::for_executor(&s, &cfg.executor, cfg.input_floats).expect("served");
        one_of_each(e.addr, &s, &table);
        let r = e.shutdown();
        assert_eq!((r.held_at_stop, r.frontend.duplicates), (0, 0), "{}", path.display());
        eprintln!("{}: served", path.display());
    }
}

/// Files nobody tuned for: `perf/scripts/heldout.py` draws one file of
/// every family the engine serves (static policies, Orloj, queries,
/// partitions, supernets, prefix groups, re-planning mixes) for two
/// seeds; the engine starts on each, answers a request of each model and
/// query, and stops holding nothing — so the generator's files stay
/// servable as the engine and the scenario format change.
#[test]
fn every_held_out_family_is_served_by_the_engine() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../perf/scripts/heldout.py");
    for seed in [5, 6] {
        let dir = std::env::temp_dir().join(format!("baton-heldout-{}-{seed}", std::process::id()));
        let out = std::process::Command::new("python3")
            .arg(&script)
            .arg(seed.to_string())
            .arg(&dir)
            .arg("1")
            .output()
            .expect("python3 runs (Debian: python3)");
        assert!(out.status.success(), "heldout.py {seed}: {}", String::from_utf8_lossy(&out.stderr));
        let files: Vec<&str> = std::str::from_utf8(&out.stdout).expect("paths").lines().collect();
        assert_eq!(files.len(), 7, "one file a family: {files:?}");
        for f in files {
            let s = load_scenario(std::path::Path::new(f)).unwrap_or_else(|e| panic!("{e}"));
            let cfg = EngineConfig { listen: "127.0.0.1:0".parse().unwrap(), ..Default::default() };
            let e = start(&s, s.policy, &cfg).unwrap_or_else(|err| panic!("{f}: {err}"));
            let table = ModelTable::for_executor(&s, &cfg.executor, cfg.input_floats).expect("served");
            one_of_each(e.addr, &s, &table);
            let r = e.shutdown();
            assert_eq!((r.held_at_stop, r.frontend.duplicates), (0, 0), "{f}");
        }
        std::fs::remove_dir_all(&dir).expect("the files removed");
    }
}

#[test]
fn without_a_gpu_the_cuda_executor_is_refused_with_a_typed_error() {
    if baton_gpu::cuda::open_context(0).is_ok() {
        eprintln!("a GPU is here: nothing to refuse");
        return;
    }
    let path = shipped_scenarios().into_iter().find(|p| p.ends_with("cuda-h100.toml")).expect("shipped");
    let s = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
    let cfg = EngineConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        executor: ExecutorChoice::Cuda(CudaConfig::serving()),
        ..Default::default()
    };
    refused_without_a_gpu(&s, &cfg);
}

#[test]
fn glet_re_partitioning_at_run_time_starts_on_the_cuda_executor() {
    // glet re-planning every 2 s on the CUDA executor's models, each
    // backend on a green context (`core/src/partitions/cuda.rs`); without
    // a GPU, the typed no-device error.
    let path = shipped_scenarios().into_iter().find(|p| p.ends_with("cuda-glet-epochs.toml")).expect("shipped");
    let s = load_scenario(&path).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.policy_epoch.is_some(), "the file re-plans");
    let cfg = EngineConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        executor: ExecutorChoice::Cuda(CudaConfig::serving()),
        ..Default::default()
    };
    if baton_gpu::cuda::open_context(0).is_err() {
        return refused_without_a_gpu(&s, &cfg);
    }
    let e = start(&s, s.policy, &cfg).unwrap_or_else(|err| panic!("{err}"));
    let table = ModelTable::for_executor(&s, &cfg.executor, cfg.input_floats).expect("served");
    one_of_each(e.addr, &s, &table);
    let r = e.shutdown();
    assert_eq!((r.held_at_stop, r.frontend.duplicates, r.frontend.errors), (0, 0, 0));
}
