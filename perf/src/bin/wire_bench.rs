//! `cargo run --release -p baton-perf --bin wire_bench [-- --quick]`.

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let r = baton_perf::wire_bench::run(if quick { 2_000 } else { 1_000_000 });
    println!(
        "{} answers: encode into a fresh buffer {:.0} ns, into a reused one {:.0} ns ({:.2}x); decode {:.0} ns; a request encoded into a reused buffer {:.0} ns, viewed in place {:.0} ns",
        r.messages,
        r.encode_fresh_ns,
        r.encode_reused_ns,
        r.encode_fresh_ns / r.encode_reused_ns,
        r.decode_ns,
        r.encode_request_ns,
        r.view_request_ns
    );
}
