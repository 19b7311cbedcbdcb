//! Generates the Rust bindings for `schema/baton.fbs` with planus (pure
//! Rust, so the build needs no flatbuffers compiler installed by hand).

use std::path::Path;

fn main() {
    let schema = Path::new("schema/baton.fbs");
    println!("cargo:rerun-if-changed={}", schema.display());
    let declarations = planus_translation::translate_files(&[schema]).expect("schema/baton.fbs must translate");
    let code = planus_codegen::generate_rust(&declarations, false).expect("planus generates Rust");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("baton_generated.rs");
    std::fs::write(&out, code).expect("OUT_DIR is writable");
}
