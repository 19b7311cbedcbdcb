//! Real processes on a real network, with faults: the scheduler, a
//! frontend and two backend processes each in a network namespace of its
//! own, joined to this one by veth links, every connection between roles
//! through a fault-injecting proxy here (`baton_tools::faultproxy`: delay,
//! jitter, stalls, cuts with a partition after). While `baton load` runs
//! against the frontend, at seeded moments a link is cut, or a backend
//! process or the scheduler's is killed with SIGKILL and started again
//! (the scheduler keeps the cluster clock in `--clock-origin-file`, so the
//! running roles take the new one back). Every request the
//! load sent must be answered exactly once (ok, dropped with a reason, or
//! a typed error): none unanswered, none twice.
//!
//! Needs root (namespaces and links are made and removed by the test) and
//! iproute2; elsewhere it says why and passes without running. The seed,
//! the load's length and the number of faults come from BATON_NETCHAOS_SEED,
//! BATON_NETCHAOS_SECS and BATON_NETCHAOS_FAULTS; by default seed 9 with
//! 15 s and 15 faults, which found that a restarted scheduler planned on
//! backends whose process was not there (it now starts with every backend
//! failed until its process connects) and that a backend process whose
//! first greeting with a frontend failed gave up (it now tries again for
//! its patience). `perf/scripts/netchaos.sh` runs it over several seeds.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use baton_sched::rng::Rng;
use baton_tools::faultproxy::{FaultProxy, Faults};

const SECRET: &str = "the netchaos test's cluster secret";
const PATIENCE: Duration = Duration::from_secs(60);

/// The two tests run one at a time: each starts a cluster of processes
/// that needs the machine's cores, and beside each other on a slow 2-core
/// machine with a noisy host the sub-cluster test's load saw 1.3 ms
/// ingress at p50 (24% bad) and the chaos test's client was cut off;
/// alone, both passed on the same machine minutes later.
static ONE_CLUSTER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())),
    }
}

/// Namespace `i` (`bnc-<pid>-i`), linked to this one: here 10.78.i.1,
/// there 10.78.i.2. Removed on drop.
struct Netns {
    name: String,
    host_link: String,
}

