//! The engine on the CPU executor (`--executor cpu`): real compute on a
//! backend thread, checked for what it computes, not how fast (timings are
//! measured by `baton demo` runs, perf/README.md).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use baton_core::models::ExecutorChoice;
use baton_core::runtime::{start, EngineConfig};
use baton_gpu::reference::CpuConfig;
use baton_gpu::supernet::{default_subnets, Supernet};
use baton_net::framing::FrameBuf;
use baton_sched::scenario::builder::ScenarioText;
use baton_sched::PolicyKind;
use baton_wire::{encode, fb, Message};

const PATIENCE: Duration = Duration::from_secs(120);

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Request `i`'s input: a different vector per request.
fn input(i: u64, len: usize) -> Vec<f32> {
    (0..len).map(|k| ((i * 31 + k as u64) as f32 * 0.07).sin()).collect()
}

/// Request `id` of `model` with `input(id, len)`, its frame.
fn request(id: u64, model: &str, len: usize) -> Vec<u8> {
    let req = fb::InferRequest {
        id,
        model: Some(model.into()),
        slo_ns: 50_000_000,
        inputs: Some(vec![fb::Tensor {
            name: None,
            dtype: fb::DType::F32,
            shape: Some(vec![len as i64]),
            data: Some(input(id, len).iter().flat_map(|x| x.to_le_bytes()).collect()),
        }]),
        ..Default::default()
    };
    encode(&Message::InferRequest(req)).unwrap()
}

/// Reads answers from `conn` into `answers` until it holds `n`.
fn read_until(conn: &mut TcpStream, buf: &mut FrameBuf, answers: &mut Vec<fb::InferResponse>, n: usize) {
    while answers.len() < n {
        match buf.next_frame().expect("valid frames") {
            Some(Ok(Message::InferResponse(r))) => answers.push(r),
            Some(other) => panic!("unexpected {other:?}"),
            None => {
                let k = conn.read(buf.spare()).expect("answers come");
                assert!(k > 0, "closed after {} answers", answers.len());
                buf.filled(k);
            }
        }
    }
}

/// Serves the CPU profile's scenario with its load moved to the supernet,
/// under `policy`, and sends it `waves` waves of a batch each (every wave
/// answered before the next); returns the answers.
fn serve_supernet(policy: &str, waves: u64) -> Vec<fb::InferResponse> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../perf/scenarios/cpu-varlen.toml");
    let s = ScenarioText::from_toml(&std::fs::read_to_string(path).unwrap())
        .set("models[2].weight", 1.0)
        .set("models[3].weight", 0.0)
        .set("policy.name", policy)
        .scenario();
    let cpu = CpuConfig::serving();
    let cfg = EngineConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        executor: ExecutorChoice::Cpu(cpu),
        ..Default::default()
    };
    let e = start(&s, s.policy, &cfg).expect("the engine starts on the CPU executor");
    let (wave, len) = (u64::from(cpu.max_batch), cpu.shapes.supernet.input);
    let mut conn = TcpStream::connect(e.addr).unwrap();
    conn.set_read_timeout(Some(PATIENCE)).unwrap();
    let (mut buf, mut answers) = (FrameBuf::default(), Vec::new());
    for w in 0..waves {
        let bytes: Vec<u8> = (w * wave..(w + 1) * wave).flat_map(|i| request(i, "supernet", len)).collect();
        conn.write_all(&bytes).unwrap();
        read_until(&mut conn, &mut buf, &mut answers, ((w + 1) * wave) as usize);
    }
    let r = e.shutdown();
    let n = waves * wave;
    assert_eq!((r.frontend.received, r.frontend.answered(), r.frontend.duplicates), (n, n, 0), "{policy}");
    answers
}

#[test]
fn the_cpu_supernet_answers_exactly_what_the_subnet_it_reports_computes() {
    let shape = CpuConfig::serving().shapes.supernet;
    let subnets = default_subnets(&shape);
    let net = Supernet::new(shape, &subnets);
    let mut used = std::collections::BTreeSet::new();
    // SlackFit chooses each batch's subnet; the fixed-accuracy baselines
    // run the least and a middle one whatever the timing, so that more
    // than one subnet is checked.
    for policy in ["slackfit", "fixed-1", "fixed-3"] {
        assert!(PolicyKind::parse(policy).is_ok());
        let answers = serve_supernet(policy, 12);
        let ok: Vec<_> = answers.iter().filter(|a| a.status == fb::Status::Ok).collect();
        assert!(ok.len() >= answers.len() / 2, "{policy}: {} of {} ok", ok.len(), answers.len());
        for a in ok {
            let k = a.subnet.expect("a supernet's answer names its subnet") as usize;
            // Bit for bit what the subnet, extracted as a network of its
            // own, computes on the same input.
            let mut want = vec![0.0; shape.classes];
            net.extract(&subnets[k]).forward(&input(a.id, shape.input), &mut want);
            let got = f32s(a.outputs.as_ref().unwrap()[0].data.as_deref().unwrap());
            assert_eq!(got, want, "{policy}: request {} on subnet {k}", a.id);
            assert!(a.accuracy > 70.0 && a.accuracy <= 80.0, "{}", a.accuracy);
            used.insert(k);
        }
    }
    assert!(used.len() >= 2, "subnets checked: {used:?}");
}

