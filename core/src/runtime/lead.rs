//! Batches start on time. A shard that sleeps until its next timer wakes
//! late by the OS's wake-up latency (tens to hundreds of microseconds on a
//! busy VM), and a batch planned to finish just before its earliest
//! deadline starts that much late. So a shard does not sleep into the last
//! `lead` before a due timer: it yields round after round instead (serving
//! its sockets and rings) and fires the timer the moment it is due.
//!
//! `lead` follows the measured oversleep: after each sleep the shard
//! reports how much later than asked it woke; the lead jumps to a larger
//! sample at once and decays by 1/DECAY of the gap per smaller one, kept
//! within [MIN_LEAD, MAX_LEAD]. Spinning costs CPU only in the last
//! `lead` before work is due, never while idle.
//!
//! A shard that goes on (busy, or within the lead) turns through its
//! reactor (`park.rs`: sockets are polled on a turn, and the tasks they
//! wake run) once `TURN_EVERY` has passed since its last turn or park —
//! but not within the lead of a due timer, which a turn could overshoot,
//! unless `MAX_STALE` has passed: sockets wait at most that long.
//!
//! A front shard that hosts scheduler-side shards (`Hosting`) takes what
//! they just sent it at once, in another round before its round's end
//! (`again`): a backend's fetch of its batch's inputs and the frontend's
//! reply then cross in rounds of one loop, not in turns of the reactor
//! between them (measured on glet-game at 16,300 r/s, three runs each:
//! start lag p50 18–20 -> 12–14 µs, completion p50 13–14 -> 7–9 µs). At
//! most `QUICK_ROUNDS` go in a row, so sockets still get their turns.

use std::time::Duration;

use baton_sched::time::Nanos;

use super::park::Rhythm;
use crate::clock::Clock;

/// What one round of a shard's pump did: whether it worked, and when (on
/// the cluster clock) its next timer is due.
#[derive(Clone, Copy, Debug)]
pub struct Round {
    pub busy: bool,
    pub next: Option<Nanos>,
}

const MIN_LEAD: Duration = Duration::from_micros(10);
const MAX_LEAD: Duration = Duration::from_micros(250);
const DECAY: u32 = 64;
/// How often a shard that goes on turns through its reactor.
const TURN_EVERY: Nanos = 20_000;
/// The longest a shard goes on without a turn.
const MAX_STALE: Nanos = 50_000;
/// How often a shard whose sockets are all on socket rings
/// (`baton_net::tcp::uring`: a frontend's clients, a role process's
/// peers) turns: only its listeners and a role process's reconnecting
/// tasks wait for a turn (a new connection waits at most this long).
pub const RARE_TURN: Nanos = 1_000_000;
/// Rounds a front shard goes on in a row, without its round's end,
/// while its hosted shards keep sending it messages.
const QUICK_ROUNDS: u32 = 4;

#[derive(Clone, Copy, Debug)]
pub struct Lead {
    lead: Duration,
    /// When the shard last turned through its reactor or parked.
    turned: Nanos,
    /// Rounds gone on in a row without a round's end (`again`).
    quick: u32,
    /// How often it turns, and the longest it goes on without a turn.
    every: Nanos,
    stale: Nanos,
}

impl Default for Lead {
    fn default() -> Self {
        Self { lead: MIN_LEAD, turned: 0, quick: 0, every: TURN_EVERY, stale: MAX_STALE }
    }
}

impl Lead {
    /// A shard whose sockets need a turn only every `every` (at most).
    pub fn turning_every(every: Nanos) -> Self {
        Self { every, stale: every, ..Self::default() }
    }

    /// Whether a timer `until` away is too close to sleep for.
    pub fn imminent(&self, until: Option<Duration>) -> bool {
        until.is_some_and(|d| d <= self.lead)
    }

