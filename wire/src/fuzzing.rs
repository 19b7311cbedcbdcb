//! The decoder's fuzz entry point, shared by the `cargo fuzz` target
//! (`wire/fuzz`) and the corpus smoke test that runs under `cargo test`.

use crate::fb;
use crate::frame::split;
use crate::message::{decode, decode_payload, encode, request_head, view, Limits, Message, View};

/// Feeds arbitrary bytes through the stream decoder: splits whole frames
/// and decodes each. Any input may be refused, none may panic; whatever
/// decodes must re-encode to a frame that decodes to the same message —
/// compared as bytes, re-encoded, since a float may be NaN, which equals
/// nothing (found by `cargo fuzz`: an `accuracy` of NaN). Every frame is
/// also read in place (`view`): what decodes has a view, and the view
/// made owned is the decoded message; a request's head (`request_head`,
/// read before a request is turned away unread) agrees with it.
/// Returns how many frames decoded.
pub fn decode_stream(mut bytes: &[u8]) -> usize {
    let limits = Limits::default();
    let mut ok = 0;
    while let Ok(Some((h, payload, used))) = split(bytes) {
        let seen = view(h.kind, payload, &limits);
        let head = request_head(payload);
        if let Ok(m) = decode_payload(h.kind, payload, &limits) {
            round_trips(&m, &limits);
            if let Message::InferRequest(r) = &m {
                let h = head.expect("a request that decodes has a head");
                assert_eq!((h.id, h.model, h.query), (r.id, r.model.as_deref(), r.query.as_deref()));
            }
            let owned = match seen.expect("a message that decodes has a view") {
                View::InferRequest(v) => match &m {
                    Message::InferRequest(r) => {
                        assert!(crate::request::same(&v, r), "the view is the decoded request: {v:?} {r:?}");
                        Ok(m.clone())
                    }
                    other => panic!("a request decoded as {other:?}"),
                },
                View::InferResponse(r) => fb::InferResponse::try_from(r).map(Message::InferResponse),
                View::Owned(m) => Ok(m),
            };
            let owned = owned.expect("a view of a message that decodes reads");
            assert_eq!(encode(&owned).ok(), encode(&m).ok(), "the view is the decoded message");
            ok += 1;
        } else if h.kind == crate::Kind::InferRequest {
            // A request is read in place by its own reader: what it takes,
            // the decode takes too.
            assert!(seen.is_err(), "a request that does not decode has no view");
        }
        bytes = &bytes[used..];
    }
    ok
}

fn round_trips(m: &Message, limits: &Limits) {
    let once = encode(m).expect("a decoded message fits a frame");
    let back = decode(&once, limits).expect("an encoded message decodes");
    assert_eq!(back.kind(), m.kind());
    let twice = encode(&back).expect("it fits again");
    assert_eq!(once, twice, "decode(encode(m)) must give m back");
}
