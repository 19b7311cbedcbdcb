//! Schedulers side by side, driven as one: a partitioned cluster's
//! sub-cluster schedulers (`partitioned.rs`, `repartitioned.rs`). Each is
//! woken when its own deadline is due, and their decisions are handed out
//! round robin — the scheduler after the one that gave the last decision
//! is asked first — so that no sub-cluster's decisions wait behind
//! another's. Routing requests, completions and failures to one of them is
//! the caller's, as is renaming what their decisions name.

use crate::time::Nanos;
use crate::types::{Output, Scheduler};

/// Sub-cluster schedulers, asked round robin (module doc).
pub struct SideBySide {
    scheds: Vec<Box<dyn Scheduler>>,
    /// The scheduler asked first for the next decision.
    next: usize,
}

impl SideBySide {
    /// `scheds` in order: the first is asked first.
    pub fn new(scheds: Vec<Box<dyn Scheduler>>) -> Self {
        Self { scheds, next: 0 }
    }

    /// How many schedulers there are.
    pub fn count(&self) -> usize {
        self.scheds.len()
    }

    /// Scheduler `i`.
    pub fn sched(&mut self, i: usize) -> &mut dyn Scheduler {
        self.scheds[i].as_mut()
    }

    /// Wakes every scheduler whose deadline is due at `now`.
    pub fn on_timeout(&mut self, now: Nanos) {
        for s in &mut self.scheds {
            if s.next_timeout().is_some_and(|t| t <= now) {
                s.on_timeout(now);
            }
        }
    }

    /// The earliest of the schedulers' deadlines.
    pub fn next_timeout(&self) -> Option<Nanos> {
        self.scheds.iter().filter_map(|s| s.next_timeout()).min()
    }

    /// The next decision, round robin, with the index of the scheduler
    /// that made it.
    pub fn poll_output(&mut self) -> Option<(usize, Output)> {
        let n = self.scheds.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if let Some(out) = self.scheds[i].poll_output() {
                self.next = (i + 1) % n;
                return Some((i, out));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::types::{BackendId, BatchDone, DropReason, Request, RequestId};

    /// Which scheduler was woken when.
    type Woken = Rc<RefCell<Vec<(usize, Nanos)>>>;

    /// Scheduler `me`: hands out the drops it was given, due at `due`.
    struct Fake {
        me: usize,
        out: Vec<Output>,
        due: Option<Nanos>,
        woken: Woken,
    }

    impl Scheduler for Fake {
        fn on_request(&mut self, _: Nanos, _: Request) {}
        fn on_batch_done(&mut self, _: Nanos, _: &BatchDone<'_>) {}
        fn on_backend_failed(&mut self, _: Nanos, _: BackendId) {}
        fn on_backend_joined(&mut self, _: Nanos, _: BackendId) {}
        fn on_timeout(&mut self, now: Nanos) {
            self.woken.borrow_mut().push((self.me, now));
        }
        fn next_timeout(&self) -> Option<Nanos> {
            self.due
        }
        fn poll_output(&mut self) -> Option<Output> {
            (!self.out.is_empty()).then(|| self.out.remove(0))
        }
    }

    #[test]
    fn decisions_come_round_robin_and_only_due_schedulers_wake() {
        let woken = Woken::default();
        let fake = |me: usize, ids: &[u64], due: Option<Nanos>| -> Box<dyn Scheduler> {
            let drop = |&id: &u64| Output::Dropped { request: RequestId(id), reason: DropReason::QueueFull };
            Box::new(Fake { me, out: ids.iter().map(drop).collect(), due, woken: woken.clone() })
        };
        let mut s =
            SideBySide::new(vec![fake(0, &[1, 2, 3], Some(10)), fake(1, &[4], None), fake(2, &[5, 6], Some(5))]);
        let mut order = Vec::new();
        while let Some((i, Output::Dropped { request, .. })) = s.poll_output() {
            order.push((i, request.0));
        }
        assert_eq!(order, [(0, 1), (1, 4), (2, 5), (0, 2), (2, 6), (0, 3)]);
        assert_eq!(s.next_timeout(), Some(5));
        s.on_timeout(7);
        s.on_timeout(10);
        assert_eq!(*woken.borrow(), [(2, 7), (0, 10), (2, 10)]);
        assert_eq!(s.count(), 3);
    }
}
