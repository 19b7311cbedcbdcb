//! A hierarchical timer wheel on integer ticks (tokio's
//! `runtime/time/wheel`, reduced to what a shard needs): insert, cancel,
//! advance, and a lower bound on the next deadline to sleep until.
//!
//! `LEVELS` levels of 64 slots; a slot at level `l` spans `64^l` ticks. A
//! timer due at `when` lives at the level of the highest 6-bit group in
//! which `when` differs from `elapsed` (the wheel's current tick), in the
//! slot that group names. So every timer at level `l` is due after the
//! current level-`l` slot and within the current level-`l+1` slot, and
//! every level-0 timer is due before any higher-level one: the earliest
//! deadline is found in the lowest level with an occupied slot, with one
//! bitmap scan. Advancing to a higher-level slot re-inserts its timers one
//! or more levels lower ("cascading"); level-0 timers fire.
//!
//! Timers in a later top-level window than `elapsed` (the levels cover
//! `64^LEVELS` = 2^36 ticks, 19 hours of 1 µs ticks) wait in an overflow
//! list, re-filed when the wheel enters the next window. A timer more than
//! `HORIZON` ticks ahead is refused with a typed error (so one window
//! crossing always suffices), never fired early.
//!
//! Costs: insert O(1), cancel O(slot length), advance O(timers fired or
//! cascaded + levels).

const LEVELS: usize = 6;
const SLOTS: usize = 64;
const BITS: u32 = 6;
/// Ticks a timer may be ahead of the wheel.
pub const HORIZON: u64 = 1 << (BITS as u64 * LEVELS as u64);

/// A handle to cancel a timer with; stale handles are harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId {
    index: u32,
    generation: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimerError {
    /// The deadline is more than `HORIZON` ticks ahead of the wheel.
    BeyondHorizon { when: u64, elapsed: u64 },
}

impl std::fmt::Display for TimerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimerError::BeyondHorizon { when, elapsed } => {
                write!(f, "timer at tick {when} is more than {HORIZON} ticks after the wheel's {elapsed}")
            }
        }
    }
}

impl std::error::Error for TimerError {}

struct Entry<T> {
    when: u64,
    level: usize,
    slot: usize,
    value: T,
}

struct Cell<T> {
    generation: u32,
    entry: Option<Entry<T>>,
}

pub struct TimerWheel<T> {
    elapsed: u64,
    /// Slab of timers; `free` lists empty cells.
    cells: Vec<Cell<T>>,
    free: Vec<u32>,
    /// Per level and slot, the cells of the timers there.
    slots: Vec<[Vec<u32>; SLOTS]>,
    occupied: [u64; LEVELS],
    /// Timers beyond the current top-level window (level `LEVELS`).
    overflow: Vec<u32>,
    len: usize,
}

fn level_for(elapsed: u64, when: u64) -> usize {
    let masked = (elapsed ^ when) | (SLOTS as u64 - 1);
    ((63 - masked.leading_zeros()) / BITS) as usize
}

fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (BITS as usize * level)) & (SLOTS as u64 - 1)) as usize
}

impl<T> TimerWheel<T> {
    pub fn new(now: u64) -> Self {
        TimerWheel {
            elapsed: now,
            cells: Vec::new(),
            free: Vec::new(),
            slots: (0..LEVELS).map(|_| std::array::from_fn(|_| Vec::new())).collect(),
            occupied: [0; LEVELS],
            overflow: Vec::new(),
            len: 0,
        }
    }

