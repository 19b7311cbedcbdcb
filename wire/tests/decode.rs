//! Round trips of every message kind, typed refusals of bad input, and a
//! no-panic smoke run of the fuzz entry point over mutated frames and the
//! committed corpus (`wire/fuzz/corpus/decode`).

use baton_wire::fb;
use baton_wire::fuzzing::decode_stream;
use baton_wire::{decode, encode, DecodeError, FrameError, Kind, Limits, Message, HEADER_LEN};

fn tensor(name: &str, shape: &[i64], dtype: fb::DType, bytes: usize) -> fb::Tensor {
    fb::Tensor {
        name: Some(name.into()),
        dtype,
        shape: Some(shape.to_vec()),
        data: Some((0..bytes).map(|i| (i * 31 % 251) as u8).collect()),
    }
}

fn samples() -> Vec<Message> {
    let image = tensor("image", &[1, 3, 8, 8], fb::DType::F32, 3 * 64 * 4);
    let ids = vec![7, 8, 9, u64::MAX];
    vec![
        Message::InferRequest(fb::InferRequest {
            id: 42,
            model: Some("resnet50".into()),
            slo_ns: 25_000_000,
            app: 3,
            inputs: Some(vec![image.clone(), tensor("mask", &[8], fb::DType::U8, 8)]),
            app_name: Some("long".into()),
            query: None,
            path_ns: 180_000,
        }),
        Message::InferResponse(fb::InferResponse {
            id: 42,
            status: fb::Status::Dropped,
            drop_reason: fb::DropReason::Shed,
            error_code: fb::ErrorCode::UnknownModel,
            message: Some("shed under overload".into()),
            timing: Some(fb::Timing {
                queue_ns: 1,
                exec_ns: 2,
                batch_size: 3,
                received_ns: 4,
                seen_ns: 5,
                exec_at_ns: 6,
                started_ns: 7,
                finished_ns: 8,
                written_ns: 9,
                origin_unix_ns: 10,
            }),
            outputs: Some(vec![tensor("logits", &[1, 10], fb::DType::F16, 20)]),
            app: 2,
            subnet: Some(3),
            accuracy: 77.5,
            solo_ns: 12_345,
            stage: Some("car".into()),
        }),
        Message::RequestMeta(fb::RequestMeta {
            id: 1,
            frontend: 2,
            model: 3,
            app: 4,
            arrival_ns: 5,
            deadline_ns: 6,
            input: Some(fb::InputAt { addr: 1 << 40, rkey: 7, len: 128 }),
        }),
        Message::BatchPlan(fb::BatchPlan {
            batch_id: 9,
            model: 1,
            backend: 2,
            exec_at_ns: 100,
            expected_finish_ns: 200,
            subnet: Some(5),
            requests: Some(ids.clone()),
            frontends: Some(vec![0, 1, 0, 1]),
            seen_ns: Some(vec![10, 11, 12, 13]),
            heads: Some(vec![0, 2, 1, 0]),
            inputs: Some(vec![fb::InputAt { addr: 64, rkey: 7, len: 64 }; 4]),
        }),
        Message::FetchInputs(fb::FetchInputs { batch_id: 9, requests: Some(ids.clone()), backend: 2 }),
        Message::Inputs(fb::Inputs {
            batch_id: 9,
            requests: Some(ids.clone()),
            tensors: Some(vec![image]),
            backend: 2,
            frontend: 1,
        }),
        Message::Results(fb::Results {
            batch_id: 9,
            requests: Some(ids.clone()),
            outputs: Some(vec![tensor("logits", &[4, 10], fb::DType::I64, 320)]),
            exec_ns: 5_000_000,
            batch_size: 4,
            seen_ns: Some(vec![10, 11, 12, 13]),
            exec_at_ns: 100,
            started_ns: 101,
            finished_ns: 180,
            subnet: None,
            solo_ns: Some(vec![1, 2, 3, 4]),
        }),
        Message::BatchDone(fb::BatchDone {
            batch_id: 9,
            backend: 2,
            model: 1,
            batch_size: 4,
            started_ns: 100,
            finished_ns: 180,
            failed: true,
            requests: Some(vec![7, 8]),
            solo_ns: Some(vec![30, 40]),
        }),
        Message::Dropped(fb::Dropped {
            requests: Some(ids),
            reason: fb::DropReason::BadPlan,
            message: Some("batch of 9 exceeds the maximum 8".into()),
        }),
        Message::BackendStatus(fb::BackendStatus {
            backend: 2,
            healthy: true,
            free_at_ns: 77,
            loaded_models: Some(vec![1, 2, 3]),
            memory_free_mb: 12_000,
            leaving: true,
        }),
        Message::ModelLoad(fb::ModelLoad { model: 1, name: Some("vgg16".into()), backend: 2, max_batch: 32, id: 3 }),
        Message::ModelUnload(fb::ModelUnload { model: 1, backend: 2, name: Some("vgg16".into()), id: 4 }),
        Message::Stats(fb::Stats {
            accepted: 10,
            batches: 3,
            backend: Some(2),
            busy_ns: 9,
            requests: 4,
            sizes: Some(vec![1, 2]),
            ..Default::default()
        }),
        Message::Hello(fb::Hello {
            role: fb::Role::Backend,
            index: 3,
            origin_unix_ns: 1 << 60,
            nonce: Some(vec![7; 32]),
            proof: Some(vec![9; 32]),
        }),
        Message::RdmaConnect(fb::RdmaConnect {
            answer: true,
            backend: 1,
            frontend: 2,
            qp_num: 0x1234,
            lid: 3,
            gid: Some(vec![0xfe; 16]),
            psn: 99,
            region_addr: 1 << 44,
            region_len: 1 << 26,
            rkey: 0xabc,
            error: None,
        }),
    ]
}

