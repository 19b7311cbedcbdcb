//! Idle engines take no CPU: `baton serve`, and the role processes
//! (`baton scheduler`, `frontend`, `backend`) connected to each other,
//! park until a timer, an I/O completion or a ring message wakes them
//! (`core/src/runtime/park.rs`; a role process's peers are on a socket
//! ring whose eventfd wakes it). The test reads each process's own CPU
//! time from /proc, so load from other processes on the machine cannot
//! fail it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// User plus system CPU time of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // Fields after the parenthesised command name; utime and stime are
    // fields 14 and 15 of the whole line.
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

/// A process killed when dropped (also when the test fails).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `baton ARGS`, started: the process and its start-up line (printed once
/// it is ready, with its bound addresses).
fn start(args: &[&str]) -> (Killed, String) {
    let mut p = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .env("BATON_CLUSTER_SECRET", "the idle test's cluster secret")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("baton starts");
    let mut line = String::new();
    BufReader::new(p.stderr.take().expect("piped")).read_line(&mut line).expect("a start-up line");
    (Killed(p), line)
}

/// The addresses a start-up line names.
fn addresses(line: &str) -> Vec<String> {
    line.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| w.starts_with("127.0.0.1:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn idle_servers_take_under_one_percent_of_a_core() {
    let any = "127.0.0.1:0";
    let (serve, line) = start(&["serve", "--listen", any]);
    assert!(line.starts_with("baton serve:") && !addresses(&line).is_empty(), "{line}");
    let (scheduler, line) = start(&["scheduler", "--listen", any]);
    let sched = addresses(&line).pop().unwrap_or_else(|| panic!("{line}"));
    let (frontend, line) = start(&["frontend", "--listen", any, "--peer-listen", any, "--scheduler", &sched]);
    let peers = addresses(&line).pop().unwrap_or_else(|| panic!("{line}"));
    let (backend, line) = start(&["backend", "--scheduler", &sched, "--frontends", &peers]);
    assert!(line.starts_with("baton backend:"), "{line}");
    let all = [("serve", serve), ("scheduler", scheduler), ("frontend", frontend), ("backend", backend)];
    // SAFETY: sysconf reads a constant of the running system.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let t0: Vec<u64> = all.iter().map(|(_, p)| cpu_ticks(p.0.id())).collect();
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let used: Vec<f64> =
        all.iter().zip(&t0).map(|((_, p), t0)| (cpu_ticks(p.0.id()) - t0) as f64 / ticks_per_s).collect();
    let secs = start.elapsed().as_secs_f64();
    for ((what, _), used) in all.iter().zip(used) {
        assert!(used / secs <= 0.01, "idle baton {what} used {:.2}% of a core", used / secs * 100.0);
    }
}
