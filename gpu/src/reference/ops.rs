//! The operators of the reference models, row-major f32 throughout.

/// `c[m x n] = a[m x k] · b[k x n] (+ bias[n] on every row)`.
///
/// Rows go in groups of `GEMM_ROWS`, so each row of `b` is read once per
/// group rather than once per row (what makes a batch of stacked rows
/// cheaper than its members one by one); every output element is still
/// `bias_j + Σ_p a_ip b_pj` summed in order of p, so the result does not
/// depend on the grouping, bit for bit.
pub fn gemm(a: &[f32], b: &[f32], bias: Option<&[f32]>, m: usize, k: usize, n: usize, c: &mut [f32]) {
    assert_eq!(b.len(), k * n, "gemm shapes");
    gemm_strided(a, (b, n), bias, m, k, n, c)
}

/// `gemm` with `b`'s rows `ldb >= n` floats apart: the product with the
/// first `n` columns of a wider matrix, read in place.
pub fn gemm_strided(
    a: &[f32],
    (b, ldb): (&[f32], usize),
    bias: Option<&[f32]>,
    m: usize,
    k: usize,
    n: usize,
    c: &mut [f32],
) {
    assert!(a.len() == m * k && c.len() == m * n && ldb >= n, "gemm shapes");
    assert!(k == 0 || b.len() >= (k - 1) * ldb + n, "gemm: b holds k rows of ldb");
    if n == 0 {
        return;
    }
    for (g, rows) in c.chunks_mut(GEMM_ROWS * n).enumerate() {
        for row in rows.chunks_exact_mut(n) {
            match bias {
                Some(bias) => row.copy_from_slice(bias),
                None => row.fill(0.0),
            }
        }
        let a_rows = &a[g * GEMM_ROWS * k..][..rows.len() / n * k];
        for p in 0..k {
            let w = &b[p * ldb..][..n];
            for (row, x) in rows.chunks_exact_mut(n).zip(a_rows.chunks_exact(k)) {
                let x = x[p];
                for (r, &w) in row.iter_mut().zip(w) {
                    *r += x * w;
                }
            }
        }
    }
}

/// Rows of `a` (and `c`) that `gemm` runs together.
pub const GEMM_ROWS: usize = 4;

/// The patches of a 3x3, stride-1, zero-padded convolution over one image
/// `x[c][h][w]`: row `y*w + x` holds the `c*9` inputs its output sees, so
/// the convolution is one GEMM with weights `[c*9 x out]` ("im2col").
pub fn im2col3(x: &[f32], c: usize, h: usize, w: usize, cols: &mut Vec<f32>) {
    assert_eq!(x.len(), c * h * w);
    cols.clear();
    cols.resize(h * w * c * 9, 0.0);
    for yy in 0..h {
        for xx in 0..w {
            let row = (yy * w + xx) * c * 9;
            for ch in 0..c {
                for (t, (dy, dx)) in (0..3).flat_map(|dy| (0..3).map(move |dx| (dy, dx))).enumerate() {
                    let (sy, sx) = (yy + dy, xx + dx);
                    if sy >= 1 && sx >= 1 && sy - 1 < h && sx - 1 < w {
                        cols[row + ch * 9 + t] = x[ch * h * w + (sy - 1) * w + (sx - 1)];
                    }
                }
            }
        }
    }
}

pub fn relu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = v.max(0.0));
}

/// GELU, tanh form.
pub fn gelu(x: &mut [f32]) {
    const K: f32 = 0.797_884_6; // sqrt(2/pi)
    x.iter_mut().for_each(|v| *v = 0.5 * *v * (1.0 + (K * (*v + 0.044_715 * *v * *v * *v)).tanh()));
}

/// Layer normalisation of each row of `x[rows x d]` (no learned scale).
pub fn layernorm(x: &mut [f32], d: usize) {
    for row in x.chunks_exact_mut(d) {
        let mean = row.iter().sum::<f32>() / d as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + 1e-5).sqrt();
        row.iter_mut().for_each(|v| *v = (*v - mean) * inv);
    }
}

/// Layer normalisation of each row of `x[rows x d]` with a learned scale
/// and shift: `gamma * (x - mean) / sqrt(var + eps) + beta` (BERT's, with
/// eps 1e-12).
pub fn layernorm_affine(x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let d = gamma.len();
    assert!(d == beta.len() && x.len().is_multiple_of(d), "layer norm shapes");
    for row in x.chunks_exact_mut(d) {
        let mean = row.iter().sum::<f32>() / d as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

/// GELU in its exact form, `x Φ(x) = x (1 + erf(x / sqrt 2)) / 2` (BERT's).
pub fn gelu_erf(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2)));
}

