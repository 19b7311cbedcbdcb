//! Turning arrivals away at the frontend while the engine runs behind its
//! own plans.
//!
//! Past its capacity an engine that admits everything serves almost
//! nothing in time: every request costs the loop its full path (admission,
//! scheduling, a drop or an answer), the backlog grows, every batch starts
//! and is answered late, and nearly every answer misses its SLO (measured:
//! 99.96–99.99% bad at 1,200,000 r/s on engine-tiny, a quarter past the
//! sustained rate; perf/results/overload.txt). Turned
//! away at the door, a request costs the read of its head (id, model,
//! query: `baton_wire::message::request_head`, asked before the rest is
//! verified) and a short answer, so shedding a fraction `p` of arrivals
//! gives the loop back most of what they would have cost, and the rest
//! are served in time. (Turned away after its decode and checks, as at
//! first, 609,000–691,000 r/s were answered in time at 1,200,000 offered
//! in the runs that did not collapse; turned away by head, 746,000–
//! 795,000.)
//!
//! **Signal.** Each batch's time around its plan as the frontend sees it
//! in `Results`: a = (start − planned start) + (answer − finish), the
//! engine's own lateness, not the deliberate queueing of the plan. One late
//! batch is noise (a host stall of a few milliseconds); a standing backlog
//! makes every batch late. So, as CoDel reads a queue's sojourn time, the
//! signal is the minimum of `a` over an interval of `INTERVAL`: above
//! `TARGET`, the engine was behind for the whole interval.
//!
//! **Response.** Additive increase, additive decrease of `p`: +`UP` after
//! each interval whose minimum exceeded `TARGET`, −`DOWN` after each one
//! that did not (or saw no batch), within [0, `MAX`]. The requests turned
//! away are every 1/p-th arrival (an accumulator: deterministic, and spread
//! evenly over time and clients).
//!
//! **Aged arrivals** (`Aged`, a second, independent door). Where the
//! transport knows how long a request waited before the frontend read it
//! (the in-process clients: how far the loop was behind their schedule),
//! a request that waited more than a share `s` of its SLO is turned away
//! at the door, and so is every arrival after it until one comes within
//! `s / 2` of its SLO. The loop's work per request grows as requests' slack
//! falls: less slack, smaller batches, each batch's fixed work (its plan,
//! start, finish, inputs, results, timers) over fewer requests. So a
//! backlog feeds itself: a stall puts the loop behind, requests reach the
//! frontend with less slack, cost more, and it falls further behind,
//! until it settles where every arrival comes with its deadline nearly
//! gone and is dropped by the scheduler after costing its whole path
//! (measured on one core at 450,000 r/s, well below its capacity: a
//! busy loop sharing the core for 200 or 400 ms left the stress
//! harness's loop 100-140 ms behind for good, 74-77% of a 5 s run bad;
//! perf/results/overload.txt). Turned away by its head, an aged request
//! costs a fraction of its path and the loop catches up through the
//! backlog. Why on to `s / 2`: turning away only the arrivals past `s`,
//! the loop settled at `s` behind, serving requests with `1 - s` of their
//! slack, a cost at which it could not catch up, and stayed so for
//! seconds (at 675,000 r/s after a 200 ms stall, 13% of a 5 s run bad
//! over three seconds); caught up to `s / 2`, it serves requests with
//! more than half their slack again and recovers in the stall's second
//! (1.5-4.8% bad, the stall's own). A wait shorter than `s` of the SLO
//! sheds nothing: a stall the loop absorbs costs no request. `s` is the
//! engine's choice (`EngineConfig::shed_aged_share`, 0.8): the lower, the
//! more slack the requests served while it recovers keep, and the more a
//! stall it would have absorbed costs (perf/results/overload.txt).

use baton_sched::time::Nanos;

/// An interval longer than a host stall (kdamond takes 3–4 ms of a core on
/// this VM, perf/results/generator_stalls.txt), short against a second.
const INTERVAL: Nanos = 10_000_000;
/// Lateness no healthy batch reaches for a whole interval (p99.9 of start
/// lag plus completion is below 0.3 ms up to the sustained rate,
/// perf/results/engine_bench.txt).
const TARGET: Nanos = 500_000;
const UP: f64 = 0.05;
const DOWN: f64 = 0.01;
/// At most this share is turned away: some requests always reach the
/// scheduler, so the signal keeps coming.
const MAX: f64 = 0.5;

#[derive(Clone, Debug, Default)]
pub struct Overload {
    /// The current interval's start (from the first event on), and the
    /// least lateness seen in it (None: no batch yet).
    start: Option<Nanos>,
    least: Option<Nanos>,
    /// The share of arrivals turned away.
    p: f64,
    acc: f64,
}

impl Overload {
    /// A batch's time around its plan, `late`, seen at `now`.
    pub fn observe(&mut self, now: Nanos, late: Nanos) {
        self.roll(now);
        self.least = Some(self.least.map_or(late, |l| l.min(late)));
    }

    /// Whether the arrival at `now` is turned away.
    pub fn turn_away(&mut self, now: Nanos) -> bool {
        self.roll(now);
        if self.p == 0.0 {
            return false;
        }
        self.acc += self.p;
        let away = self.acc >= 1.0;
        if away {
            self.acc -= 1.0;
        }
        away
    }

    /// The share of arrivals now turned away.
    #[cfg(test)]
    fn share(&self) -> f64 {
        self.p
    }

