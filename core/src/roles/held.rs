//! A frontend's held requests, by cluster id. A frontend hands out ids in
//! sequence (`frontend.rs`), and requests leave in about the order they
//! came, each within its SLO (or its grace after it). So the map is a
//! deque indexed from the oldest id still held: a lookup is a subtraction
//! and an index, requests that came together (a batch's members, answered
//! together) sit together in memory, and the ids answered leave holes that
//! the front sheds as the oldest leave. A hash map would scatter them, one
//! cache miss per answer at a few hundred thousand held.
//!
//! Its length is the span from the oldest held id to the newest: at most
//! the arrival rate times the longest a request is held (its deadline plus
//! the frontend's grace, after which it is answered `Lost`). Ids wrap below
//! the frontend's bits (`mask`); the bits above are the frontend's own,
//! and an id with other ones is never held here.
//!
//! The front sheds at most `SHED` holes per removal. A request held long
//! at the front (to its grace) leaves as many holes behind it as requests
//! came meanwhile — hundreds of thousands at a second's worth — and shed
//! all at once when it leaves they stalled the frontend's shard for
//! milliseconds (measured: 2 ms of one removal at 600,000 r/s). A few per
//! removal, they go as fast as they came, and the total work is the same.

use std::collections::VecDeque;

/// Holes the front sheds per removal at most (module doc).
const SHED: usize = 64;

pub struct ByIds<T> {
    /// The id of `slots[0]`.
    first: u64,
    /// The sequence bits of an id.
    mask: u64,
    slots: VecDeque<Option<T>>,
    len: usize,
}

impl<T> ByIds<T> {
    pub fn new(mask: u64) -> Self {
        Self { first: 0, mask, slots: VecDeque::new(), len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `first`'s frontend bits with sequence number `first + i`.
    fn id_at(&self, i: usize) -> u64 {
        (self.first & !self.mask) | (self.first.wrapping_add(i as u64) & self.mask)
    }

    fn index(&self, id: u64) -> Option<usize> {
        let i = id.wrapping_sub(self.first) & self.mask;
        (id & !self.mask == self.first & !self.mask && i < self.slots.len() as u64).then_some(i as usize)
    }

    /// Holds `v` under `id`: the id after the newest held (any id when
    /// none is). Ids come in sequence; anything else is a bug.
    pub fn insert(&mut self, id: u64, v: T) {
        // Holes left unshed are kept when the id follows them.
        if self.len == 0 && (self.slots.is_empty() || id != self.id_at(self.slots.len())) {
            self.slots.clear();
            self.first = id;
        }
        assert_eq!(id, self.id_at(self.slots.len()), "ids are held in sequence");
        self.slots.push_back(Some(v));
        self.len += 1;
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let i = self.index(id)?;
        self.slots[i].as_mut()
    }

    /// Hints `id`'s slot into the cache ahead of a `get_mut` or `remove`
    /// (`crate::prefetch`): a batch's members lie apart, each a miss.
    pub fn prefetch(&self, id: u64) {
        if let Some(i) = self.index(id) {
            crate::prefetch::prefetch(&self.slots[i]);
        }
    }

    pub fn remove(&mut self, id: u64) -> Option<T> {
        let i = self.index(id)?;
        let v = self.slots[i].take()?;
        self.len -= 1;
        for _ in 0..SHED {
            if !self.slots.front().is_some_and(Option::is_none) {
                break;
            }
            self.slots.pop_front();
            self.first = self.id_at(1);
        }
        Some(v)
    }

    /// Every held request with its id, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, v)| Some((self.id_at(i), v.as_ref()?)))
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK: u64 = (1 << 48) - 1;

    #[test]
    fn ids_leave_in_any_order_and_the_front_is_shed() {
        let mut m = ByIds::new(MASK);
        let base = 3 << 48 | 10;
        for i in 0..5 {
            m.insert(base + i, i);
        }
        assert_eq!(m.remove(base + 2), Some(2));
        assert_eq!(m.remove(base + 2), None, "once");
        assert_eq!(m.remove(base), Some(0));
        assert_eq!((m.len(), m.slots.len()), (3, 4), "the front's hole is shed, the middle's kept");
        assert_eq!(m.iter().map(|(id, &v)| (id - base, v)).collect::<Vec<_>>(), vec![(1, 1), (3, 3), (4, 4)]);
        *m.get_mut(base + 3).unwrap() = 30;
        assert_eq!(m.get_mut(base + 5), None, "not yet held");
        assert_eq!(m.get_mut(base + 3 - (1 << 48)), None, "another frontend's id");
        m.insert(base + 5, 5);
        for i in [1, 3, 4, 5] {
            assert!(m.remove(base + i).is_some());
        }
        assert!(m.is_empty() && m.slots.is_empty());
        m.insert(7, 7);
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(7, &7)], "empty: any id starts it");
    }

    /// A request held long at the front leaves many holes behind it: they
    /// are shed a few per removal, and lookups, insertions and the count
    /// stay right meanwhile.
    #[test]
    fn a_long_held_front_is_shed_a_few_holes_per_removal() {
        let mut m = ByIds::new(MASK);
        let n = 10 * SHED as u64;
        for i in 0..n {
            m.insert(i, i);
        }
        for i in 1..n - 1 {
            assert_eq!(m.remove(i), Some(i));
        }
        assert_eq!(m.slots.len() as u64, n, "the long-held front keeps every hole behind it");
        assert_eq!(m.remove(0), Some(0));
        assert_eq!(m.slots.len() as u64, n - SHED as u64, "one removal sheds SHED holes, its own first");
        assert_eq!((m.len(), m.get_mut(n - 1).copied()), (1, Some(n - 1)));
        m.insert(n, n);
        assert_eq!(m.remove(n - 1), Some(n - 1));
        assert_eq!(m.remove(n - 1), None, "once");
        assert_eq!(m.iter().map(|(id, &v)| (id, v)).collect::<Vec<_>>(), vec![(n, n)]);
        // The last one out leaves holes unshed; the next id follows them.
        assert_eq!(m.remove(n), Some(n));
        assert!(m.is_empty() && !m.slots.is_empty());
        m.insert(n + 1, 0);
        assert_eq!(m.get_mut(n + 1), Some(&mut 0));
        // An id that does not follow them starts afresh.
        assert_eq!(m.remove(n + 1), Some(0));
        m.insert(5, 5);
        assert_eq!((m.slots.len(), m.iter().collect::<Vec<_>>()), (1, vec![(5, &5)]));
    }

    #[test]
    fn ids_wrap_below_the_frontend_bits() {
        let mut m = ByIds::new(MASK);
        let top = 1 << 48 | MASK;
        m.insert(top, 'a');
        m.insert(1 << 48, 'b');
        assert_eq!(m.iter().map(|(id, _)| id).collect::<Vec<_>>(), vec![top, 1 << 48]);
        assert_eq!(m.remove(top), Some('a'));
        assert_eq!(m.get_mut(1 << 48), Some(&mut 'b'));
        assert_eq!(m.get_mut(2 << 48), None);
    }

    #[test]
    #[should_panic(expected = "in sequence")]
    fn an_id_out_of_sequence_is_a_bug() {
        let mut m = ByIds::new(MASK);
        m.insert(1, ());
        m.insert(3, ());
    }
}
