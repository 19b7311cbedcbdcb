//! Buffers a shard reuses instead of allocating them per request. A
//! request's bytes are made by one role and dropped by another: its input
//! is copied out of the client's frame by the frontend and consumed by
//! the backend that runs it; its output is written by the backend and
//! dropped by the frontend's shard once the answer is encoded. Each side
//! gives back what it is done with, and the other takes from here:
//!
//! ```text
//! frontend admits    take bytes   (the input)          backend starts  give the input
//! backend finishes   take bytes, dims (the output)     shard encodes   give the answer's
//! frontend answers   take tensors (the answer's list)                  outputs and list
//! scheduler plans    take ids, times, frontends, apps   backend finishes give the plan's
//! backend fetches    take ids (per frontend)            frontend reads   give them
//! frontend sends     take ids, tensors (the inputs)     backend takes    give both lists
//! backend finishes   take ids, times (per frontend)     frontend answers give them
//! ```
//!
//! The free lists are the calling thread's own (no lock, no atomic): a
//! shard that hosts its backends (serve's default, one core) reuses every
//! buffer, and after warm-up allocates none per request. Across shards a
//! buffer given back on one thread serves the next taken there, so the
//! lists of a shard that only gives fill to `MAX` and the rest are freed,
//! as without a pool. A buffer keeps its capacity, not its contents.
//!
//! What a list keeps is bounded, in buffers and in bytes, and a large
//! buffer is not kept at all (its allocation is the system's mapping,
//! and copying its contents costs more than allocating it): a burst of
//! large inputs leaves at most `MAX_BYTES` behind on a thread.

use std::cell::{Cell, RefCell};

use baton_sched::types::AppId;
use baton_wire::fb;

/// Buffers kept per list at most: more than a shard has in flight between
/// a take and its give (a round's answers, a batch's outputs).
const MAX: usize = 4096;
/// Bytes of capacity kept per list at most.
const MAX_BYTES: usize = 16 << 20;
/// The largest buffer kept, in bytes of capacity.
const MAX_BUFFER: usize = 64 << 10;

pub struct Free<T> {
    list: RefCell<Vec<Vec<T>>>,
    /// Bytes of capacity in `list`.
    kept: Cell<usize>,
}

impl<T> Free<T> {
    const fn new() -> Self {
        Self { list: RefCell::new(Vec::new()), kept: Cell::new(0) }
    }

    fn bytes(v: &Vec<T>) -> usize {
        v.capacity() * size_of::<T>()
    }

    fn take(&self) -> Vec<T> {
        let v = self.list.borrow_mut().pop().unwrap_or_default();
        debug_assert!(v.is_empty(), "a free buffer is empty");
        self.kept.set(self.kept.get() - Self::bytes(&v));
        v
    }

    fn give(&self, mut v: Vec<T>) {
        let bytes = Self::bytes(&v);
        let mut list = self.list.borrow_mut();
        if bytes == 0 || bytes > MAX_BUFFER || list.len() == MAX || self.kept.get() + bytes > MAX_BYTES {
            return;
        }
        v.clear();
        list.push(v);
        self.kept.set(self.kept.get() + bytes);
    }
}

/// An element type with a free list of its own on each thread.
pub trait Pooled: Sized + 'static {
    fn free() -> &'static std::thread::LocalKey<Free<Self>>;
}

macro_rules! pooled {
    ($($t:ty => $list:ident),* $(,)?) => {
        thread_local! {
            $(static $list: Free<$t> = const { Free::new() };)*
        }
        $(impl Pooled for $t {
            fn free() -> &'static std::thread::LocalKey<Free<Self>> {
                &$list
            }
        })*
    };
}

// Bytes (inputs, outputs), dims (shapes), tensor lists; request ids and
// times (`u64`: a batch's lists in its plan, fetches, inputs, results),
// frontends (`u32`), a batch's floats and apps, a backend's inputs by id.
pooled!(
    u8 => BYTES,
    i64 => DIMS,
    fb::Tensor => TENSORS,
    u64 => WORDS,
    u32 => HALVES,
    f32 => FLOATS,
    AppId => APPS,
    (u64, Vec<u8>) => INPUTS,
);

/// An empty buffer, reused where one was given back on this thread.
pub fn take<T: Pooled>() -> Vec<T> {
    T::free().with(Free::take)
}

/// `take` with room for `n`.
pub fn with_room<T: Pooled>(n: usize) -> Vec<T> {
    let mut v = take();
    v.reserve(n);
    v
}

/// Gives back a buffer (its contents are dropped).
pub fn give<T: Pooled>(v: Vec<T>) {
    T::free().with(|f| f.give(v))
}

