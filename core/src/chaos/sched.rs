//! The scheduler process of a chaos run: the policy whole (`SchedulerRole`)
//! or Symphony split over model shards and its rank shard, as `baton serve
//! --model-shards K` runs it (`runtime::part`), the parts' own messages
//! carried at once within the process as the rings between its shards do.
//!
//! The split keeps no ledger of batches in flight: when a backend fails,
//! its rank shard stops granting it, and the requests of its batches are
//! answered by their frontends (`Lost`, when the backend goes or past the
//! grace) rather than dropped here.

use baton_sched::time::Nanos;
use baton_wire::Message;

use crate::roles::scheduler::SchedulerRole;
use crate::roles::{Addr, Envelope};
use crate::runtime::link::ShardMsg;
use crate::runtime::part::{pump, Caused, Part};

pub enum Scheduler {
    Whole(Box<SchedulerRole>),
    Split(Vec<Box<dyn Part>>),
}

impl Scheduler {
    /// Handles a message for the scheduler; false if no part took it.
    pub fn on_message(&mut self, now: Nanos, msg: Message, out: &mut Vec<Envelope>) -> bool {
        match self {
            Scheduler::Whole(s) => {
                s.on_message(now, msg, out);
                true
            }
            Scheduler::Split(parts) => {
                pump(parts, now, ShardMsg::env(Envelope { to: Addr::Scheduler(0), msg }), out) == 0
            }
        }
    }

    pub fn on_timeout(&mut self, now: Nanos, out: &mut Vec<Envelope>) {
        match self {
            Scheduler::Whole(s) => s.on_timeout(now, out),
            Scheduler::Split(parts) => {
                let mut caused = Caused::default();
                for p in parts.iter_mut().filter(|p| p.next_timeout().is_some_and(|t| t <= now)) {
                    p.on_timeout(now, &mut caused);
                }
                out.append(&mut caused.env);
                let own =
                    caused.rank.into_iter().map(ShardMsg::Rank).chain(caused.model.into_iter().map(ShardMsg::Model));
                for m in own {
                    let untaken = pump(parts, now, m, out);
                    debug_assert_eq!(untaken, 0, "Symphony's own messages always have a part");
                }
            }
        }
    }

    pub fn next_timeout(&self) -> Option<Nanos> {
        match self {
            Scheduler::Whole(s) => s.next_timeout(),
            Scheduler::Split(parts) => parts.iter().filter_map(|p| p.next_timeout()).min(),
        }
    }

    /// Batches it planned that have not come back (none kept by the split).
    pub fn inflight(&self) -> usize {
        match self {
            Scheduler::Whole(s) => s.inflight(),
            Scheduler::Split(_) => 0,
        }
    }
}
