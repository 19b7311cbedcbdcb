//! The KServe v2 (Open Inference Protocol) gateway: HTTP/REST and gRPC
//! beside the binary protocol, for clients that speak what Triton, KServe
//! and TorchServe speak (`tritonclient`, `perf_analyzer`).
//!
//! **Where it runs, and why.** Both servers run on one thread of their own
//! with a tokio current-thread runtime (`start`). hyper and tonic are built
//! on tokio's epoll reactor and `Send` futures, which do not fit glommio's
//! io_uring executors; on a thread apart they share no core's executor and
//! no lock with the shards. Each call crosses to the frontend shard as one
//! `fb::InferRequest` through the `Door` (a bounded channel and the shard's
//! doorbell) and is admitted there by the same code as a binary-protocol
//! request: the gateway parses and answers, it decides nothing. The binary
//! path keeps its thread-per-core shape and pays nothing for the gateway.
//!
//! **Exactly once.** The frontend answers each request it took exactly
//! once, through the `Reply` it was handed; a request it could not take
//! (channel full, engine stopping) is answered 503 here at once. A client
//! that hangs up drops its `Reply`'s receiver: the answer is then counted
//! as orphaned, as for a binary client that left.
//!
//! The request parameters Baton reads (both transports; documented with
//! the rest of the protocols in `wire/PROTOCOL.md`):
//! - `slo_us` (integer): the latency budget in microseconds; without it
//!   the model's SLO from the scenario.
//! - `app` (string): the application class (Orloj's), by name.

mod capped;
mod grpc;
mod http;
mod infer;
mod proto;

pub use infer::{Problem, ProblemKind};
pub use proto::inference as pb;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use baton_wire::fb;

/// Where a request's one answer goes.
pub type Reply = tokio::sync::oneshot::Sender<fb::InferResponse>;

/// What the frontend will answer: dropped unanswered when it stops.
pub type Later<T> = tokio::sync::oneshot::Receiver<T>;

/// What a model (or a multi-model query) looks like to KServe clients.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    pub name: String,
    /// Served now (loaded); a model that is not is still listed.
    pub ready: bool,
    /// A multi-model query, run as one model.
    pub query: bool,
    /// The one FP32 input tensor, `input`, of this many elements.
    pub input_floats: usize,
    /// The outputs: a model's `output`, a query's one per stage (named by
    /// the stage's model), each of this many elements.
    pub outputs: Vec<(String, usize)>,
    /// The SLO a request without `slo_us` gets.
    pub slo_ns: u64,
}

/// Why a request could not be handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The frontend has as many gateway requests waiting as it takes.
    Full,
    /// The engine is stopping.
    Stopped,
}

/// The gateway's way into a running frontend.
pub trait Door: Send + Sync + 'static {
    /// Hands `req` to the frontend; its one answer comes on `reply`. The
    /// door gives `req` its id.
    fn submit(&self, req: fb::InferRequest, reply: Reply) -> Result<(), Refusal>;
    /// The model or query named `name`.
    fn model(&self, name: &str) -> Option<ModelInfo>;
    /// Every model and query, loaded or not.
    fn models(&self) -> Vec<ModelInfo>;
    /// Prometheus's text exposition of the engine's metrics.
    fn metrics(&self) -> Later<Result<String, Problem>>;
    /// Serves model `name` again (KServe's repository extension).
    fn load(&self, name: &str) -> Later<Result<(), Problem>>;
    /// Stops serving model `name`: new requests get `NOT_FOUND`, the ones
    /// it holds a typed error; none is lost.
    fn unload(&self, name: &str) -> Later<Result<(), Problem>>;
}

/// Where the gateway listens, and its limits.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// KServe v2 over HTTP/REST, with `/metrics`.
    pub http: Option<SocketAddr>,
    /// KServe v2 over gRPC.
    pub grpc: Option<SocketAddr>,
    /// The largest request body (HTTP) or message (gRPC) taken, in bytes.
    pub max_body: usize,
    /// HTTP connections open at most; more are answered 503 and closed.
    pub max_connections: usize,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self { http: None, grpc: None, max_body: baton_wire::MAX_FRAME, max_connections: 16_384 }
    }
}

/// A running gateway: where it listens, and how to stop it.
pub struct Gateway {
    pub http: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<JoinHandle<()>>,
}

/// The server's name and version, and the protocol extensions it serves.
pub const SERVER_NAME: &str = "baton";
pub const EXTENSIONS: &[&str] = &["binary_tensor_data", "model_repository", "parameters"];

/// Starts the gateway's thread, listening where `cfg` says; fails if a
/// listener cannot be bound.
pub fn start(door: Arc<dyn Door>, cfg: &GatewayConfig) -> std::io::Result<Gateway> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let bind = |addr: Option<SocketAddr>| addr.map(|a| rt.block_on(tokio::net::TcpListener::bind(a))).transpose();
    let (http_l, grpc_l) = (bind(cfg.http)?, bind(cfg.grpc)?);
    let http_addr = http_l.as_ref().map(|l| l.local_addr()).transpose()?;
    let grpc_addr = grpc_l.as_ref().map(|l| l.local_addr()).transpose()?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (max_body, max_connections) = (cfg.max_body, cfg.max_connections);
    let thread = std::thread::Builder::new().name("baton-gateway".into()).spawn(move || {
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async move {
            let mut tasks = Vec::new();
            if let Some(l) = http_l {
                let limits = http::Limits { max_body, max_connections };
                tasks.push(tokio::spawn(http::serve(l, Arc::clone(&door), limits, stopped.clone())));
            }
            if let Some(l) = grpc_l {
                let limits = http::Limits { max_body, max_connections };
                tasks.push(tokio::spawn(grpc::serve(l, Arc::clone(&door), limits, stopped.clone())));
            }
            for t in tasks {
                let _ = t.await;
            }
        });
    })?;
    Ok(Gateway { http: http_addr, grpc: grpc_addr, stop: Some(stop), thread: Some(thread) })
}

impl Gateway {
    /// Stops listening and waits for the thread (calls in flight get their
    /// answers first when the engine still runs).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(true);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.halt();
    }
}
