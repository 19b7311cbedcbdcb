//! The backends a work-conserving policy hands out one batch at a time
//! (Clipper, Orloj, SuperServe): which are idle, which have failed, and the
//! one rule they share (a failed backend may come back: `join`) — with no backend left alive, every request is
//! dropped with `NoBackend` rather than held forever.

use std::collections::VecDeque;

use crate::types::{BackendId, DropReason, Output, RequestId};

#[derive(Clone, Debug)]
pub struct Backends {
    /// Idle backends; the last one is handed out next.
    idle: Vec<BackendId>,
    failed: Vec<bool>,
    alive: u32,
}

impl Backends {
    /// `n` backends, all idle; backend 0 is handed out first.
    pub fn new(n: u32) -> Self {
        Self { idle: (0..n).rev().map(BackendId).collect(), failed: vec![false; n as usize], alive: n }
    }

    /// The backend `take` would hand out, if one is idle.
    pub fn next_idle(&self) -> Option<BackendId> {
        self.idle.last().copied()
    }

    /// Hands out an idle backend.
    pub fn take(&mut self) -> Option<BackendId> {
        self.idle.pop()
    }

    /// A backend finished its batch: idle again, unless it has failed.
    pub fn release(&mut self, b: BackendId) {
        assert!(!self.idle.contains(&b), "backend {} released twice", b.0);
        if !self.failed[b.index()] {
            self.idle.push(b);
        }
    }

    /// A backend failed for good. True if it was the last one alive.
    pub fn fail(&mut self, b: BackendId) -> bool {
        if !std::mem::replace(&mut self.failed[b.index()], true) {
            self.alive -= 1;
            self.idle.retain(|&x| x != b);
        }
        self.alive == 0
    }

    /// A failed backend is back, idle.
    pub fn join(&mut self, b: BackendId) {
        if std::mem::replace(&mut self.failed[b.index()], false) {
            self.alive += 1;
            debug_assert!(!self.idle.contains(&b), "a failed backend was idle");
            self.idle.push(b);
        }
    }

    /// Drops `id` with `NoBackend` if no backend is left alive; true if it did.
    pub fn refuse(&self, id: RequestId, out: &mut VecDeque<Output>) -> bool {
        if self.alive == 0 {
            out.push_back(no_backend(id));
        }
        self.alive == 0
    }
}

/// The answer to a request no backend is left to serve.
pub fn no_backend(id: RequestId) -> Output {
    Output::Dropped { request: id, reason: DropReason::NoBackend }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_backends_never_come_back_and_the_last_failure_refuses_requests() {
        let mut b = Backends::new(2);
        let mut out = VecDeque::new();
        assert_eq!(b.take(), Some(BackendId(0)));
        assert!(!b.fail(BackendId(0)), "backend 1 is alive");
        b.release(BackendId(0));
        assert_eq!(b.next_idle(), Some(BackendId(1)), "a failed backend is not idle again");
        assert!(!b.refuse(RequestId(7), &mut out));
        assert!(b.fail(BackendId(1)));
        assert!(b.fail(BackendId(1)), "failing twice changes nothing");
        assert_eq!(b.next_idle(), None);
        assert!(b.refuse(RequestId(8), &mut out));
        assert_eq!(out, VecDeque::from([no_backend(RequestId(8))]));
        b.join(BackendId(0));
        b.join(BackendId(0));
        assert_eq!((b.take(), b.take()), (Some(BackendId(0)), None), "a backend back is idle, once");
        assert!(!b.refuse(RequestId(9), &mut out), "one backend is alive again");
    }
}
