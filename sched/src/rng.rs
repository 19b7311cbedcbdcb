//! A small, fast, seedable PRNG (xoshiro256** seeded through splitmix64) and
//! the distributions the simulator draws from. Deterministic: one seed gives
//! the same stream on every run of the same binary.

#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        Self { s: [splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x), splitmix64(&mut x)] }
    }

    /// An independent stream derived from this seed and a stream number.
    pub fn stream(seed: u64, stream: u64) -> Self {
        let mut x = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        Self::new(splitmix64(&mut x))
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in (0, 1]: safe under `ln`.
    #[inline]
    pub fn unit_open0(&mut self) -> f64 {
        1.0 - self.unit()
    }

    /// Uniform in 0..n (n > 0), without modulo bias worth caring about here.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Exponential with mean 1.
    pub fn exp1(&mut self) -> f64 {
        -self.unit_open0().ln()
    }

    /// Standard normal (Box–Muller; the second value is discarded to keep the
    /// stream stateless).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit_open0();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Gamma(shape, 1) by Marsaglia–Tsang; shape < 1 by the boost
    /// `Gamma(k) = Gamma(k+1) * U^(1/k)`.
    pub fn gamma(&mut self, shape: f64) -> f64 {
        assert!(shape > 0.0 && shape.is_finite());
        if shape < 1.0 {
            let u = self.unit_open0();
            return self.gamma(shape + 1.0) * u.powf(1.0 / shape);
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / (9.0 * d).sqrt();
        loop {
            let x = self.normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.unit_open0();
            if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
                return d * v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let m = xs.iter().sum::<f64>() / xs.len() as f64;
        (m, xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64)
    }

    #[test]
    fn gamma_has_its_moments() {
        for shape in [0.1, 0.5, 1.0, 3.0] {
            let mut r = Rng::new(1);
            let xs: Vec<f64> = (0..200_000).map(|_| r.gamma(shape)).collect();
            let (m, v) = mean_var(&xs);
            assert!((m / shape - 1.0).abs() < 0.03, "shape {shape} mean {m}");
            assert!((v / shape - 1.0).abs() < 0.1, "shape {shape} var {v}");
        }
    }

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| 0).scan(Rng::stream(7, 1), |r, _: u64| Some(r.next_u64())).collect();
        let b: Vec<u64> = (0..4).map(|_| 0).scan(Rng::stream(7, 1), |r, _: u64| Some(r.next_u64())).collect();
        let c: Vec<u64> = (0..4).map(|_| 0).scan(Rng::stream(7, 2), |r, _: u64| Some(r.next_u64())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