#[test]
fn every_kind_round_trips() {
    let all = samples();
    assert_eq!(all.len(), Kind::ALL.len(), "one sample per kind");
    for m in &all {
        let bytes = encode(m).unwrap();
        assert_eq!(decode(&bytes, &Limits::default()).as_ref(), Ok(m));
    }
    let stream: Vec<u8> = all.iter().flat_map(|m| encode(m).unwrap()).collect();
    assert_eq!(decode_stream(&stream), all.len());
}

fn request_with(inputs: Vec<fb::Tensor>) -> Vec<u8> {
    encode(&Message::InferRequest(fb::InferRequest {
        id: 1,
        model: Some("m".into()),
        slo_ns: 1,
        app: 0,
        inputs: Some(inputs),
        app_name: None,
        query: None,
        path_ns: 0,
    }))
    .unwrap()
}

#[test]
fn bad_input_gets_typed_errors() {
    let l = Limits::default();
    let ok = tensor("x", &[2, 2], fb::DType::F32, 16);
    let err = |bytes: &[u8]| decode(bytes, &l).unwrap_err();

    let mut wrong_size = ok.clone();
    wrong_size.data = Some(vec![0; 15]);
    assert_eq!(
        err(&request_with(vec![wrong_size])),
        DecodeError::TensorSize { tensor: 0, expected: Some(16), got: 15 }
    );

    let negative = fb::Tensor { shape: Some(vec![2, -2]), ..ok.clone() };
    assert_eq!(err(&request_with(vec![negative])), DecodeError::NegativeDim { tensor: 0, dim: -2 });

    let overflow = fb::Tensor { shape: Some(vec![i64::MAX, i64::MAX, i64::MAX]), ..ok.clone() };
    assert!(matches!(err(&request_with(vec![overflow])), DecodeError::TensorSize { expected: None, .. }));

    let deep = fb::Tensor { shape: Some(vec![1; 9]), data: Some(vec![0; 4]), ..ok.clone() };
    assert_eq!(err(&request_with(vec![deep])), DecodeError::TooManyDims { tensor: 0, got: 9, max: 8 });

    assert_eq!(err(&request_with(vec![ok.clone(); 65])), DecodeError::TooManyTensors { got: 65, max: 64 });

    let many =
        Message::Dropped(fb::Dropped { requests: Some(vec![0; 5000]), reason: fb::DropReason::Expired, message: None });
    assert_eq!(err(&encode(&many).unwrap()), DecodeError::TooManyIds { field: "requests", got: 5000, max: 4096 });

    let plan = Message::BatchPlan(fb::BatchPlan {
        batch_id: 1,
        model: 0,
        backend: 0,
        exec_at_ns: 0,
        expected_finish_ns: 0,
        subnet: None,
        requests: Some(vec![1, 2, 3]),
        frontends: Some(vec![0, 0]),
        seen_ns: None,
        heads: None,
        inputs: None,
    });
    assert_eq!(err(&encode(&plan).unwrap()), DecodeError::Mismatched { field: "frontends", got: 2, want: 3 });
    let Message::BatchPlan(mut plan) = plan else { unreachable!() };
    (plan.frontends, plan.seen_ns) = (Some(vec![0; 3]), Some(vec![7; 2]));
    let plan = encode(&Message::BatchPlan(plan)).unwrap();
    assert_eq!(err(&plan), DecodeError::Mismatched { field: "seen_ns", got: 2, want: 3 });
    let heads = fb::BatchPlan {
        requests: Some(vec![1, 2, 3]),
        frontends: Some(vec![0; 3]),
        heads: Some(vec![0; 4]),
        ..Default::default()
    };
    let heads = encode(&Message::BatchPlan(heads)).unwrap();
    assert_eq!(err(&heads), DecodeError::Mismatched { field: "heads", got: 4, want: 3 });
    let at = fb::InputAt { addr: 0, rkey: 0, len: 0 };
    let inputs = fb::BatchPlan {
        requests: Some(vec![1, 2, 3]),
        frontends: Some(vec![0; 3]),
        inputs: Some(vec![at; 2]),
        ..Default::default()
    };
    let inputs = encode(&Message::BatchPlan(inputs)).unwrap();
    assert_eq!(err(&inputs), DecodeError::Mismatched { field: "inputs", got: 2, want: 3 });
    let done = fb::BatchDone { requests: Some(vec![1, 2]), solo_ns: Some(vec![9]), ..Default::default() };
    let done = encode(&Message::BatchDone(done)).unwrap();
    assert_eq!(err(&done), DecodeError::Mismatched { field: "solo_ns", got: 1, want: 2 });

    let good = request_with(vec![ok]);
    assert_eq!(err(&good[..good.len() - 1]), DecodeError::Truncated { need: good.len(), have: good.len() - 1 });
    assert_eq!(err(&[good.as_slice(), &[0]].concat()), DecodeError::Trailing(1));
    assert_eq!(err(&good[..3]), DecodeError::Truncated { need: HEADER_LEN, have: 3 });

    let mut unknown = good.clone();
    unknown[4] = 200;
    assert_eq!(err(&unknown), DecodeError::Frame(FrameError::UnknownKind(200)));

    // A payload of the wrong kind is malformed, not misread: a Stats frame
    // relabelled as an InferRequest reads its counters as offsets.
    let mut relabelled = encode(&samples()[12]).unwrap();
    relabelled[4] = Kind::InferRequest as u8;
    assert!(matches!(err(&relabelled), DecodeError::Malformed { kind: Kind::InferRequest, .. }));
}

