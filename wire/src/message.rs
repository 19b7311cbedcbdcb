//! Typed messages: encoding, and decoding with verification and limits.
//!
//! Decoding a payload is two passes over the buffer, both bounds-checked by
//! planus (no `unsafe`, no panics on any input):
//! 1. `check_*` walks the root table through its borrowed view and enforces
//!    `Limits` *before* anything is copied: element counts, tensor shapes
//!    against their byte sizes, and a byte budget — the tensor bytes and
//!    names a message references may not add up to more than the payload,
//!    so offsets that alias one blob many times cannot amplify a 16 MiB
//!    frame into gigabytes of owned copies.
//! 2. The owned conversion (`TryFrom<…Ref>`) reads every field, which
//!    verifies every offset, string (UTF-8) and enum tag.
//!
//! The schema has no recursive table, so nesting depth is bounded by the
//! schema itself (a tensor inside a message is the deepest it goes).

use crate::fb;
use crate::frame::{FrameError, FrameHeader, Kind, HEADER_LEN};
use planus::ReadAsRoot;

/// What a decoder accepts beyond the frame limit.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Tensors in one message.
    pub max_tensors: usize,
    /// Dimensions of one tensor.
    pub max_dims: usize,
    /// Request ids (or models) listed in one message.
    pub max_ids: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_tensors: 64, max_dims: 8, max_ids: 4096 }
    }
}

impl Limits {
    /// What roles accept from each other: a batch's `Inputs` and `Results`
    /// carry one tensor per request, as many as a message lists ids.
    pub fn between_roles() -> Self {
        let d = Limits::default();
        Limits { max_tensors: d.max_ids, ..d }
    }
}

/// Why a payload was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum DecodeError {
    Frame(FrameError),
    /// The payload is not a valid flatbuffer of the frame's kind.
    Malformed {
        kind: Kind,
        detail: String,
    },
    TooManyTensors {
        got: usize,
        max: usize,
    },
    TooManyDims {
        tensor: usize,
        got: usize,
        max: usize,
    },
    TooManyIds {
        field: &'static str,
        got: usize,
        max: usize,
    },
    NegativeDim {
        tensor: usize,
        dim: i64,
    },
    /// `data` holds a different number of bytes than shape x dtype says.
    TensorSize {
        tensor: usize,
        expected: Option<u128>,
        got: usize,
    },
    /// The message references more bytes than its payload holds (aliased
    /// offsets).
    Aliased {
        referenced: usize,
        payload: usize,
    },
    /// A parallel list whose length differs from the list it annotates.
    Mismatched {
        field: &'static str,
        got: usize,
        want: usize,
    },
    /// Bytes after the last whole frame when decoding a single frame.
    Trailing(usize),
    /// Fewer bytes than the header announces.
    Truncated {
        need: usize,
        have: usize,
    },
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use DecodeError::*;
        match self {
            Frame(e) => write!(f, "bad frame header: {e}"),
            Malformed { kind, detail } => write!(f, "malformed {kind:?} payload: {detail}"),
            TooManyTensors { got, max } => write!(f, "{got} tensors, at most {max}"),
            TooManyDims { tensor, got, max } => write!(f, "tensor {tensor} has {got} dimensions, at most {max}"),
            TooManyIds { field, got, max } => write!(f, "{field} lists {got} entries, at most {max}"),
            NegativeDim { tensor, dim } => write!(f, "tensor {tensor} has a negative dimension {dim}"),
            TensorSize { tensor, expected: Some(e), got } => {
                write!(f, "tensor {tensor} holds {got} bytes, its shape and dtype say {e}")
            }
            TensorSize { tensor, expected: None, got } => {
                write!(f, "tensor {tensor} holds {got} bytes, its shape overflows")
            }
            Aliased { referenced, payload } => {
                write!(f, "message references {referenced} bytes but its payload holds {payload}")
            }
            Mismatched { field, got, want } => {
                write!(f, "{field} has {got} entries, one per request ({want}) expected")
            }
            Trailing(n) => write!(f, "{n} bytes after the frame"),
            Truncated { need, have } => write!(f, "frame needs {need} bytes, {have} present"),
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<FrameError> for DecodeError {
    fn from(e: FrameError) -> Self {
        DecodeError::Frame(e)
    }
}

macro_rules! messages {
    ($($kind:ident => $r:ident),* $(,)?) => {
        /// One decoded (owned, verified) message.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Message {
            $($kind(fb::$kind),)*
        }

        impl Message {
            pub fn kind(&self) -> Kind {
                match self {
                    $(Message::$kind(_) => Kind::$kind,)*
                }
            }

            fn payload<'b>(&self, b: &'b mut planus::Builder) -> &'b [u8] {
                b.clear();
                match self {
                    $(Message::$kind(m) => b.finish(m, None),)*
                }
            }
        }

        /// Decodes and verifies one payload of the given kind.
        pub fn decode_payload(kind: Kind, payload: &[u8], limits: &Limits) -> Result<Message, DecodeError> {
            let bad = |e: planus::Error| DecodeError::Malformed { kind, detail: e.to_string() };
            match kind {
                $(Kind::$kind => {
                    let r = <fb::$r>::read_as_root(payload).map_err(bad)?;
                    check::$kind(&r, payload.len(), limits).map_err(|e| e.into_decode(kind))?;
                    Ok(Message::$kind(fb::$kind::try_from(r).map_err(bad)?))
                })*
            }
        }
    };
}

