//! Deques used as FIFOs, kept where the cache has them.
//!
//! `VecDeque::pop_front` moves the ring's start on even when the deque
//! empties, so a queue that fills and drains again and again walks its
//! whole capacity: once a burst has grown it, each push lands on a line
//! last touched a lap ago, long out of the core's caches. `clear` on an
//! empty deque puts the start back at the first slot (std does; the test
//! below checks it), so a queue rewound whenever it empties keeps reusing
//! its first lines. The engine's queues between a policy's parts and its
//! shards empty every turn of their loop.

use std::collections::VecDeque;

/// Puts an empty deque's start back at its first slot (a no-op otherwise).
#[inline]
pub fn rewind<T>(q: &mut VecDeque<T>) {
    if q.is_empty() {
        q.clear();
    }
}

/// `q.pop_front()`, rewinding `q` when it empties.
#[inline]
pub fn pop_front<T>(q: &mut VecDeque<T>) -> Option<T> {
    let v = q.pop_front();
    rewind(q);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(q: &mut VecDeque<u64>) -> *const u64 {
        q.make_contiguous().as_ptr()
    }

    #[test]
    fn a_queue_that_empties_starts_again_at_its_first_slot() {
        let mut q = VecDeque::with_capacity(64);
        q.push_back(0);
        let first = start(&mut q);
        for i in 0..40 {
            q.push_back(i);
            q.pop_front();
        }
        assert_ne!(start(&mut q), first, "std's pop_front walks on");
        q.clear();
        assert!(pop_front(&mut q).is_none());
        for i in 0..40 {
            q.push_back(i);
            assert_eq!(pop_front(&mut q), Some(i));
            q.push_back(i);
            assert_eq!(start(&mut q), first, "rewound when it emptied");
            assert_eq!(pop_front(&mut q), Some(i));
        }
        q.extend([1, 2]);
        assert_eq!(pop_front(&mut q), Some(1));
        rewind(&mut q);
        assert_eq!(q, [2], "a deque with something in it is left as it is");
    }
}
