//! Slots of a registered region: their layout, how they are written and
//! checked, and how they are allocated.
//!
//! A slot holds one request's input between two guards, in 8-byte words:
//!
//! ```text
//! [ id | len | input, zero-padded to a word | id ]
//! ```
//!
//! A reader takes the input only if both guards are the id it expected and
//! `len` fits the slot (`parse`). A writer clears both guards, writes the
//! length and the input, then sets the guards (`write`): a READ that
//! overlaps a rewrite sees a cleared or different guard at one end at
//! least. The memory is a slice of `AtomicU64` because a NIC (or the
//! loopback stand-in, on another thread) reads it while the CPU may write:
//! atomics give those races defined behaviour, and the guards give them
//! meaning.
//!
//! Slots are sized in powers of two words (at least `MIN_WORDS`); freed
//! slots go on their size's free list and are reused before the region's
//! unused tail is cut into.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::{RdmaError, Region, Remote};

/// Words of a slot around its input: id and length before, id after.
pub const OVERHEAD_WORDS: usize = 3;
/// The smallest slot (64 bytes).
pub const MIN_WORDS: usize = 8;

/// Words of a slot for an input of `len` bytes.
pub fn words_for(len: usize) -> usize {
    (len.div_ceil(8) + OVERHEAD_WORDS).next_power_of_two().max(MIN_WORDS)
}

/// Writes request `id`'s `input` into the slot of `mem` starting at word
/// `at` (`words_for(input.len())` words long).
pub fn write(mem: &[AtomicU64], at: usize, id: u64, input: &[u8]) {
    let body = input.len().div_ceil(8);
    let tail = at + 2 + body;
    assert!(tail < at + words_for(input.len()) && tail < mem.len(), "the slot holds its input");
    mem[at].store(0, Ordering::Relaxed);
    mem[tail].store(0, Ordering::Relaxed);
    fence(Ordering::Release);
    mem[at + 1].store(input.len() as u64, Ordering::Relaxed);
    for (i, chunk) in input.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        mem[at + 2 + i].store(u64::from_le_bytes(word), Ordering::Relaxed);
    }
    fence(Ordering::Release);
    mem[tail].store(id, Ordering::Relaxed);
    mem[at].store(id, Ordering::Release);
}

/// Copies `words` words of `mem` from word `at`, as a READ does.
pub fn copy(mem: &[AtomicU64], at: usize, words: usize) -> Vec<u64> {
    let out = mem[at..at + words].iter().map(|w| w.load(Ordering::Relaxed)).collect();
    fence(Ordering::Acquire);
    out
}

/// Request `id`'s input out of a slot's words, if they hold it whole.
pub fn parse(words: &[u64], id: u64) -> Result<Vec<u8>, RdmaError> {
    let stale = RdmaError::Stale { expected: id };
    let (&head, &len) = match words {
        [head, len, ..] => (head, len),
        _ => return Err(stale),
    };
    let body = usize::try_from(len).map_err(|_| stale.clone())?.div_ceil(8);
    let Some(&tail) = words.get(2 + body) else { return Err(stale) };
    if head != id || tail != id || id == 0 {
        return Err(stale);
    }
    let mut out: Vec<u8> = words[2..2 + body].iter().flat_map(|w| w.to_le_bytes()).collect();
    out.truncate(len as usize);
    Ok(out)
}

/// Which words of a region are free, by slot size.
#[derive(Debug)]
pub struct Slots {
    words: usize,
    /// The first word never handed out.
    top: usize,
    /// Free slots by size class (`words_for`'s log2).
    free: Vec<Vec<usize>>,
    /// Slots handed out: their first word and size class.
    used: HashMap<usize, u32>,
}

impl Slots {
    pub fn new(words: usize) -> Self {
        Slots { words, top: 0, free: vec![Vec::new(); 64], used: HashMap::new() }
    }

    /// The first word of a free slot for an input of `len` bytes.
    pub fn alloc(&mut self, len: usize) -> Result<usize, RdmaError> {
        let size = words_for(len);
        let class = size.trailing_zeros();
        let at = match self.free[class as usize].pop() {
            Some(at) => at,
            None if self.words - self.top >= size => {
                self.top += size;
                self.top - size
            }
            None => return Err(RdmaError::RegionFull { need: size * 8 }),
        };
        self.used.insert(at, class);
        Ok(at)
    }

