//! The KServe v2 gateway's door into the frontend shard
//! (`baton_net::kserve`, which runs HTTP and gRPC on a thread of its own).
//!
//! Everything the gateway asks crosses one bounded channel to the frontend
//! shard and rings its doorbell; the shard handles it in its pump round:
//! an inference request is admitted by the frontend role like any binary
//! client's (under the connection number `GATEWAY`) and its one answer is
//! sent back on the request's `Reply`; a load or unload republishes the
//! model table (the shard is its only writer) and, for an unload, answers
//! the requests of that model it holds; a scrape copies the role's tally.
//! The shard keeps the gateway's replies by request id; the door numbers
//! requests so ids never repeat.
//!
//! Reduced, and said so: loading serves again a model of the scenario
//! that was unloaded (the scenario is the repository); a model the
//! scenario does not have cannot be added, since each policy's state is
//! sized by the scenario's models. In `baton frontend` (roles as separate
//! processes) load and unload act on that frontend only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use baton_net::kserve::{Door, Later, ModelInfo, Problem, ProblemKind, Refusal, Reply};
use baton_wire::fb;
use crossbeam_channel::{Receiver, Sender, TrySendError};
use tokio::sync::oneshot;

use super::park::Bell;
use crate::models::ModelTable;
use crate::publish::Published;
use crate::roles::frontend::ConnId;

/// The connection number the frontend role knows gateway requests by.
pub const GATEWAY: ConnId = ConnId::MAX;

/// Gateway requests waiting for the frontend shard, at most.
const WAITING: usize = 1 << 16;

/// What the gateway asks of the frontend shard.
pub enum Ask {
    Infer(fb::InferRequest, Reply),
    /// Load (true) or unload (false) the model named.
    Repository(String, bool, oneshot::Sender<Result<(), Problem>>),
    Scrape(oneshot::Sender<Result<String, Problem>>),
}

/// The gateway's side.
pub struct Bridge {
    tx: Sender<Ask>,
    bell: Bell,
    next: AtomicU64,
    table: Arc<Published<ModelTable>>,
}

/// The frontend shard's side.
pub struct Inbox {
    pub rx: Receiver<Ask>,
    /// Where each admitted gateway request's answer goes, by its id.
    pub replies: HashMap<u64, Reply>,
}

/// A bridge ringing `bell`, and the inbox the shard behind it drains.
pub fn bridge(bell: Bell, table: Arc<Published<ModelTable>>) -> (Bridge, Inbox) {
    let (tx, rx) = crossbeam_channel::bounded(WAITING);
    (Bridge { tx, bell, next: AtomicU64::new(0), table }, Inbox { rx, replies: HashMap::new() })
}

impl Bridge {
    fn ask(&self, ask: Ask) -> Result<(), Refusal> {
        self.tx.try_send(ask).map_err(|e| match e {
            TrySendError::Full(_) => Refusal::Full,
            TrySendError::Disconnected(_) => Refusal::Stopped,
        })?;
        self.bell.ring();
        Ok(())
    }

    /// Asks what `ask` makes of a reply channel; its answer comes on the
    /// receiver. A full queue is answered here; when the shard has stopped
    /// the sender is dropped with the ask, which the caller reads as the
    /// server stopping.
    fn ask_later<T>(&self, ask: impl FnOnce(oneshot::Sender<Result<T, Problem>>) -> Ask) -> Later<Result<T, Problem>> {
        let (tx, rx) = oneshot::channel();
        match self.tx.try_send(ask(tx)) {
            Ok(()) => self.bell.ring(),
            Err(TrySendError::Full(Ask::Repository(_, _, tx))) => {
                let _ = tx.send(Err(Problem::refused(Refusal::Full)));
            }
            Err(TrySendError::Full(Ask::Scrape(tx))) => {
                let _ = tx.send(Err(Problem::refused(Refusal::Full)));
            }
            Err(_) => {}
        }
        rx
    }
}

impl Door for Bridge {
    fn submit(&self, mut req: fb::InferRequest, reply: Reply) -> Result<(), Refusal> {
        req.id = self.next.fetch_add(1, Ordering::Relaxed);
        self.ask(Ask::Infer(req, reply))
    }

    fn model(&self, name: &str) -> Option<ModelInfo> {
        self.table.read(|t| info(t, name))
    }

    fn models(&self) -> Vec<ModelInfo> {
        self.table.read(|t| {
            let names = t.models.iter().map(|m| &m.name).chain(t.queries.iter().map(|q| &q.spec.name));
            names.filter_map(|n| info(t, n)).collect()
        })
    }

    fn metrics(&self) -> Later<Result<String, Problem>> {
        self.ask_later(Ask::Scrape)
    }

    fn load(&self, name: &str) -> Later<Result<(), Problem>> {
        self.ask_later(|tx| Ask::Repository(name.to_string(), true, tx))
    }

    fn unload(&self, name: &str) -> Later<Result<(), Problem>> {
        self.ask_later(|tx| Ask::Repository(name.to_string(), false, tx))
    }
}

/// The model or query `name` of `t` as KServe clients see it.
fn info(t: &ModelTable, name: &str) -> Option<ModelInfo> {
    if let Some(m) = t.find(name) {
        let m = &t.models[m as usize];
        return Some(ModelInfo {
            name: m.name.clone(),
            ready: m.loaded,
            query: false,
            input_floats: m.input_floats,
            outputs: vec![("output".into(), m.output_floats)],
            slo_ns: m.slo,
        });
    }
    let q = &t.queries[t.find_query(name)? as usize].spec;
    let stage = |i: usize| &t.models[q.stages[i].model.index()];
    Some(ModelInfo {
        name: q.name.clone(),
        ready: (0..q.stages.len()).all(|i| stage(i).loaded),
        query: true,
        input_floats: stage(0).input_floats,
        outputs: (0..q.stages.len()).map(|i| (stage(i).name.clone(), stage(i).output_floats)).collect(),
        slo_ns: q.slo,
    })
}

/// Loads or unloads model `name` in `table`: the model's number when it
/// changed, None when it already was so.
pub fn set_loaded(table: &Published<ModelTable>, name: &str, load: bool) -> Result<Option<u32>, Problem> {
    let Some(m) = table.read(|t| t.find(name)) else {
        let why = format!("no model named `{}` in the repository (the scenario's models)", baton_wire::clip(name));
        return Err(Problem::new(ProblemKind::NotFound, why));
    };
    let mut t = table.read(ModelTable::clone);
    if t.models[m as usize].loaded == load {
        return Ok(None);
    }
    t.models[m as usize].loaded = load;
    table.publish(t);
    Ok(Some(m))
}
