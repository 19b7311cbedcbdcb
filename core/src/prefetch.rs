//! Cache prefetch hints for the per-request records a batch's answer
//! touches. A batch's members were admitted among other models' requests,
//! so their records lie apart — one cache miss each, one after another
//! when each is read as its answer is built. Hinting them all first lets
//! the misses overlap: the answers then find them in cache (the stress
//! harness on one core at 850,000 r/s: the frontend's `ByIds::remove`
//! was 14% of the engine's core, most of it waiting on the record, and
//! 2.5% hinted; `perf/results/engine_profile.txt`).
//!
//! A hint never faults and has no effect on what a program computes, so a
//! wrong or stale address costs only the hint; on other architectures it
//! is a no-op.

/// Cache line size assumed for the hints (x86-64's).
const LINE: usize = 64;

/// Hints the cache lines of `v` into the cache ahead of a read or write.
#[inline]
pub fn prefetch<T: ?Sized>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = (v as *const T).cast::<i8>();
        let at = start as usize;
        let (first, last) = (at & !(LINE - 1), (at + size_of_val(v).max(1) - 1) & !(LINE - 1));
        for line in (first..=last).step_by(LINE) {
            // SAFETY: a prefetch is a hint: it dereferences nothing the
            // program sees and never faults, whatever the address (here
            // the lines `v` lies on); sse, its target feature, is part of
            // x86-64's baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_offset(line as isize - at as isize)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of every size class at every offset within a line: the
    /// lines they span are hinted without arithmetic overflow (the first
    /// line starts before an unaligned value).
    #[test]
    fn hints_any_value_at_any_alignment() {
        let buf = [0u8; 4 * LINE];
        for off in 0..LINE {
            prefetch(&buf[off]);
            prefetch(&buf[off..off + LINE + 1]);
            let at = &buf[off..];
            prefetch(&at);
            prefetch(<&[u8; 2 * LINE]>::try_from(&at[..2 * LINE]).unwrap());
        }
        prefetch(&());
    }
}
