//! The rank shard (Symphony's RankThread): the only state machine that sees
//! every backend. It owns each backend's `free_at`, one timer per model
//! candidate and the set of parked candidates (`mc`), and grants backends.
//! Its event rate is the batch rate, not the request rate.
//!
//! - Candidate timer, at `exec_at - delay(bs)`: if the earliest-free backend
//!   is free by `exec_at`, grant it; else park the candidate.
//! - Backend timer, at `free_at - max delay(bs)` over parked candidates: tell
//!   every parked candidate with `free_at > invalid_after` it is invalid, then
//!   grant the backend to the parked candidate with the earliest `exec_at`.
//!
//! Appendix C removes an invalid candidate from `mc` silently, so its model
//! waits for its next arrival or drop timer before it tries again. Here the
//! model shard is told (`Invalidated`, with the backend's free time) and
//! re-plans at once against that time: a smaller batch, or a shed.
//!
//! A granted backend leaves the free heap until its model shard answers with
//! `BackendFree`. A failed backend leaves it for good: if it was granted,
//! the model shard's `BackendFree` does not bring it back, and completions
//! it sent before failing are ignored. A failed backend that comes back
//! (`BackendJoined`) is free from then on — or, if a model shard still
//! holds its grant, once that shard's `BackendFree` returns it. Complexity: O(log backends + log models) per message,
//! O(|mc|) per backend timer.

use std::collections::{BTreeMap, VecDeque};

use super::{Candidate, ToModel, ToRank};
use crate::heap::IndexedMinHeap;
use crate::time::Nanos;
use crate::types::{BackendId, DispatchDelay, ModelId};

const NOT_PARKED: u32 = u32::MAX;

#[derive(Debug)]
pub struct RankShard {
    delay: DispatchDelay,
    /// Backends not granted right now, keyed by the time they are free.
    free: IndexedMinHeap,
    candidates: Vec<Option<Candidate>>,
    /// Per model: when its candidate's timer fires.
    timers: IndexedMinHeap,
    parked: Vec<u32>,
    /// Per model: its index in `parked`, or NOT_PARKED.
    parked_at: Vec<u32>,
    /// Batch sizes of the parked candidates (bs -> count): the backend timer
    /// leads by the largest one's dispatch delay.
    parked_bs: BTreeMap<u32, u32>,
    gpu_timer: Option<Nanos>,
    /// Per backend: batches sent to it and not yet done.
    outstanding: Vec<u32>,
    failed: Vec<bool>,
    /// Per backend: granted to a model shard that has not answered yet.
    granted: Vec<bool>,
    out: VecDeque<ToModel>,
    /// Completions of batches it has no record of sending, ignored: over a
    /// real network a completion can come twice, or come from batches an
    /// earlier run of the scheduler sent (never in the simulator).
    pub unexpected_done: u64,
}

impl RankShard {
    pub fn new(models: usize, backends: u32, delay: DispatchDelay) -> Self {
        let mut free = IndexedMinHeap::with_capacity(backends as usize);
        for b in 0..backends as usize {
            free.set(b, 0);
        }
        Self {
            delay,
            free,
            candidates: vec![None; models],
            timers: IndexedMinHeap::with_capacity(models),
            parked: Vec::with_capacity(models),
            parked_at: vec![NOT_PARKED; models],
            parked_bs: BTreeMap::new(),
            gpu_timer: None,
            outstanding: vec![0; backends as usize],
            failed: vec![false; backends as usize],
            granted: vec![false; backends as usize],
            out: VecDeque::new(),
            unexpected_done: 0,
        }
    }

    /// How many backends it ranks.
    pub fn backends(&self) -> usize {
        self.failed.len()
    }