impl Netns {
    fn new(i: u8) -> Result<Self, String> {
        let name = format!("bnc{}-{i}", std::process::id());
        let (host_link, ns_link) = (format!("bnc{}h{i}", std::process::id() % 10_000), format!("bnc{i}n"));
        ip(&["netns", "add", &name])?;
        let ns = Self { name, host_link };
        ip(&["link", "add", &ns.host_link, "type", "veth", "peer", "name", &ns_link])?;
        ip(&["link", "set", &ns_link, "netns", &ns.name])?;
        ip(&["addr", "add", &format!("10.78.{i}.1/24"), "dev", &ns.host_link])?;
        ip(&["link", "set", &ns.host_link, "up"])?;
        let inside = |args: &[&str]| ip(&[&["netns", "exec", &ns.name, "ip"], args].concat());
        inside(&["addr", "add", &format!("10.78.{i}.2/24"), "dev", &ns_link])?;
        inside(&["link", "set", &ns_link, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn here(i: u8) -> String {
        format!("10.78.{i}.1")
    }

    fn there(i: u8) -> String {
        format!("10.78.{i}.2")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_link]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A role process in a namespace; killed on drop.
struct Role {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Role {
    fn start(ns: &Netns, args: &[String]) -> Self {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_baton")])
            .args(args)
            .args(["--duration", "600", "--json"])
            .env("BATON_CLUSTER_SECRET", SECRET)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec runs");
        let (tx, lines) = mpsc::channel();
        let err = BufReader::new(child.stderr.take().expect("piped"));
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Self { child, lines }
    }

    /// Waits for its readiness line (`baton ROLE: ...`).
    fn ready(&self, role: &str) {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.starts_with(&format!("baton {role}:")) => return,
                Ok(line) => seen.push(line),
                Err(_) => panic!("baton {role} was not ready in {PATIENCE:?}: {seen:?}"),
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }

    /// Stops it as an operator does (SIGTERM: a backend leaves first) and
    /// waits for it to exit.
    fn stop(&mut self) {
        // SAFETY: kill has no memory preconditions; the pid is our child's
        // (`ip netns exec` execs the command in place), not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }

    /// Waits for a line of its output that starts with `prefix`.
    fn says(&self, prefix: &str) -> bool {
        let deadline = Instant::now() + PATIENCE;
        while let Ok(line) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            if line.starts_with(prefix) {
                return true;
            }
        }
        false
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `baton load --json` report's counts, for the log.
fn tally(v: &serde_json::Value) -> String {
    let keys = ["sent", "ok", "late", "dropped", "errors", "unanswered", "duplicates"];
    keys.iter().map(|k| format!("{k} {}", v[*k])).collect::<Vec<_>>().join(" ")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn roles_in_namespaces_through_faulty_links_answer_every_request_once() {
    let _alone = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(nss) = namespaces(1, 4) else { return };
    let seed = env("BATON_NETCHAOS_SEED", 9);
    let (secs, faults) = (env("BATON_NETCHAOS_SECS", 15), env("BATON_NETCHAOS_FAULTS", 15));
    eprintln!("netchaos seed {seed}: {secs} s of load, {faults} faults (replay: BATON_NETCHAOS_SEED={seed})");
    let (s, f, b) = (1u8, 2u8, [3u8, 4u8]);
    let at = |i: u8, port: u16| format!("{}:{port}", Netns::there(i));
    // The proxies, here: every role reaches the scheduler and the
    // frontend's peer listener through them, on its own link's near end.
    let link = |seed| Faults {
        seed,
        delay: Duration::from_micros(200),
        jitter: Duration::from_millis(2),
        stall_chance: 0.01,
        stall: Duration::from_millis(150),
    };
    let any = |port| -> SocketAddr { format!("0.0.0.0:{port}").parse().unwrap() };
    let to_sched = FaultProxy::start(any(17801), at(s, 7701).parse().unwrap(), link(seed)).expect("proxy");
    let to_peers = FaultProxy::start(any(17802), at(f, 7702).parse().unwrap(), link(seed + 1)).expect("proxy");
    let via = |i: u8, port: u16| format!("{}:{port}", Netns::here(i));

    let origin_file = std::env::temp_dir().join(format!("baton-netchaos-{}.origin", std::process::id()));
    let _ = std::fs::remove_file(&origin_file);
    let origin = origin_file.display().to_string();
    let sched_args = strings(&["scheduler", "--listen", &at(s, 7701), "--clock-origin-file", &origin]);
    let mut sched = Role::start(&nss[0], &sched_args);
    sched.ready("scheduler");
    let fe_args = ["frontend", "--listen", &at(f, 7700), "--peer-listen", &at(f, 7702), "--scheduler", &via(f, 17801)];
    let fe = Role::start(&nss[1], &strings(&fe_args));
    fe.ready("frontend");
    let backend_args = |i: usize| {
        let (ns, first) = (b[i], (2 * i).to_string());
        let args = ["backend", "--scheduler", &via(ns, 17801), "--frontends", &via(ns, 17802)];
        strings(&[&args[..], &["--first", &first, "--count", "2"]].concat())
    };
    let mut backends: Vec<Role> = (0..2).map(|i| Role::start(&nss[2 + i], &backend_args(i))).collect();
    for r in &backends {
        r.ready("backend");
    }

    let target = at(f, 7700);
    let load = move |rate: &str, secs: u64| {
        let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/serve-default.toml");
        let (secs, drain) = (secs.to_string(), PATIENCE.as_secs().to_string());
        let args = ["load", scenario, "--target", &target, "--rate", rate, "--duration", &secs, "--drain", &drain];
        let out = Command::new(env!("CARGO_BIN_EXE_baton")).args(args).arg("--json").output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("one JSON object")
    };
    let (during, after) = (load.clone(), load);
    let load = std::thread::spawn(move || during("300", secs));

    // The faults, at seeded moments through the load.
    let mut rng = Rng::new(seed);
    let (mut kills, mut sched_kills) = (0, 0);
    let started = Instant::now();
    for k in 0..faults {
        let when = Duration::from_secs_f64(secs as f64 * (k as f64 + rng.unit()) / faults as f64);
        std::thread::sleep(when.saturating_sub(started.elapsed()));
        match rng.below(4) {
            0 => to_sched.cut(Duration::from_millis(100 + rng.below(400))),
            1 => to_peers.cut(Duration::from_millis(100 + rng.below(400))),
            2 => {
                sched.kill();
                sched_kills += 1;
                std::thread::sleep(Duration::from_millis(100 + rng.below(400)));
                sched = Role::start(&nss[0], &sched_args);
                sched.ready("scheduler");
            }
            _ => {
                let i = rng.below(2) as usize;
                backends[i].kill();
                kills += 1;
                std::thread::sleep(Duration::from_millis(100 + rng.below(400)));
                backends[i] = Role::start(&nss[2 + i], &backend_args(i));
            }
        }
    }
    let v = load.join().unwrap();
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    let (ps, pp) = (to_sched.stats(), to_peers.stats());
    eprintln!(
        "netchaos seed {seed}: {kills} backend processes and {sched_kills} schedulers killed and restarted; links cut {} times ({} connections \
         refused meanwhile), {} chunks stalled; {}",
        ps.cuts + pp.cuts,
        ps.refused + pp.refused,
        ps.stalls + pp.stalls,
        tally(&v)
    );
    assert_eq!((n("unanswered"), n("duplicates")), (0, 0), "{v}");
    assert_eq!(n("ok") + n("late") + n("dropped") + n("errors"), n("sent"), "{v}");
    assert!(n("ok") > 0, "{v}");
    // Once the faults stop (the links calm too), every role is back: the
    // frontend has taken the (restarted) scheduler back, the backends
    // have rejoined, and the cluster serves as if nothing had happened.
    to_sched.calm();
    to_peers.calm();
    std::thread::sleep(Duration::from_secs(1));
    let v = after("200", 2);
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    eprintln!(
        "netchaos seed {seed}: after the faults, 2 s at 200 r/s: sent {} ok {} late {} dropped {} errors {} unanswered {}",
        n("sent"),
        n("ok"),
        n("late"),
        n("dropped"),
        n("errors"),
        n("unanswered")
    );
    assert!(n("ok") * 100 >= n("sent") * 95 && n("errors") + n("unanswered") == 0, "not recovered: {v}");
    drop((backends, fe, sched));
    let _ = std::fs::remove_file(&origin_file);
}

/// Namespaces `first..=last`, or why they cannot be made here (then the
/// test says so and passes without running).
fn namespaces(first: u8, last: u8) -> Option<Vec<Netns>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: namespaces and veth links need root");
        return None;
    }
    match (first..=last).map(Netns::new).collect() {
        Ok(n) => Some(n),
        Err(why) => {
            eprintln!("skipped: cannot make network namespaces here ({why})");
            None
        }
    }
}

/// Symphony's sub-clusters across namespaces: the schedulers of two
/// sub-clusters, a frontend routing by a table in a file, and backend
/// processes, each in a namespace of its own (reached through plain
/// forwarding proxies here). While `baton load` runs, a model and a GPU
/// move from sub-cluster 0 to 1 as an operator moves them: the GPU's
/// backend process is stopped (it leaves scheduler 0) and started under
/// scheduler 1, and the routing file is rewritten (the frontend follows
/// it). Every request is answered exactly once.
#[test]
fn subclusters_in_namespaces_move_a_model_and_a_gpu_under_load() {
    let _alone = ONE_CLUSTER_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(nss) = namespaces(11, 15) else { return };
    let (s0, s1, f, rest, mover) = (11u8, 12u8, 13u8, 14u8, 15u8);
    let ns = |i: u8| &nss[usize::from(i - 11)];
    let at = |i: u8, port: u16| format!("{}:{port}", Netns::there(i));
    let via = |i: u8, port: u16| format!("{}:{port}", Netns::here(i));
    let plain =
        Faults { seed: 1, delay: Duration::ZERO, jitter: Duration::ZERO, stall_chance: 0.0, stall: Duration::ZERO };
    let any = |port| -> SocketAddr { format!("0.0.0.0:{port}").parse().unwrap() };
    let proxy = |port, to: String| FaultProxy::start(any(port), to.parse().unwrap(), plain.clone()).expect("proxy");
    let _proxies = [proxy(17811, at(s0, 7701)), proxy(17812, at(s1, 7701)), proxy(17813, at(f, 7702))];

    let dir = std::env::temp_dir().join(format!("baton-netns-subclusters-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let (origin, routes) = (dir.join("clock-origin"), dir.join("routes.json"));
    // The routing table as `baton partition --json` writes it; replaced
    // whole (a rename), as an operator's tool would.
    let publish = |json: &str| {
        let next = dir.join("routes.next");
        std::fs::write(&next, json).expect("written");
        std::fs::rename(&next, &routes).expect("renamed");
    };
    publish(r#"{"subclusters":[{"models":["ResNet50","InceptionV3"],"gpus":2},{"models":["BERT-base"],"gpus":2}]}"#);
    let origin = origin.display().to_string();
    let scheduler = |k: &str, i: u8| {
        let args = ["scheduler", "--listen", &at(i, 7701), "--clock-origin-file", &origin, "--subcluster", k];
        let r = Role::start(ns(i), &strings(&args));
        r.ready("scheduler");
        r
    };
    let (sched0, sched1) = (scheduler("0", s0), scheduler("1", s1));
    let schedulers = format!("{},{}", via(f, 17811), via(f, 17812));
    let routes_arg = routes.display().to_string();
    let fe_args = ["frontend", "--listen", &at(f, 7700), "--peer-listen", &at(f, 7702), "--scheduler", &schedulers];
    let fe = Role::start(ns(f), &strings(&[&fe_args[..], &["--routes", &routes_arg]].concat()));
    fe.ready("frontend");
    let backend = |i: u8, first: &str, count: &str, k: &str| {
        let to = via(i, if k == "0" { 17811 } else { 17812 });
        let args = ["backend", "--scheduler", &to, "--subcluster", k, "--frontends", &via(i, 17813)];
        let r = Role::start(ns(i), &strings(&[&args[..], &["--first", first, "--count", count]].concat()));
        r.ready("backend");
        r
    };
    let gpu0 = backend(rest, "0", "1", "0");
    let gpus23 = backend(rest, "2", "2", "1");
    let mut gpu1 = backend(mover, "1", "1", "0");

    let target = at(f, 7700);
    let secs = 6;
    let load = std::thread::spawn(move || {
        let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/serve-default.toml");
        let (secs, drain) = (secs.to_string(), PATIENCE.as_secs().to_string());
        let args = ["load", scenario, "--target", &target, "--rate", "300", "--duration", &secs, "--drain", &drain];
        let out = Command::new(env!("CARGO_BIN_EXE_baton")).args(args).arg("--json").output().expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("one JSON object")
    });
    std::thread::sleep(Duration::from_secs(secs / 2));
    // InceptionV3 and GPU 1 move to sub-cluster 1: GPUs are numbered in
    // the table's order, so sub-cluster 0 keeps GPU 0 and 1 has 1, 2, 3.
    gpu1.stop();
    gpu1 = backend(mover, "1", "1", "1");
    publish(r#"{"subclusters":[{"models":["ResNet50"],"gpus":1},{"models":["InceptionV3","BERT-base"],"gpus":3}]}"#);
    assert!(fe.says("baton frontend: routes from"), "the frontend did not take the new routes");
    let v = load.join().unwrap();
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    eprintln!("sub-clusters in namespaces: {}", tally(&v));
    assert_eq!((n("unanswered"), n("duplicates"), n("errors")), (0, 0, 0), "{v}");
    assert!(n("ok") * 100 >= n("sent") * 95, "{v}");
    drop((gpu0, gpus23, gpu1, fe, sched0, sched1));
    let _ = std::fs::remove_dir_all(&dir);
}
