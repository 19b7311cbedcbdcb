//! Flatbuffers written front to back, without a builder: a message's
//! table first at a fixed place, then each child (string, vector, table)
//! after every field that points at it, since flatbuffers' offsets are
//! unsigned. The answer's and the request's writers (`answer.rs`,
//! `request_writer.rs`) lay out their own tables and share this for the
//! children: strings, byte and i64 vectors, and tensors.
//!
//! A tensor (`fb::Tensor`): a vtable of its 4 fields, then its table
//! (4-aligned): +4 name, +8 shape, +12 data (u32 offsets), +16 dtype (u8).

use crate::fb;

const TENSOR_VTABLE_LEN: usize = 4 + 2 * 4;
const TENSOR_LEN: usize = 20;
const T_NAME: usize = 4;
const T_SHAPE: usize = 8;
const T_DATA: usize = 12;
const T_DTYPE: usize = 16;

/// Writes a root table's head into the payload `p`: the root offset to
/// the table at `table`, the vtable at `vtable` (its length, the table's
/// length `table_len`, each field's place `slots`), and the table's
/// offset back to its vtable; the table's bytes, to fill in.
pub(crate) fn root_table<'p>(
    p: &'p mut [u8],
    vtable: usize,
    slots: &[u16],
    table: usize,
    table_len: usize,
) -> &'p mut [u8] {
    let vtable_len = 4 + 2 * slots.len();
    debug_assert!(vtable + vtable_len <= table && table + table_len <= p.len());
    put(p, 0, (table as u32).to_le_bytes());
    put(p, vtable, (vtable_len as u16).to_le_bytes());
    put(p, vtable + 2, (table_len as u16).to_le_bytes());
    for (i, s) in slots.iter().enumerate() {
        put(p, vtable + 4 + 2 * i, s.to_le_bytes());
    }
    let t = &mut p[table..table + table_len];
    put(t, 0, ((table - vtable) as i32).to_le_bytes());
    t
}

/// A vtable slot: where a field lies in its table, or 0 when it is absent.
pub(crate) fn slot(present: bool, place: usize) -> u16 {
    if present {
        place as u16
    } else {
        0
    }
}

pub(crate) fn put<const N: usize>(p: &mut [u8], at: usize, bytes: [u8; N]) {
    p[at..at + N].copy_from_slice(&bytes);
}

/// The children's writer: positions are from the payload's start (`base`).
pub(crate) struct Writer<'a> {
    pub out: &'a mut Vec<u8>,
    base: usize,
}

impl<'a> Writer<'a> {
    /// Children appended to `out`, whose payload starts at `base`.
    pub fn new(out: &'a mut Vec<u8>, base: usize) -> Self {
        Self { out, base }
    }

    fn pos(&self) -> usize {
        self.out.len() - self.base
    }

    /// Pads with zeros until the position plus `skew` is a multiple of `to`.
    fn align(&mut self, to: usize, skew: usize) {
        let pad = (to - (self.pos() + skew) % to) % to;
        self.out.resize(self.out.len() + pad, 0);
    }

    fn put<const N: usize>(&mut self, at: usize, bytes: [u8; N]) {
        put(&mut self.out[self.base..], at, bytes);
    }

    /// Writes `v`, if present, with `write` (which says where it lies),
    /// and points the offset at `field` to it.
    #[inline(always)]
    pub fn child<T: ?Sized>(&mut self, field: usize, v: Option<&T>, write: impl FnOnce(&mut Self, &T) -> usize) {
        if let Some(v) = v {
            let target = write(self, v);
            self.point(field, target);
        }
    }

    /// Points the offset at `field` to `target` (which lies after it).
    fn point(&mut self, field: usize, target: usize) {
        debug_assert!(target > field, "flatbuffers' offsets point forward");
        self.put(field, ((target - field) as u32).to_le_bytes());
    }

    fn len(&mut self, n: usize) {
        self.out.extend_from_slice(&(n as u32).to_le_bytes());
    }

    pub fn string(&mut self, s: &str) -> usize {
        self.align(4, 0);
        let at = self.pos();
        self.len(s.len());
        self.out.extend_from_slice(s.as_bytes());
        self.out.push(0);
        at
    }

    fn bytes(&mut self, b: &[u8]) -> usize {
        self.align(4, 0);
        let at = self.pos();
        self.len(b.len());
        self.out.extend_from_slice(b);
        at
    }

    /// A vector of i64: its elements 8-aligned, after its 4-byte length.
    fn longs(&mut self, v: &[i64]) -> usize {
        self.align(8, 4);
        let at = self.pos();
        self.len(v.len());
        for x in v {
            self.out.extend_from_slice(&x.to_le_bytes());
        }
        at
    }