/// Gives back what an `Option`al list holds.
pub fn give_some<T: Pooled>(v: Option<Vec<T>>) {
    if let Some(v) = v {
        give(v);
    }
}

/// An empty byte buffer, reused where one was given back.
pub fn bytes() -> Vec<u8> {
    take()
}

/// Gives back a byte buffer (its contents are dropped).
pub fn give_bytes(v: Vec<u8>) {
    give(v)
}

/// An empty tensor list, reused where one was given back.
pub fn tensors() -> Vec<fb::Tensor> {
    take()
}

/// A one-dimensional F32 tensor of `xs`, little-endian, in reused buffers.
pub fn f32_tensor(xs: &[f32]) -> fb::Tensor {
    let mut data = bytes();
    // Reserved once, then a four-byte copy per float: a byte-by-byte
    // `extend` checks capacity per byte (measured: 2.7% of the one-core
    // stress harness), and zeroing first then writing in place calls
    // `memset` and `memcpy` for a few floats (1.7%).
    data.reserve(xs.len() * 4);
    for x in xs {
        data.extend_from_slice(&x.to_le_bytes());
    }
    let mut shape = take();
    shape.push(xs.len() as i64);
    fb::Tensor { name: None, dtype: fb::DType::F32, shape: Some(shape), data: Some(data) }
}

/// Gives back an answer's buffers once it is encoded (or read): its
/// outputs' bytes and shapes, and their list (taken out of it).
pub fn give_answer(a: &mut fb::InferResponse) {
    let Some(mut outputs) = a.outputs.take() else { return };
    for t in outputs.drain(..) {
        if let Some(data) = t.data {
            give_bytes(data);
        }
        if let Some(shape) = t.shape {
            give(shape);
        }
    }
    give(outputs);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensors_bytes_are_its_floats_little_endian_even_in_a_reused_buffer() {
        let xs = [1.5f32, -2.0, f32::MAX, 0.1];
        give_bytes(vec![7u8; 3]);
        let t = f32_tensor(&xs);
        let want: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(t.data.as_deref(), Some(&want[..]));
    }

    /// What is given back is taken again, empty, on the same thread; a
    /// buffer never allocated is not kept; another thread has lists of
    /// its own.
    #[test]
    fn buffers_given_back_are_taken_again_empty_on_their_thread() {
        let t = f32_tensor(&[1.0, 2.0]);
        assert_eq!((t.shape.as_deref(), t.data.as_deref().map(<[u8]>::len)), (Some(&[2i64][..]), Some(8)));
        let (data, shape) = (t.data.as_ref().unwrap().as_ptr(), t.shape.as_ref().unwrap().as_ptr());
        let mut outputs = tensors();
        outputs.push(t);
        let list = outputs.as_ptr();
        give_answer(&mut fb::InferResponse { outputs: Some(outputs), ..Default::default() });
        let again = f32_tensor(&[3.0]);
        assert_eq!(again.data.as_ref().unwrap().as_ptr(), data, "the bytes are reused");
        assert_eq!(again.shape.as_ref().unwrap().as_ptr(), shape, "the shape is reused");
        assert_eq!(again.data.as_deref(), Some(&3f32.to_le_bytes()[..]), "nothing of the old contents");
        let l = tensors();
        assert!(l.is_empty() && l.as_ptr() == list, "the list is reused, empty");
        give_bytes(Vec::new());
        assert_eq!(bytes().capacity(), 0, "an unallocated buffer is not kept");
        give_bytes(vec![1; 10]);
        std::thread::spawn(|| assert_eq!(bytes().capacity(), 0, "another thread's lists")).join().unwrap();
        assert!(bytes().capacity() >= 10);
    }

    /// A list keeps at most `MAX` buffers and `MAX_BYTES` of them, and no
    /// buffer larger than `MAX_BUFFER`; what it counts as kept follows
    /// what it holds.
    #[test]
    fn a_list_keeps_a_bounded_number_of_buffers_and_bytes() {
        let held = || BYTES.with(|f| (f.list.borrow().len(), f.kept.get()));
        give_bytes(Vec::with_capacity(MAX_BUFFER + 1));
        assert_eq!(held(), (0, 0), "too large to keep");
        (0..MAX + 10).for_each(|_| give_bytes(Vec::with_capacity(1)));
        assert_eq!(held(), (MAX, MAX), "at most MAX buffers");
        (0..MAX).for_each(|_| drop(bytes()));
        assert_eq!(held(), (0, 0), "taken: no longer counted");
        (0..MAX).for_each(|_| give_bytes(Vec::with_capacity(MAX_BUFFER)));
        assert_eq!(held(), (MAX_BYTES / MAX_BUFFER, MAX_BYTES), "at most MAX_BYTES");
    }
}
