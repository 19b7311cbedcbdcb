//! The atomics shim: std normally, loom's model-checked types under
//! `--cfg loom` (as tokio's `src/loom/` does), so the lock-free code is the
//! same text in both.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// An `UnsafeCell` with loom's closure API on both builds.
#[derive(Debug)]
pub(crate) struct Cell<T>(#[cfg(loom)] loom::cell::UnsafeCell<T>, #[cfg(not(loom))] std::cell::UnsafeCell<T>);

impl<T> Cell<T> {
    pub(crate) fn new(v: T) -> Self {
        #[cfg(loom)]
        return Cell(loom::cell::UnsafeCell::new(v));
        #[cfg(not(loom))]
        Cell(std::cell::UnsafeCell::new(v))
    }

    /// Runs `f` on a raw pointer to the value; the caller upholds exclusive
    /// access for the duration (loom checks that it did).
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        f(self.0.get())
    }
}
