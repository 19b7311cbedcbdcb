//! A fault-injecting TCP proxy, for real-process chaos runs: it stands
//! between two roles (`listen` → `upstream`) and, from a seed, delays what
//! it forwards (a base delay and jitter per chunk, now and then a long
//! stall), and on command cuts every connection through it and refuses new
//! ones for a while (a partition). TCP hides packet loss and reordering
//! within a stream (it retransmits and reorders), so at this level they
//! show as delay and stalls; a lost connection is a cut. The kernels of
//! these machines have no netem qdisc, hence a proxy.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use baton_sched::rng::Rng;

#[derive(Clone, Debug)]
pub struct Faults {
    pub seed: u64,
    /// Every chunk forwarded waits this long, plus up to `jitter`.
    pub delay: Duration,
    pub jitter: Duration,
    /// The chance that a chunk stalls `stall` longer.
    pub stall_chance: f64,
    pub stall: Duration,
}

/// What a proxy did, for the run's report.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProxyStats {
    pub connections: u64,
    pub cuts: u64,
    pub refused: u64,
    pub stalls: u64,
    pub bytes: u64,
}

struct State {
    /// Both ends of every open connection, to cut them.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    refuse_until: Mutex<Instant>,
    stop: AtomicBool,
    /// No more delays or stalls (`calm`).
    calm: AtomicBool,
    connections: AtomicU64,
    cuts: AtomicU64,
    refused: AtomicU64,
    stalls: AtomicU64,
    bytes: AtomicU64,
}

pub struct FaultProxy {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl FaultProxy {
    /// Listens on `listen` and forwards each connection to `upstream`.
    pub fn start(listen: SocketAddr, upstream: SocketAddr, faults: Faults) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            open: Mutex::default(),
            refuse_until: Mutex::new(Instant::now()),
            stop: AtomicBool::new(false),
            calm: AtomicBool::new(false),
            connections: AtomicU64::new(0),
            cuts: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        });
        let st = Arc::clone(&state);
        std::thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                if st.stop.load(Ordering::Acquire) {
                    return;
                }
                let Ok(client) = client else { continue };
                if Instant::now() < *st.refuse_until.lock().expect("not poisoned") {
                    st.refused.fetch_add(1, Ordering::Relaxed);
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(1)) else { continue };
                st.connections.fetch_add(1, Ordering::Relaxed);
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    st.open.lock().expect("not poisoned").push((c, s));
                }
                for (i, (from, to)) in
                    [(client.try_clone(), server.try_clone()), (Ok(server), Ok(client))].into_iter().enumerate()
                {
                    let (Ok(from), Ok(to)) = (from, to) else { continue };
                    let rng = Rng::stream(faults.seed, 2 * n as u64 + i as u64);
                    let (st, faults) = (Arc::clone(&st), faults.clone());
                    std::thread::spawn(move || pump(from, to, rng, &faults, &st));
                }
            }
        });
        Ok(Self { addr, state })
    }

    /// Cuts every connection through the proxy now and refuses new ones
    /// for `refuse` (then they pass again).
    pub fn cut(&self, refuse: Duration) {
        *self.state.refuse_until.lock().expect("not poisoned") = Instant::now() + refuse;
        let open: Vec<_> = self.state.open.lock().expect("not poisoned").drain(..).collect();
        for (c, s) in open {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
        self.state.cuts.fetch_add(1, Ordering::Relaxed);
    }

    /// Forwards without delay or stall from now on (the faults are over;
    /// cuts still happen when asked).
    pub fn calm(&self) {
        self.state.calm.store(true, Ordering::Release);
    }

    pub fn stats(&self) -> ProxyStats {
        let s = &self.state;
        ProxyStats {
            connections: s.connections.load(Ordering::Relaxed),
            cuts: s.cuts.load(Ordering::Relaxed),
            refused: s.refused.load(Ordering::Relaxed),
            stalls: s.stalls.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        // Wakes the accept loop so it sees `stop`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
        self.cut(Duration::ZERO);
    }
}

/// Forwards `from` to `to`, each chunk delayed as `faults` says, until
/// either end closes; then closes the other's direction.
fn pump(mut from: TcpStream, mut to: TcpStream, mut rng: Rng, faults: &Faults, st: &State) {
    let mut buf = vec![0; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut wait = faults.delay + faults.jitter.mul_f64(rng.unit());
        if rng.unit() < faults.stall_chance {
            st.stalls.fetch_add(1, Ordering::Relaxed);
            wait += faults.stall;
        }
        if !st.calm.load(Ordering::Acquire) {
            std::thread::sleep(wait);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        st.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