/// A scenario of `members` in one prefix group `group` under Nexus
/// (generous SLOs: this checks what is computed).
fn prefix_scenario(group: &str, members: &[&str]) -> baton_sched::Scenario {
    let mut t = format!(
        "name = \"cpu-prefix-test\"\nseed = 3\nduration_s = 5\nwarmup_s = 0\n[cluster]\ngpus = 1\n\
         [[prefixes]]\nname = \"{group}\"\nalpha_ms = 0.2\nbeta_ms = 0.2\n[policy]\nname = \"nexus\"\n",
    );
    for m in members {
        t += &format!(
            "[[models]]\nname = \"{m}\"\nprefix_of = \"{group}\"\nalpha_ms = 0.01\nbeta_ms = 0.01\nmax_batch = 4\n\
             slo_ms = 50.0\nweight = 1.0\n"
        );
    }
    baton_sched::Scenario::parse(&t).unwrap_or_else(|e| panic!("{e}\n{t}"))
}

/// Prefix batching on the CPU: batches mixing the trunk's variants run the
/// trunk once and each variant's head over its own requests, and every
/// answer is bit for bit what its variant, run whole, computes.
#[test]
fn a_cpu_prefix_group_answers_each_variant_as_it_computes_whole() {
    // The small shapes (three heads, batches of 4): this checks what is
    // computed, in a debug build too.
    let members = ["mlp-0", "mlp-1", "mlp-2"];
    let s = prefix_scenario("mlp", &members);
    let cpu = CpuConfig::small();
    let cfg = EngineConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        executor: ExecutorChoice::Cpu(cpu),
        plan_rate_rps: 300.0,
        ..Default::default()
    };
    let e = start(&s, s.policy, &cfg).expect("the engine starts on the CPU executor");
    let len = cpu.shared.input;
    let n = 96u64;
    let mut conn = TcpStream::connect(e.addr).unwrap();
    conn.set_read_timeout(Some(PATIENCE)).unwrap();
    // All at once: the group's session batches them across variants.
    let bytes: Vec<u8> = (0..n).flat_map(|i| request(i, members[i as usize % members.len()], len)).collect();
    conn.write_all(&bytes).unwrap();
    let (mut buf, mut answers) = (FrameBuf::default(), Vec::new());
    read_until(&mut conn, &mut buf, &mut answers, n as usize);
    let r = e.shutdown();
    assert_eq!((r.frontend.received, r.frontend.answered(), r.frontend.duplicates), (n, n, 0));
    let mut whole = cpu.build_shared();
    let ok: Vec<_> = answers.iter().filter(|a| a.status == fb::Status::Ok).collect();
    assert!(ok.len() as u64 >= n / 2, "{} of {n} ok", ok.len());
    let mut largest = 0;
    for a in ok {
        let head: u32 = members[a.id as usize % members.len()][4..].parse().unwrap();
        let x = input(a.id, len);
        let mut want = Vec::new();
        let batch = baton_gpu::Batch { model: 1 + head, variant: None, heads: None, inputs: &[&x] };
        baton_gpu::Executor::run(&mut whole, &batch, &mut want).unwrap();
        let got = f32s(a.outputs.as_ref().unwrap()[0].data.as_deref().unwrap());
        assert_eq!(got, want[0], "request {} on head {head}", a.id);
        largest = largest.max(a.timing.as_ref().map_or(0, |t| t.batch_size));
    }
    // The group's one queue is in arrival order and arrivals go round the
    // variants, so any batch of two or more mixed them.
    assert!(largest >= 2, "batches mixed the variants: largest {largest}");
}

/// A prefix group the CPU executor has no trunk for, or a member that is
/// not its trunk's variant, is refused at start, saying which.
#[test]
fn a_cpu_prefix_group_that_is_not_the_trunks_is_refused() {
    let cfg = EngineConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        executor: ExecutorChoice::Cpu(CpuConfig::small()),
        ..Default::default()
    };
    for (group, members, says) in [
        ("mlp", &["mlp-0", "mlp-9"][..], "`mlp-9` is not one of its trunk's variants (`mlp-0` to `mlp-2`)"),
        ("trunk", &["trunk-0"][..], "prefix group `trunk` is not a shared trunk of the CPU executor (it has mlp)"),
    ] {
        let s = prefix_scenario(group, members);
        let err = start(&s, s.policy, &cfg).err().expect("refused").to_string();
        assert!(err.contains(says), "{err}");
    }
}
