//! Execution-time distributions of one application's requests (the solo
//! time X of a request, before batching), as scenario files write them:
//! `normal:mean,sd`, `uniform:a,b`, `lognormal:mu,sigma` (of ln X in ms),
//! `const:x` and `bimodal:m1,s1,m2,s2,p1` (two normals, the first with
//! probability p1). All in milliseconds. Draws never fall below `FLOOR`.

use crate::rng::Rng;
use crate::time::{ms_to_nanos, Nanos, NANOS_PER_MS};

/// The smallest solo time a draw can give: 10 µs.
pub const FLOOR: Nanos = 10_000;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExecDist {
    Normal { mean: f64, sd: f64 },
    Uniform { a: f64, b: f64 },
    LogNormal { mu: f64, sigma: f64 },
    Const(f64),
    Bimodal { m1: f64, s1: f64, m2: f64, s2: f64, p1: f64 },
}

fn normal_cdf(z: f64) -> f64 {
    // Abramowitz & Stegun 7.1.26 on erf; absolute error below 1.5e-7.
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly =
        t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erf = 1.0 - poly * (-x * x).exp();
    if z >= 0.0 {
        0.5 * (1.0 + erf)
    } else {
        0.5 * (1.0 - erf)
    }
}

impl ExecDist {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (kind, args) = s.split_once(':').ok_or_else(|| format!("`{s}`: expected <kind>:<numbers>"))?;
        let nums: Vec<f64> = args
            .split(',')
            .map(|x| x.trim().parse::<f64>().map_err(|_| format!("`{s}`: `{x}` is not a number")))
            .collect::<Result<_, _>>()?;
        // Solo times stay far below what overflows a 64-bit nanosecond clock.
        if nums.iter().any(|x| !x.is_finite() || x.abs() > 1e6) {
            return Err(format!("`{s}`: numbers must be finite and at most 1e6 in size"));
        }
        let want = |n: usize| {
            if nums.len() == n {
                Ok(())
            } else {
                Err(format!("`{s}`: {kind} takes {n} numbers, got {}", nums.len()))
            }
        };
        let d = match kind {
            "normal" => {
                want(2)?;
                ExecDist::Normal { mean: nums[0], sd: nums[1] }
            }
            "uniform" => {
                want(2)?;
                ExecDist::Uniform { a: nums[0], b: nums[1] }
            }
            "lognormal" => {
                want(2)?;
                ExecDist::LogNormal { mu: nums[0], sigma: nums[1] }
            }
            "const" => {
                want(1)?;
                ExecDist::Const(nums[0])
            }
            "bimodal" => {
                want(5)?;
                ExecDist::Bimodal { m1: nums[0], s1: nums[1], m2: nums[2], s2: nums[3], p1: nums[4] }
            }
            _ => return Err(format!("`{s}`: unknown kind `{kind}` (normal, uniform, lognormal, const, bimodal)")),
        };
        d.validate().map_err(|e| format!("`{s}`: {e}"))?;
        Ok(d)
    }

    fn validate(&self) -> Result<(), String> {
        match *self {
            ExecDist::Normal { mean, sd } if mean <= 0.0 || sd < 0.0 => Err("mean must be > 0 and sd >= 0".into()),
            ExecDist::Uniform { a, b } if a < 0.0 || b <= a => Err("need 0 <= a < b".into()),
            ExecDist::LogNormal { sigma, .. } if sigma < 0.0 => Err("sigma must be >= 0".into()),
            ExecDist::Const(x) if x <= 0.0 => Err("x must be > 0".into()),
            ExecDist::Bimodal { m1, s1, m2, s2, p1 }
                if m1 <= 0.0 || m2 <= 0.0 || s1 < 0.0 || s2 < 0.0 || !(0.0..=1.0).contains(&p1) =>
            {
                Err("means must be > 0, sds >= 0, p1 in [0, 1]".into())
            }
            _ => Ok(()),
        }
    }

    /// One solo time, in nanoseconds.
    pub fn sample(&self, rng: &mut Rng) -> Nanos {
        let ms = match *self {
            ExecDist::Normal { mean, sd } => mean + sd * rng.normal(),
            ExecDist::Uniform { a, b } => a + (b - a) * rng.unit(),
            ExecDist::LogNormal { mu, sigma } => (mu + sigma * rng.normal()).exp(),
            ExecDist::Const(x) => x,
            ExecDist::Bimodal { m1, s1, m2, s2, p1 } => {
                if rng.unit() < p1 {
                    m1 + s1 * rng.normal()
                } else {
                    m2 + s2 * rng.normal()
                }
            }
        };
        // Clamped: a draw far in a tail stays a representable duration.
        ms_to_nanos(ms.clamp(0.0, 1e6)).max(FLOOR)
    }

    /// P(X <= x) for x in milliseconds (ignoring the floor, which only moves
    /// mass below 10 µs).
    pub fn cdf_ms(&self, x: f64) -> f64 {
        // P(N(m, s) <= v), a step when s = 0.
        let n = |v: f64, m: f64, s: f64| if s == 0.0 { f64::from(u8::from(v >= m)) } else { normal_cdf((v - m) / s) };
        match *self {
            ExecDist::Normal { mean, sd } => n(x, mean, sd),
            ExecDist::Uniform { a, b } => ((x - a) / (b - a)).clamp(0.0, 1.0),
            ExecDist::LogNormal { mu, sigma } if x > 0.0 => n(x.ln(), mu, sigma),
            ExecDist::LogNormal { .. } => 0.0,
            ExecDist::Const(c) => f64::from(u8::from(x >= c)),
            ExecDist::Bimodal { m1, s1, m2, s2, p1 } => p1 * n(x, m1, s1) + (1.0 - p1) * n(x, m2, s2),
        }
    }

    /// The mean solo time in nanoseconds (ignoring the floor).
    pub fn mean_nanos(&self) -> f64 {
        let ms = match *self {
            ExecDist::Normal { mean, .. } => mean,
            ExecDist::Uniform { a, b } => 0.5 * (a + b),
            ExecDist::LogNormal { mu, sigma } => (mu + 0.5 * sigma * sigma).exp(),
            ExecDist::Const(x) => x,
            ExecDist::Bimodal { m1, m2, p1, .. } => p1 * m1 + (1.0 - p1) * m2,
        };
        ms * NANOS_PER_MS as f64
    }
}

