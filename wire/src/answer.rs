//! The answer's writer: an `InferResponse` laid out front to back at fixed
//! places, without a flatbuffers builder. A frontend writes one answer per
//! request, and through planus's builder (back to front, then copied into
//! the outbox) that took about 90 ns of a request's ~1 µs on a loaded
//! frontend (perf/results/wire_bench.txt); here it is written where it is
//! sent, in one pass.
//!
//! The payload (offsets from its start; every scalar aligned to its size
//! from there, as flatbuffers wants):
//!
//! ```text
//!   0  u32  root: the table's offset (TABLE)
//!   4  vtable: u16 its length (28), u16 the table's (128), u16 x 12 where
//!      each field lies in the table (0: absent)
//!  32  the table: i32 back to the vtable (28), then at fixed places
//!        +4 app u32     +8 id u64      +16 timing (80-byte struct)
//!       +96 solo_ns u64 +104 message   +108 outputs   +112 stage (u32
//!      offsets)  +116 accuracy f32  +120 subnet u16  +122 status u8
//!      +123 drop_reason u8  +124 error_code u8
//! 160  children, each after every field that points at it (flatbuffers'
//!      offsets are unsigned): message, the outputs' vector, each tensor
//!      (its vtable, table, name, shape, data), stage
//! ```
//!
//! Every scalar is written, defaults included (a reader takes a present
//! default as it takes an absent one); the optional ones — `subnet`,
//! `timing`, the strings and `outputs` — are absent where `None`, their
//! room in the table left zero. An answer reads back as itself through
//! planus's reader and every decode path, as the generated writer's frame
//! of it does (`message.rs`'s tests, on 2,000 random answers); its
//! alignment is tested below.

use crate::fb;
use crate::layout::{put, root_table, slot, Writer};

/// Fields of `InferResponse`, in the schema's order (their vtable slots).
const FIELDS: usize = 12;
const VTABLE: usize = 4;
const VTABLE_LEN: usize = 4 + 2 * FIELDS;
/// The table, 8-aligned for its u64s and the timing struct.
const TABLE: usize = 32;
const TABLE_LEN: usize = 128;
/// Where the children begin.
const FIXED: usize = TABLE + TABLE_LEN;

// Places in the table.
const APP: usize = 4;
const ID: usize = 8;
const TIMING: usize = 16;
const SOLO_NS: usize = 96;
const MESSAGE: usize = 104;
const OUTPUTS: usize = 108;
const STAGE: usize = 112;
const ACCURACY: usize = 116;
const SUBNET: usize = 120;
const STATUS: usize = 122;
const DROP_REASON: usize = 123;
const ERROR_CODE: usize = 124;

const _: () = assert!(VTABLE + VTABLE_LEN <= TABLE && TABLE.is_multiple_of(8) && ERROR_CODE < TABLE_LEN);
const _: () = assert!(TIMING.is_multiple_of(8) && TIMING + std::mem::size_of::<[u64; 10]>() <= SOLO_NS);

/// Appends `a`'s payload to `out`; returns its length.
pub fn write(a: &fb::InferResponse, out: &mut Vec<u8>) -> usize {
    let base = out.len();
    out.resize(base + FIXED, 0);
    let slots: [u16; FIELDS] = [
        ID as u16,
        STATUS as u16,
        DROP_REASON as u16,
        ERROR_CODE as u16,
        slot(a.message.is_some(), MESSAGE),
        slot(a.timing.is_some(), TIMING),
        slot(a.outputs.is_some(), OUTPUTS),
        APP as u16,
        slot(a.subnet.is_some(), SUBNET),
        ACCURACY as u16,
        SOLO_NS as u16,
        slot(a.stage.is_some(), STAGE),
    ];
    {
        let t = root_table(&mut out[base..], VTABLE, &slots, TABLE, TABLE_LEN);
        put(t, APP, a.app.to_le_bytes());
        put(t, ID, a.id.to_le_bytes());
        if let Some(m) = &a.timing {
            let words = [
                m.queue_ns,
                m.exec_ns,
                u64::from(m.batch_size),
                m.received_ns,
                m.seen_ns,
                m.exec_at_ns,
                m.started_ns,
                m.finished_ns,
                m.written_ns,
                m.origin_unix_ns,
            ];
            for (i, w) in words.iter().enumerate() {
                put(t, TIMING + 8 * i, w.to_le_bytes());
            }
        }
        put(t, SOLO_NS, a.solo_ns.to_le_bytes());
        put(t, ACCURACY, a.accuracy.to_le_bytes());
        put(t, SUBNET, a.subnet.unwrap_or(0).to_le_bytes());
        t[STATUS] = a.status as u8;
        t[DROP_REASON] = a.drop_reason as u8;
        t[ERROR_CODE] = a.error_code as u8;
    }
    let mut w = Writer::new(out, base);
    w.child(TABLE + MESSAGE, a.message.as_deref(), Writer::string);
    w.child(TABLE + OUTPUTS, a.outputs.as_deref(), Writer::tensors);
    w.child(TABLE + STAGE, a.stage.as_deref(), Writer::string);
    w.out.len() - base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_and_a_shape_lie_aligned_wherever_the_payload_starts() {
        crate::layout::read::aligned_behind_any_prefix(TABLE, TABLE + OUTPUTS, &[3, -1], |name, out| {
            let t = fb::Tensor {
                name: Some(name.into()),
                shape: Some(vec![3, -1]),
                data: Some(vec![7; 12]),
                ..Default::default()
            };
            write(&fb::InferResponse { message: Some("m".into()), outputs: Some(vec![t]), ..Default::default() }, out)
        });
    }
}
