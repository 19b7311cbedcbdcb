//! A client's request read in place without planus: the frontend reads
//! one per request, and planus's reader (a vtable lookup and an error
//! path per field) took about 90 ns of it (`wire_bench`). This reader
//! walks the same flatbuffer by hand, accepting exactly what planus's
//! verifying decode does (tested against it below, on valid requests and
//! on every one-byte corruption and truncation of them):
//!
//! - a table: a u32 offset to it; at it an i32 back to its vtable, which
//!   must not lie before the slice the offset was read in (the payload,
//!   or a vector's elements: planus reads a vector's tables relative to
//!   its elements); the vtable's u16 length even and at least 4, all of
//!   it in the payload; a field's u16 place past the vtable's end is 0
//!   (absent).
//! - a scalar: its bytes in the payload; an enum: a known tag.
//! - a string or vector: a u32 offset forward to a u32 length, then that
//!   many elements in the payload; strings UTF-8.
//!
//! Then the limits `check::request_view` applies, in its order (strings,
//! the tensor count, each tensor's name, data, dtype and shape), and the
//! scalars last, as the owned conversion reads them. Every read is
//! bounds-checked with `get`: no input panics.

use crate::fb;
use crate::message::check::{dtype_bytes, Budget};
use crate::message::{DecodeError, Limits, RequestView, TensorView};
use crate::Kind;

// Fields of `InferRequest` (vtable slots), in the schema's order.
const ID: usize = 0;
const MODEL: usize = 1;
const SLO_NS: usize = 2;
const APP: usize = 3;
const INPUTS: usize = 4;
const APP_NAME: usize = 5;
const QUERY: usize = 6;
const PATH_NS: usize = 7;
// Fields of `Tensor`.
const T_NAME: usize = 0;
const T_DTYPE: usize = 1;
const T_SHAPE: usize = 2;
const T_DATA: usize = 3;

/// A structural fault: what was wrong, and where.
struct Bad(&'static str, usize);

impl Bad {
    fn into_decode(self) -> DecodeError {
        DecodeError::Malformed { kind: Kind::InferRequest, detail: format!("{} at byte {}", self.0, self.1) }
    }
}

type R<T> = Result<T, Bad>;

fn bytes(p: &[u8], at: usize, n: usize) -> R<&[u8]> {
    at.checked_add(n).and_then(|end| p.get(at..end)).ok_or(Bad("out of bounds", at))
}

fn le<const N: usize>(p: &[u8], at: usize) -> R<[u8; N]> {
    Ok(bytes(p, at, N)?.try_into().expect("N bytes"))
}

fn u32_at(p: &[u8], at: usize) -> R<usize> {
    Ok(u32::from_le_bytes(le(p, at)?) as usize)
}

/// Where the offset at `at` points.
fn follow(p: &[u8], at: usize) -> R<usize> {
    at.checked_add(u32_at(p, at)?).ok_or(Bad("offset overflows", at))
}

/// A vector's (or string's) elements: where they start and how many.
fn vector(p: &[u8], at: usize, stride: usize) -> R<(usize, usize)> {
    let v = follow(p, at)?;
    let n = u32_at(p, v)?;
    let start = v + 4;
    bytes(p, start, n.checked_mul(stride).ok_or(Bad("vector too long", v))?)?;
    Ok((start, n))
}

fn string(p: &[u8], at: usize) -> R<&str> {
    let (start, n) = vector(p, at, 1)?;
    std::str::from_utf8(&p[start..start + n]).map_err(|_| Bad("string not UTF-8", start))
}

/// A table read at the offset at `at`, its vtable not before `base`.
struct Table<'a> {
    at: usize,
    vtable: &'a [u8],
}

impl<'a> Table<'a> {
    fn read(p: &'a [u8], base: usize, at: usize) -> R<Self> {
        let t = follow(p, at)?;
        let back = i32::from_le_bytes(le(p, t)?);
        let vt = i64::try_from(t).ok().and_then(|t| t.checked_sub(i64::from(back))).ok_or(Bad("vtable offset", t))?;
        let vt = usize::try_from(vt).ok().filter(|&vt| vt >= base).ok_or(Bad("vtable before its slice", t))?;
        let len = u16::from_le_bytes(le(p, vt)?) as usize;
        if len < 4 || !len.is_multiple_of(2) {
            return Err(Bad("vtable length", vt));
        }
        Ok(Table { at: t, vtable: bytes(p, vt, len)? })
    }

    /// Where field `i` lies, if present.
    fn field(&self, i: usize) -> Option<usize> {
        let place = self.vtable.get(4 + 2 * i..6 + 2 * i).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        (place != 0).then(|| self.at + usize::from(place))
    }

    fn scalar<const N: usize>(&self, p: &[u8], i: usize) -> R<Option<[u8; N]>> {
        self.field(i).map(|at| le(p, at)).transpose()
    }

