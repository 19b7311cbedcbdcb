//! A model's pending requests, ordered by deadline, and the batch arithmetic
//! on them that Symphony and Clockwork share.
//!
//! Because the queue is ordered by deadline, the first `b` requests form the
//! batch of size `b` with the latest possible earliest deadline: the head's.
//! A batch of the first `b` starting at `start` is feasible iff
//! `start + l(b) <= head.deadline` (Clipper-style pruning keeps the largest
//! such prefix; the rest stay queued).

use std::collections::VecDeque;

use crate::heap::IndexedMinHeap;
use crate::profile::Profile;
use crate::time::Nanos;
use crate::types::{DispatchDelay, RequestId};

/// Where a batch would start: decided at `now` (so it starts no earlier than
/// `now + delay(b)`), on a backend free at `not_before`, running `profile`.
#[derive(Clone, Copy, Debug)]
pub struct Start<'a> {
    pub now: Nanos,
    pub not_before: Nanos,
    pub profile: &'a Profile,
    pub delay: &'a DispatchDelay,
}

impl Start<'_> {
    /// g for one deadline: the largest batch (at most `cap`) that finishes
    /// by `dl`, or 0.
    fn fits_by(&self, dl: Nanos, cap: u32) -> u32 {
        // Started by the dispatch delay: l(b) + d_data*b <= dl - now - d_ctrl.
        let by_delay = dl
            .checked_sub(self.now + self.delay.ctrl)
            .map_or(0, |budget| self.profile.max_batch_within(budget, self.delay.per_request, cap));
        // Started by the backend: l(b) <= dl - not_before.
        let by_backend =
            dl.checked_sub(self.not_before).map_or(0, |budget| self.profile.max_batch_within(budget, 0, cap));
        by_delay.min(by_backend)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    pub id: RequestId,
    pub deadline: Nanos,
}

#[derive(Clone, Debug)]
pub struct BatchQueue {
    q: VecDeque<Pending>,
    capacity: usize,
}

impl BatchQueue {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0);
        Self { q: VecDeque::new(), capacity }
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    pub fn head(&self) -> Option<Pending> {
        self.q.front().copied()
    }

    /// The deadline of the i-th request in deadline order.
    pub fn deadline(&self, i: usize) -> Nanos {
        self.q[i].deadline
    }

    /// Adds a request in deadline order (ties by id). Arrivals of one model
    /// with one SLO come in order, so this is an append in the common case.
    /// Returns the request back if the queue is full.
    pub fn push(&mut self, p: Pending) -> Result<(), Pending> {
        if self.q.len() >= self.capacity {
            return Err(p);
        }
        let key = |x: &Pending| (x.deadline, x.id);
        if self.q.back().is_none_or(|b| key(b) <= key(&p)) {
            self.q.push_back(p);
        } else {
            let at = self.q.partition_point(|x| key(x) <= key(&p));
            self.q.insert(at, p);
        }
        Ok(())
    }

    /// Removes from the head every request that cannot finish by its deadline
    /// even alone when started at `at`; calls `dropped` for each.
    pub fn drop_unreachable(&mut self, at: &Start<'_>, mut dropped: impl FnMut(RequestId)) {
        let finish_alone = (at.now + at.delay.of(1)).max(at.not_before) + at.profile.latency(1);
        while let Some(h) = self.q.front() {
            if finish_alone <= h.deadline {
                break;
            }
            dropped(h.id);
            crate::fifo::pop_front(&mut self.q);
        }
    }

    /// The largest batch (a prefix, at most `cap`) that, started at `at`,
    /// finishes by the head's deadline. Zero if the queue is empty or not
    /// even the head fits.
    pub fn feasible_batch(&self, at: &Start<'_>, cap: u32) -> u32 {
        match self.q.front() {
            Some(h) => at.fits_by(h.deadline, cap).min(self.q.len() as u32),
            None => 0,
        }
    }

    /// The window of the queue that gives the largest feasible batch:
    /// `(skip, bs)` where skipping the first `skip` requests lets the next
    /// `bs` run together in time, with `bs` as large as any window allows and
    /// `skip` as small as that `bs` allows. `(0, feasible_batch)` whenever
    /// skipping gains nothing.
    ///
    /// With g(i) the largest batch that meets request i's deadline
    /// (non-decreasing in i, as deadlines are) and h(i) = len - i
    /// (decreasing), the batch from window i is min(g(i), h(i)): unimodal,
    /// peaking where g crosses h, so two binary searches find it in
    /// O(log len) profile inversions.
    pub fn best_window(&self, at: &Start<'_>, cap: u32) -> (usize, u32) {
        let len = self.q.len();
        if len == 0 {
            return (0, 0);
        }
        let g = |i: usize| at.fits_by(self.q[i].deadline, cap) as usize;
        let first = |pred: &dyn Fn(usize) -> bool| {
            let (mut lo, mut hi) = (0, len); // first i in lo..hi with pred(i), or len
            while lo < hi {
                let mid = (lo + hi) / 2;
                if pred(mid) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            lo
        };
        let cross = first(&|i| g(i) >= len - i);
        let mut best = if cross < len { (cross, (len - cross) as u32) } else { (0, 0) };
        if cross > 0 {
            let below = g(cross - 1);
            if below as u32 >= best.1 && below > 0 {
                best = (first(&|i| g(i) >= below), below as u32);
            }
        }
        best
    }

    /// Nexus's early drop: the number of head requests to drop so that a
    /// window of `window` requests (fewer if the queue is shorter) starting
    /// after them finishes, started at `at`, by its first request's deadline.
    /// Scans from the head and stops at the first request with that budget.
    pub fn early_drop_count(&self, at: &Start<'_>, window: u32) -> usize {
        let len = self.q.len();
        (0..len)
            .find(|&i| {
                let w = (window as usize).min(len - i) as u32;
                at.fits_by(self.q[i].deadline, w) >= w
            })
            .unwrap_or(len)
    }

    /// Removes the first `n` requests, calling `dropped` for each.
    pub fn drop_front(&mut self, n: usize, mut dropped: impl FnMut(RequestId)) {
        for p in self.q.drain(..n) {
            dropped(p.id);
        }
        crate::fifo::rewind(&mut self.q);
    }

    /// Removes the first `b` requests and appends their ids to `into`.
    pub fn pop_batch(&mut self, b: u32, into: &mut Vec<RequestId>) {
        assert!(b as usize <= self.q.len(), "pop_batch({b}) of {}", self.q.len());
        into.extend(self.q.drain(..b as usize).map(|p| p.id));
        crate::fifo::rewind(&mut self.q);
    }

    /// Removes everything (used when a model loses its last backend).
    pub fn drain_all(&mut self) -> impl Iterator<Item = Pending> + '_ {
        self.q.drain(..)
    }
}

