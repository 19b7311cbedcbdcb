//! One armed deadline per target (the scheduler, each backend) on the
//! shard's timer wheel. Targets re-arm after every event that may move
//! their next deadline; a re-arm to the same deadline costs nothing, a new
//! one cancels the old timer. The wheel ticks in microseconds, and a
//! deadline is rounded up to its tick, so a target is never woken early.
//! Events mark their target touched; a re-arm visits the touched targets
//! only, so a round costs what it touched, not the number of targets (a
//! thousand emulated GPUs on one shard).

use baton_sched::time::Nanos;

use super::marked::Marked;
use crate::timer::{TimerId, TimerWheel};

const NANOS_PER_TICK: Nanos = 1_000;

fn tick_of(t: Nanos) -> u64 {
    t.div_ceil(NANOS_PER_TICK)
}

pub struct Alarms {
    wheel: TimerWheel<usize>,
    armed: Vec<Option<(u64, TimerId)>>,
    /// Targets whose deadline may have moved since they were last armed.
    touched: Marked,
}

impl Alarms {
    pub fn new(targets: usize, now: Nanos) -> Self {
        Self { wheel: TimerWheel::new(now / NANOS_PER_TICK), armed: vec![None; targets], touched: Marked::new(targets) }
    }

    /// Target `t`'s deadline may have moved: `rearm` asks it again.
    pub fn touch(&mut self, t: usize) {
        self.touched.mark(t);
    }

    /// Arms every target touched since the last call at `next(t)`, each
    /// once.
    pub fn rearm(&mut self, mut next: impl FnMut(usize) -> Option<Nanos>) {
        while let Some(t) = self.touched.pop() {
            self.arm(t, next(t));
        }
    }

    /// Target `t` next wants to be woken at `at` (or never).
    pub fn arm(&mut self, t: usize, at: Option<Nanos>) {
        let tick = at.map(tick_of);
        if self.armed[t].map(|a| a.0) == tick {
            return;
        }
        if let Some((_, id)) = self.armed[t].take() {
            self.wheel.cancel(id);
        }
        if let Some(tick) = tick {
            // A deadline beyond the wheel's horizon (19 hours) is re-armed
            // by the target's next event long before it matters.
            if let Ok(id) = self.wheel.insert(tick.max(self.wheel.elapsed()), t) {
                self.armed[t] = Some((tick, id));
            }
        }
    }

    /// Targets whose deadline has passed at `now`, each once.
    pub fn due(&mut self, now: Nanos, out: &mut Vec<usize>) {
        let armed = &mut self.armed;
        self.wheel.advance(now / NANOS_PER_TICK, |_, _, t| {
            armed[t] = None;
            out.push(t);
        });
    }

    /// When the next target is due, at the latest (a lower bound on the
    /// wheel's earliest deadline).
    pub fn next(&self) -> Option<Nanos> {
        self.wheel.next_deadline().map(|tick| tick * NANOS_PER_TICK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_fire_once_not_early_and_rearm() {
        let mut a = Alarms::new(3, 0);
        a.arm(0, Some(5_500));
        a.arm(1, Some(2_000));
        a.arm(2, Some(9_000));
        a.arm(2, None);
        let mut due = Vec::new();
        a.due(5_000, &mut due);
        assert_eq!(due, vec![1]);
        due.clear();
        a.due(5_999, &mut due);
        assert!(due.is_empty(), "5.5 µs rounds up to tick 6");
        a.due(6_000, &mut due);
        assert_eq!(due, vec![0]);
        a.arm(1, Some(7_000));
        a.arm(1, Some(8_000));
        due.clear();
        a.due(20_000, &mut due);
        assert_eq!(due, vec![1]);
        assert_eq!(a.next(), None);
    }

    #[test]
    fn a_rearm_asks_each_touched_target_once() {
        let mut a = Alarms::new(4, 0);
        a.touch(2);
        a.touch(0);
        a.touch(2);
        let mut asked = Vec::new();
        a.rearm(|t| {
            asked.push(t);
            Some(1_000 * (t as Nanos + 1))
        });
        assert_eq!(asked, vec![0, 2]);
        asked.clear();
        a.rearm(|t| {
            asked.push(t);
            None
        });
        assert!(asked.is_empty(), "nothing touched since");
        let mut due = Vec::new();
        a.due(3_000, &mut due);
        assert_eq!(due, vec![0, 2]);
    }
}