    /// Frees the slot at word `at`; a slot not handed out is ignored.
    pub fn free(&mut self, at: usize) {
        if let Some(class) = self.used.remove(&at) {
            self.free[class as usize].push(at);
        }
    }

    /// Slots handed out and not freed.
    pub fn in_use(&self) -> usize {
        self.used.len()
    }
}

/// A registered region cut into slots: what a store does with its memory,
/// whatever registered it (`M`: the words, owned or shared).
pub struct Slab<M> {
    pub mem: M,
    slots: Slots,
    /// The region as peers address it.
    pub region: Region,
}

impl<M: Deref<Target = [AtomicU64]>> Slab<M> {
    pub fn new(mem: M, region: Region) -> Self {
        let slots = Slots::new(mem.len());
        Slab { mem, slots, region }
    }

    /// The slot's first word, if `at` is a slot of this region.
    fn word(&self, at: Remote) -> Option<usize> {
        let off = at.addr.checked_sub(self.region.addr)?;
        let fits = at.rkey == self.region.rkey && off.is_multiple_of(8) && off + u64::from(at.len) <= self.region.len;
        fits.then_some((off / 8) as usize)
    }

    /// Copies request `id`'s `input` into a free slot; where it is.
    pub fn put(&mut self, id: u64, input: &[u8]) -> Result<Remote, RdmaError> {
        let at = self.slots.alloc(input.len())?;
        write(&self.mem, at, id, input);
        let len = (words_for(input.len()) * 8) as u32;
        Ok(Remote { addr: self.region.addr + at as u64 * 8, rkey: self.region.rkey, len })
    }

    /// Request `id`'s input at `at`, read here.
    pub fn get(&self, id: u64, at: Remote) -> Result<Vec<u8>, RdmaError> {
        let word = self.word(at).ok_or(RdmaError::RemoteAccess { addr: at.addr, len: at.len })?;
        parse(&copy(&self.mem, word, at.len as usize / 8), id)
    }

    pub fn release(&mut self, at: Remote) {
        if let Some(word) = self.word(at) {
            self.slots.free(word);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(words: usize) -> Vec<AtomicU64> {
        (0..words).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn a_slot_gives_back_its_input_to_its_id_only() {
        let mem = region(64);
        for len in [0, 1, 7, 8, 9, 100] {
            let input: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(31)).collect();
            write(&mem, 0, 42, &input);
            let words = copy(&mem, 0, words_for(len));
            assert_eq!(parse(&words, 42), Ok(input));
            assert_eq!(parse(&words, 43), Err(RdmaError::Stale { expected: 43 }));
        }
    }

    #[test]
    fn a_torn_or_cleared_slot_is_stale() {
        let mem = region(16);
        write(&mem, 0, 7, &[1; 20]);
        let mut words = copy(&mem, 0, words_for(20));
        words[2 + 3] = 9; // the tail guard of another write
        assert!(parse(&words, 7).is_err());
        words = copy(&mem, 0, words_for(20));
        words[1] = 1 << 40; // a length past the slot
        assert!(parse(&words, 7).is_err());
        assert!(parse(&[], 7).is_err());
        assert!(parse(&[0; 8], 0).is_err(), "a cleared slot matches no request");
    }

    #[test]
    fn slots_are_reused_by_size_and_the_region_fills() {
        let mut s = Slots::new(64);
        let a = s.alloc(100).unwrap(); // 16 words
        let b = s.alloc(10).unwrap(); // 8 words
        assert_eq!((a, b), (0, 16));
        s.free(a);
        assert_eq!(s.alloc(90), Ok(0), "a freed slot of the size is reused");
        assert_eq!(s.alloc(200), Ok(24), "32 words from the unused tail");
        assert_eq!(s.alloc(200), Err(RdmaError::RegionFull { need: 256 }));
        s.free(12345);
        assert_eq!(s.in_use(), 3);
    }
}
