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
//! A granted backend leaves the free heap until its model shard answers with
//! `BackendFree`. Complexity: O(log backends + log models) per message,
//! O(|mc|) per backend timer.

use std::collections::VecDeque;

use super::{Candidate, ToModel, ToRank};
use crate::heap::IndexedMinHeap;
use crate::time::Nanos;
use crate::types::{BackendId, DispatchDelay, ModelId};

#[derive(Debug)]
pub struct RankShard {
    delay: DispatchDelay,
    /// Backends not granted right now, keyed by the time they are free.
    free: IndexedMinHeap,
    candidates: Vec<Option<Candidate>>,
    /// Per model: when its candidate's timer fires.
    timers: IndexedMinHeap,
    parked: Vec<u32>,
    is_parked: Vec<bool>,
    gpu_timer: Option<Nanos>,
    out: VecDeque<ToModel>,
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
            is_parked: vec![false; models],
            gpu_timer: None,
            out: VecDeque::new(),
        }
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
            ToRank::BackendFree { backend, free_at } => {
                assert!(self.free.get(backend.index()).is_none(), "backend {backend:?} freed twice");
                self.free.set(backend.index(), free_at);
            }
        }
        self.set_gpu_timer();
    }

    pub fn on_timeout(&mut self, now: Nanos) {
        loop {
            let model_due = self.timers.peek().filter(|&(_, at)| at <= now);
            let gpu_due = self.gpu_timer.filter(|&at| at <= now);
            match (model_due, gpu_due) {
                (Some((m, at)), g) if g.is_none_or(|g| at <= g) => self.on_model_timer(m),
                (_, Some(_)) => self.on_gpu_timer(),
                (None, None) => return,
                (Some(_), None) => unreachable!("covered by the first arm"),
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
        self.out.pop_front()
    }

    /// Backends currently free or freeing (not granted).
    pub fn ungranted_backends(&self) -> usize {
        self.free.len()
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
        let mut i = 0;
        while i < self.parked.len() {
            let m = self.parked[i] as usize;
            let c = self.candidates[m].expect("parked candidates exist");
            if free_at > c.invalid_after {
                self.parked.swap_remove(i);
                self.is_parked[m] = false;
                self.candidates[m] = None;
                self.out.push_back(ToModel::Invalidated { model: ModelId(m as u32), free_at });
            } else {
                i += 1;
            }
        }
        let best = self.parked.iter().map(|&m| m as usize).min_by_key(|&m| (self.candidates[m].map(|c| c.exec_at), m));
        match best {
            Some(m) => self.grant(m, b, free_at),
            None => self.set_gpu_timer(),
        }
    }

    fn grant(&mut self, m: usize, b: usize, free_at: Nanos) {
        self.free.remove(b);
        self.unpark(m);
        self.timers.remove(m);
        self.candidates[m] = None;
        self.out.push_back(ToModel::Grant { model: ModelId(m as u32), backend: BackendId(b as u32), free_at });
        self.set_gpu_timer();
    }

    fn park(&mut self, m: usize) {
        if !self.is_parked[m] {
            self.is_parked[m] = true;
            self.parked.push(m as u32);
        }
    }

    fn unpark(&mut self, m: usize) {
        if self.is_parked[m] {
            self.is_parked[m] = false;
            let i = self.parked.iter().position(|&x| x as usize == m).expect("parked set is consistent");
            self.parked.swap_remove(i);
        }
    }

    fn set_gpu_timer(&mut self) {
        self.gpu_timer = match (self.free.peek(), self.parked.is_empty()) {
            (Some((_, free_at)), false) => {
                let max_delay = self
                    .parked
                    .iter()
                    .map(|&m| self.delay.of(self.candidates[m as usize].map_or(0, |c| c.bs)))
                    .max()
                    .unwrap_or(0);
                Some(free_at.saturating_sub(max_delay))
            }
            _ => None,
        };
    }
}