/// One deadline-ordered queue per model, and the models ordered by their
/// head request's deadline: the earliest-deadline-first view that Clockwork
/// and Clipper share.
#[derive(Clone, Debug)]
pub struct EdfQueues {
    queues: Vec<BatchQueue>,
    heads: IndexedMinHeap,
}

impl EdfQueues {
    pub fn new(models: usize, capacity: usize) -> Self {
        Self {
            queues: (0..models).map(|_| BatchQueue::new(capacity)).collect(),
            heads: IndexedMinHeap::with_capacity(models),
        }
    }

    pub fn push(&mut self, model: usize, p: Pending) -> Result<(), Pending> {
        self.with(model, |q| q.push(p))
    }

    /// The model whose head has the earliest deadline, and that deadline.
    pub fn earliest(&self) -> Option<(usize, Nanos)> {
        self.heads.peek()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    /// Empties every queue, calling `dropped` for each request.
    pub fn drain(&mut self, mut dropped: impl FnMut(RequestId)) {
        for m in 0..self.queues.len() {
            self.with(m, |q| {
                let n = q.len();
                q.drop_front(n, &mut dropped)
            });
        }
    }

    /// Works on one model's queue, then re-ranks the model by its new head.
    pub fn with<R>(&mut self, model: usize, f: impl FnOnce(&mut BatchQueue) -> R) -> R {
        let r = f(&mut self.queues[model]);
        match self.queues[model].head() {
            Some(h) => self.heads.set(model, h.deadline),
            None => {
                self.heads.remove(model);
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn p(id: u64, deadline: Nanos) -> Pending {
        Pending { id: RequestId(id), deadline }
    }

    #[test]
    fn stays_sorted_and_bounded() {
        let mut rng = Rng::new(3);
        let mut q = BatchQueue::new(100);
        for i in 0..100 {
            q.push(p(i, rng.below(1000))).unwrap();
        }
        assert!(q.push(p(100, 0)).is_err());
        let mut out = vec![];
        let mut prev = 0;
        while let Some(h) = q.head() {
            assert!(h.deadline >= prev);
            prev = h.deadline;
            q.pop_batch(1, &mut out);
        }
        assert_eq!(out.len(), 100);
    }

    #[test]
    fn feasible_batch_is_the_largest_that_meets_the_head() {
        let prof = Profile::table(vec![10, 12, 14, 16, 18]).unwrap();
        let delay = DispatchDelay { ctrl: 2, per_request: 1 };
        let mut rng = Rng::new(9);
        for _ in 0..2_000 {
            let mut q = BatchQueue::new(16);
            for i in 0..1 + rng.below(6) {
                q.push(p(i, 10 + rng.below(40))).unwrap();
            }
            let now = rng.below(20);
            let not_before = rng.below(30);
            let at = Start { now, not_before, profile: &prof, delay: &delay };
            let b = q.feasible_batch(&at, 5);
            let dl = q.head().unwrap().deadline;
            let finish = |b: u32| (now + delay.of(b)).max(not_before) + prof.latency(b);
            let want = (1..=(q.len() as u32).min(5)).filter(|&b| finish(b) <= dl).max().unwrap_or(0);
            assert_eq!(b, want);
            // best_window against trying every window.
            let mut brute = (0, 0);
            for skip in 0..q.len() {
                let dl = q.q[skip].deadline;
                let n = ((q.len() - skip) as u32).min(5);
                let bs = (1..=n).filter(|&b| finish(b) <= dl).max().unwrap_or(0);
                if bs > brute.1 {
                    brute = (skip, bs);
                }
            }
            assert_eq!(q.best_window(&at, 5), brute);
            // early_drop_count against its definition, scanned from the head.
            for window in 1..=5u32 {
                let skip = q.early_drop_count(&at, window);
                let ok = |i: usize| {
                    let w = (window as usize).min(q.len() - i) as u32;
                    (1..=w).all(|b| finish(b) <= q.q[i].deadline)
                };
                assert!(skip == q.len() || ok(skip));
                assert!((0..skip).all(|i| !ok(i)));
            }
        }
    }
}
