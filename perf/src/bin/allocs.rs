//! Heap allocations per request on the engine's shards, the issue's "no
//! malloc per request" measured: a counting global allocator counts the
//! allocations (and reallocations) made on the engine's threads (named
//! `baton-frontend-*`, `baton-sched-*`, `baton-clients`), not the load
//! generator's, in two runs of one path at one rate, a short and a long;
//! the difference over the requests it adds is what a request costs in
//! steady state (start-up, warm-up and the growth of long-lived buffers
//! cancel out).
//!
//! `cargo run --release -p baton-perf --bin allocs -- [FILE] [--rate R]
//! [--secs S]`: FILE defaults to perf/scenarios/engine-tiny.toml, R to
//! 100,000 r/s, S (the long run) to 4 (the short is S/4). Two paths:
//! `serve` (the engine behind its TCP listener, `baton load` on its own
//! thread over loopback) and `clients` (the in-process generator of the
//! stress harness feeding the frontend role: no sockets, no encoding).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use baton_core::runtime::clients::{run as clients, Load};
use baton_core::runtime::{start, EngineConfig, EngineReport};
use baton_perf::report::load_scenario;
use baton_sched::Scenario;
use baton_tools::load::{self, LoadConfig};

/// Counts on the engine's threads; passes everything to the system's.
struct Counting;

static CALLS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread is one of the engine's: unknown until its
    /// first allocation reads its name.
    static ENGINE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether the calling thread's name marks it as one of the engine's
/// shards. Reads the name into a buffer on the stack: an allocator must
/// not allocate.
fn engine_thread() -> bool {
    ENGINE.with(|e| {
        *e.get().get_or_insert_with(|| {
            let mut name = [0u8; 16];
            // SAFETY: the buffer is 16 bytes, the most a thread name takes
            // with its terminating NUL (pthread_getname_np's documented
            // limit), and it outlives the call.
            let rc = unsafe { libc::pthread_getname_np(libc::pthread_self(), name.as_mut_ptr().cast(), name.len()) };
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            rc == 0 && [&b"baton-frontend"[..], b"baton-sched", b"baton-clients"].iter().any(|p| name.starts_with(p))
        })
    })
}

fn count(bytes: usize) {
    if engine_thread() {
        CALLS.fetch_add(1, Relaxed);
        BYTES.fetch_add(bytes as u64, Relaxed);
    }
}

// SAFETY: every call is passed to `System` with the caller's arguments,
// unchanged; counting neither allocates nor touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    Some(args.get(i + 1).unwrap_or_else(|| panic!("{name} takes a value")).clone())
}

/// Allocations, bytes, requests answered and batches run over one run of
/// a path.
type Counted = (u64, u64, u64, u64);

fn counted(run: impl FnOnce() -> (u64, u64)) -> Counted {
    let (calls, bytes) = (CALLS.load(Relaxed), BYTES.load(Relaxed));
    let (answered, batches) = run();
    (CALLS.load(Relaxed) - calls, BYTES.load(Relaxed) - bytes, answered, batches)
}

/// Requests answered and batches run, as the engine counted them.
fn answered(r: &EngineReport) -> (u64, u64) {
    (r.frontend.answered(), r.backends.iter().map(|b| b.batches).sum())
}

fn serve(s: &Scenario, rate: f64, secs: f64) -> (u64, u64) {
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("valid address");
    let (server, generator) =
        load::split_cores(&load::allowed_cores()).map_or((None, Vec::new()), |(s, g)| (Some(s), g));
    let cfg = EngineConfig { listen, plan_rate_rps: rate, cores: server, ..Default::default() };
    let engine = start(s, s.policy, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let lc = LoadConfig {
        input_floats: vec![cfg.input_floats],
        warmup: Duration::ZERO,
        cores: generator,
        ..LoadConfig::new(engine.addr, rate, Duration::from_secs_f64(secs))
    };
    let r = load::run(s, &lc).unwrap_or_else(|e| panic!("{e}"));
    let report = engine.shutdown();
    assert_eq!((r.unanswered, r.duplicates), (0, 0), "every request answered once");
    answered(&report)
}

fn in_process(s: &Scenario, rate: f64, secs: f64) -> (u64, u64) {
    let load = Load { rate_rps: rate, warmup: Duration::ZERO, measure: Duration::from_secs_f64(secs), seed: s.seed };
    let o = clients(s, s.policy, &EngineConfig::default(), load).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((o.tally.unanswered, o.tally.duplicates), (0, 0), "every request answered once");
    answered(&o.engine)
}

fn main() {
    let file = std::env::args()
        .nth(1)
        .filter(|a| !a.starts_with("--"))
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/engine-tiny.toml").into());
    let s = load_scenario(std::path::Path::new(&file)).unwrap_or_else(|e| panic!("{e}"));
    let rate: f64 = flag("--rate").map_or(100_000.0, |v| v.parse().expect("--rate takes a number"));
    let secs: f64 = flag("--secs").map_or(4.0, |v| v.parse().expect("--secs takes a number"));
    println!("{} / {} at {rate:.0} r/s, runs of {:.1} s and {secs:.1} s", s.name, s.policy.as_str(), secs / 4.0);
    type Path = fn(&Scenario, f64, f64) -> (u64, u64);
    let paths: [(&str, Path); 2] = [("serve", serve), ("clients", in_process)];
    for (name, path) in paths {
        let short = counted(|| path(&s, rate, secs / 4.0));
        let long = counted(|| path(&s, rate, secs));
        let d = |f: fn(&Counted) -> u64| f(&long).saturating_sub(f(&short)).max(1) as f64;
        let (calls, bytes, requests, batches) = (d(|c| c.0), d(|c| c.1), d(|c| c.2), d(|c| c.3));
        println!(
            "  {name:<8} allocations per request {:.2} (per batch {:.1}, {:.1} requests a batch), bytes per request {:.0} \
             ({} and {} allocations for {} and {} answers)",
            calls / requests,
            calls / batches,
            requests / batches,
            bytes / requests,
            short.0,
            long.0,
            short.2,
            long.2,
        );
    }
}