    /// The wheel's current tick (the last `advance`).
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `value` at tick `when`; a tick already passed fires on the
    /// next `advance`.
    pub fn insert(&mut self, when: u64, value: T) -> Result<TimerId, TimerError> {
        if when.saturating_sub(self.elapsed) >= HORIZON {
            return Err(TimerError::BeyondHorizon { when, elapsed: self.elapsed });
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.cells.push(Cell { generation: 0, entry: None });
                u32::try_from(self.cells.len() - 1).expect("fewer than 2^32 timers")
            }
        };
        let entry = Entry { when, level: 0, slot: 0, value };
        self.cells[index as usize].entry = Some(entry);
        self.place(index);
        self.len += 1;
        Ok(TimerId { index, generation: self.cells[index as usize].generation })
    }

    /// Files cell `index` under the level and slot its deadline gives.
    fn place(&mut self, index: u32) {
        let e = self.cells[index as usize].entry.as_mut().expect("placed cells hold a timer");
        let when = e.when.max(self.elapsed);
        e.level = level_for(self.elapsed, when).min(LEVELS);
        if e.level == LEVELS {
            debug_assert!(when - self.elapsed < HORIZON, "insert checked the horizon");
            e.slot = 0;
            self.overflow.push(index);
            return;
        }
        e.slot = slot_for(when, e.level);
        self.slots[e.level][e.slot].push(index);
        self.occupied[e.level] |= 1 << e.slot;
    }

    fn list(&mut self, level: usize, slot: usize) -> &mut Vec<u32> {
        if level == LEVELS {
            &mut self.overflow
        } else {
            &mut self.slots[level][slot]
        }
    }

    /// Removes a pending timer and returns its value; None if it already
    /// fired or was cancelled.
    pub fn cancel(&mut self, id: TimerId) -> Option<T> {
        let cell = self.cells.get_mut(id.index as usize)?;
        if cell.generation != id.generation {
            return None;
        }
        let e = cell.entry.take()?;
        cell.generation = cell.generation.wrapping_add(1);
        self.free.push(id.index);
        let list = self.list(e.level, e.slot);
        let at = list.iter().position(|&i| i == id.index).expect("a pending timer is in its slot");
        list.swap_remove(at);
        if list.is_empty() && e.level < LEVELS {
            self.occupied[e.level] &= !(1 << e.slot);
        }
        self.len -= 1;
        Some(e.value)
    }

    /// The earliest (level, slot) with timers and the tick that slot
    /// starts at: a lower bound on the next deadline.
    fn next_expiration(&self) -> Option<(usize, usize, u64)> {
        let in_window = (0..LEVELS).find_map(|level| {
            let bits = self.occupied[level];
            if bits == 0 {
                return None;
            }
            let now_slot = slot_for(self.elapsed, level);
            // Occupied slots at or after the current one, by position.
            let slot = (bits.rotate_right(now_slot as u32).trailing_zeros() as usize + now_slot) % SLOTS;
            let span = 1u64 << (BITS as usize * level);
            let window = self.elapsed & !(span * SLOTS as u64 - 1);
            let start = (window + slot as u64 * span).max(self.elapsed);
            debug_assert!(slot >= now_slot, "timers at a level are never behind its current slot");
            Some((level, slot, start))
        });
        // Overflow timers are all due after every timer in the levels, no
        // earlier than the next top-level window.
        in_window.or_else(|| (!self.overflow.is_empty()).then(|| (LEVELS, 0, (self.elapsed | (HORIZON - 1)) + 1)))
    }

    /// A tick at or before the earliest pending deadline (exact when that
    /// timer sits at level 0): when to wake the shard next.
    pub fn next_deadline(&self) -> Option<u64> {
        self.next_expiration().map(|(.., at)| at)
    }

    /// Moves the wheel to `now` and fires every timer due at or before it,
    /// in deadline order, through `fire(id, when, value)`.
    pub fn advance(&mut self, now: u64, mut fire: impl FnMut(TimerId, u64, T)) {
        assert!(now >= self.elapsed, "the wheel does not go back in time ({now} < {})", self.elapsed);
        while let Some((level, slot, start)) = self.next_expiration() {
            if start > now {
                break;
            }
            self.elapsed = start;
            if level < LEVELS {
                self.occupied[level] &= !(1 << slot);
            }
            let mut due = std::mem::take(self.list(level, slot));
            if level == 0 {
                // All due now: the slot's tick, or earlier for timers that
                // were already past at insert; fire those first.
                due.sort_by_key(|&i| self.cells[i as usize].entry.as_ref().map(|e| e.when));
                for &index in &due {
                    let cell = &mut self.cells[index as usize];
                    let e = cell.entry.take().expect("slot lists hold pending timers");
                    let id = TimerId { index, generation: cell.generation };
                    cell.generation = cell.generation.wrapping_add(1);
                    self.free.push(index);
                    self.len -= 1;
                    fire(id, e.when, e.value);
                }
            } else {
                for &index in &due {
                    self.place(index);
                }
            }
            due.clear();
            // Give the allocation back to the (now empty) slot for reuse.
            let list = self.list(level, slot);
            if list.is_empty() {
                *list = due;
            }
        }
        self.elapsed = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Model-based fuzz: inserts (near, far, past), cancels of live and
    /// stale ids, and advances by small and large steps, against a
    /// BTreeMap keyed by (deadline, insertion number).
    #[test]
    fn fires_exactly_what_a_sorted_map_says() {
        let mut rng = baton_sched::rng::Rng::new(0x853c_49e6_748f_ea9b);
        let mut next = move || rng.next_u64();
        for start in [0u64, 63, 4095, (1 << 30) - 7] {
            let mut wheel = TimerWheel::new(start);
            let mut model: BTreeMap<(u64, u64), TimerId> = BTreeMap::new();
            let mut ids: Vec<(TimerId, u64, u64)> = Vec::new();
            let mut now = start;
            for n in 0..30_000u64 {
                match next() % 10 {
                    0..=4 => {
                        let ahead = match next() % 4 {
                            0 => next() % 64,
                            1 => next() % 5000,
                            2 => next() % (1 << 24),
                            _ => next() % HORIZON,
                        };
                        let when = (now + ahead).saturating_sub(if next() % 20 == 0 { 3 } else { 0 });
                        let id = wheel.insert(when, n).unwrap();
                        model.insert((when, n), id);
                        ids.push((id, when, n));
                    }
                    5 | 6 if !ids.is_empty() => {
                        let (id, when, n) = ids.swap_remove(next() as usize % ids.len());
                        let live = model.remove(&(when, n)).is_some();
                        assert_eq!(wheel.cancel(id), live.then_some(n));
                        assert_eq!(wheel.cancel(id), None, "a second cancel is a no-op");
                    }
                    _ => {
                        if let (Some(lb), Some((&(first, _), _))) = (wheel.next_deadline(), model.first_key_value()) {
                            assert!(lb <= first.max(now), "next_deadline {lb} after the earliest timer {first}");
                        }
                        assert_eq!(wheel.next_deadline().is_some(), !model.is_empty());
                        now += match next() % 3 {
                            0 => next() % 70,
                            1 => next() % 100_000,
                            _ => next() % (1 << 26),
                        };
                        let mut fired = Vec::new();
                        wheel.advance(now, |_, when, v| fired.push((when, v)));
                        let rest = model.split_off(&(now + 1, 0));
                        let want: Vec<(u64, u64)> = model.keys().copied().collect();
                        model = rest;
                        let mut sorted = fired.clone();
                        sorted.sort();
                        assert_eq!(sorted, want, "fired set at {now}");
                        assert!(fired.windows(2).all(|w| w[0].0 <= w[1].0), "deadline order");
                    }
                }
                assert_eq!(wheel.len(), model.len());
            }
        }
    }

    #[test]
    fn beyond_the_horizon_is_a_typed_error() {
        let mut w = TimerWheel::new(10);
        assert!(w.insert(10 + HORIZON - 1, ()).is_ok());
        assert_eq!(w.insert(10 + HORIZON, ()), Err(TimerError::BeyondHorizon { when: 10 + HORIZON, elapsed: 10 }));
    }
}