#[test]
fn enum_tags_outside_the_schema_are_refused() {
    let m =
        Message::Dropped(fb::Dropped { requests: Some(vec![1]), reason: fb::DropReason::BackendFailed, message: None });
    let bytes = encode(&m).unwrap();
    let tag = fb::DropReason::BackendFailed as u8;
    // Find the reason byte and put an unknown tag there.
    let pos = (HEADER_LEN..bytes.len())
        .find(|&i| {
            let mut b = bytes.clone();
            b[i] = 99;
            bytes[i] == tag && matches!(decode(&b, &Limits::default()), Err(DecodeError::Malformed { .. }))
        })
        .expect("the reason byte is in the payload");
    assert!(pos >= HEADER_LEN);
}

#[test]
fn offsets_aliasing_one_blob_cannot_amplify_a_frame() {
    // 64 tensors whose data vectors all point at one 64 KiB blob: owned
    // copies would take 4 MiB from a 64 KiB frame.
    let mut b = planus::Builder::new();
    let blob = b.create_vector(vec![0u8; 65536].as_slice());
    let shape = b.create_vector([65536i64].as_slice());
    let tensors: Vec<planus::Offset<fb::Tensor>> = (0..64)
        .map(|_| fb::Tensor::builder().name_as_null().dtype(fb::DType::U8).shape(shape).data(blob).finish(&mut b))
        .collect();
    let inputs = b.create_vector(tensors.as_slice());
    let root = fb::InferRequest::builder()
        .id(1)
        .model_as_null()
        .slo_ns(1)
        .app(0)
        .inputs(inputs)
        .app_name_as_null()
        .query_as_null()
        .path_ns(0)
        .finish(&mut b);
    let payload = b.finish(root, None).to_vec();
    let frame =
        [baton_wire::FrameHeader::new(Kind::InferRequest, payload.len()).unwrap().to_bytes().as_slice(), &payload]
            .concat();
    assert!(matches!(decode(&frame, &Limits::default()), Err(DecodeError::Aliased { .. })));
}