    pub fn on_message(&mut self, msg: ToRank) {
        match msg {
            ToRank::Candidate { model, candidate } => {
                let m = model.index();
                self.unpark(m);
                self.candidates[m] = candidate;
                match candidate {
                    Some(c) => self.timers.set(m, c.exec_at.saturating_sub(self.delay.of(c.bs))),
                    None => {
                        self.timers.remove(m);
                    }
                }
            }
            ToRank::BackendFree { backend, .. } if self.failed[backend.index()] => {
                self.granted[backend.index()] = false;
            }
            ToRank::BackendFree { backend, free_at, dispatched } => {
                self.granted[backend.index()] = false;
                assert!(self.free.get(backend.index()).is_none(), "backend {backend:?} freed twice");
                self.free.set(backend.index(), free_at);
                self.outstanding[backend.index()] += u32::from(dispatched);
            }
            ToRank::BatchDone { backend, .. } if self.failed[backend.index()] => {}
            ToRank::BatchDone { backend, .. } if self.outstanding[backend.index()] == 0 => {
                self.unexpected_done += 1;
            }
            ToRank::BatchDone { backend, at } => {
                let b = backend.index();
                self.outstanding[b] -= 1;
                // Idle and not granted: it is free now, whatever was predicted.
                if self.outstanding[b] == 0 && self.free.get(b).is_some() {
                    self.free.set(b, at);
                }
            }
            ToRank::BackendFailed { backend } => {
                let b = backend.index();
                self.failed[b] = true;
                self.free.remove(b);
                self.outstanding[b] = 0;
            }
            ToRank::BackendJoined { backend, at } => {
                let b = backend.index();
                if std::mem::replace(&mut self.failed[b], false) && !self.granted[b] {
                    self.free.set(b, at);
                }
            }
        }
        self.set_gpu_timer();
    }

    pub fn on_timeout(&mut self, now: Nanos) {
        loop {
            let model_due = self.timers.peek().filter(|&(_, at)| at <= now);
            let gpu_due = self.gpu_timer.filter(|&at| at <= now);
            match (model_due, gpu_due) {
                (Some((m, at)), Some(g)) if at <= g => self.on_model_timer(m),
                (Some((m, _)), None) => self.on_model_timer(m),
                (_, Some(_)) => self.on_gpu_timer(),
                (None, None) => return,
            }
        }
    }

    pub fn next_timeout(&self) -> Option<Nanos> {
        let m = self.timers.peek().map(|(_, at)| at);
        match (m, self.gpu_timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn poll_output(&mut self) -> Option<ToModel> {
        crate::fifo::pop_front(&mut self.out)
    }

    fn on_model_timer(&mut self, m: usize) {
        self.timers.remove(m);
        let c = self.candidates[m].expect("a timer always belongs to a candidate");
        match self.free.peek() {
            Some((b, free_at)) if free_at <= c.exec_at => self.grant(m, b, free_at),
            _ => {
                self.park(m);
                self.set_gpu_timer();
            }
        }
    }

    fn on_gpu_timer(&mut self) {
        self.gpu_timer = None;
        let (b, free_at) = self.free.peek().expect("the backend timer needs a free backend");
        let invalid: Vec<u32> = self
            .parked
            .iter()
            .copied()
            .filter(|&m| free_at > self.candidates[m as usize].expect("parked candidates exist").invalid_after)
            .collect();
        for m in invalid {
            let m = m as usize;
            self.unpark(m);
            self.candidates[m] = None;
            self.out.push_back(ToModel::Invalidated { model: ModelId(m as u32), free_at });
        }
        let best = self.parked.iter().map(|&m| m as usize).min_by_key(|&m| (self.candidates[m].map(|c| c.exec_at), m));
        match best {
            Some(m) => self.grant(m, b, free_at),
            None => self.set_gpu_timer(),
        }
    }

    fn grant(&mut self, m: usize, b: usize, free_at: Nanos) {
        self.free.remove(b);
        self.granted[b] = true;
        self.unpark(m);
        self.timers.remove(m);
        self.candidates[m] = None;
        self.out.push_back(ToModel::Grant { model: ModelId(m as u32), backend: BackendId(b as u32), free_at });
        self.set_gpu_timer();
    }

    fn park(&mut self, m: usize) {
        if self.parked_at[m] == NOT_PARKED {
            self.parked_at[m] = self.parked.len() as u32;
            self.parked.push(m as u32);
            let bs = self.candidates[m].expect("only candidates park").bs;
            *self.parked_bs.entry(bs).or_default() += 1;
        }
    }

    fn unpark(&mut self, m: usize) {
        let at = self.parked_at[m];
        if at == NOT_PARKED {
            return;
        }
        self.parked_at[m] = NOT_PARKED;
        self.parked.swap_remove(at as usize);
        if let Some(&moved) = self.parked.get(at as usize) {
            self.parked_at[moved as usize] = at;
        }
        let bs = self.candidates[m].expect("parked candidates exist").bs;
        let n = self.parked_bs.get_mut(&bs).expect("parked_bs counts every parked candidate");
        *n -= 1;
        if *n == 0 {
            self.parked_bs.remove(&bs);
        }
    }

    fn set_gpu_timer(&mut self) {
        self.gpu_timer = match (self.free.peek(), self.parked_bs.last_key_value()) {
            (Some((_, free_at)), Some((&max_bs, _))) => Some(free_at.saturating_sub(self.delay.of(max_bs))),
            _ => None,
        };
    }
}