    /// Whether a front shard whose hosted shards left it messages
    /// (`pending`) runs another round at once instead of ending this one
    /// (see the top of the file).
    pub fn again(&mut self, pending: bool) -> bool {
        let again = pending && self.quick < QUICK_ROUNDS;
        self.quick = if again { self.quick + 1 } else { 0 };
        again
    }

    /// Ends a pump's `round` at `now` (read by the caller as the round
    /// ended: its last read of the clock, not a new one): yields while busy
    /// or within the lead of the next timer, else parks until the lead
    /// before it (`Rhythm`), and learns from how long the sleep lasted.
    /// How long it parked, if it did.
    pub async fn end_round(
        &mut self,
        rhythm: &mut Rhythm,
        clock: &Clock,
        now: Nanos,
        round: Round,
        has_work: impl FnOnce() -> bool,
    ) -> Option<Duration> {
        let next = round.next.map(|at| Duration::from_nanos(at.saturating_sub(now)));
        let asked = next.map(|d| d.saturating_sub(self.lead));
        let busy = round.busy || self.imminent(next);
        let turn = self.turns(now, next);
        let parked = rhythm.end_round(busy, turn, now, clock, asked, has_work).await;
        if turn || parked.is_some() {
            self.turned = now;
        }
        if let Some((asked, parked)) = asked.zip(parked).filter(|&(a, p)| p >= a) {
            self.slept(asked, parked);
        }
        parked
    }

    /// Whether a shard that goes on at `now`, its next timer `next` away,
    /// turns through its reactor (see the top of the file).
    fn turns(&self, now: Nanos, next: Option<Duration>) -> bool {
        let since = now.saturating_sub(self.turned);
        since >= self.stale || (since >= self.every && !self.imminent(next))
    }

    /// A sleep asked for `asked` and lasted `slept`.
    pub fn slept(&mut self, asked: Duration, slept: Duration) {
        let over = slept.saturating_sub(asked).min(MAX_LEAD);
        self.lead = if over >= self.lead { over } else { self.lead - (self.lead - over) / DECAY };
        self.lead = self.lead.max(MIN_LEAD);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lead_jumps_to_an_oversleep_and_decays_slowly() {
        let mut l = Lead::default();
        assert_eq!(l.lead, MIN_LEAD);
        l.slept(Duration::from_micros(50), Duration::from_micros(130));
        assert_eq!(l.lead, Duration::from_micros(80));
        assert!(l.imminent(Some(Duration::from_micros(80))) && !l.imminent(Some(Duration::from_micros(81))));
        l.slept(Duration::from_micros(50), Duration::from_micros(50));
        assert_eq!(l.lead, Duration::from_micros(80) - Duration::from_micros(80) / DECAY);
        l.slept(Duration::ZERO, Duration::from_secs(1));
        assert_eq!(l.lead, MAX_LEAD, "bounded");
        assert!(!l.imminent(None));
    }

    #[test]
    fn a_shard_turns_every_so_often_but_not_within_the_lead_until_it_is_stale() {
        let l = Lead { lead: Duration::from_micros(100), turned: 1_000_000, ..Lead::default() };
        let far = Some(Duration::from_millis(1));
        let close = Some(Duration::from_micros(100));
        assert!(!l.turns(1_000_000 + TURN_EVERY - 1, far), "not yet");
        assert!(l.turns(1_000_000 + TURN_EVERY, far) && l.turns(1_000_000 + TURN_EVERY, None));
        assert!(!l.turns(1_000_000 + TURN_EVERY, close), "a timer within the lead is spun for");
        assert!(l.turns(1_000_000 + MAX_STALE, close), "but not for longer than MAX_STALE");
    }

    #[test]
    fn a_front_shard_goes_on_while_messages_wait_but_not_forever() {
        let mut l = Lead::default();
        assert!(!l.again(false), "nothing waits: the round ends");
        for _ in 0..QUICK_ROUNDS {
            assert!(l.again(true));
        }
        assert!(!l.again(true), "QUICK_ROUNDS in a row, then the round ends");
        assert!(l.again(true), "and the count starts over");
    }
}
