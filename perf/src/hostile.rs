//! Hostile and careless clients against a served engine, with well-behaved
//! load running meanwhile: idle connections by the thousand, a client that
//! never reads its answers, partial frames trickled a byte at a time, and
//! floods at several times the engine's capacity.
//!
//! The server is a child process (this binary again, `serve_child`), so
//! its resident memory (`VmRSS` in `/proc/PID/status`) is its own, sampled
//! every 10 ms through each phase; each phase starts a fresh one. The
//! well-behaved load is `baton load`'s generator (`baton_tools::load`).
//! Overload figures are in-SLO answers per second at k times a base rate
//! as a fraction of those at the base rate (a server that sheds keeps
//! serving what it can; one that queues everything serves nothing in
//! time), and how fast a client hears a request will not be served (the
//! latency of answers that are not ok).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::runtime::clients::{client_request, Target};
use baton_core::runtime::{start, EngineConfig};
use baton_net::framing::FrameBuf;
use baton_sched::Scenario;
use baton_wire::{encode, fb, Message};
use serde::Serialize;

use crate::load::{self, LoadConfig, LoadReport};

/// Where the child finds the scenario and its limits: the arguments after
/// `--serve-child`.
pub struct ChildArgs {
    pub scenario: std::path::PathBuf,
    pub max_unread: usize,
}

/// The server side: serves `args.scenario` until stdin closes, having
/// printed its address; then prints how many clients it cut off.
pub fn serve_child(args: &ChildArgs) {
    raise_fd_limit();
    let s = crate::report::load_scenario(&args.scenario).unwrap_or_else(|e| panic!("{e}"));
    let cfg = EngineConfig {
        listen: "127.0.0.1:0".parse().expect("valid address"),
        plan_rate_rps: s.rate_rps.unwrap_or(0.0),
        max_unread: args.max_unread,
        ..Default::default()
    };
    let engine = start(&s, s.policy, &cfg).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", engine.addr);
    let _ = std::io::stdout().flush();
    let mut rest = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut rest);
    let r = engine.shutdown();
    println!("{} {} {}", r.unread_closed, r.connections, r.refused_connections);
}

