//! # baton-wire — the wire protocol
//!
//! **Owns:** the flatbuffers schema (`schema/baton.fbs`), its generated
//! bindings (planus, in `build.rs`), framing (length + kind, `frame`), and
//! decoding with verification and limits into typed messages (`message`).
//! The two messages a frontend handles once per request are done by hand,
//! without planus: a client's request read in place (`request`, accepting
//! what planus's verifying decode accepts) and its answer written in place
//! (`answer`, reading back as planus's writer's does).
//!
//! **Is not:** a transport (that is `baton-net`): it turns bytes into
//! verified messages and back, nothing more. Bytes from the network never
//! panic: every malformed input is a typed `DecodeError`.

#[allow(clippy::all, unused, non_snake_case, non_camel_case_types, missing_docs)]
pub mod generated {
    include!(concat!(env!("OUT_DIR"), "/baton_generated.rs"));
}

pub use generated::baton::wire as fb;

mod answer;
pub mod frame;
pub mod fuzzing;
mod layout;
pub mod message;
mod request;
mod request_writer;

pub use frame::{FrameError, FrameHeader, Kind, HEADER_LEN, MAX_FRAME};
pub use message::{decode, encode, encode_answer_into, encode_into, DecodeError, Limits, Message};
/// The flatbuffers builder `encode_into` reuses.
pub use planus::Builder;
/// What reading a field of a `View` in place can fail with.
pub use planus::Error as ReadError;

/// A deterministic xorshift sequence from `seed` (non-zero), for the
/// tests' random messages.
#[cfg(test)]
pub(crate) fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// A client's string as quoted back in an error: at most 64 characters,
/// so an answer stays small whatever the request carried.
pub fn clip(s: &str) -> &str {
    s.char_indices().nth(64).map_or(s, |(i, _)| &s[..i])
}
