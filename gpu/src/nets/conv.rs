//! Convolution and max pooling on one image's activations in HWC layout
//! (`x[h*w x c]`, a row per pixel), the layout in which a convolution is
//! one GEMM: im2col gathers each output pixel's receptive field into a row
//! of `c*k*k` columns, ordered `ch*k*k + dy*k + dx` (channel-major), and
//! the weights are `[c*k*k x out]` in the same order — PyTorch's
//! `weight[o][ch][dy][dx]` at row `ch*k*k + dy*k + dx`, column `o`. So the
//! first `c'` input channels are the first `c'*k*k` rows and the first
//! `o'` outputs the first `o'` columns, and a slice of a convolution
//! (SubNetAct's WeightSlice, `supernet.rs`) is read in place: `conv` takes
//! the weights' row stride. A 1x1 stride-1 convolution needs no gather: it
//! is the GEMM on `x` itself.
//!
//! Output size along each side: `o = (i + 2 pad - k) / stride + 1`.

use crate::reference::ops::gemm_strided;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvSpec {
    pub inputs: usize,
    pub outputs: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
}

impl ConvSpec {
    /// The output side for an input side `i` (panics if the kernel does not fit).
    pub fn out_side(&self, i: usize) -> usize {
        pooled_side(i, self.k, self.stride, self.pad)
    }

    /// Floats in the `[k*k*inputs x outputs]` weights.
    pub fn weights(&self) -> usize {
        self.k * self.k * self.inputs * self.outputs
    }

    /// Multiply-accumulates on an `h x w` input.
    pub fn macs(&self, h: usize, w: usize) -> u64 {
        (self.out_side(h) * self.out_side(w) * self.weights()) as u64
    }
}

/// `(i + 2 pad - k) / stride + 1`, for convolutions and pooling alike.
pub fn pooled_side(i: usize, k: usize, stride: usize, pad: usize) -> usize {
    assert!(stride > 0 && i + 2 * pad >= k, "a {k}-wide window does not fit {i} + 2 x {pad}");
    (i + 2 * pad - k) / stride + 1
}

/// The receptive fields of `spec` over `x[h*w x c]` into `cols[oh*ow x
/// k*k*c]` (zeros where the window hangs over the padding).
pub fn im2col(x: &[f32], (h, w): (usize, usize), spec: &ConvSpec, cols: &mut Vec<f32>) {
    let ConvSpec { inputs: c, k, stride, pad, .. } = *spec;
    assert_eq!(x.len(), h * w * c, "im2col input");
    let (oh, ow) = (spec.out_side(h), spec.out_side(w));
    let (taps, width) = (k * k, k * k * c);
    cols.clear();
    cols.resize(oh * ow * width, 0.0);
    for oy in 0..oh {
        for ox in 0..ow {
            let row = &mut cols[(oy * ow + ox) * width..][..width];
            for dy in 0..k {
                let Some(sy) = (oy * stride + dy).checked_sub(pad).filter(|&y| y < h) else { continue };
                for dx in 0..k {
                    let Some(sx) = (ox * stride + dx).checked_sub(pad).filter(|&x| x < w) else { continue };
                    let pixel = &x[(sy * w + sx) * c..][..c];
                    for (ch, &v) in pixel.iter().enumerate() {
                        row[ch * taps + dy * k + dx] = v;
                    }
                }
            }
        }
    }
}

/// `y[oh*ow x out] = conv(x) + bias` (no bias: None); returns `(oh, ow)`.
/// The weights' rows are `ld` floats apart (`ld >= outputs`: the first
/// `outputs` columns of a wider convolution's weights). `cols` is scratch.
pub fn conv(
    x: &[f32],
    hw: (usize, usize),
    spec: &ConvSpec,
    (weights, ld, bias): (&[f32], usize, Option<&[f32]>),
    cols: &mut Vec<f32>,
    y: &mut Vec<f32>,
) -> (usize, usize) {
    let rows = spec.k * spec.k * spec.inputs;
    assert!(ld >= spec.outputs && weights.len() >= (rows - 1) * ld + spec.outputs, "conv weights");
    assert!(bias.is_none_or(|b| b.len() == spec.outputs), "conv bias");
    let (oh, ow) = (spec.out_side(hw.0), spec.out_side(hw.1));
    y.clear();
    y.resize(oh * ow * spec.outputs, 0.0);
    let direct = spec.k == 1 && spec.stride == 1 && spec.pad == 0;
    let a = if direct {
        x
    } else {
        im2col(x, hw, spec, cols);
        cols
    };
    gemm_strided(a, (weights, ld), bias, oh * ow, rows, spec.outputs, y);
    (oh, ow)
}