/// Lets this process hold what the phases open (10,000 connections, both
/// ends when the server is in process).
pub fn raise_fd_limit() {
    let want = 1 << 16;
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < want {
            l.rlim_cur = want;
            l.rlim_max = l.rlim_max.max(want);
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// A server child and its memory sampler.
struct Server {
    child: Child,
    addr: SocketAddr,
    out: BufReader<std::process::ChildStdout>,
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap_or("VmRSS: 0 kB");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0)
}

impl Server {
    fn start(scenario: &std::path::Path, max_unread: usize) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("this binary"))
            .args(["--serve-child", &scenario.display().to_string(), &max_unread.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the server child starts");
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        out.read_line(&mut line).expect("the child prints its address");
        let addr = line.trim().parse().unwrap_or_else(|e| panic!("`{line}`: {e}"));
        let (peak_kib, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (p, s, pid) = (Arc::clone(&peak_kib), Arc::clone(&stop), child.id());
        std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                p.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Self { child, addr, out, peak_kib, stop }
    }

    fn rss_mib(&self) -> f64 {
        rss_kib(self.child.id()) as f64 / 1024.0
    }

    /// The highest RSS since the last call, MiB.
    fn take_peak_mib(&self) -> f64 {
        self.peak_kib.swap(rss_kib(self.child.id()), Ordering::Relaxed) as f64 / 1024.0
    }

    /// Stops it; the number of clients it cut off for not reading.
    fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        drop(self.child.stdin.take());
        let mut line = String::new();
        self.out.read_line(&mut line).expect("the child reports");
        self.child.wait().expect("the child exits");
        line.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
    }
}

/// One phase: the server's memory and what the well-behaved load got.
#[derive(Debug, Serialize)]
pub struct Phase {
    pub name: String,
    /// RSS when the phase's clients are in place, before the load, MiB.
    pub rss_mib: f64,
    /// The highest RSS sampled during the phase, MiB.
    pub peak_rss_mib: f64,
    pub load: LoadReport,
    /// What the phase's hostile clients saw, in words.
    pub hostile: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    /// The well-behaved load's rate, r/s.
    pub rate_rps: f64,
    /// RSS of a fresh server, idle, MiB.
    pub idle_rss_mib: f64,
    pub phases: Vec<Phase>,
    /// (k, in-SLO r/s at k times the rate over that at the rate).
    pub overload: Vec<(f64, f64)>,
}

pub struct Config {
    pub scenario: std::path::PathBuf,
    /// The well-behaved load's rate, r/s, and how long each phase runs.
    pub rate_rps: f64,
    pub secs: f64,
    pub idle_connections: usize,
    pub trickled: usize,
    /// The bound on a client's unread answers in the non-reading phase.
    pub max_unread: usize,
    /// Overload factors.
    pub factors: Vec<f64>,
}

fn well_behaved(s: &Scenario, addr: SocketAddr, rate: f64, secs: f64) -> LoadReport {
    let cfg = LoadConfig { connections: 2, ..LoadConfig::new(addr, rate, Duration::from_secs_f64(secs)) };
    load::run(s, &cfg).unwrap_or_else(|e| panic!("{e}"))
}

/// A request frame for the scenario's first model.
fn request_frame(s: &Scenario, id: u64, slo_ms: u64) -> Vec<u8> {
    let (model, floats) = (Target::Model(&s.models[0].spec.name), baton_core::models::DEFAULT_INPUT_FLOATS);
    let req = client_request(id, model, slo_ms * 1_000_000, 0, floats, None);
    encode(&Message::InferRequest(req)).expect("fits a frame")
}

/// Runs every phase.
pub fn run(c: &Config) -> Report {
    raise_fd_limit();
    let s = crate::report::load_scenario(&c.scenario).unwrap_or_else(|e| panic!("{e}"));
    let default_unread = EngineConfig::default().max_unread;
    let mut phases = Vec::new();

    let server = Server::start(&c.scenario, default_unread);
    let idle_rss_mib = server.rss_mib();
    server.take_peak_mib();
    let load = well_behaved(&s, server.addr, c.rate_rps, c.secs);
    phases.push(Phase {
        name: "well-behaved load alone".into(),
        rss_mib: idle_rss_mib,
        peak_rss_mib: server.take_peak_mib(),
        load,
        hostile: "none".into(),
    });
    server.stop();

    // Idle connections: opened, held through the load, then closed.
    let server = Server::start(&c.scenario, default_unread);
    let idle: Vec<TcpStream> = (0..c.idle_connections)
        .map(|i| TcpStream::connect(server.addr).unwrap_or_else(|e| panic!("idle connection {i}: {e}")))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let rss_mib = server.rss_mib();
    server.take_peak_mib();
    let load = well_behaved(&s, server.addr, c.rate_rps, c.secs);
    let peak_rss_mib = server.take_peak_mib();
    drop(idle);
    server.stop();
    let hostile = format!("{} idle connections held open", c.idle_connections);
    phases.push(Phase { name: "idle connections".into(), rss_mib, peak_rss_mib, load, hostile });

    // A client that sends a tenth of the rate and never reads its answers
    // (the load sends the other nine tenths), against a server that cuts
    // it off past `c.max_unread` bytes and one without the bound (as
    // before it).
    for (name, max_unread) in [("non-reading client", c.max_unread), ("non-reading client, no bound", usize::MAX)] {
        let server = Server::start(&c.scenario, max_unread);
        let rss_mib = server.rss_mib();
        server.take_peak_mib();
        let (stop, written) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let hog = {
            let (stop, written) = (Arc::clone(&stop), Arc::clone(&written));
            let mut sock = TcpStream::connect(server.addr).expect("connects");
            // Ten requests at a time, at a tenth of the rate.
            let ten = request_frame(&s, 1, 1_000).repeat(10);
            let every = Duration::from_secs_f64(100.0 / c.rate_rps);
            std::thread::spawn(move || {
                let _ = sock.set_write_timeout(Some(Duration::from_millis(200)));
                while !stop.load(Ordering::Acquire) {
                    match sock.write_all(&ten) {
                        Ok(()) => written.fetch_add(10, Ordering::Relaxed),
                        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                            0
                        }
                        Err(_) => return true,
                    };
                    std::thread::sleep(every);
                }
                false
            })
        };
        let load = well_behaved(&s, server.addr, 0.9 * c.rate_rps, c.secs);
        stop.store(true, Ordering::Release);
        let cut = hog.join().expect("the hog thread ends");
        let peak_rss_mib = server.take_peak_mib();
        let closed = server.stop();
        let hostile = format!(
            "sent {} requests, read nothing; {} (server's count of clients cut off: {closed})",
            written.load(Ordering::Relaxed),
            if cut { "cut off" } else { "never cut off" }
        );
        phases.push(Phase { name: name.into(), rss_mib, peak_rss_mib, load, hostile });
    }

    // Partial frames trickled a byte at a time on many connections.
    let server = Server::start(&c.scenario, default_unread);
    let rss_mib = server.rss_mib();
    server.take_peak_mib();
    let trickle = {
        let (addr, n, frame) = (server.addr, c.trickled, request_frame(&s, 7, 10_000));
        std::thread::spawn(move || trickle(addr, n, &frame))
    };
    let load = well_behaved(&s, server.addr, c.rate_rps, c.secs);
    let (ok, other) = trickle.join().expect("the trickle thread ends");
    let peak_rss_mib = server.take_peak_mib();
    server.stop();
    let hostile = format!("{} connections, one byte each per ms: {ok} answered ok, {other} otherwise", c.trickled);
    phases.push(Phase { name: "trickled partial frames".into(), rss_mib, peak_rss_mib, load, hostile });

    // Overload: the load at the rate, then at k times it.
    let mut base = 0.0;
    let mut overload = Vec::new();
    for &k in std::iter::once(&1.0).chain(&c.factors) {
        let server = Server::start(&c.scenario, default_unread);
        let rss_mib = server.rss_mib();
        server.take_peak_mib();
        let load = well_behaved(&s, server.addr, k * c.rate_rps, c.secs);
        let peak_rss_mib = server.take_peak_mib();
        server.stop();
        if k == 1.0 {
            base = load.goodput_rps;
        } else {
            overload.push((k, load.goodput_rps / base));
        }
        let hostile = format!("the load itself at {k}x the rate");
        phases.push(Phase { name: format!("overload {k}x"), rss_mib, peak_rss_mib, load, hostile });
    }
    Report { scenario: s.name.clone(), rate_rps: c.rate_rps, idle_rss_mib, phases, overload }
}