/// The q-quantile of a weighted mixture of distributions, in nanoseconds,
/// by bisection on the mixture's CDF.
pub fn mixture_quantile(parts: &[(f64, ExecDist)], q: f64) -> Nanos {
    assert!((0.0..1.0).contains(&q) && !parts.is_empty());
    let total: f64 = parts.iter().map(|p| p.0).sum();
    let cdf = |x: f64| parts.iter().map(|(w, d)| w * d.cdf_ms(x)).sum::<f64>() / total;
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while cdf(hi) < q {
        hi *= 2.0;
        assert!(hi < 1e12, "quantile search diverged");
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid) < q {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    ((hi * NANOS_PER_MS as f64).round() as Nanos).max(FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_kind_and_rejects_bad_ones() {
        assert_eq!(ExecDist::parse("normal:40,5"), Ok(ExecDist::Normal { mean: 40.0, sd: 5.0 }));
        assert_eq!(ExecDist::parse("const:3"), Ok(ExecDist::Const(3.0)));
        assert!(ExecDist::parse("bimodal:10,1,30,2,0.7").is_ok());
        assert!(ExecDist::parse("lognormal:2.3,0.4").is_ok());
        assert!(ExecDist::parse("uniform:5,9").is_ok());
        for bad in ["normal:40", "normal:-1,2", "uniform:5,5", "bimodal:1,1,2,2,1.5", "gauss:1,2", "const:x", "const"] {
            assert!(ExecDist::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn samples_match_the_cdf() {
        for s in ["normal:40,5", "uniform:5,9", "lognormal:2.3,0.4", "bimodal:10,1,30,2,0.7", "const:3"] {
            let d = ExecDist::parse(s).unwrap();
            let mut rng = Rng::new(5);
            let xs: Vec<f64> = (0..50_000).map(|_| d.sample(&mut rng) as f64 / 1e6).collect();
            for q in [0.1, 0.5, 0.9, 0.99] {
                let x = mixture_quantile(&[(1.0, d)], q) as f64 / 1e6;
                let frac = xs.iter().filter(|&&v| v <= x).count() as f64 / xs.len() as f64;
                assert!((frac - q).abs() < 0.01 || matches!(d, ExecDist::Const(_)), "{s} q{q}: {frac}");
            }
        }
    }
}