/// Max pooling of `x[h*w x c]` over `k x k` windows (padding never wins);
/// returns `(oh, ow)`.
pub fn maxpool(
    x: &[f32],
    (h, w): (usize, usize),
    c: usize,
    (k, stride, pad): (usize, usize, usize),
    y: &mut Vec<f32>,
) -> (usize, usize) {
    assert_eq!(x.len(), h * w * c, "maxpool input");
    let (oh, ow) = (pooled_side(h, k, stride, pad), pooled_side(w, k, stride, pad));
    y.clear();
    y.resize(oh * ow * c, f32::NEG_INFINITY);
    for oy in 0..oh {
        for ox in 0..ow {
            let out = &mut y[(oy * ow + ox) * c..][..c];
            for sy in (oy * stride..oy * stride + k).filter_map(|v| v.checked_sub(pad)).filter(|&v| v < h) {
                for sx in (ox * stride..ox * stride + k).filter_map(|v| v.checked_sub(pad)).filter(|&v| v < w) {
                    out.iter_mut().zip(&x[(sy * w + sx) * c..][..c]).for_each(|(o, &v)| *o = o.max(v));
                }
            }
        }
    }
    (oh, ow)
}

/// A `c x side x side` CHW image as HWC (`[side*side x c]`).
pub fn chw_to_hwc(x: &[f32], c: usize, side: usize) -> Vec<f32> {
    assert_eq!(x.len(), c * side * side, "a CHW image");
    let mut hwc = vec![0.0; x.len()];
    for (ch, plane) in x.chunks_exact(side * side).enumerate() {
        for (p, &v) in plane.iter().enumerate() {
            hwc[p * c + ch] = v;
        }
    }
    hwc
}

/// The mean of each channel over all pixels of `x[pixels x c]`.
pub fn global_avgpool(x: &[f32], c: usize) -> Vec<f32> {
    let pixels = x.len() / c;
    let mut sum = vec![0.0; c];
    for row in x.chunks_exact(c) {
        sum.iter_mut().zip(row).for_each(|(s, v)| *s += v);
    }
    sum.iter().map(|s| s / pixels as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::Gen;

    /// The convolution by its definition.
    fn direct(x: &[f32], (h, w): (usize, usize), s: &ConvSpec, wt: &[f32], b: &[f32]) -> Vec<f32> {
        let (oh, ow) = (s.out_side(h), s.out_side(w));
        let mut y = vec![0.0; oh * ow * s.outputs];
        for (oy, ox, o) in (0..oh).flat_map(|a| (0..ow).flat_map(move |b| (0..s.outputs).map(move |o| (a, b, o)))) {
            let mut acc = b[o];
            for (dy, dx, ch) in (0..s.k).flat_map(|a| (0..s.k).flat_map(move |b| (0..s.inputs).map(move |c| (a, b, c))))
            {
                let (sy, sx) =
                    ((oy * s.stride + dy) as isize - s.pad as isize, (ox * s.stride + dx) as isize - s.pad as isize);
                if sy >= 0 && sx >= 0 && (sy as usize) < h && (sx as usize) < w {
                    acc += x[(sy as usize * w + sx as usize) * s.inputs + ch]
                        * wt[((ch * s.k + dy) * s.k + dx) * s.outputs + o];
                }
            }
            y[(oy * ow + ox) * s.outputs + o] = acc;
        }
        y
    }

    #[test]
    fn every_convolution_resnet_uses_equals_the_definition() {
        let mut g = Gen(11);
        // 7x7/2 pad 3 (stem), 3x3/1 and 3x3/2 pad 1, 1x1/1 and 1x1/2 (downsample), odd sides.
        for (k, stride, pad, (h, w)) in
            [(7, 2, 3, (13, 11)), (3, 1, 1, (6, 5)), (3, 2, 1, (7, 8)), (1, 1, 0, (4, 4)), (1, 2, 0, (5, 6))]
        {
            let s = ConvSpec { inputs: 3, outputs: 5, k, stride, pad };
            let (x, wt, b) = (g.fill(h * w * 3, 1.0), g.fill(s.weights(), 0.5), g.fill(5, 0.1));
            let (mut cols, mut y) = (Vec::new(), Vec::new());
            let (oh, ow) = conv(&x, (h, w), &s, (&wt, 5, Some(&b)), &mut cols, &mut y);
            assert_eq!((oh, ow), (s.out_side(h), s.out_side(w)));
            let want = direct(&x, (h, w), &s, &wt, &b);
            let err = y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(err < 1e-5, "{k}x{k}/{stride} pad {pad} on {h}x{w}: max error {err}");
        }
        assert_eq!(ConvSpec { inputs: 3, outputs: 64, k: 7, stride: 2, pad: 3 }.out_side(224), 112);
    }

    #[test]
    fn pooling_takes_the_window_maximum_and_the_channel_mean() {
        // One channel, 4x4 holding 0..16: 3x3/2 pad 1 windows.
        let x: Vec<f32> = (0..16).map(|v| v as f32 - 8.0).collect();
        let mut y = Vec::new();
        assert_eq!(maxpool(&x, (4, 4), 1, (3, 2, 1), &mut y), (2, 2));
        assert_eq!(y, [-3.0, -1.0, 5.0, 7.0]);
        assert_eq!(pooled_side(112, 3, 2, 1), 56);
        assert_eq!(global_avgpool(&[1.0, 10.0, 3.0, 20.0], 2), [2.0, 15.0]);
    }
}