/// Sends `frame` on `n` connections one byte at a time (each connection a
/// byte per millisecond), then reads each one's answer: (ok, other).
fn trickle(addr: SocketAddr, n: usize, frame: &[u8]) -> (usize, usize) {
    let mut conns: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(addr).expect("connects")).collect();
    for c in &conns {
        let _ = c.set_nodelay(true);
    }
    for byte in frame {
        for c in &mut conns {
            c.write_all(std::slice::from_ref(byte)).expect("the server reads");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let (mut ok, mut other) = (0, 0);
    for mut c in conns {
        let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
        match answer(&mut c) {
            Some(a) if a.status == fb::Status::Ok => ok += 1,
            _ => other += 1,
        }
    }
    (ok, other)
}

fn answer(c: &mut TcpStream) -> Option<fb::InferResponse> {
    let mut buf = FrameBuf::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(Ok(Message::InferResponse(r)))) = buf.next_frame() {
            return Some(r);
        }
        match c.read(buf.spare()) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.filled(n),
        }
    }
    None
}

/// The report as lines for perf/results.
pub fn print(r: &Report) {
    println!(
        "scenario {}  well-behaved load {:.0} r/s  idle server RSS {:.1} MiB",
        r.scenario, r.rate_rps, r.idle_rss_mib
    );
    for p in &r.phases {
        let l = &p.load;
        println!(
            "{:<30} RSS {:>7.1} MiB, peak {:>7.1} MiB | load: offered {:>7.0} r/s, in SLO {:>7.1} r/s, bad {:.4} \
             (late {} dropped {} errors {} unanswered {} duplicates {}), p99 {:.2} ms, not-ok answers p50/p99 {:.2}/{:.2} ms | {}",
            p.name,
            p.rss_mib,
            p.peak_rss_mib,
            l.offered_rps,
            l.goodput_rps,
            l.bad_rate,
            l.late,
            l.dropped,
            l.errors,
            l.unanswered,
            l.duplicates,
            l.p99_ms,
            l.not_ok_p50_ms,
            l.not_ok_p99_ms,
            p.hostile
        );
    }
    for (k, f) in &r.overload {
        println!("overload {k}x: in-SLO answers per second {:.3} of those at 1x", f);
    }
}