    fn string(&self, p: &'a [u8], i: usize) -> R<Option<&'a str>> {
        self.field(i).map(|at| string(p, at)).transpose()
    }
}

/// The payload of a request frame, verified and read in place.
pub fn read<'a>(p: &'a [u8], limits: &Limits) -> Result<RequestView<'a>, DecodeError> {
    let r = Table::read(p, 0, 0).map_err(Bad::into_decode)?;
    let mut budget = Budget::new(p.len());
    let strings = [MODEL, APP_NAME, QUERY].map(|i| r.string(p, i));
    let [model, app_name, query] = strings;
    let (model, app_name, query) =
        (model.map_err(Bad::into_decode)?, app_name.map_err(Bad::into_decode)?, query.map_err(Bad::into_decode)?);
    for s in [model, app_name, query] {
        budget.string(s).map_err(|e| e.into_decode(Kind::InferRequest))?;
    }
    let inputs = r.field(INPUTS).map(|at| vector(p, at, 4)).transpose().map_err(Bad::into_decode)?;
    let tensors = inputs.map_or(0, |(_, n)| n);
    if tensors > limits.max_tensors {
        return Err(DecodeError::TooManyTensors { got: tensors, max: limits.max_tensors });
    }
    let mut first = None;
    if let Some((start, n)) = inputs {
        for i in 0..n {
            let t = tensor(p, start, start + 4 * i, i, &mut budget, limits)?;
            first = first.or(Some(t));
        }
    }
    let scalars = || -> R<_> {
        let id = r.scalar(p, ID)?.map_or(0, u64::from_le_bytes);
        let slo_ns = r.scalar(p, SLO_NS)?.map_or(0, u64::from_le_bytes);
        let app = r.scalar(p, APP)?.map_or(0, u32::from_le_bytes);
        let path_ns = r.scalar(p, PATH_NS)?.map_or(0, u64::from_le_bytes);
        Ok((id, slo_ns, app, path_ns))
    };
    let (id, slo_ns, app, path_ns) = scalars().map_err(Bad::into_decode)?;
    Ok(RequestView { id, slo_ns, app, path_ns, model, app_name, query, tensors, first })
}

/// Whether view `v` holds what the owned decode of the same payload, `r`,
/// does (the fuzz target's and the tests' check).
pub(crate) fn same(v: &RequestView<'_>, r: &fb::InferRequest) -> bool {
    let inputs = r.inputs.as_deref().unwrap_or(&[]);
    let first = |t: &TensorView<'_>, o: &fb::Tensor| t.dtype == o.dtype && t.data == o.data.as_deref().unwrap_or(&[]);
    (v.id, v.slo_ns, v.app, v.path_ns) == (r.id, r.slo_ns, r.app, r.path_ns)
        && (v.model, v.app_name, v.query) == (r.model.as_deref(), r.app_name.as_deref(), r.query.as_deref())
        && v.tensors == inputs.len()
        && match (&v.first, inputs.first()) {
            (Some(t), Some(o)) => first(t, o),
            (None, None) => true,
            _ => false,
        }
}