/// The error function, Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7,
/// below f32's resolution of erf's values near 1), evaluated in f64.
pub fn erf(x: f32) -> f32 {
    let (sign, x) = if x < 0.0 { (-1.0, -f64::from(x)) } else { (1.0, f64::from(x)) };
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly =
        t * (0.254_829_592 + t * (-0.284_496_736 + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    (sign * (1.0 - poly * (-x * x).exp())) as f32
}

/// Multi-head self-attention of `rows` positions that see only each other:
/// from their projections `qkv[rows x 3d]` (each row `q | k | v`), per head
/// `softmax(Q Kᵀ / sqrt(dh)) V` as GEMMs on the head's slices (`dh = d /
/// heads`), into `out[rows x d]`.
pub fn attention(qkv: &[f32], rows: usize, d: usize, heads: usize, out: &mut [f32]) {
    let (s, dh) = (rows, d / heads);
    assert!(qkv.len() == s * 3 * d && out.len() == s * d && dh * heads == d, "attention shapes");
    let head = |part: usize, hd: usize| -> Vec<f32> {
        (0..s).flat_map(|i| qkv[i * 3 * d + part * d + hd * dh..][..dh].to_vec()).collect()
    };
    for hd in 0..heads {
        let (q, k, v) = (head(0, hd), head(1, hd), head(2, hd));
        let kt: Vec<f32> = (0..dh).flat_map(|c| (0..s).map(move |j| (c, j))).map(|(c, j)| k[j * dh + c]).collect();
        let mut scores = vec![0.0; s * s];
        gemm(&q, &kt, None, s, dh, s, &mut scores);
        let scale = 1.0 / (dh as f32).sqrt();
        scores.iter_mut().for_each(|x| *x *= scale);
        softmax(&mut scores, s);
        let mut o = vec![0.0; s * dh];
        gemm(&scores, &v, None, s, s, dh, &mut o);
        for i in 0..s {
            out[i * d + hd * dh..][..dh].copy_from_slice(&o[i * dh..][..dh]);
        }
    }
}

/// Softmax of each row of `x[rows x n]`, stabilised by the row maximum.
pub fn softmax(x: &mut [f32], n: usize) {
    for row in x.chunks_exact_mut(n) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        row.iter_mut().for_each(|v| {
            *v = (*v - max).exp();
            sum += *v;
        });
        row.iter_mut().for_each(|v| *v /= sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norms_and_softmax_have_their_defining_properties() {
        let mut x: Vec<f32> = (0..64).map(|i| (i as f32 * 0.7).sin() * 3.0 + 1.0).collect();
        layernorm(&mut x, 16);
        for row in x.chunks(16) {
            let mean: f32 = row.iter().sum::<f32>() / 16.0;
            let var: f32 = row.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 16.0;
            assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3, "{mean} {var}");
        }
        softmax(&mut x, 8);
        for row in x.chunks(8) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5 && row.iter().all(|&p| p > 0.0));
        }
        let mut g = vec![-3.0, 0.0, 3.0];
        gelu(&mut g);
        assert!(g[0].abs() < 0.01 && g[1] == 0.0 && (g[2] - 3.0).abs() < 0.01, "{g:?}");
        // erf against tabulated values (A&S Table 7.1), and the exact GELU
        // beside the tanh form it approximates.
        for (x, want) in [(0.0, 0.0), (0.5, 0.520_499_9), (1.0, 0.842_700_8), (2.0, 0.995_322_3), (-1.0, -0.842_700_8)]
        {
            assert!((erf(x) - want).abs() < 3e-7, "erf({x}) = {}", erf(x));
        }
        let xs: Vec<f32> = (-40..=40).map(|i| i as f32 * 0.1).collect();
        let (mut exact, mut tanh) = (xs.clone(), xs.clone());
        gelu_erf(&mut exact);
        gelu(&mut tanh);
        assert!(exact.iter().zip(&tanh).all(|(a, b)| (a - b).abs() < 1e-3));
        let mut y = vec![1.0, 2.0, 3.0, 4.0];
        layernorm_affine(&mut y, &[2.0, 2.0], &[1.0, -1.0], 1e-12);
        assert_eq!(y, [-1.0, 1.0, -1.0, 1.0]);
    }
}
