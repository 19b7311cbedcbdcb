//! What became of each request of a run, for setting the simulator beside
//! the engine request by request (`baton demo --gap`). The load generator
//! sends the simulator's arrivals in order (`Arrivals`), so the i-th
//! arrival of both runs of one file, rate, seed and length is the same
//! request; a fate is kept by that ordinal. Query roots take an ordinal
//! and keep no fate (a query's client sees one answer for many stage
//! requests; the stages spawned are not arrivals).
//!
//! Kept only when asked (`run_fates`): a run of millions of requests
//! otherwise carries none of it.

use crate::time::Nanos;
use crate::types::{DropReason, ModelId};

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Its batch was planned at `exec_at`, started at `start` (later where
    /// the backend was still busy) and ended at `finish` (its answer left
    /// then, or at the end of a stall that held it).
    Ran {
        exec_at: Nanos,
        start: Nanos,
        finish: Nanos,
        batch: u32,
    },
    Dropped(DropReason),
    /// Still held when the run ended (a scheduler bug the report counts).
    Unanswered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fate {
    pub model: ModelId,
    pub arrival: Nanos,
    pub deadline: Nanos,
    pub end: End,
}

impl Fate {
    /// Answered ok by its deadline.
    pub fn ok(&self) -> bool {
        matches!(self.end, End::Ran { finish, .. } if finish <= self.deadline)
    }
}

/// The fates of a run's requests as it goes: by request id, with each
/// model arrival's ordinal.
#[derive(Debug, Default)]
pub(super) struct Book {
    /// By request id: its arrival's ordinal (None for a query stage's) and fate.
    requests: Vec<(Option<usize>, Fate)>,
}

impl Book {
    /// Request `id` (the next) is new: a model's arrival (its ordinal) or
    /// a query's stage (None).
    pub fn new_request(&mut self, id: u64, fate: Fate, ordinal: Option<usize>) {
        assert_eq!(id as usize, self.requests.len(), "request ids count up from 0");
        self.requests.push((ordinal, fate));
    }

    pub fn end(&mut self, id: u64, end: End) {
        self.requests[id as usize].1.end = end;
    }

    /// By arrival ordinal, of `arrivals` in all: each model request's
    /// fate, None for query roots.
    pub fn by_arrival(self, arrivals: usize) -> Vec<Option<Fate>> {
        let mut out = vec![None; arrivals];
        for (ordinal, fate) in self.requests {
            if let Some(i) = ordinal {
                out[i] = Some(fate);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fates_are_kept_by_arrival_and_query_roots_keep_none() {
        let fate = |arrival| Fate { model: ModelId(0), arrival, deadline: arrival + 10, end: End::Unanswered };
        let mut book = Book::default();
        book.new_request(0, fate(1), Some(0));
        // Arrival 1 is a query's root; request 1 its first stage.
        book.new_request(1, fate(2), None);
        book.new_request(2, fate(3), Some(2));
        book.end(2, End::Ran { exec_at: 4, start: 5, finish: 13, batch: 2 });
        book.end(0, End::Dropped(DropReason::Shed));
        let by = book.by_arrival(3);
        assert_eq!(by.len(), 3);
        assert_eq!(by[0].map(|f| f.end), Some(End::Dropped(DropReason::Shed)));
        assert_eq!(by[1], None);
        assert!(by[2].expect("a model arrival").ok());
        assert!(!Fate { end: End::Ran { exec_at: 4, start: 5, finish: 14, batch: 2 }, ..fate(3) }.ok());
    }
}
