//! Deterministic random weights: a splitmix64 stream of uniforms in
//! [-1, 1), so every model is reproducible from its seed.

pub(crate) struct Gen(pub u64);

impl Gen {
    pub fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// `n` weights scaled by `scale` (e.g. 1/sqrt(fan-in)).
    pub fn fill(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}
