//! The priority queue behind Orloj: the maximum over a changing set of lines
//! `score_i(E) = a_i*E + b_i`, queried at a parameter `E` that only grows
//! (Orloj's `E(t) = e^{mu (t - t0)}` grows with time).
//!
//! Picking the line highest at `E` is an extreme-point query on the upper
//! convex hull of the points `(a_i, b_i)` in direction `(E, 1)`. Because `E`
//! only grows, a *kinetic tournament* answers it: a complete binary tree over
//! slots where every internal node holds the winner of its two children at
//! the current `E` and the certificate `E*` at which the loser overtakes it
//! (the loser has the steeper slope: `E* = (b_w - b_l)/(a_l - a_w)`).
//! Advancing `E` replays only the certificates that expire, found through
//! each node's subtree minimum.
//!
//! Complexity (n lines, tree over a power-of-two number of slots):
//! - `max` after `advance`: O(1);
//! - `insert`, `remove`, `set`: O(log n) (one leaf-to-root path);
//! - `advance`: O(k log n) for k expiring certificates; a kinetic tournament
//!   over lines sees O(n log n) certificate failures in total while `E`
//!   sweeps, so amortized O(log² n) per line — the same bound as
//!   Overmars–van Leeuwen's update, with a constant-time query.
//! - `rescale`: O(n), for rebasing `E` before it overflows.
//!
//! Memory: five words per slot, grown by doubling; slots are reused.

const NONE: u32 = u32::MAX;

/// Total order on finite scores for the best-first walk.
#[derive(Clone, Copy, Debug, PartialEq)]
struct OrdF64(f64);

impl Eq for OrdF64 {}

impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Line {
    a: f64,
    b: f64,
}

/// A handle to a line in the hull.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(pub u32);

#[derive(Clone, Debug)]
pub struct KineticHull {
    lines: Vec<Line>,
    present: Vec<bool>,
    free: Vec<u32>,
    /// Leaves start at `cap`; node 1 is the root.
    cap: usize,
    win: Vec<u32>,
    fail: Vec<f64>,
    min_fail: Vec<f64>,
    e: f64,
    len: usize,
}

impl Default for KineticHull {
    fn default() -> Self {
        Self::with_capacity(16)
    }
}