messages!(
    InferRequest => InferRequestRef,
    InferResponse => InferResponseRef,
    RequestMeta => RequestMetaRef,
    BatchPlan => BatchPlanRef,
    FetchInputs => FetchInputsRef,
    Inputs => InputsRef,
    Results => ResultsRef,
    BatchDone => BatchDoneRef,
    Dropped => DroppedRef,
    BackendStatus => BackendStatusRef,
    ModelLoad => ModelLoadRef,
    ModelUnload => ModelUnloadRef,
    Stats => StatsRef,
    Hello => HelloRef,
    RdmaConnect => RdmaConnectRef,
);

/// A payload read in place: verified as `decode_payload` verifies it, not
/// copied into an owned message. The kinds on a client's hot path (its
/// request, its answer) are views; every other kind decodes to its owned
/// message.
#[derive(Debug)]
pub enum View<'a> {
    InferRequest(RequestView<'a>),
    InferResponse(fb::InferResponseRef<'a>),
    Owned(Message),
}

/// A verified request read in place (`crate::request`), with what its
/// verification read kept: its scalars, its strings (UTF-8 checked once)
/// and its first tensor, so the frontend admits it without reading them
/// again (measured: reading a request took 12% of the frontend shard's
/// time at 900,000 r/s, half of it reading twice).
#[derive(Debug)]
pub struct RequestView<'a> {
    pub id: u64,
    pub slo_ns: u64,
    pub app: u32,
    pub path_ns: u64,
    pub model: Option<&'a str>,
    pub app_name: Option<&'a str>,
    pub query: Option<&'a str>,
    /// How many input tensors it carries.
    pub tensors: usize,
    pub first: Option<TensorView<'a>>,
}

/// A verified tensor read in place.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub dtype: fb::DType,
    /// The product of its shape (1 for a tensor without one, as a scalar);
    /// None where it overflows i64 (a shape with a 0 in it passes the
    /// verifier, which multiplies wider).
    pub elements: Option<i64>,
    pub data: &'a [u8],
}

/// Verifies one payload of the given kind and returns it as a `View`.
pub fn view<'a>(kind: Kind, payload: &'a [u8], limits: &Limits) -> Result<View<'a>, DecodeError> {
    let bad = |e: planus::Error| DecodeError::Malformed { kind, detail: e.to_string() };
    let verified = |f: Result<(), check::Fail>| f.map_err(|e| e.into_decode(kind));
    match kind {
        Kind::InferRequest => crate::request::read(payload, limits).map(View::InferRequest),
        Kind::InferResponse => {
            let r = fb::InferResponseRef::read_as_root(payload).map_err(bad)?;
            verified(check::InferResponse(&r, payload.len(), limits))?;
            Ok(View::InferResponse(r))
        }
        _ => decode_payload(kind, payload, limits).map(View::Owned),
    }
}

