//! An idle `baton serve` takes no CPU: its shards park until a timer, an
//! I/O completion or a ring message wakes them (`core/src/runtime/park.rs`).
//! The test reads the server process's own CPU time from /proc, so load
//! from other processes on the machine cannot fail it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
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

#[test]
fn an_idle_server_takes_under_one_percent_of_a_core() {
    let mut server = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("baton serve starts");
    // Ready once it prints its start-up line (with the bound address).
    let mut line = String::new();
    BufReader::new(server.stderr.take().expect("piped")).read_line(&mut line).expect("a start-up line");
    assert!(line.starts_with("baton serve:") && line.contains(" on 127.0.0.1:"), "{line}");
    // SAFETY: sysconf reads a constant of the running system.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let (t0, start) = (cpu_ticks(server.id()), Instant::now());
    std::thread::sleep(Duration::from_secs(5));
    let used = (cpu_ticks(server.id()) - t0) as f64 / ticks_per_s;
    let share = used / start.elapsed().as_secs_f64();
    let _ = server.kill();
    let _ = server.wait();
    assert!(share <= 0.01, "idle baton serve used {:.2}% of a core", share * 100.0);
}
