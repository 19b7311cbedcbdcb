//! The wire codec's cost per message, side by side in one run: encoding an
//! answer into a fresh buffer per message (`encode`) versus into a reused
//! one (`Outbox::push`, what connections do; answers are written in place,
//! `baton_wire::answer`), and decoding it back (verification and owned
//! copy); a client's request encoded into a reused buffer, as the load
//! generator sends each, and read in place, as a frontend reads each.

use std::time::Instant;

use baton_net::framing::Outbox;
use baton_wire::message::{view, View};
use baton_wire::{decode, encode, fb, Kind, Limits, Message, HEADER_LEN};
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct WireCosts {
    pub messages: usize,
    pub encode_fresh_ns: f64,
    pub encode_reused_ns: f64,
    pub decode_ns: f64,
    /// A client's request verified and read in place (`message::view`),
    /// as a frontend reads each.
    pub view_request_ns: f64,
    /// A client's request encoded into a reused buffer (`Outbox::push`).
    pub encode_request_ns: f64,
}

/// A client's request as the load generator sends them: a model name and
/// 16 floats.
pub fn request(id: u64) -> Message {
    let data: Vec<u8> = (0..16).flat_map(|i| (i as f32).to_le_bytes()).collect();
    Message::InferRequest(fb::InferRequest {
        id,
        model: Some("tiny".into()),
        slo_ns: 5_000_000,
        inputs: Some(vec![fb::Tensor { name: None, dtype: fb::DType::F32, shape: Some(vec![16]), data: Some(data) }]),
        ..Default::default()
    })
}

/// An ok answer with one 4-float output, as the engine sends them.
pub fn answer(id: u64) -> Message {
    let data: Vec<u8> = (0..4).flat_map(|i| (i as f32 + id as f32).to_le_bytes()).collect();
    Message::InferResponse(fb::InferResponse {
        id,
        status: fb::Status::Ok,
        timing: Some(fb::Timing {
            queue_ns: 1_000,
            exec_ns: 20_000,
            batch_size: 32,
            received_ns: 1_000_000,
            seen_ns: 1_010_000,
            exec_at_ns: 1_020_000,
            started_ns: 1_020_500,
            finished_ns: 1_040_500,
            written_ns: 1_041_000,
            origin_unix_ns: 1_795_000_000_000_000_000,
        }),
        outputs: Some(vec![fb::Tensor { name: None, dtype: fb::DType::F32, shape: Some(vec![4]), data: Some(data) }]),
        ..Default::default()
    })
}

/// Encodes `msgs` into `out`, 256 to a write, as a connection does.
fn push_all(out: &mut Outbox, msgs: &[Message]) {
    for chunk in msgs.chunks(256) {
        for m in chunk {
            out.push(m).expect("fits a frame");
        }
        let bytes = out.take();
        assert!(!bytes.is_empty());
        out.recycle(bytes);
    }
}

pub fn run(messages: usize) -> WireCosts {
    let msgs: Vec<Message> = (0..messages as u64).map(answer).collect();
    let per = |t: Instant| t.elapsed().as_nanos() as f64 / messages as f64;

    let t = Instant::now();
    let mut fresh = 0usize;
    for m in &msgs {
        fresh += encode(m).expect("fits a frame").len();
    }
    let encode_fresh_ns = per(t);

    let mut out = Outbox::default();
    let t = Instant::now();
    push_all(&mut out, &msgs);
    let encode_reused_ns = per(t);
    assert!(fresh > 0);

    let frames: Vec<Vec<u8>> = msgs.iter().map(|m| encode(m).expect("fits")).collect();
    let t = Instant::now();
    for (f, m) in frames.iter().zip(&msgs) {
        assert_eq!(&decode(f, &Limits::default()).expect("valid"), m);
    }
    let decode_ns = per(t);

    let asked: Vec<Message> = (0..messages as u64).map(request).collect();
    let t = Instant::now();
    push_all(&mut out, &asked);
    let encode_request_ns = per(t);

    let requests: Vec<Vec<u8>> = asked.iter().map(|m| encode(m).expect("fits")).collect();
    let limits = Limits::default();
    let t = Instant::now();
    let mut ids = 0u64;
    for f in &requests {
        match view(Kind::InferRequest, &f[HEADER_LEN..], &limits) {
            Ok(View::InferRequest(r)) => ids = ids.wrapping_add(r.id),
            other => panic!("a request views as one: {other:?}"),
        }
    }
    let view_request_ns = per(t);
    assert_eq!(ids, (0..messages as u64).sum::<u64>());
    WireCosts { messages, encode_fresh_ns, encode_reused_ns, decode_ns, view_request_ns, encode_request_ns }
}