/// What a frontend reads of a request it turns away unread
/// (`request_head`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestHead<'a> {
    pub id: u64,
    pub model: Option<&'a str>,
    pub query: Option<&'a str>,
}

/// A request payload's id, model and query (what its answer and its tally
/// need), read without verifying
/// the rest (each read is bounds-checked); None where one does not read,
/// for the caller to decode the payload whole and refuse it as `view` does.
pub fn request_head(payload: &[u8]) -> Option<RequestHead<'_>> {
    let r = fb::InferRequestRef::read_as_root(payload).ok()?;
    Some(RequestHead { id: r.id().ok()?, model: r.model().ok()?, query: r.query().ok()? })
}

/// Encodes a message as one frame (header + payload).
pub fn encode(m: &Message) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::new();
    encode_into(m, &mut planus::Builder::new(), &mut out)?;
    Ok(out)
}

/// Appends `m` as one frame to `out`, building it in `builder` (reused
/// across calls, a sender encodes without allocating once both have grown
/// to its largest message). On error nothing is appended.
pub fn encode_into(m: &Message, builder: &mut planus::Builder, out: &mut Vec<u8>) -> Result<(), FrameError> {
    match m {
        Message::InferResponse(a) => encode_answer_into(a, out),
        Message::InferRequest(r) => written_frame(Kind::InferRequest, out, |out| crate::request_writer::write(r, out)),
        m => frame_into(m.kind(), m.payload(builder), out),
    }
}

/// `encode_into` of `Message::InferResponse(a)`, for an answer held by
/// reference (a frontend answers from its list, not moving each out):
/// written in place, without a builder (`crate::answer`).
pub fn encode_answer_into(a: &fb::InferResponse, out: &mut Vec<u8>) -> Result<(), FrameError> {
    written_frame(Kind::InferResponse, out, |out| crate::answer::write(a, out))
}