/// Deterministic mutations (bit flips, byte overwrites, truncations,
/// splices) of every sample, then every committed corpus file: no input
/// may panic.
#[test]
fn fuzz_entry_point_survives_mutations_and_the_corpus() {
    let frames: Vec<Vec<u8>> = samples().iter().map(|m| encode(m).unwrap()).collect();
    let mut rng = baton_sched::rng::Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut next = move || rng.next_u64();
    let mut decoded = 0;
    for round in 0..20_000 {
        let mut f = frames[round % frames.len()].clone();
        match next() % 4 {
            0 => {
                let i = next() as usize % f.len();
                f[i] ^= 1 << (next() % 8);
            }
            1 => {
                for _ in 0..1 + next() % 8 {
                    let i = next() as usize % f.len();
                    f[i] = next() as u8;
                }
            }
            2 => f.truncate(next() as usize % f.len()),
            _ => {
                let other = &frames[next() as usize % frames.len()];
                let at = next() as usize % f.len().min(other.len());
                f.truncate(at);
                f.extend_from_slice(&other[at..]);
            }
        }
        decoded += decode_stream(&f);
    }
    assert!(decoded > 1000, "most single mutations still decode ({decoded})");
    let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    if std::env::var_os("BATON_WRITE_CORPUS").is_some() {
        for (i, f) in frames.iter().enumerate() {
            std::fs::write(corpus.join(format!("seed-{i:02}")), f).unwrap();
        }
    }
    let mut files = 0;
    for e in std::fs::read_dir(&corpus).unwrap() {
        decode_stream(&std::fs::read(e.unwrap().path()).unwrap());
        files += 1;
    }
    assert!(files >= Kind::ALL.len(), "the corpus seeds every kind ({files} files)");
}

#[test]
fn identical_tensors_are_encoded_apart_and_decode() {
    // planus's byte cache would share one blob between equal tensors, which
    // the aliasing check refuses; the encoder must not share.
    let t = fb::Tensor { name: None, dtype: fb::DType::F32, shape: Some(vec![4]), data: Some(vec![7; 16]) };
    let m = Message::Inputs(fb::Inputs {
        batch_id: 1,
        requests: Some((0..32).collect()),
        tensors: Some(vec![t; 32]),
        backend: 0,
        frontend: 0,
    });
    assert_eq!(decode(&encode(&m).unwrap(), &Limits::default()), Ok(m));
}