impl KineticHull {
    pub fn with_capacity(n: usize) -> Self {
        let cap = n.max(2).next_power_of_two();
        let mut h = Self {
            lines: vec![Line { a: 0.0, b: 0.0 }; cap],
            present: vec![false; cap],
            free: (0..cap as u32).rev().collect(),
            cap,
            win: vec![NONE; 2 * cap],
            fail: vec![f64::INFINITY; 2 * cap],
            min_fail: vec![f64::INFINITY; 2 * cap],
            e: 0.0,
            len: 0,
        };
        h.rebuild();
        h
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The current query parameter.
    pub fn e(&self) -> f64 {
        self.e
    }

    pub fn line(&self, s: Slot) -> (f64, f64) {
        assert!(self.present[s.0 as usize], "slot {s:?} is empty");
        let l = self.lines[s.0 as usize];
        (l.a, l.b)
    }

    pub fn insert(&mut self, a: f64, b: f64) -> Slot {
        assert!(a.is_finite() && b.is_finite(), "line ({a}, {b}) is not finite");
        if self.free.is_empty() {
            self.grow();
        }
        let s = self.free.pop().expect("grow leaves free slots");
        self.lines[s as usize] = Line { a, b };
        self.present[s as usize] = true;
        self.len += 1;
        self.update_path(s as usize);
        Slot(s)
    }

    pub fn set(&mut self, s: Slot, a: f64, b: f64) {
        assert!(a.is_finite() && b.is_finite(), "line ({a}, {b}) is not finite");
        assert!(self.present[s.0 as usize], "slot {s:?} is empty");
        self.lines[s.0 as usize] = Line { a, b };
        self.update_path(s.0 as usize);
    }

    pub fn remove(&mut self, s: Slot) {
        let i = s.0 as usize;
        assert!(self.present[i], "slot {s:?} removed twice");
        self.present[i] = false;
        self.free.push(s.0);
        self.len -= 1;
        self.update_path(i);
    }

    /// Moves the query parameter forward to `e` (never backward).
    pub fn advance(&mut self, e: f64) {
        assert!(e >= self.e, "E moves backward: {} -> {e}", self.e);
        self.e = e;
        if self.min_fail[1] <= e {
            self.fix(1);
        }
    }

    /// The highest line at the current `E` and its value.
    pub fn max(&self) -> Option<(Slot, f64)> {
        let w = self.win[1];
        (w != NONE).then(|| (Slot(w), self.value(w)))
    }

    /// The `k` highest lines at the current `E`, best first, appended to
    /// `out`. Every node's winner is the best of its subtree, so a best-first
    /// walk from the root finds them in O(k log k) node visits.
    pub fn top(&self, k: usize, out: &mut Vec<(Slot, f64)>) {
        let mut frontier: std::collections::BinaryHeap<(OrdF64, std::cmp::Reverse<usize>)> =
            std::collections::BinaryHeap::new();
        if self.win[1] != NONE {
            frontier.push((OrdF64(self.value(self.win[1])), std::cmp::Reverse(1)));
        }
        let mut taken = 0;
        while let Some((v, std::cmp::Reverse(i))) = frontier.pop() {
            if taken == k {
                return;
            }
            if i >= self.cap {
                out.push((Slot(self.win[i]), v.0));
                taken += 1;
                continue;
            }
            for c in [2 * i, 2 * i + 1] {
                if self.win[c] != NONE {
                    frontier.push((OrdF64(self.value(self.win[c])), std::cmp::Reverse(c)));
                }
            }
        }
    }

    /// Rebasing: every `a` is multiplied by `factor` and `E` divided by it,
    /// which leaves every score `a*E + b` unchanged. Callers that recompute
    /// their lines against a new origin use `set_all` instead.
    pub fn rescale(&mut self, factor: f64) {
        assert!(factor > 0.0 && factor.is_finite());
        for l in &mut self.lines {
            l.a *= factor;
        }
        self.e /= factor;
        self.rebuild();
    }

    /// Replaces `E` and lets `f` rewrite every line, then rebuilds: O(n).
    pub fn reset_with(&mut self, e: f64, mut f: impl FnMut(Slot) -> (f64, f64)) {
        assert!(e >= 0.0 && e.is_finite());
        self.e = e;
        for i in 0..self.cap {
            if self.present[i] {
                let (a, b) = f(Slot(i as u32));
                assert!(a.is_finite() && b.is_finite());
                self.lines[i] = Line { a, b };
            }
        }
        self.rebuild();
    }

    #[inline]
    fn value(&self, s: u32) -> f64 {
        let l = self.lines[s as usize];
        l.a * self.e + l.b
    }

    fn grow(&mut self) {
        let old = self.cap;
        let cap = old * 2;
        self.lines.resize(cap, Line { a: 0.0, b: 0.0 });
        self.present.resize(cap, false);
        self.free.extend((old as u32..cap as u32).rev());
        self.cap = cap;
        self.win = vec![NONE; 2 * cap];
        self.fail = vec![f64::INFINITY; 2 * cap];
        self.min_fail = vec![f64::INFINITY; 2 * cap];
        self.rebuild();
    }

    fn rebuild(&mut self) {
        for i in (1..2 * self.cap).rev() {
            self.compute(i);
        }
    }

    fn update_path(&mut self, slot: usize) {
        let mut i = self.cap + slot;
        while i >= 1 {
            self.compute(i);
            i /= 2;
        }
    }

    fn fix(&mut self, i: usize) {
        if i < self.cap {
            let (l, r) = (2 * i, 2 * i + 1);
            if self.min_fail[l] <= self.e {
                self.fix(l);
            }
            if self.min_fail[r] <= self.e {
                self.fix(r);
            }
        }
        self.compute(i);
    }

    /// Recomputes node `i` from its children at the current `E`.
    fn compute(&mut self, i: usize) {
        if i >= self.cap {
            let s = i - self.cap;
            self.win[i] = if self.present[s] { s as u32 } else { NONE };
            self.fail[i] = f64::INFINITY;
            self.min_fail[i] = f64::INFINITY;
            return;
        }
        let (l, r) = (2 * i, 2 * i + 1);
        let (wl, wr) = (self.win[l], self.win[r]);
        let (w, fail) = match (wl, wr) {
            (NONE, x) | (x, NONE) => (x, f64::INFINITY),
            _ => {
                let (ll, lr) = (self.lines[wl as usize], self.lines[wr as usize]);
                let (vl, vr) = (self.value(wl), self.value(wr));
                // Ties go to the steeper line: it stays ahead as E grows.
                let left_wins = (vl, ll.a, std::cmp::Reverse(wl)) > (vr, lr.a, std::cmp::Reverse(wr));
                let (w, lw, lx) = if left_wins { (wl, ll, lr) } else { (wr, lr, ll) };
                let fail = if lx.a > lw.a {
                    // Strictly later than now, even where rounding says otherwise.
                    ((lw.b - lx.b) / (lx.a - lw.a)).max(self.e.next_up())
                } else {
                    f64::INFINITY
                };
                (w, fail)
            }
        };
        self.win[i] = w;
        self.fail[i] = fail;
        self.min_fail[i] = fail.min(self.min_fail[l]).min(self.min_fail[r]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use std::collections::HashMap;

    fn brute(model: &HashMap<Slot, (f64, f64)>, e: f64) -> Option<f64> {
        model.values().map(|&(a, b)| a * e + b).fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
    }

    /// Model-based fuzz: random inserts, moves, removes, advances and
    /// rescales against a brute-force maximum.
    #[test]
    fn matches_a_brute_force_maximum() {
        for seed in 0..120 {
            let mut rng = Rng::new(seed);
            let mut h = KineticHull::with_capacity(1 + rng.below(8) as usize);
            let mut model: HashMap<Slot, (f64, f64)> = HashMap::new();
            let mut e = 0.0;
            for step in 0..1_500 {
                let line = |rng: &mut Rng| {
                    // Few distinct slopes and intercepts make ties common.
                    let a = (rng.below(9) as f64 - 4.0) * if rng.below(2) == 0 { 1.0 } else { 0.37 };
                    let b = rng.below(21) as f64 - 10.0;
                    (a, b)
                };
                match rng.below(10) {
                    0..=3 => {
                        let (a, b) = line(&mut rng);
                        model.insert(h.insert(a, b), (a, b));
                    }
                    4 | 5 if !model.is_empty() => {
                        let mut keys: Vec<Slot> = model.keys().copied().collect();
                        keys.sort();
                        let s = keys[rng.below(keys.len() as u64) as usize];
                        h.remove(s);
                        model.remove(&s);
                    }
                    6 if !model.is_empty() => {
                        let mut keys: Vec<Slot> = model.keys().copied().collect();
                        keys.sort();
                        let s = keys[rng.below(keys.len() as u64) as usize];
                        let (a, b) = line(&mut rng);
                        h.set(s, a, b);
                        model.insert(s, (a, b));
                    }
                    7 if rng.below(20) == 0 => {
                        let k = 0.5 + rng.unit() * 4.0;
                        h.rescale(k);
                        for v in model.values_mut() {
                            v.0 *= k;
                        }
                        e = h.e();
                    }
                    _ => {
                        e += rng.unit() * 3.0;
                        h.advance(e);
                    }
                }
                assert_eq!(h.len(), model.len());
                let want = brute(&model, h.e());
                let got = h.max().map(|(s, v)| {
                    let (a, b) = model[&s];
                    assert!((a * h.e() + b - v).abs() <= 1e-9 * v.abs().max(1.0));
                    v
                });
                // The top k against sorting every value.
                let k = rng.below(6) as usize;
                let mut top = Vec::new();
                h.top(k, &mut top);
                let mut all: Vec<f64> = model.values().map(|&(a, b)| a * h.e() + b).collect();
                all.sort_by(|x, y| y.total_cmp(x));
                assert_eq!(top.len(), k.min(all.len()));
                for (i, &(s, v)) in top.iter().enumerate() {
                    let (a, b) = model[&s];
                    assert!((a * h.e() + b - v).abs() <= 1e-9 * v.abs().max(1.0));
                    assert!((v - all[i]).abs() <= 1e-9 * v.abs().max(1.0), "seed {seed} step {step}: top {i}");
                }
                match (want, got) {
                    (None, None) => {}
                    (Some(w), Some(g)) => {
                        assert!((w - g).abs() <= 1e-9 * w.abs().max(1.0), "seed {seed} step {step}: {g} vs {w}")
                    }
                    _ => panic!("seed {seed} step {step}: {got:?} vs {want:?}"),
                }
            }
        }
    }
}
