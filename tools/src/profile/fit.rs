//! The pure statistics of the CPU profile: a dynamic model's batching
//! factor kappa, and each app's solo-time distribution.

/// One measured batch of a dynamic model: `b` members padded to the
/// longest, which alone takes `solo_ms`; the batch took `batch_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchPoint {
    pub b: usize,
    pub solo_ms: f64,
    pub batch_ms: f64,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KappaFit {
    /// The least-squares kappa, unclamped (a single CPU core may batch
    /// worse than running members one by one: kappa above 1).
    pub kappa: f64,
    /// Points with b >= 2 behind it.
    pub points: usize,
    /// Root mean square of the residuals `y - kappa x`.
    pub rms: f64,
}

/// Fits `g(b, x) = x (1 + kappa (b - 1))` to batches: with
/// `y = T(b, Lmax) / solo(Lmax) - 1` and `x = b - 1`, the least-squares
/// line through the origin `kappa = Σ x y / Σ x²`. Points of b = 1 (x = 0)
/// and non-positive or non-finite times say nothing and are skipped. None
/// without a usable point of b >= 2.
pub fn fit_kappa(points: &[BatchPoint]) -> Option<KappaFit> {
    let xy: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.b >= 2 && p.solo_ms > 0.0 && p.batch_ms > 0.0 && p.solo_ms.is_finite() && p.batch_ms.is_finite())
        .map(|p| ((p.b - 1) as f64, p.batch_ms / p.solo_ms - 1.0))
        .collect();
    if xy.is_empty() {
        return None;
    }
    let sxx: f64 = xy.iter().map(|(x, _)| x * x).sum();
    let kappa = xy.iter().map(|(x, y)| x * y).sum::<f64>() / sxx;
    let rms = (xy.iter().map(|(x, y)| (y - kappa * x).powi(2)).sum::<f64>() / xy.len() as f64).sqrt();
    Some(KappaFit { kappa, points: xy.len(), rms })
}

/// Mean and sample standard deviation (`sqrt(Σ (x - mean)² / (n - 1))`,
/// 0 for one sample); None for no samples.
pub fn mean_sd(xs: &[f64]) -> Option<(f64, f64)> {
    if xs.is_empty() {
        return None;
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 { xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    Some((mean, var.sqrt()))
}

/// The `q` quantile (nearest rank, `q` in [0, 1]) of `xs`; None if empty.
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.saturating_sub(1).min(v.len() - 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kappa_is_recovered_from_exact_batches_and_b1_says_nothing() {
        let g = |b: usize, x: f64, k: f64| BatchPoint { b, solo_ms: x, batch_ms: x * (1.0 + k * (b - 1) as f64) };
        let pts: Vec<BatchPoint> = (1..=8).flat_map(|b| [g(b, 0.2, 0.3), g(b, 1.5, 0.3)]).collect();
        let f = fit_kappa(&pts).unwrap();
        assert!((f.kappa - 0.3).abs() < 1e-12 && f.rms < 1e-12 && f.points == 14, "{f:?}");
        // Least squares through the origin: y = 0.5 at x = 1 and 1.5 at x = 2
        // gives (0.5 + 3) / (1 + 4) = 0.7.
        let pts = [g(2, 1.0, 0.5), g(3, 1.0, 0.75)];
        assert!((fit_kappa(&pts).unwrap().kappa - 0.7).abs() < 1e-12);
        assert_eq!(fit_kappa(&[g(1, 1.0, 0.0)]), None);
        let nan = BatchPoint { b: 2, solo_ms: f64::NAN, batch_ms: 1.0 };
        assert_eq!(fit_kappa(&[nan, BatchPoint { b: 3, solo_ms: 0.0, batch_ms: 1.0 }]), None);
    }

    #[test]
    fn moments_and_quantiles() {
        assert_eq!(mean_sd(&[]), None);
        assert_eq!(mean_sd(&[2.0]), Some((2.0, 0.0)));
        let (m, s) = mean_sd(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!((m - 2.5).abs() < 1e-12 && (s - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&xs, 0.99), Some(99.0));
        assert_eq!(quantile(&xs, 0.0), Some(1.0));
        assert_eq!(quantile(&xs, 1.0), Some(100.0));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
