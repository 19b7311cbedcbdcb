//! Batch latency profiles l(b): how long a batch of `b` requests of one model
//! runs on one backend. See `../shared/design/symphony.md` ("Profiles").

use crate::time::{ms_to_nanos, Nanos};

/// l(b) for b = 1..=max_batch. Both shapes answer in O(1) except
/// `max_batch_within`, which is O(1) for linear and O(log B) for tables.
#[derive(Clone, Debug, PartialEq)]
pub enum Profile {
    /// `l(b) = alpha*b + beta`, capped at `max_batch`.
    Linear { alpha: Nanos, beta: Nanos, max_batch: u32 },
    /// Measured `l(b)`; `table[b-1]` is l(b). Non-decreasing in b.
    Table(Vec<Nanos>),
}

/// Why a profile cannot be built.
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileError {
    Empty,
    ZeroMaxBatch,
    ZeroLatency,
    NotMonotone { batch: u32 },
}

impl std::fmt::Display for ProfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty => write!(f, "latency table is empty"),
            Self::ZeroMaxBatch => write!(f, "max_batch must be at least 1"),
            Self::ZeroLatency => write!(f, "l(1) must be positive"),
            Self::NotMonotone { batch } => write!(f, "latency table decreases at batch {batch}"),
        }
    }
}

impl Profile {
    pub fn linear_ms(alpha_ms: f64, beta_ms: f64, max_batch: u32) -> Result<Self, ProfileError> {
        if max_batch == 0 {
            return Err(ProfileError::ZeroMaxBatch);
        }
        let p = Profile::Linear { alpha: ms_to_nanos(alpha_ms), beta: ms_to_nanos(beta_ms), max_batch };
        if p.latency(1) == 0 {
            return Err(ProfileError::ZeroLatency);
        }
        Ok(p)
    }

    pub fn table(latencies: Vec<Nanos>) -> Result<Self, ProfileError> {
        if latencies.is_empty() {
            return Err(ProfileError::Empty);
        }
        if latencies[0] == 0 {
            return Err(ProfileError::ZeroLatency);
        }
        if let Some(i) = latencies.windows(2).position(|w| w[1] < w[0]) {
            return Err(ProfileError::NotMonotone { batch: i as u32 + 2 });
        }
        Ok(Profile::Table(latencies))
    }

    pub fn max_batch(&self) -> u32 {
        match self {
            Profile::Linear { max_batch, .. } => *max_batch,
            Profile::Table(t) => t.len() as u32,
        }
    }

    /// l(b). `b` must be in 1..=max_batch.
    #[inline]
    pub fn latency(&self, b: u32) -> Nanos {
        assert!(b >= 1 && b <= self.max_batch(), "latency({b}) outside 1..={}", self.max_batch());
        match self {
            Profile::Linear { alpha, beta, .. } => alpha * b as Nanos + beta,
            Profile::Table(t) => t[b as usize - 1],
        }
    }

    /// The fixed cost of a batch (beta), used by the beta*lambda rule. For a
    /// table it is the intercept `2*l(1) - l(2)` clamped to `[0, l(1)]`.
    pub fn fixed_cost(&self) -> Nanos {
        match self {
            Profile::Linear { beta, .. } => *beta,
            Profile::Table(t) if t.len() >= 2 => (2 * t[0]).saturating_sub(t[1]).min(t[0]),
            Profile::Table(t) => t[0],
        }
    }

    /// The largest `b <= cap` with `l(b) + extra_per_request*b <= budget`,
    /// or 0 if not even one request fits. `extra_per_request` carries the
    /// per-request dispatch delay (d_data) into the same inversion.
    #[inline]
    pub fn max_batch_within(&self, budget: Nanos, extra_per_request: Nanos, cap: u32) -> u32 {
        let cap = cap.min(self.max_batch());
        match self {
            Profile::Linear { alpha, beta, .. } => {
                let slope = alpha + extra_per_request;
                if budget < beta + slope {
                    return 0;
                }
                if slope == 0 {
                    return cap;
                }
                (((budget - beta) / slope).min(cap as Nanos)) as u32
            }
            Profile::Table(t) => {
                // Both terms grow with b, so the predicate is monotone.
                let fits = |b: usize| t[b - 1] + extra_per_request * b as Nanos <= budget;
                let (mut lo, mut hi) = (0usize, cap as usize); // fits(lo) or lo == 0; answer in lo..=hi
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if fits(mid) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                lo as u32
            }
        }
    }

    /// Throughput of back-to-back batches of `b`, in requests per second.
    pub fn throughput_rps(&self, b: u32) -> f64 {
        b as f64 * 1e9 / self.latency(b) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_latency_and_inverse_agree() {
        let p = Profile::linear_ms(1.053, 5.072, 64).unwrap();
        assert_eq!(p.latency(16), 21_920_000);
        for budget in [0, 6_124_999, 6_125_000, 21_920_000, 25_000_000, u64::MAX / 2] {
            let b = p.max_batch_within(budget, 0, 64);
            if b > 0 {
                assert!(p.latency(b) <= budget);
            }
            if b < 64 {
                assert!(p.latency(b + 1) > budget, "budget {budget} b {b}");
            }
        }
    }

    #[test]
    fn table_inverse_matches_scan() {
        let p = Profile::table(vec![5, 7, 7, 9, 20]).unwrap();
        for budget in 0..25 {
            let want = (1..=5).filter(|&b| p.latency(b) <= budget).max().unwrap_or(0);
            assert_eq!(p.max_batch_within(budget, 0, 5), want);
            assert_eq!(p.max_batch_within(budget, 0, 3), want.min(3));
            let with_extra = (1..=5).filter(|&b| p.latency(b) + 2 * b as u64 <= budget).max().unwrap_or(0);
            assert_eq!(p.max_batch_within(budget, 2, 5), with_extra);
        }
        assert_eq!(p.fixed_cost(), 3);
    }

    #[test]
    fn bad_tables_are_rejected() {
        assert_eq!(Profile::table(vec![]), Err(ProfileError::Empty));
        assert_eq!(Profile::table(vec![3, 2]), Err(ProfileError::NotMonotone { batch: 2 }));
        assert_eq!(Profile::linear_ms(1.0, 1.0, 0), Err(ProfileError::ZeroMaxBatch));
    }
}
