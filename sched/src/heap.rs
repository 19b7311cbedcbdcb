//! An indexed binary min-heap over a fixed key space `0..capacity`.
//!
//! Each key holds at most one priority; `set` inserts or moves it, `remove`
//! takes it out. Ties break on the key, so the order is total and runs are
//! deterministic. The rank shard keeps backend free times and candidate
//! timers in these; the model shard keeps its drop timers in one.
//!
//! Complexity: `peek` O(1); `set`, `remove`, `pop` O(log n); memory is two
//! arrays sized by the key space, allocated once.

const ABSENT: u32 = u32::MAX;

#[derive(Clone, Debug)]
pub struct IndexedMinHeap {
    /// heap[i] = key at heap position i.
    heap: Vec<u32>,
    /// pos[key] = its position in `heap`, or ABSENT.
    pos: Vec<u32>,
    /// prio[key], meaningful only while the key is present.
    prio: Vec<u64>,
}

impl IndexedMinHeap {
    pub fn with_capacity(capacity: usize) -> Self {
        assert!(capacity < ABSENT as usize);
        Self { heap: Vec::with_capacity(capacity), pos: vec![ABSENT; capacity], prio: vec![0; capacity] }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.pos.len()
    }

    pub fn get(&self, key: usize) -> Option<u64> {
        (self.pos[key] != ABSENT).then(|| self.prio[key])
    }

    #[inline]
    pub fn peek(&self) -> Option<(usize, u64)> {
        self.heap.first().map(|&k| (k as usize, self.prio[k as usize]))
    }

    pub fn pop(&mut self) -> Option<(usize, u64)> {
        let top = self.peek()?;
        self.remove(top.0);
        Some(top)
    }

    /// Inserts `key` with `prio`, or moves it there if present.
    pub fn set(&mut self, key: usize, prio: u64) {
        let p = self.pos[key];
        self.prio[key] = prio;
        if p == ABSENT {
            self.heap.push(key as u32);
            let at = self.heap.len() - 1;
            self.pos[key] = at as u32;
            self.sift_up(at);
        } else {
            let at = self.sift_up(p as usize);
            self.sift_down(at);
        }
    }

    pub fn remove(&mut self, key: usize) -> Option<u64> {
        let p = self.pos[key];
        if p == ABSENT {
            return None;
        }
        let p = p as usize;
        let last = self.heap.len() - 1;
        self.swap(p, last);
        self.heap.pop();
        self.pos[key] = ABSENT;
        if p < self.heap.len() {
            let at = self.sift_up(p);
            self.sift_down(at);
        }
        Some(self.prio[key])
    }

    #[inline]
    fn less(&self, a: usize, b: usize) -> bool {
        let (ka, kb) = (self.heap[a] as usize, self.heap[b] as usize);
        (self.prio[ka], ka) < (self.prio[kb], kb)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a] as usize] = a as u32;
        self.pos[self.heap[b] as usize] = b as u32;
    }

    fn sift_up(&mut self, mut at: usize) -> usize {
        while at > 0 {
            let parent = (at - 1) / 2;
            if !self.less(at, parent) {
                break;
            }
            self.swap(at, parent);
            at = parent;
        }
        at
    }

    fn sift_down(&mut self, mut at: usize) {
        loop {
            let (l, r) = (2 * at + 1, 2 * at + 2);
            let mut min = at;
            if l < self.heap.len() && self.less(l, min) {
                min = l;
            }
            if r < self.heap.len() && self.less(r, min) {
                min = r;
            }
            if min == at {
                return;
            }
            self.swap(at, min);
            at = min;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use std::collections::BTreeMap;

    /// Model-based fuzz: random sets, removes and pops against a BTreeMap.
    #[test]
    fn matches_a_btreemap_model() {
        for seed in 0..50 {
            let mut rng = Rng::new(seed);
            let n = 1 + rng.below(40) as usize;
            let mut heap = IndexedMinHeap::with_capacity(n);
            let mut model: BTreeMap<usize, u64> = BTreeMap::new();
            for _ in 0..2_000 {
                let key = rng.below(n as u64) as usize;
                match rng.below(4) {
                    0 | 1 => {
                        let p = rng.below(100);
                        heap.set(key, p);
                        model.insert(key, p);
                    }
                    2 => assert_eq!(heap.remove(key), model.remove(&key)),
                    _ => {
                        let want = model.iter().map(|(&k, &p)| (p, k)).min().map(|(p, k)| (k, p));
                        assert_eq!(heap.pop(), want);
                        if let Some((k, _)) = want {
                            model.remove(&k);
                        }
                    }
                }
                assert_eq!(heap.len(), model.len());
                let want = model.iter().map(|(&k, &p)| (p, k)).min().map(|(p, k)| (k, p));
                assert_eq!(heap.peek(), want, "seed {seed}");
            }
        }
    }
}
