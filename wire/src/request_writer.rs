//! The request's writer: an `InferRequest` laid out front to back at fixed
//! places, without a flatbuffers builder, as `answer.rs` lays out the
//! answer. A client writes one per request, and through planus's builder
//! (back to front, then copied into the outbox) that took 140-153 ns of
//! it, here 64-75 ns, and 11.75% of the load generator's samples at
//! 400,000 r/s, here 4.77% (perf/results/wire_bench.txt).
//!
//! The payload (offsets from its start; every scalar aligned to its size
//! from there, as flatbuffers wants):
//!
//! ```text
//!   0  u32  root: the table's offset (TABLE)
//!   4  vtable: u16 its length (20), u16 the table's (48), u16 x 8 where
//!      each field lies in the table (0: absent)
//!  24  the table: i32 back to the vtable (20), then at fixed places
//!        +4 app u32    +8 id u64    +16 slo_ns u64    +24 path_ns u64
//!       +32 model  +36 inputs  +40 app_name  +44 query (u32 offsets)
//!  72  children, in the generated writer's order (model, inputs,
//!      app_name, query; `layout.rs`)
//! ```
//!
//! Every scalar is written, defaults included; the strings and `inputs`
//! are absent where `None`. A request reads back as itself through
//! planus's reader, the frontend's own reader (`request.rs`) and every
//! decode path, as the generated writer's frame of it does (`message.rs`'s
//! tests, on 2,000 random requests).

use crate::fb;
use crate::layout::{put, root_table, slot, Writer};

/// Fields of `InferRequest`, in the schema's order (their vtable slots).
const FIELDS: usize = 8;
const VTABLE: usize = 4;
const VTABLE_LEN: usize = 4 + 2 * FIELDS;
/// The table, 8-aligned for its u64s.
const TABLE: usize = VTABLE + VTABLE_LEN;
const TABLE_LEN: usize = 48;
/// Where the children begin.
const FIXED: usize = TABLE + TABLE_LEN;

// Places in the table.
const APP: usize = 4;
const ID: usize = 8;
const SLO_NS: usize = 16;
const PATH_NS: usize = 24;
const MODEL: usize = 32;
const INPUTS: usize = 36;
const APP_NAME: usize = 40;
const QUERY: usize = 44;

const _: () = assert!(TABLE.is_multiple_of(8) && QUERY + 4 == TABLE_LEN);

/// Appends `r`'s payload to `out`; returns its length.
pub fn write(r: &fb::InferRequest, out: &mut Vec<u8>) -> usize {
    let base = out.len();
    out.resize(base + FIXED, 0);
    let slots: [u16; FIELDS] = [
        ID as u16,
        slot(r.model.is_some(), MODEL),
        SLO_NS as u16,
        APP as u16,
        slot(r.inputs.is_some(), INPUTS),
        slot(r.app_name.is_some(), APP_NAME),
        slot(r.query.is_some(), QUERY),
        PATH_NS as u16,
    ];
    {
        let t = root_table(&mut out[base..], VTABLE, &slots, TABLE, TABLE_LEN);
        put(t, APP, r.app.to_le_bytes());
        put(t, ID, r.id.to_le_bytes());
        put(t, SLO_NS, r.slo_ns.to_le_bytes());
        put(t, PATH_NS, r.path_ns.to_le_bytes());
    }
    let mut w = Writer::new(out, base);
    w.child(TABLE + MODEL, r.model.as_deref(), Writer::string);
    w.child(TABLE + INPUTS, r.inputs.as_deref(), Writer::tensors);
    w.child(TABLE + APP_NAME, r.app_name.as_deref(), Writer::string);
    w.child(TABLE + QUERY, r.query.as_deref(), Writer::string);
    w.out.len() - base
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_and_a_shape_lie_aligned_wherever_the_payload_starts() {
        crate::layout::read::aligned_behind_any_prefix(TABLE, TABLE + INPUTS, &[2, -1], |model, out| {
            let t = fb::Tensor { shape: Some(vec![2, -1]), data: Some(vec![7; 8]), ..Default::default() };
            write(&fb::InferRequest { model: Some(model.into()), inputs: Some(vec![t]), ..Default::default() }, out)
        });
    }
}
