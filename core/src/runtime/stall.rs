//! A scenario's stalls (`[[stalls]]`, `baton_sched::scenario::Stall`) in
//! the engine: each scheduler-side shard stops from a stall's start to its
//! end, on the engine's clock from the shard's start, as a host that
//! pauses would stop it. Its thread sleeps: arrivals and completions wait
//! in the rings and the timers fall due, all handled once it wakes, as the
//! simulator handles what falls in a stall at its end. The GPUs' batches
//! under way run on (an emulated GPU's finish is a timer: its answer
//! waits). A shard pinned to a front shard's core runs in that shard's
//! loop, so there the whole loop stops, clients' reads included.
//!
//! This is for checking the engine against the simulator on a file that
//! has stalls (a policy that collapses after one collapses in both); a
//! parked shard wakes for a stall's start as for a timer.

use std::collections::VecDeque;
use std::time::Duration;

use baton_sched::scenario::Stall;
use baton_sched::time::Nanos;

#[derive(Debug, Default)]
pub struct Stalls {
    /// Those still to come, on the engine's clock, in time order.
    left: VecDeque<Stall>,
}

impl Stalls {
    /// The scenario's `stalls`, for a shard started at `start`.
    pub fn new(stalls: &[Stall], start: Nanos) -> Self {
        Self { left: stalls.iter().map(|s| Stall { from: start + s.from, to: start + s.to }).collect() }
    }

    /// When the next stall starts.
    pub fn next(&self) -> Option<Nanos> {
        self.left.front().map(|s| s.from)
    }

    /// At `now`: if a stall has started, sleeps to its end (nothing if it
    /// is over already: the shard slept through it) and says so.
    pub fn hold(&mut self, now: Nanos) -> bool {
        let Some(s) = self.left.front().copied().filter(|s| s.from <= now) else { return false };
        self.left.pop_front();
        if now < s.to {
            std::thread::sleep(Duration::from_nanos(s.to - now));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_held_once_from_its_start_on_the_shards_clock() {
        let mut s = Stalls::new(&[Stall { from: 10, to: 20 }, Stall { from: 30, to: 2_000_030 }], 1_000);
        assert_eq!(s.next(), Some(1_010));
        assert!(!s.hold(1_009), "not yet");
        assert!(s.hold(1_025), "over already: nothing to sleep");
        assert_eq!(s.next(), Some(1_030));
        let t = std::time::Instant::now();
        assert!(s.hold(1_030));
        assert!(t.elapsed() >= Duration::from_millis(2), "slept to the end");
        assert_eq!((s.next(), s.hold(u64::MAX)), (None, false));
    }
}
