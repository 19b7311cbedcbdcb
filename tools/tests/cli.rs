//! The `baton` command line as users meet it: the documented flags work,
//! JSON carries the documented fields, and bad scenarios are rejected with a
//! message naming the key, before anything runs.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn baton(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_baton")).args(args).output().expect("baton runs")
}

/// A shipped scenario: the built-in ones under `tools/scenarios/`, the rest
/// under `perf/scenarios/`.
fn scenario(name: &str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let builtin = root.join("scenarios").join(name);
    let path = if builtin.exists() { builtin } else { root.join("../perf/scenarios").join(name) };
    path.display().to_string()
}

fn write_temp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("baton-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp file");
    path.display().to_string()
}

#[test]
fn sim_json_has_the_documented_fields() {
    let out = baton(&["sim", &scenario("table4-resnet50.toml"), "--rate", "3000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in ["offered_rps", "goodput_rps", "bad_rate", "gpu_idle_fraction"] {
        assert!(v[key].is_number(), "missing {key}");
    }
    let m = &v["models"][0];
    for key in ["p99_ms", "bad_rate", "mean_batch"] {
        assert!(m[key].is_number(), "missing models[0].{key}");
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("seed 7"), "the seed is printed");
}

/// `baton sim --stall AT_S,FOR_MS`: the file's run with its host stalled
/// (Table 4's 30 s file: a 100 ms stall leaves those of its first 75 ms
/// no time, a few hundred of 160,000); a stall that cannot be is refused,
/// naming the flag and the key.
#[test]
fn sim_stalls_the_host_when_told_and_refuses_a_stall_that_cannot_be() {
    let file = scenario("table4-resnet50.toml");
    let bad = |extra: &[&str]| {
        let out = baton(&[&["sim", &file, "--rate", "3000", "--json"], extra].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        v["late"].as_u64().unwrap() + v["dropped"].as_u64().unwrap()
    };
    let (calm, stalled) = (bad(&[]), bad(&["--stall", "10,100"]));
    assert!(stalled >= calm + 150, "{calm} bad without the stall, {stalled} with it");
    for (arg, says) in [("10,0", "stalls[0].for_ms"), ("10", "AT_S,FOR_MS"), ("31.99,50", "after the run's end")] {
        let out = baton(&["sim", &file, "--rate", "3000", "--stall", arg]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("--stall") && err.contains(says), "{arg}: {err}");
    }
}

#[test]
fn find_goodput_and_policy_override() {
    let out =
        baton(&["sim", &scenario("table4-inceptionresnetv2.toml"), "--find-goodput", "--policy", "nexus", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["policy"], "nexus");
    assert!(v["goodput_rps"].as_f64().expect("number") > 100.0);
}

/// `baton demo --find-goodput`: the engine's goodput by search beside the
/// simulator's, then a run at the simulator's rate; every probe is a fresh
/// engine on the same cores (timings mean nothing here; the accounting
/// must hold).
#[test]
fn demo_finds_the_engines_goodput_beside_the_simulators() {
    let out =
        baton(&["demo", "--find-goodput", "--duration", "0.5", "--warmup", "0", "--probes", "2", "--json", "--gap"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let g = &v["goodput"];
    let sim = g["sim_rps"].as_f64().expect("the simulator's goodput");
    assert!(sim > 0.0 && g["engine_rps"].as_f64().is_some(), "{g}");
    assert_eq!(g["probes"].as_array().map(Vec::len), Some(2), "{g}");
    assert_eq!(v["load"]["offered_rps"].as_f64(), Some(sim), "the run is at the simulator's goodput");
    assert_eq!((v["load"]["unanswered"].as_u64(), v["load"]["duplicates"].as_u64()), (Some(0), Some(0)));
    // Request by request beside the simulator: every request compared, the
    // engine's bad ones and the simulator's each split in two.
    let (gap, n) = (&v["gap"], |x: &serde_json::Value| x.as_u64().expect("a count"));
    let sent = n(&v["load"]["sent"]);
    assert_eq!(n(&gap["compared"]), sent, "{gap}");
    assert_eq!(n(&gap["bad_engine_only"]) + n(&gap["bad_both"]), sent - n(&v["load"]["ok"]), "{gap}");
    let sim_bad = (n(&gap["bad_sim_only"]) + n(&gap["bad_both"])) as f64 / sent as f64;
    assert!((sim_bad - v["sim"]["bad_rate"].as_f64().expect("a rate")).abs() < 1e-9, "{gap}");
    // The probes' generators pinned threads of their own, not the caller's:
    // the last run still splits the machine's cores (it found one core
    // left, both sides on it, when the sender ran on the caller's thread).
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let generator = v["load"]["generator_cores"].as_array().map_or(0, Vec::len);
    assert!(cores < 2 || generator > 0, "the generator's cores: {}", v["load"]["generator_cores"]);
    let both = baton(&["demo", "--find-goodput", "--rate", "100"]);
    assert_eq!(both.status.code(), Some(2), "--rate and --find-goodput conflict");
}

#[test]
fn bad_input_is_rejected_with_the_key_named() {
    let good = std::fs::read_to_string(scenario("table4-resnet50.toml")).expect("readable");
    let cases = [
        ("unknown.toml", good.replace("seed = 7", "seed = 7\ncolour = \"red\""), "colour"),
        ("zero-gpus.toml", good.replace("gpus = 8", "gpus = 0"), "cluster.gpus"),
        ("tight-slo.toml", good.replace("slo_ms = 25.0", "slo_ms = 2.0"), "slo_ms"),
        ("bad-arrival.toml", good.replace("\"poisson\"", "\"gamma:0\""), "arrival"),
    ];
    for (name, text, key) in cases {
        let out = baton(&["sim", &write_temp(name, &text), "--rate", "100"]);
        assert_eq!(out.status.code(), Some(2), "{name} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{name}: `{err}` does not name {key}");
        assert!(out.stdout.is_empty(), "{name}: nothing runs half-configured");
    }
    let out = baton(&["sim", &scenario("table4-resnet50.toml"), "--rate", "100", "--policy", "fifo"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policy"));
    let out = baton(&["sim", &scenario("table4-resnet50.toml"), "--rate", "-5"]);
    assert_ne!(out.status.code(), Some(0));
    let out = baton(&["sim", "/nonexistent/scenario.toml", "--rate", "100"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn trace_writes_an_azure_schema_file_that_scenarios_read() {
    let dir = std::env::temp_dir().join(format!("baton-cli-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let csv = dir.join("day.csv");
    let out = baton(&["trace", "--out", csv.to_str().expect("utf-8"), "--functions", "30", "--seed", "5"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&csv).expect("written");
    assert!(text.starts_with("HashOwner,HashApp,HashFunction,Trigger,1,2,3"));
    assert_eq!(text.lines().count(), 31);
    let scenario = dir.join("s.toml");
    std::fs::write(
        &scenario,
        "name = \"t\"\nduration_s = 2\nwarmup_s = 0.5\n[cluster]\ngpus = 2\n[[models]]\nname = \"m\"\n\
         supernet = \"default\"\nmax_batch = 16\nslo_ms = 36.0\narrival = \"trace:day.csv\"\n",
    )
    .expect("written");
    let out = baton(&["sim", scenario.to_str().expect("utf-8"), "--rate", "500", "--policy", "slackfit", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v["mean_accuracy"].as_f64().expect("supernet runs report accuracy") >= 73.0);
    std::fs::write(dir.join("day.csv"), "not,a,trace\n").expect("written");
    let out = baton(&["sim", scenario.to_str().expect("utf-8"), "--rate", "500"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("models[0].arrival"));
}

/// The safety net for every wait on a process: long enough for a loaded CI
/// machine, short enough that a hung process fails the test with a message
/// rather than hanging it.
const PATIENCE: Duration = Duration::from_secs(120);

/// Role processes share this secret through the environment.
const SECRET_ENV: &str = "BATON_CLUSTER_SECRET";
const SECRET: &str = "the tests' cluster secret";

/// A server or role process under test. It is started without a usable
/// lifetime (`--duration` is only a backstop, so that a process whose test
/// was killed does not live forever): the test waits for its readiness line
/// on stderr, drives it, then stops it with SIGTERM (`stop`) and reads the
/// final JSON report it prints on its way out. Nothing depends on how long
/// the machine takes to start, serve or stop it. Dropping it (a failed
/// test) kills the process.
struct Proc {
    name: String,
    child: Child,
    /// Its stderr, line by line, as it comes (a reader thread owns the pipe).
    lines: mpsc::Receiver<String>,
    stderr: Vec<String>,
    /// Its whole stdout, sent once the pipe closes (the process exited).
    stdout: mpsc::Receiver<Vec<u8>>,
}

impl Proc {
    fn start(args: &[&str]) -> Self {
        Self::start_with(args, None)
    }

    /// Started with at most `max_files` open file descriptors, if given.
    fn start_with(args: &[&str], max_files: Option<u64>) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
        if let Some(n) = max_files {
            use std::os::unix::process::CommandExt;
            // SAFETY: runs in the forked child before exec; setrlimit is a
            // plain system call (async-signal-safe) on a local struct.
            unsafe {
                cmd.pre_exec(move || {
                    let l = libc::rlimit { rlim_cur: n, rlim_max: n };
                    match libc::setrlimit(libc::RLIMIT_NOFILE, &l) {
                        0 => Ok(()),
                        _ => Err(std::io::Error::last_os_error()),
                    }
                });
            }
        }
        let mut child = cmd
            .args(args)
            .env(SECRET_ENV, SECRET)
            .args(["--duration", "600", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("baton starts");
        let (line_tx, lines) = mpsc::channel();
        let err = BufReader::new(child.stderr.take().expect("piped"));
        std::thread::spawn(move || {
            for line in err.lines() {
                let Ok(line) = line else { break };
                if line_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (out_tx, stdout) = mpsc::channel();
        let mut out = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = out.read_to_end(&mut bytes);
            let _ = out_tx.send(bytes);
        });
        Self { name: format!("baton {}", args[0]), child, lines, stderr: Vec::new(), stdout }
    }

    /// Waits for its readiness line, `baton ROLE: ...` (the first line it
    /// prints with that prefix), and returns it.
    fn ready(&mut self) -> String {
        let prefix = format!("{}:", self.name);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stderr.push(line.clone());
                    if line.starts_with(&prefix) {
                        return line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{} printed no readiness line in {PATIENCE:?}; stderr: {:?}", self.name, self.stderr)
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().expect("waited for");
                    panic!("{} exited ({status}) before it was ready; stderr: {:?}", self.name, self.stderr)
                }
            }
        }
    }

    /// Waits for the readiness line and returns the address it reports.
    fn listening(&mut self) -> String {
        self.addresses().remove(0)
    }

    /// Waits for the readiness line and returns every address it reports
    /// (`... on ADDR[, backends on ADDR]`), in order.
    fn addresses(&mut self) -> Vec<String> {
        let line = self.ready();
        let addrs: Vec<String> =
            line.split([' ', ',']).filter(|w| w.parse::<SocketAddr>().is_ok()).map(String::from).collect();
        assert!(!addrs.is_empty(), "no address: {line}");
        addrs
    }

    /// Stops it with SIGTERM and returns its final JSON report.
    fn stop(mut self) -> serde_json::Value {
        // SAFETY: kill(2) on the pid of our own child, which has not been
        // waited for (so the pid is still its).
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0, "{} could not be signalled", self.name);
        // Its stdout closes when it exits, after the report.
        let out = self.stdout.recv_timeout(PATIENCE).unwrap_or_else(|_| {
            panic!("{} did not exit within {PATIENCE:?} of SIGTERM; stderr: {:?}", self.name, self.stderr)
        });
        let status = self.child.wait().expect("waited for");
        self.stderr.extend(self.lines.try_iter());
        assert!(status.success(), "{} exited with {status}; stderr: {:?}", self.name, self.stderr);
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{}: not one JSON object ({e}): {}", self.name, String::from_utf8_lossy(&out)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `baton load --json` against `addr`: its object, checked for the
/// documented fields and complete accounting. It sends for 0.5 s of
/// warm-up and 1 s that counts, and then
/// waits for the last answers (`--drain`, a safety net: the run ends as
/// soon as every request is answered).
fn load_json(addr: &str, rate: &str) -> serde_json::Value {
    let drain = PATIENCE.as_secs().to_string();
    let load = baton(&[
        "load",
        &scenario("serve-default.toml"),
        "--target",
        addr,
        "--rate",
        rate,
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--drain",
        &drain,
        "--json",
    ]);
    assert!(load.status.success(), "{}", String::from_utf8_lossy(&load.stderr));
    let v: serde_json::Value = serde_json::from_slice(&load.stdout).expect("one JSON object");
    for key in ["sent", "ok", "dropped", "errors", "bad_rate", "goodput_rps", "p99_ms"] {
        assert!(v[key].is_number(), "missing {key}");
    }
    let n = |k: &str| v[k].as_u64().unwrap();
    assert!(n("sent") as f64 > rate.parse::<f64>().unwrap() / 2.0, "{v}");
    assert_eq!(n("ok") + n("late") + n("dropped") + n("errors"), n("sent"), "{v}");
    assert_eq!((n("unanswered"), n("duplicates"), n("errors")), (0, 0, 0), "{v}");
    assert!(n("ok") > n("sent") / 2, "{v}");
    assert!(n("warmup_sent") > 0 && v["warmup_s"] == 0.5, "{v}");
    v
}

/// Every request `baton load` sent, warm-up included.
fn all_sent(v: &serde_json::Value) -> u64 {
    v["sent"].as_u64().unwrap() + v["warmup_sent"].as_u64().unwrap()
}

#[test]
fn serve_and_load_as_separate_processes_account_for_every_request() {
    let mut server = Proc::start(&["serve", "--listen", "127.0.0.1:0"]);
    let addr = server.listening();
    let v = load_json(&addr, "500");
    let s = server.stop();
    assert_eq!(s["received"].as_u64(), Some(all_sent(&v)), "{s}");
    assert_eq!(s["duplicates"].as_u64(), Some(0));
}

#[test]
fn frontend_scheduler_and_backend_processes_serve_like_serve() {
    // Each role is ready when it says so: the scheduler and the frontend
    // once they listen (the frontend also once the scheduler registered
    // it), the backend once the scheduler registered its GPUs and it holds
    // a connection to the frontend.
    let mut s = Proc::start(&["scheduler", "--listen", "127.0.0.1:0"]);
    let sched = s.listening();
    let any = "127.0.0.1:0";
    let mut f =
        Proc::start(&["frontend", "--listen", any, "--peer-listen", any, "--scheduler", &sched, "--http-listen", any]);
    let [fe, peers] = <[String; 2]>::try_from(f.addresses()).expect("clients' and backends' addresses");
    let http = f.stderr.iter().find_map(|l| l.strip_prefix("baton gateway: http on ")).expect("http").to_string();
    // A backend with another secret is refused, saying why.
    let wrong = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["backend", "--scheduler", &sched, "--frontends", &peers, "--duration", "1"])
        .env(SECRET_ENV, "not the cluster's secret")
        .output()
        .expect("baton runs");
    assert_eq!(wrong.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("cluster secret"), "{wrong:?}");
    let mut b = Proc::start(&["backend", "--scheduler", &sched, "--frontends", &peers]);
    b.ready();
    let v = load_json(&fe, "500");
    // The frontend's /metrics shows what the other processes did: the
    // backends' batches and the scheduler's decisions, sent as totals.
    let deadline = Instant::now() + PATIENCE;
    let shown = loop {
        let m = metrics(&http);
        let sum = |family: &str| -> f64 {
            m.lines().filter(|l| l.starts_with(family)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
        };
        let (batches, decisions) = (sum("baton_backend_batches_total{"), sum("baton_scheduler_decisions_total"));
        if batches > 0.0 && decisions > 0.0 {
            break batches;
        }
        assert!(Instant::now() < deadline, "no backend or scheduler totals on the frontend's /metrics:\n{m}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Stopped in the order they depend on each other: backend, frontend, scheduler.
    let (b, f, s) = (b.stop(), f.stop(), s.stop());
    assert_eq!(f["received"].as_u64(), Some(all_sent(&v)), "{f}");
    assert_eq!(
        (f["duplicates"].as_u64(), f["bad_frames"].as_u64(), b["bad_frames"].as_u64()),
        (Some(0), Some(0), Some(0))
    );
    assert!(s["refused_peers"].as_u64() >= Some(1), "the backend with another secret: {s}");
    // Every batch the scheduler planned ran on the backend process.
    assert_eq!(s["scheduler_batches"], b["batches"], "{s} {b}");
    assert!(shown <= b["batches"].as_f64().unwrap(), "{shown} shown, {b}");
}

/// `baton cluster`: two sub-clusters, a scheduler each, from a lopsided
/// table (every model on one GPU of sub-cluster 0), re-planned every 0.3 s
/// while `baton load` spreads its connections over the two frontends: the
/// controller moves GPUs to where the traffic is, and every request is
/// answered exactly once.
#[test]
fn cluster_re_plans_under_load_and_answers_every_request_once() {
    let routes = write_temp(
        "lopsided-routes.json",
        r#"{"subclusters": [{"models": ["ResNet50", "InceptionV3", "BERT-base"], "gpus": 1}, {"models": [], "gpus": 3}]}"#,
    );
    let any = "127.0.0.1:0,127.0.0.1:0";
    let mut c =
        Proc::start(&["cluster", "--schedulers", "2", "--routes", &routes, "--listen", any, "--epoch-s", "0.3"]);
    let fes = c.addresses();
    assert_eq!(fes.len(), 2, "a frontend per --listen address: {fes:?}");
    let v = load_json(&fes.join(","), "300");
    let c = c.stop();
    assert_eq!(c["received"].as_u64(), Some(all_sent(&v)), "{c}");
    assert_eq!((c["duplicates"].as_u64(), c["held_at_stop"].as_u64()), (Some(0), Some(0)), "{c}");
    assert!(c["replans"].as_u64() >= Some(1), "the controller moved nothing: {c}");
    let gpus = |k: usize| c["subclusters"][k]["gpus"].as_array().map_or(0, Vec::len);
    assert!(gpus(0) > 1, "no GPU joined the busy sub-cluster: {c}");
    // A table for another number of schedulers is refused, saying so.
    let out = baton(&["cluster", "--schedulers", "3", "--routes", &routes, "--duration", "1"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--routes has 2 sub-clusters, --schedulers 3"), "{out:?}");
    // More sub-clusters than models (or GPUs) to plan them with.
    let out = baton(&["cluster", "--schedulers", "9", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("make at most 3 sub-clusters"), "{out:?}");
}

/// A scheduler that runs out of file descriptors goes on accepting once
/// some are free: before, its accept loop ended at the first failed accept
/// and no role could connect to it again.
#[test]
fn a_scheduler_out_of_descriptors_accepts_again_once_some_are_free() {
    let mut s = Proc::start_with(&["scheduler", "--listen", "127.0.0.1:0"], Some(96));
    let sched = s.listening();
    // More connections than it has descriptors for; then all gone.
    let hogs: Vec<std::net::TcpStream> = (0..160)
        .filter_map(|_| std::net::TcpStream::connect_timeout(&sched.parse().unwrap(), Duration::from_secs(1)).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    drop(hogs);
    let any = "127.0.0.1:0";
    let mut f = Proc::start(&["frontend", "--listen", any, "--peer-listen", any, "--scheduler", &sched]);
    let [fe, peers] = <[String; 2]>::try_from(f.addresses()).expect("clients' and backends' addresses");
    let mut b = Proc::start(&["backend", "--scheduler", &sched, "--frontends", &peers]);
    b.ready();
    let v = load_json(&fe, "300");
    let (_, f, s) = (b.stop(), f.stop(), s.stop());
    assert_eq!(f["received"].as_u64(), Some(all_sent(&v)), "{f}");
    assert!(s["accept_failures"].as_u64() > Some(0), "it did run out of descriptors: {s}");
}

/// `GET /metrics` on `addr`: the body.
fn metrics(addr: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).expect("connects");
    write!(s, "GET /metrics HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("reads");
    out.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default()
}

#[test]
fn serve_refuses_what_the_engine_cannot_run() {
    // Sibling partitions see each other's batches in one process only.
    let glet = scenario("glet-game.toml");
    let out = baton(&["scheduler", "--scenario", &glet, "--listen", "127.0.0.1:0", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("separate processes"), "{err}");
    let out = baton(&["frontend", "--listen", "127.0.0.1:0", "--index", "70000", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("frontend index 70000"));
    let out = baton(&["serve", "--listen", "127.0.0.1:0", "--numa-node", "4096", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NUMA node 4096"), "{err}");
    // More frontends of a role cluster are more frontend processes.
    let out = baton(&["frontend", "--listen", "127.0.0.1:0", "--frontend-shards", "2", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--frontend-shards"));
    let out = baton(&["serve", "--listen", "127.0.0.1:0", "--frontend-shards", "0", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let out = baton(&["serve", "--listen", "127.0.0.1:0", "--frontend-shards", "2", "--duration", "0.5", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("shards on cores"), "{err}");
}

#[test]
fn plan_prints_the_budgets_of_a_fork_join_query() {
    let out = baton(&["plan", &scenario("nexus-forkjoin.toml"), "--rate", "100"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("query traffic-ranked")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("Dp split") && line.contains("ranker (joins car+face)"), "{line}");
    // The join is due at the end of the SLO, its parents together before it.
    assert!(line.ends_with("due +300.0"), "{line}");
    let car_due = line.split("car ").nth(1).and_then(|x| x.split("due +").nth(1)).expect("car's deadline");
    let face_due = line.split("face ").nth(1).and_then(|x| x.split("due +").nth(1)).expect("face's deadline");
    assert_eq!(car_due.split(',').next(), face_due.split(',').next(), "{line}");
}

#[test]
fn partition_policies_plan_and_simulate_glet_scenarios() {
    let out = baton(&["plan", &scenario("glet-scen3.toml"), "--policy", "glet", "--rate", "2000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert!(v["rate_scale"].as_f64().expect("a plan") >= 1.0, "2000 r/s is schedulable on 4 GPUs");
    let parts = v["partitions"].as_array().expect("partitions");
    for gpu in 0..4 {
        let sum: u64 = parts.iter().filter(|p| p["gpu"] == gpu).map(|p| p["percent"].as_u64().expect("size")).sum();
        assert!(sum <= 100, "GPU {gpu} split into {sum}%");
    }
    let out = baton(&["sim", &scenario("glet-scen3.toml"), "--policy", "sbp", "--rate", "2000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A partition policy on a scenario without partition profiles is refused before running.
    let out = baton(&["sim", &scenario("table4-resnet50.toml"), "--policy", "glet", "--rate", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("partition_profiles"));
    let out = baton(&["plan", &scenario("table4-resnet50.toml"), "--policy", "greedy-part", "--rate", "100"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn serve_with_the_cuda_executor_says_why_it_cannot_instead_of_panicking() {
    let out = baton(&["serve", "--listen", "127.0.0.1:0", "--executor", "cuda", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    // Without a driver: "no CUDA device"; on a GPU machine: the built-in
    // scenario's models are not the CUDA executor's.
    assert!(err.contains("no CUDA device") || err.contains("not a model of the CUDA executor"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn load_sizes_requests_as_the_servers_executor_takes_them() {
    let prefix = scenario("cpu-prefix.toml");
    let mut server = Proc::start(&["serve", "--scenario", &prefix, "--executor", "cpu", "--listen", "127.0.0.1:0"]);
    let addr = server.listening();
    let load = |sizes: &[&str]| {
        let args = ["load", &prefix, "--target", &addr, "--rate", "100", "--duration", "1", "--warmup", "0", "--json"];
        let out = baton(&[&args[..], sizes].concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        let n = |k: &str| v[k].as_u64().unwrap();
        (n("sent"), n("errors"), n("unanswered"))
    };
    // The default size is not the CPU models': every request is refused, typed.
    let (sent, errors, unanswered) = load(&[]);
    assert!(sent > 0 && errors == sent && unanswered == 0, "{sent} {errors} {unanswered}");
    let (sent, errors, unanswered) = load(&["--executor", "cpu"]);
    assert!(sent > 0 && errors == 0 && unanswered == 0, "{sent} {errors} {unanswered}");
    let both = baton(&["load", &prefix, "--target", &addr, "--executor", "cpu", "--input-floats", "4"]);
    assert_eq!(both.status.code(), Some(2), "{both:?}");
    server.stop();
}

#[test]
fn demo_gives_the_cpu_executors_compute_threads_cores_of_their_own() {
    let prefix = scenario("cpu-prefix.toml");
    let args =
        ["demo", "--scenario", &prefix, "--executor", "cpu", "--rate", "200", "--duration", "1", "--warmup", "0"];
    let out = baton(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (err, report) = (String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    // The cores this test may run on (`available_parallelism` reads the affinity mask).
    let two = std::thread::available_parallelism().map_or(1, usize::from) >= 2;
    assert_eq!(err.contains("compute threads on cores"), two, "{err}");
    assert!(report.contains("unanswered 0") && report.contains("duplicates 0"), "{report}");
    // Only the CPU executor has compute threads.
    let out = baton(&["serve", "--listen", "127.0.0.1:0", "--executor-cores", "0", "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--executor-cores"), "{out:?}");
}

#[test]
fn profile_measures_the_whole_networks_on_the_cpu_into_a_scenario() {
    let path = write_temp("nets-profile.toml", "");
    let out = baton(&[
        "profile",
        "--executor",
        "cpu",
        "--nets",
        "--scaled",
        "--max-batch",
        "3",
        "--reps",
        "1",
        "--out",
        &path,
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("resnet50-scaled: 95122 weights") && err.contains("bert-scaled:"), "{err}");
    // The written file is a scenario the simulator runs, with a table per network.
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches("latency_ms = [").count(), 3, "{text}");
    let sim = baton(&["sim", &path, "--json"]);
    assert!(sim.status.success(), "{}", String::from_utf8_lossy(&sim.stderr));
    // The networks exist only on the CPU so far: the GPU refuses --nets, typed.
    let gpu = baton(&["profile", "--nets"]);
    assert_eq!(gpu.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&gpu.stderr).contains("--nets needs --executor cpu"));
}

#[test]
fn partition_prints_subclusters_with_their_models_and_gpus() {
    let zoo = concat!(env!("CARGO_MANIFEST_DIR"), "/../perf/scenarios/zoo-a100-all.toml");
    let out = baton(&["partition", zoo, "--schedulers", "4", "--rate", "20000", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let subs = v["subclusters"].as_array().expect("subclusters");
    assert_eq!(subs.len(), 4);
    let models: usize = subs.iter().map(|c| c["models"].as_array().unwrap().len()).sum();
    let gpus: u64 = subs.iter().map(|c| c["gpus"].as_u64().unwrap()).sum();
    assert_eq!((models, gpus), (37, 64), "{v}");
    assert_eq!(v["solver"]["solver"], "milp", "{v}");
    assert!(v["solver"]["gap"].as_f64().is_some_and(|g| (0.0..0.05).contains(&g)), "{v}");
    let out = baton(&["partition", zoo, "--schedulers", "0", "--rate", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least one scheduler"));
    // Queries cannot be split over sub-clusters: no plan is made for them.
    let queries = concat!(env!("CARGO_MANIFEST_DIR"), "/../perf/scenarios/nexus-traffic.toml");
    let out = baton(&["partition", queries, "--schedulers", "2", "--rate", "100"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("multi-model queries"));
}

/// `--transport rdma` without verbs built refuses, naming the feature; the
/// loopback stand-in needs none.
#[cfg(not(feature = "rdma"))]
#[test]
fn a_build_without_verbs_refuses_rdma_and_says_how_to_get_it() {
    let out = baton(&["serve", "--transport", "rdma", "--listen", "127.0.0.1:0", "--duration", "0.2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--features rdma"));
    let out = baton(&["serve", "--rdma-device", "loopback", "--listen", "127.0.0.1:0", "--duration", "0.2"]);
    assert_eq!(out.status.code(), Some(2), "--rdma-device alone is a mistake");
}

/// Built with verbs on a machine without an RDMA device: the typed error,
/// said once, and the server fetches inputs over TCP.
#[cfg(feature = "rdma")]
#[test]
fn without_an_rdma_device_serve_says_so_and_fetches_over_tcp() {
    if std::path::Path::new("/sys/class/infiniband").read_dir().is_ok_and(|mut d| d.next().is_some()) {
        return; // a machine with a device: the net crate's verbs tests use it
    }
    let out = baton(&["serve", "--transport", "rdma", "--listen", "127.0.0.1:0", "--duration", "0.5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("no RDMA device") && err.contains("over TCP"), "{err}");
    assert!(err.contains("baton serve: "), "it serves: {err}");
}

#[test]
fn topology_shows_every_view_and_they_agree() {
    let out = baton(&["topology", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let views = v["views"].as_array().expect("views");
    assert_eq!(views.len(), if cfg!(feature = "hwloc") { 2 } else { 1 }, "{v}");
    assert_eq!(v["agree"], true, "hwloc and /sys see the same nodes, cores, GPUs and NICs: {v}");
    assert!(!views[0]["nodes"]["0"].as_array().expect("node 0's cores").is_empty());
}

#[test]
fn sim_runs_a_partitioned_cluster_and_refuses_what_it_cannot_split() {
    let zoo = concat!(env!("CARGO_MANIFEST_DIR"), "/../perf/scenarios/zoo-a100-all.toml");
    let out = baton(&["sim", zoo, "--rate", "5000", "--schedulers", "4", "--gpus", "32", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["policy"], "symphony/4-schedulers");
    assert!(v["sent"].as_u64().unwrap() > 0 && v["ok"].as_u64().unwrap() > 0, "{v}");
    // Re-planned every epoch, as `baton cluster --epoch-s` runs it: the
    // mix of nexus-shift moves, and the re-planned cluster drops less.
    let shift = concat!(env!("CARGO_MANIFEST_DIR"), "/../perf/scenarios/nexus-shift.toml");
    let bad = |extra: &[&str]| {
        let args = [&["sim", shift, "--policy", "symphony", "--rate", "3000", "--schedulers", "2", "--json"], extra];
        let out = baton(&args.concat());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        (v["policy"].as_str().unwrap().to_owned(), v["bad_rate"].as_f64().unwrap())
    };
    let (once, replanned) = (bad(&[]), bad(&["--epoch-s", "2"]));
    assert_eq!(replanned.0, "symphony/2-schedulers/epochs");
    assert!(replanned.1 < once.1 / 10.0, "{once:?} {replanned:?}");
    let out = baton(&["sim", shift, "--rate", "3000", "--epoch-s", "2"]);
    assert_eq!(out.status.code(), Some(2), "--epoch-s without --schedulers");
    let forkjoin = concat!(env!("CARGO_MANIFEST_DIR"), "/../perf/scenarios/nexus-forkjoin.toml");
    let out = baton(&["sim", forkjoin, "--rate", "100", "--schedulers", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run multi-model queries"));
}

#[test]
fn scheduler_refuses_a_bad_autoscaling_setting_and_says_which() {
    for (args, key) in [
        (vec!["--autoscale-period", "0"], "--autoscale-period"),
        (vec!["--autoscale-period", "nan"], "--autoscale-period"),
        (vec!["--autoscale-period", "1", "--autoscale-headroom", "1.5"], "--autoscale-*"),
    ] {
        let out = baton(&[&["scheduler", "--listen", "127.0.0.1:0"], &args[..]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "{args:?}: `{err}` does not name {key}");
    }
}