/// Tensor `i` of a request, its offset at `at` among the elements that
/// start at `base`: checked as `check::tensors` checks each.
fn tensor<'a>(
    p: &'a [u8],
    base: usize,
    at: usize,
    i: usize,
    budget: &mut Budget,
    l: &Limits,
) -> Result<TensorView<'a>, DecodeError> {
    let t = Table::read(p, base, at).map_err(Bad::into_decode)?;
    let name = t.string(p, T_NAME).map_err(Bad::into_decode)?;
    budget.string(name).map_err(|e| e.into_decode(Kind::InferRequest))?;
    let data = match t.field(T_DATA) {
        Some(at) => {
            let (start, n) = vector(p, at, 1).map_err(Bad::into_decode)?;
            &p[start..start + n]
        }
        None => &[],
    };
    budget.take(data.len()).map_err(|e| e.into_decode(Kind::InferRequest))?;
    let tag = t.scalar::<1>(p, T_DTYPE).map_err(Bad::into_decode)?.map_or(0, |[b]| b);
    let dtype = fb::DType::try_from(tag).map_err(|_| Bad("unknown dtype", t.at).into_decode())?;
    let mut elements = Some(1i64);
    if let Some(at) = t.field(T_SHAPE) {
        let (start, n) = vector(p, at, 8).map_err(Bad::into_decode)?;
        if n > l.max_dims {
            return Err(DecodeError::TooManyDims { tensor: i, got: n, max: l.max_dims });
        }
        let mut elems: Option<u128> = Some(1);
        for k in 0..n {
            let d = i64::from_le_bytes(p[start + 8 * k..start + 8 * k + 8].try_into().expect("8 bytes"));
            if d < 0 {
                return Err(DecodeError::NegativeDim { tensor: i, dim: d });
            }
            elems = elems.and_then(|e| e.checked_mul(d as u128));
            elements = elements.and_then(|e| e.checked_mul(d));
        }
        let expected = elems.and_then(|e| e.checked_mul(dtype_bytes(dtype)));
        if expected != Some(data.len() as u128) {
            return Err(DecodeError::TensorSize { tensor: i, expected, got: data.len() });
        }
    }
    Ok(TensorView { dtype, elements, data })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{decode_payload, view, View};
    use crate::{encode, Message, HEADER_LEN};

    /// What the reader makes of `p`, against planus's verifying decode:
    /// the same request, or both refusing it (with the same error where it
    /// is a limit's; a structural fault is `Malformed` on both sides).
    /// Whether both read it.
    fn agrees(p: &[u8]) -> bool {
        let limits = Limits { max_tensors: 3, max_dims: 3, ..Limits::default() };
        let ours = view(Kind::InferRequest, p, &limits);
        match (decode_payload(Kind::InferRequest, p, &limits), ours) {
            (Ok(Message::InferRequest(r)), Ok(View::InferRequest(v))) => {
                assert!(same(&v, &r), "{v:?} {r:?}");
                return true;
            }
            (Err(DecodeError::Malformed { .. }), Err(DecodeError::Malformed { .. })) => {}
            (Err(e), Err(o)) => assert_eq!(e, o, "{p:?}"),
            (theirs, ours) => panic!("planus: {theirs:?}, ours: {ours:?}, payload {p:?}"),
        }
        false
    }

    fn random_request(next: &mut impl FnMut() -> u64) -> fb::InferRequest {
        let n = next();
        let bit = |k: u32| (n >> k) & 1 == 1;
        let text = |m: u64| "aé.".repeat((m % 4) as usize);
        let tensor = |m: u64| {
            let dtype = fb::DType::ENUM_VALUES[(m % 6) as usize];
            let dims: Vec<i64> =
                (0..m % 5).map(|d| ((m >> (8 + d)) % 3) as i64 - i64::from(m.is_multiple_of(97))).collect();
            let elems: i64 = dims.iter().product();
            // Mostly consistent with the shape; now and then not.
            let len = (elems.max(0) as usize) * dtype_bytes(dtype) as usize + usize::from(m.is_multiple_of(13));
            fb::Tensor {
                name: m.is_multiple_of(3).then(|| text(m >> 3)),
                dtype,
                shape: (!m.is_multiple_of(7)).then_some(dims),
                data: (!m.is_multiple_of(11)).then(|| vec![7; len]),
            }
        };
        fb::InferRequest {
            id: next(),
            model: bit(0).then(|| text(n >> 8)),
            slo_ns: if bit(1) { next() } else { 0 },
            app: if bit(2) { next() as u32 } else { 0 },
            inputs: bit(3).then(|| (0..(n >> 16) % 5).map(|_| tensor(next())).collect()),
            app_name: bit(4).then(|| text(n >> 20)),
            query: bit(5).then(|| text(n >> 24)),
            path_ns: if bit(6) { next() } else { 0 },
        }
    }

    /// Valid requests of every shape, each corrupted at every byte and cut
    /// at every length: the reader and planus's decode agree on all.
    #[test]
    fn the_reader_agrees_with_planus_on_requests_and_their_corruptions() {
        let mut next = crate::xorshift(0x9e37_79b9_7f4a_7c15);
        let (mut read, mut corrupted_read, mut with_tensors) = (0, 0, 0);
        for _ in 0..400 {
            let r = random_request(&mut next);
            let tensors = r.inputs.as_ref().is_some_and(|t| !t.is_empty());
            let frame = encode(&Message::InferRequest(r)).unwrap();
            let p = frame[HEADER_LEN..].to_vec();
            if agrees(&p) {
                read += 1;
                with_tensors += usize::from(tensors);
            }
            for cut in 0..p.len() {
                agrees(&p[..cut]);
            }
            let mut bad = p.clone();
            for i in 0..bad.len() {
                for flip in [0x01, 0x80, 0xff] {
                    bad[i] ^= flip;
                    corrupted_read += usize::from(agrees(&bad));
                    bad[i] ^= flip;
                }
            }
        }
        // Both ways are exercised: requests read (with tensors among
        // them), and corruptions read (a flipped scalar or string byte).
        assert!(read > 150 && with_tensors > 30 && corrupted_read > 10_000, "{read} {with_tensors} {corrupted_read}");
    }

    /// Bytes at random (small, so offsets land inside) never panic the
    /// reader, and it refuses what planus refuses.
    #[test]
    fn garbage_never_panics_and_is_refused_as_planus_refuses_it() {
        let mut next = crate::xorshift(0x1234_5678_9abc_def1);
        for len in 0..200 {
            // Small values: offsets that land inside the payload.
            let p: Vec<u8> = (0..len).map(|_| (next() % 24) as u8).collect();
            agrees(&p);
        }
    }
}