    /// Closes the intervals that ended by `now`: one step per interval, an
    /// interval without a batch counting as one on time.
    fn roll(&mut self, now: Nanos) {
        let start = *self.start.get_or_insert(now);
        let ended = now.saturating_sub(start) / INTERVAL;
        if ended == 0 {
            return;
        }
        let behind = self.least.take().is_some_and(|l| l > TARGET);
        let step = if behind { UP } else { -DOWN };
        let quiet = (ended - 1) as f64 * DOWN;
        self.p = ((self.p + step).clamp(0.0, MAX) - quiet).max(0.0);
        if self.p == 0.0 {
            self.acc = 0.0;
        }
        self.start = Some(start + ended * INTERVAL);
        debug_assert!((0.0..=MAX).contains(&self.p));
    }
}

/// The aged-arrival door: once a request waited more than `share` of its
/// SLO before the frontend read it, arrivals are turned away until one
/// comes within `share / 2` of its SLO (the loop caught up). One state for
/// every arrival, as the loop's lag is one: where SLOs differ, an arrival
/// of a longer SLO within half the share opens the door for all, and one
/// of a shorter SLO past the share closes it again, so between the two
/// the door is as if it turned away only the arrivals past the share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Aged {
    share: f64,
    catching_up: bool,
}

impl Aged {
    /// None for a share of 1 or more (no wait within the SLO sheds), or
    /// one that is not a number above 0.
    pub fn new(share: f64) -> Option<Self> {
        (share > 0.0 && share < 1.0).then_some(Self { share, catching_up: false })
    }

    /// Whether the next arrival, with SLO `slo`, that waited `waited` is
    /// turned away.
    pub fn turns_away(&mut self, waited: Nanos, slo: Nanos) -> bool {
        let (waited, past) = (waited as f64, self.share * slo as f64);
        if waited > past {
            self.catching_up = true;
        } else if waited <= past / 2.0 {
            self.catching_up = false;
        }
        self.catching_up
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arrivals within the share pass; from the first past it, every one is
    /// turned away until one comes within half the share.
    #[test]
    fn aged_arrivals_turn_the_door_until_the_loop_caught_up() {
        let mut a = Aged::new(0.8).expect("a share below 1");
        let slo = 100 * MS;
        let waits = [0, 79, 80, 81, 200, 60, 79, 41, 40, 60, 80, 2, 81, 70];
        let away: Vec<bool> = waits.iter().map(|&w| a.turns_away(w * MS, slo)).collect();
        let expect = [false, false, false, true, true, true, true, true, false, false, false, false, true, true];
        assert_eq!(away, expect, "waits {waits:?} ms of 100");
        for off in [1.0, 1.5, 0.0, -0.5, f64::NAN] {
            assert_eq!(Aged::new(off), None, "{off}");
        }
    }

    const MS: Nanos = 1_000_000;

    /// Feeds one batch a millisecond with lateness `late(t)` from `from` for
    /// `ms`, and one arrival every 10 µs; returns the arrivals turned away.
    fn run(o: &mut Overload, from: Nanos, ms: u64, late: impl Fn(Nanos) -> Nanos) -> u64 {
        let mut away = 0;
        for t in (from..from + ms * MS).step_by(10_000) {
            if t % MS == 0 {
                o.observe(t, late(t));
            }
            away += u64::from(o.turn_away(t));
        }
        away
    }

    #[test]
    fn an_engine_on_time_turns_nothing_away() {
        let mut o = Overload::default();
        assert_eq!(run(&mut o, 0, 1_000, |_| 80_000), 0);
        assert_eq!(o.share(), 0.0);
    }

    /// A stall makes a few batches very late; the rest of the interval's
    /// batches are on time, so the minimum stays under the target.
    #[test]
    fn a_stall_shorter_than_an_interval_turns_nothing_away() {
        let mut o = Overload::default();
        let stalls = |t: Nanos| if t % (500 * MS) < 4 * MS { 4 * MS } else { 50_000 };
        assert_eq!(run(&mut o, 0, 2_000, stalls), 0);
    }

    /// Behind for good: the share grows by `UP` an interval up to `MAX`,
    /// the arrivals turned away follow it, and once on time again it falls
    /// by `DOWN` an interval to nothing.
    #[test]
    fn a_standing_backlog_turns_a_growing_share_away_and_it_recovers() {
        let mut o = Overload::default();
        let away = run(&mut o, 0, 35, |_| 2 * MS);
        assert!((o.share() - 3.0 * UP).abs() < 1e-9, "three intervals ended late: {}", o.share());
        // Arrivals in the 2nd, 3rd and 4th intervals at 0.05, 0.10, 0.15.
        let expect = (1_000.0 * (UP + 2.0 * UP) + 500.0 * 3.0 * UP) as u64;
        assert!(away.abs_diff(expect) <= 2, "{away} turned away, about {expect} expected");
        run(&mut o, 35 * MS, 1_000, |_| 2 * MS);
        assert_eq!(o.share(), MAX, "capped");
        run(&mut o, 1_035 * MS, 10, |_| 100_000);
        assert!((o.share() - (MAX - DOWN)).abs() < 1e-9);
        run(&mut o, 1_045 * MS, 1_000, |_| 100_000);
        assert_eq!(o.share(), 0.0, "back to nothing");
    }

    /// Intervals that saw no batch (nothing admitted, or everything turned
    /// away) count as on time: a quiet engine does not keep shedding.
    #[test]
    fn quiet_intervals_count_as_on_time() {
        let mut o = Overload::default();
        run(&mut o, 0, 200, |_| 2 * MS);
        let before = o.share();
        assert!(before > 10.0 * DOWN);
        // The last interval with batches ends at 200 ms (behind: the share
        // stays at its cap); the ten after it saw none.
        assert_eq!(before, MAX);
        o.turn_away(200 * MS + 10 * INTERVAL);
        assert!((o.share() - (before - 10.0 * DOWN)).abs() < 1e-9, "{} after {before}", o.share());
    }
}