    pub fn tensors(&mut self, ts: &[fb::Tensor]) -> usize {
        self.align(4, 0);
        let at = self.pos();
        self.len(ts.len());
        let slots = self.pos();
        // Room for all of them at once (each piece's padding included),
        // not a check and a grow per piece.
        let room = |t: &fb::Tensor| {
            let bytes = |n: usize| 4 + n + 8;
            TENSOR_VTABLE_LEN
                + TENSOR_LEN
                + 3
                + t.name.as_ref().map_or(0, |s| bytes(s.len() + 1))
                + t.shape.as_ref().map_or(0, |s| bytes(8 * s.len()))
                + t.data.as_ref().map_or(0, |d| bytes(d.len()))
        };
        self.out.reserve(4 * ts.len() + ts.iter().map(room).sum::<usize>());
        self.out.resize(self.out.len() + 4 * ts.len(), 0);
        for (i, t) in ts.iter().enumerate() {
            let table = self.tensor(t);
            self.point(slots + 4 * i, table);
        }
        at
    }

    /// A tensor's vtable, table and children; where its table lies.
    fn tensor(&mut self, t: &fb::Tensor) -> usize {
        self.align(4, 0);
        let vtable = self.pos();
        let table = vtable + TENSOR_VTABLE_LEN;
        let head: [u16; 6] = [
            TENSOR_VTABLE_LEN as u16,
            TENSOR_LEN as u16,
            slot(t.name.is_some(), T_NAME),
            T_DTYPE as u16,
            slot(t.shape.is_some(), T_SHAPE),
            slot(t.data.is_some(), T_DATA),
        ];
        // The vtable and the table in one append.
        let mut fixed = [0u8; TENSOR_VTABLE_LEN + TENSOR_LEN];
        for (i, h) in head.iter().enumerate() {
            put(&mut fixed, 2 * i, h.to_le_bytes());
        }
        put(&mut fixed, TENSOR_VTABLE_LEN, (TENSOR_VTABLE_LEN as i32).to_le_bytes());
        fixed[TENSOR_VTABLE_LEN + T_DTYPE] = t.dtype as u8;
        self.out.extend_from_slice(&fixed);
        self.child(table + T_NAME, t.name.as_deref(), Self::string);
        self.child(table + T_SHAPE, t.shape.as_deref(), Self::longs);
        self.child(table + T_DATA, t.data.as_deref(), Self::bytes);
        table
    }
}

/// Reading back what the writers laid out, for their tests.
#[cfg(test)]
pub(crate) mod read {
    fn u32_at(p: &[u8], at: usize) -> usize {
        u32::from_le_bytes(p[at..at + 4].try_into().unwrap()) as usize
    }

    /// Checks a writer's layout behind every prefix of 0 to 7 bytes and
    /// with a string of each length mod 4 before its tensors: the root
    /// offset points to `table`, and the one tensor in the vector that the
    /// offset at `field` points to lies aligned (the vector and the tensor
    /// to 4, its dimensions to 8, from the payload's start, as readers that
    /// check alignment, flatbuffers' C++ verifier, want) and has `shape`.
    /// `write(text, out)` appends a payload naming `text` and returns its
    /// length.
    pub fn aligned_behind_any_prefix(
        table: usize,
        field: usize,
        shape: &[i64],
        write: impl Fn(&str, &mut Vec<u8>) -> usize,
    ) {
        for prefix in 0..8 {
            for text in ["", "m", "mo", "mod"] {
                let mut out = vec![0xaa; prefix];
                let len = write(text, &mut out);
                let p = &out[prefix..];
                assert_eq!((p.len(), u32_at(p, 0)), (len, table));
                let vector = field + u32_at(p, field);
                assert_eq!((vector % 4, u32_at(p, vector)), (0, 1), "one tensor, its vector 4-aligned");
                let tensor = vector + 4 + u32_at(p, vector + 4);
                assert_eq!(tensor % 4, 0);
                let at = tensor + super::T_SHAPE + u32_at(p, tensor + super::T_SHAPE);
                assert_eq!((at + 4) % 8, 0, "the dimensions after the length are 8-aligned");
                let dims = at + 4..at + 4 + 8 * u32_at(p, at);
                let read: Vec<i64> =
                    p[dims].chunks_exact(8).map(|d| i64::from_le_bytes(d.try_into().unwrap())).collect();
                assert_eq!(read, shape);
            }
        }
    }
}