/// A frame of `kind` whose payload `write` appends to `out` (returning its
/// length), its header written in front once the length is known; on
/// error nothing is appended.
fn written_frame(kind: Kind, out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>) -> usize) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    let len = write(out);
    match FrameHeader::new(kind, len) {
        Ok(h) => {
            out[start..start + HEADER_LEN].copy_from_slice(&h.to_bytes());
            Ok(())
        }
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

fn frame_into(kind: Kind, payload: &[u8], out: &mut Vec<u8>) -> Result<(), FrameError> {
    out.extend_from_slice(&FrameHeader::new(kind, payload.len())?.to_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

/// Decodes exactly one frame from `bytes` (header, payload, nothing after).
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Message, DecodeError> {
    let head =
        bytes.first_chunk::<HEADER_LEN>().ok_or(DecodeError::Truncated { need: HEADER_LEN, have: bytes.len() })?;
    let h = FrameHeader::parse(head)?;
    let need = HEADER_LEN + h.len;
    match bytes.len().cmp(&need) {
        std::cmp::Ordering::Less => Err(DecodeError::Truncated { need, have: bytes.len() }),
        std::cmp::Ordering::Greater => Err(DecodeError::Trailing(bytes.len() - need)),
        std::cmp::Ordering::Equal => decode_payload(h.kind, &bytes[HEADER_LEN..], limits),
    }
}

/// Limit checks on the borrowed views (pass 1).
pub(crate) mod check {
    use super::{fb, DecodeError, Kind, Limits, TensorView};

    /// A check failure: a limit (already typed) or a planus read error.
    pub enum Fail {
        Limit(DecodeError),
        Read(planus::Error),
    }

    impl Fail {
        pub fn into_decode(self, kind: Kind) -> DecodeError {
            match self {
                Fail::Limit(e) => e,
                Fail::Read(e) => DecodeError::Malformed { kind, detail: e.to_string() },
            }
        }
    }

    impl From<planus::Error> for Fail {
        fn from(e: planus::Error) -> Self {
            Fail::Read(e)
        }
    }

    impl From<DecodeError> for Fail {
        fn from(e: DecodeError) -> Self {
            Fail::Limit(e)
        }
    }

    type R = Result<(), Fail>;

    fn ids(field: &'static str, len: Option<usize>, l: &Limits) -> R {
        match len {
            Some(got) if got > l.max_ids => Err(DecodeError::TooManyIds { field, got, max: l.max_ids }.into()),
            _ => Ok(()),
        }
    }

    pub(crate) fn dtype_bytes(d: fb::DType) -> u128 {
        match d {
            fb::DType::F32 | fb::DType::I32 => 4,
            fb::DType::F16 | fb::DType::Bf16 => 2,
            fb::DType::I64 => 8,
            fb::DType::U8 => 1,
        }
    }

    /// Bytes of strings and tensor data referenced so far, against the
    /// payload's size.
    pub(crate) struct Budget {
        referenced: usize,
        payload: usize,
    }

    impl Budget {
        pub(crate) fn new(payload: usize) -> Self {
            Budget { referenced: 0, payload }
        }

        pub(crate) fn take(&mut self, bytes: usize) -> R {
            self.referenced = self.referenced.saturating_add(bytes);
            if self.referenced > self.payload {
                return Err(DecodeError::Aliased { referenced: self.referenced, payload: self.payload }.into());
            }
            Ok(())
        }

        pub(crate) fn string(&mut self, s: Option<&str>) -> R {
            self.take(s.map_or(0, str::len))
        }
    }

    type Tensors<'a> = Option<planus::Vector<'a, planus::Result<fb::TensorRef<'a>>>>;

    /// Checks every tensor of `v`; the first as read, if any.
    fn tensors<'a>(v: Tensors<'a>, budget: &mut Budget, l: &Limits) -> Result<Option<TensorView<'a>>, Fail> {
        let Some(v) = v else { return Ok(None) };
        if v.len() > l.max_tensors {
            return Err(DecodeError::TooManyTensors { got: v.len(), max: l.max_tensors }.into());
        }
        let mut first = None;
        for (i, t) in v.iter().enumerate() {
            let t = t?;
            budget.string(t.name()?)?;
            let data = t.data()?.unwrap_or(&[]);
            budget.take(data.len())?;
            let dtype = t.dtype()?;
            // The element count as the frontend reads it: i64, None past it.
            let mut elements = Some(1i64);
            if let Some(shape) = t.shape()? {
                if shape.len() > l.max_dims {
                    return Err(DecodeError::TooManyDims { tensor: i, got: shape.len(), max: l.max_dims }.into());
                }
                let mut elems: Option<u128> = Some(1);
                for d in shape.iter() {
                    if d < 0 {
                        return Err(DecodeError::NegativeDim { tensor: i, dim: d }.into());
                    }
                    elems = elems.and_then(|e| e.checked_mul(d as u128));
                    elements = elements.and_then(|e| e.checked_mul(d));
                }
                let expected = elems.and_then(|e| e.checked_mul(dtype_bytes(dtype)));
                if expected != Some(data.len() as u128) {
                    return Err(DecodeError::TensorSize { tensor: i, expected, got: data.len() }.into());
                }
            }
            if i == 0 {
                first = Some(TensorView { dtype, elements, data });
            }
        }
        Ok(first)
    }

    /// The checks `crate::request::read` makes while it reads a request in
    /// place, here on planus's reader (the owned decode's).
    #[allow(non_snake_case)]
    pub fn InferRequest(r: &fb::InferRequestRef<'_>, payload: usize, l: &Limits) -> R {
        let mut b = Budget::new(payload);
        for s in [r.model()?, r.app_name()?, r.query()?] {
            b.string(s)?;
        }
        tensors(r.inputs()?, &mut b, l).map(drop)
    }
    #[allow(non_snake_case)]
    pub fn InferResponse(r: &fb::InferResponseRef<'_>, payload: usize, l: &Limits) -> R {
        let mut b = Budget::new(payload);
        b.string(r.message()?)?;
        b.string(r.stage()?)?;
        tensors(r.outputs()?, &mut b, l).map(drop)
    }
    #[allow(non_snake_case)]
    pub fn BatchPlan(r: &fb::BatchPlanRef<'_>, _: usize, l: &Limits) -> R {
        let (requests, frontends) = (r.requests()?.map_or(0, |v| v.len()), r.frontends()?.map_or(0, |v| v.len()));
        ids("requests", Some(requests), l)?;
        ids("frontends", Some(frontends), l)?;
        if requests != frontends {
            return Err(DecodeError::Mismatched { field: "frontends", got: frontends, want: requests }.into());
        }
        seen_per_request(r.seen_ns()?.map(|v| v.len()), requests)?;
        per_request("heads", r.heads()?.map(|v| v.len()), requests)?;
        per_request("inputs", r.inputs()?.map(|v| v.len()), requests)
    }
    /// `seen_ns`, when present, has one entry per request.
    fn seen_per_request(seen: Option<usize>, requests: usize) -> R {
        per_request("seen_ns", seen, requests)
    }
    /// `field`, when present, has one entry per request.
    fn per_request(field: &'static str, len: Option<usize>, requests: usize) -> R {
        match len {
            Some(got) if got != requests => Err(DecodeError::Mismatched { field, got, want: requests }.into()),
            _ => Ok(()),
        }
    }
    #[allow(non_snake_case)]
    pub fn FetchInputs(r: &fb::FetchInputsRef<'_>, _: usize, l: &Limits) -> R {
        ids("requests", r.requests()?.map(|v| v.len()), l)
    }
    #[allow(non_snake_case)]
    pub fn Inputs(r: &fb::InputsRef<'_>, payload: usize, l: &Limits) -> R {
        ids("requests", r.requests()?.map(|v| v.len()), l)?;
        tensors(r.tensors()?, &mut Budget::new(payload), l).map(drop)
    }
    #[allow(non_snake_case)]
    pub fn Results(r: &fb::ResultsRef<'_>, payload: usize, l: &Limits) -> R {
        let requests = r.requests()?.map(|v| v.len());
        ids("requests", requests, l)?;
        seen_per_request(r.seen_ns()?.map(|v| v.len()), requests.unwrap_or(0))?;
        per_request("solo_ns", r.solo_ns()?.map(|v| v.len()), requests.unwrap_or(0))?;
        tensors(r.outputs()?, &mut Budget::new(payload), l).map(drop)
    }
    #[allow(non_snake_case)]
    pub fn BatchDone(r: &fb::BatchDoneRef<'_>, _: usize, l: &Limits) -> R {
        let requests = r.requests()?.map(|v| v.len());
        ids("requests", requests, l)?;
        per_request("solo_ns", r.solo_ns()?.map(|v| v.len()), requests.unwrap_or(0))
    }
    #[allow(non_snake_case)]
    pub fn Dropped(r: &fb::DroppedRef<'_>, payload: usize, l: &Limits) -> R {
        ids("requests", r.requests()?.map(|v| v.len()), l)?;
        Budget::new(payload).string(r.message()?)
    }
    #[allow(non_snake_case)]
    pub fn BackendStatus(r: &fb::BackendStatusRef<'_>, _: usize, l: &Limits) -> R {
        ids("loaded_models", r.loaded_models()?.map(|v| v.len()), l)
    }
    #[allow(non_snake_case)]
    pub fn ModelLoad(r: &fb::ModelLoadRef<'_>, payload: usize, _: &Limits) -> R {
        Budget::new(payload).string(r.name()?)
    }
    #[allow(non_snake_case)]
    pub fn RdmaConnect(r: &fb::RdmaConnectRef<'_>, payload: usize, _: &Limits) -> R {
        let mut b = Budget::new(payload);
        b.take(r.gid()?.map_or(0, <[u8]>::len))?;
        b.string(r.error()?)
    }
    #[allow(non_snake_case)]
    pub fn ModelUnload(r: &fb::ModelUnloadRef<'_>, payload: usize, _: &Limits) -> R {
        Budget::new(payload).string(r.name()?)
    }
    /// Tables of scalars only: nothing beyond pass 2.
    macro_rules! scalar_only {
        ($($t:ident => $r:ident),*) => {$(
            #[allow(non_snake_case)]
            pub fn $t(_: &fb::$r<'_>, _: usize, _: &Limits) -> R {
                Ok(())
            }
        )*};
    }
    scalar_only!(
        RequestMeta => RequestMetaRef,
        Stats => StatsRef,
        Hello => HelloRef
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(shape: Option<Vec<i64>>, bytes: usize) -> fb::Tensor {
        fb::Tensor { name: None, dtype: fb::DType::U8, shape, data: Some((0..bytes).map(|i| i as u8).collect()) }
    }

    /// A request's head reads what was written, without the rest; bytes
    /// that are not a request (cut short anywhere, or flipped) read as no
    /// head or as some head, never a panic.
    #[test]
    fn a_request_head_reads_id_model_and_query_alone() {
        let req = fb::InferRequest {
            id: 41,
            model: Some("resnet".into()),
            slo_ns: 25_000_000,
            query: Some("game".into()),
            inputs: Some(vec![tensor(Some(vec![4]), 4)]),
            ..Default::default()
        };
        let frame = encode(&Message::InferRequest(req)).expect("fits");
        let payload = &frame[HEADER_LEN..];
        let want = RequestHead { id: 41, model: Some("resnet"), query: Some("game") };
        assert_eq!(request_head(payload), Some(want));
        assert_eq!(request_head(&[]), None);
        assert_eq!(request_head(&[0xff; 3]), None);
        for cut in 0..payload.len() {
            let _ = request_head(&payload[..cut]);
        }
        let mut bytes = payload.to_vec();
        for i in 0..bytes.len() {
            bytes[i] ^= 0x5a;
            let _ = request_head(&bytes);
            bytes[i] ^= 0x5a;
        }
    }

    /// An answer written in place (`crate::answer`) reads back as itself,
    /// as the generated writer's frame of it does, in a buffer that held
    /// something before; read in place, every field and tensor is there.
    fn answer_reads_back(a: fb::InferResponse) {
        let mut out = vec![1u8, 2];
        encode_answer_into(&a, &mut out).unwrap();
        let frame = &out[2..];
        assert_eq!(frame, &encode(&Message::InferResponse(a.clone())).unwrap()[..], "one writer: {a:?}");
        let generated = planus::Builder::new().finish(&a, None).to_vec();
        let read = |bytes| fb::InferResponse::try_from(fb::InferResponseRef::read_as_root(bytes).unwrap()).unwrap();
        let payload = &frame[HEADER_LEN..];
        assert_eq!(read(payload), read(&generated[..]), "{a:?}");
        assert_eq!(read(payload), a);
        // Decoded and viewed (limits checked) as the generated frame is.
        let header = FrameHeader::new(Kind::InferResponse, generated.len()).unwrap().to_bytes();
        let limits = Limits::default();
        assert_eq!(decode(frame, &limits), decode(&[&header[..], &generated].concat(), &limits));
        let viewed = |p| match view(Kind::InferResponse, p, &limits) {
            Ok(View::InferResponse(r)) => Ok(fb::InferResponse::try_from(r).unwrap()),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(viewed(payload), viewed(&generated));
    }

    /// Request `r`, framed by `encode` (`crate::request_writer`), reads back
    /// as itself through planus's reader, as the generated writer's payload
    /// of it does; decodes as that payload does (both valid or both the
    /// same error); and the frontend's own reader (`request::read`) takes
    /// from it what it takes from that payload.
    fn request_reads_back(r: fb::InferRequest) {
        let frame = encode(&Message::InferRequest(r.clone())).unwrap();
        let mut out = vec![1u8, 2, 3];
        encode_into(&Message::InferRequest(r.clone()), &mut planus::Builder::new(), &mut out).unwrap();
        assert_eq!(&out[3..], &frame[..], "one writer, wherever the frame starts: {r:?}");
        let payload = &frame[HEADER_LEN..];
        let generated = planus::Builder::new().finish(&r, None).to_vec();
        let read = |bytes| fb::InferRequest::try_from(fb::InferRequestRef::read_as_root(bytes).unwrap()).unwrap();
        assert_eq!(read(payload), read(&generated[..]), "{r:?}");
        assert_eq!(read(payload), r);
        let limits = Limits::default();
        let header = FrameHeader::new(Kind::InferRequest, generated.len()).unwrap().to_bytes();
        assert_eq!(decode(&frame, &limits), decode(&[&header[..], &generated].concat(), &limits));
        let viewed = |p| crate::request::read(p, &limits).map(|v| crate::request::same(&v, &r));
        assert_eq!(viewed(payload), viewed(&generated));
    }

    /// Requests of every kind of content, numbered at random, read back.
    #[test]
    fn requests_written_in_place_read_back_whatever_they_hold() {
        let mut d = Draw::new(crate::xorshift(0x9e37_79b9_7f4a_7c15));
        for _ in 0..2_000 {
            let n = d.n();
            request_reads_back(fb::InferRequest {
                id: d.n(),
                model: d.bit().then(|| text(n)),
                slo_ns: d.n(),
                app: d.n() as u32,
                inputs: d.bit().then(|| d.tensors(n)),
                app_name: d.bit().then(|| text(n >> 2)),
                query: d.bit().then(|| text(n >> 3)),
                path_ns: d.n(),
            });
        }
    }

    /// An answer too large for a frame is the typed error, and the buffer
    /// is left as it was.
    #[test]
    fn an_answer_too_large_for_a_frame_appends_nothing() {
        let big = fb::Tensor { data: Some(vec![0; crate::MAX_FRAME]), ..Default::default() };
        let a = fb::InferResponse { outputs: Some(vec![big]), ..Default::default() };
        let mut out = vec![9u8; 3];
        assert!(matches!(encode_answer_into(&a, &mut out), Err(FrameError::TooLarge { .. })));
        assert_eq!(out, vec![9u8; 3]);
        assert!(matches!(encode(&Message::InferResponse(a)), Err(FrameError::TooLarge { .. })));
    }

    /// Draws for the writers' read-back tests: numbers, coin flips, short
    /// non-ASCII strings and tensors of every shape.
    struct Draw<F: FnMut() -> u64> {
        next: F,
        bits: u64,
    }

    /// A short string, non-ASCII, of `n`'s drawing.
    fn text(n: u64) -> String {
        "é.x".repeat((n % 5) as usize)
    }

    impl<F: FnMut() -> u64> Draw<F> {
        fn new(mut next: F) -> Self {
            let bits = next();
            Self { next, bits }
        }

        fn n(&mut self) -> u64 {
            (self.next)()
        }

        fn bit(&mut self) -> bool {
            self.bits = self.bits.rotate_right(1);
            self.bits & 1 == 1
        }

        /// Up to three tensors, each part present or not.
        fn tensors(&mut self, n: u64) -> Vec<fb::Tensor> {
            (0..n % 4)
                .map(|i| {
                    let n = self.n() >> i;
                    fb::Tensor {
                        name: self.bit().then(|| text(n)),
                        dtype: fb::DType::ENUM_VALUES[(n % 6) as usize],
                        shape: self.bit().then(|| (0..n % 4).map(|d| (n >> d) as i64 - 7).collect()),
                        data: self.bit().then(|| (0..n % 23).map(|b| b as u8).collect()),
                    }
                })
                .collect()
        }
    }

    /// Answers of every kind of content, numbered at random, read back.
    #[test]
    fn answers_written_in_place_read_back_whatever_they_hold() {
        let mut d = Draw::new(crate::xorshift(0x2545_f491_4f6c_dd1d));
        for _ in 0..2_000 {
            let n = d.n();
            let a = fb::InferResponse {
                id: d.n(),
                status: fb::Status::ENUM_VALUES[(n % 3) as usize],
                drop_reason: fb::DropReason::ENUM_VALUES[(n % 7) as usize % fb::DropReason::ENUM_VALUES.len()],
                error_code: fb::ErrorCode::ENUM_VALUES[(n % 11) as usize % fb::ErrorCode::ENUM_VALUES.len()],
                message: d.bit().then(|| text(n)),
                timing: d.bit().then(|| fb::Timing {
                    queue_ns: d.n(),
                    exec_ns: d.n(),
                    batch_size: d.n() as u32,
                    received_ns: d.n(),
                    seen_ns: d.n(),
                    exec_at_ns: d.n(),
                    started_ns: d.n(),
                    finished_ns: d.n(),
                    written_ns: d.n(),
                    origin_unix_ns: d.n(),
                }),
                outputs: d.bit().then(|| d.tensors(n)),
                app: d.n() as u32,
                subnet: d.bit().then(|| d.n() as u16),
                accuracy: (d.n() % 10_000) as f32 / 7.0,
                solo_ns: d.n(),
                stage: d.bit().then(|| text(n >> 3)),
            };
            answer_reads_back(a);
        }
    }

    /// The request's and the answer's writers write what the generated
    /// writer does, whatever the tensors: none, one of each rank, several,
    /// named, with every other field set. Both read back as the same
    /// message, and decode to it.
    #[test]
    fn requests_and_answers_are_written_as_the_generated_writer_writes_them() {
        let request = fb::InferRequest {
            id: 3,
            model: Some("m".into()),
            slo_ns: 5,
            app: 2,
            app_name: Some("a".into()),
            query: Some("q".into()),
            path_ns: 8,
            ..Default::default()
        };
        let full = fb::InferResponse {
            id: 7,
            status: fb::Status::Dropped,
            message: Some("why".into()),
            timing: Some(fb::Timing { exec_ns: 3, batch_size: 2, ..Default::default() }),
            app: 4,
            subnet: Some(1),
            accuracy: 0.5,
            solo_ns: 9,
            stage: Some("stage".into()),
            ..Default::default()
        };
        let named = fb::Tensor { name: Some("out".into()), ..tensor(Some(vec![2, 3, 1]), 6) };
        let outputs = [
            None,
            Some(vec![]),
            Some(vec![tensor(Some(vec![5]), 5)]),
            Some(vec![tensor(Some(vec![2, 2]), 4)]),
            Some(vec![named.clone()]),
            Some(vec![tensor(None, 3)]),
            Some(vec![tensor(Some(vec![1]), 1), named, tensor(Some(vec![]), 1)]),
        ];
        for tensors in outputs {
            for base in [fb::InferRequest::default(), request.clone()] {
                let r = fb::InferRequest { inputs: tensors.clone(), ..base };
                request_reads_back(r.clone());
                let frame = encode(&Message::InferRequest(r.clone())).expect("encodes");
                assert_eq!(decode(&frame, &Limits::default()), Ok(Message::InferRequest(r)));
            }
            for base in [fb::InferResponse::default(), full.clone(), fb::InferResponse { subnet: None, ..full.clone() }]
            {
                let a = fb::InferResponse { outputs: tensors.clone(), ..base };
                answer_reads_back(a.clone());
                assert_eq!(
                    decode(&encode(&Message::InferResponse(a.clone())).unwrap(), &Limits::default()),
                    Ok(Message::InferResponse(a))
                );
            }
        }
    }
}
