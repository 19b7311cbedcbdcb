//! A ResNet-style CNN on one `c x h x w` image: a 3x3 stem convolution,
//! one residual block (conv, ReLU, conv, add the input, ReLU), global
//! average pooling and a linear classifier. Convolutions are GEMMs on
//! im2col patches, the formulation the GPU executor will run with cuBLAS.

use super::ops::{gemm, im2col3, relu};
use crate::weights::Gen;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CnnShape {
    pub in_channels: usize,
    pub channels: usize,
    pub height: usize,
    pub width: usize,
    pub classes: usize,
}

/// A 3x3 convolution: weights `[in*9 x out]`, bias `[out]`.
pub struct Conv3 {
    pub inputs: usize,
    pub outputs: usize,
    pub w: Vec<f32>,
    pub b: Vec<f32>,
}

impl Conv3 {
    fn random(g: &mut Gen, inputs: usize, outputs: usize) -> Self {
        let scale = 1.0 / ((inputs * 9) as f32).sqrt();
        Self { inputs, outputs, w: g.fill(inputs * 9 * outputs, scale), b: g.fill(outputs, 0.1) }
    }

    /// `x[in][h][w]` to `y[out][h][w]`, as one GEMM over the patches.
    pub fn forward(&self, x: &[f32], h: usize, w: usize, cols: &mut Vec<f32>, y: &mut Vec<f32>) {
        im2col3(x, self.inputs, h, w, cols);
        let mut hwc = vec![0.0; h * w * self.outputs];
        gemm(cols, &self.w, Some(&self.b), h * w, self.inputs * 9, self.outputs, &mut hwc);
        y.clear();
        y.resize(self.outputs * h * w, 0.0);
        for (p, row) in hwc.chunks_exact(self.outputs).enumerate() {
            for (o, &v) in row.iter().enumerate() {
                y[o * h * w + p] = v;
            }
        }
    }
}

pub struct Cnn {
    pub shape: CnnShape,
    pub(crate) stem: Conv3,
    pub(crate) conv1: Conv3,
    pub(crate) conv2: Conv3,
    pub(crate) fc: Vec<f32>,
    pub(crate) fc_b: Vec<f32>,
}

impl Cnn {
    pub fn new(shape: CnnShape, seed: u64) -> Self {
        let mut g = Gen(seed);
        let c = shape.channels;
        Self {
            shape,
            stem: Conv3::random(&mut g, shape.in_channels, c),
            conv1: Conv3::random(&mut g, c, c),
            conv2: Conv3::random(&mut g, c, c),
            fc: g.fill(c * shape.classes, 1.0 / (c as f32).sqrt()),
            fc_b: g.fill(shape.classes, 0.1),
        }
    }

    pub fn input_len(&self) -> usize {
        self.shape.in_channels * self.shape.height * self.shape.width
    }

    /// Class logits of one image.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        let CnnShape { height: h, width: w, channels: c, classes, .. } = self.shape;
        assert_eq!((x.len(), out.len()), (self.input_len(), classes));
        let mut cols = Vec::new();
        let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
        self.stem.forward(x, h, w, &mut cols, &mut a);
        relu(&mut a);
        self.conv1.forward(&a, h, w, &mut cols, &mut b);
        relu(&mut b);
        self.conv2.forward(&b, h, w, &mut cols, &mut r);
        r.iter_mut().zip(&a).for_each(|(v, s)| *v = (*v + s).max(0.0));
        let pooled: Vec<f32> = r.chunks_exact(h * w).map(|ch| ch.iter().sum::<f32>() / (h * w) as f32).collect();
        gemm(&pooled, &self.fc, Some(&self.fc_b), 1, c, classes, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The convolution by its definition, seven nested loops.
    fn direct(conv: &Conv3, x: &[f32], h: usize, w: usize) -> Vec<f32> {
        let mut y = vec![0.0; conv.outputs * h * w];
        for o in 0..conv.outputs {
            for yy in 0..h {
                for xx in 0..w {
                    let mut acc = conv.b[o];
                    for i in 0..conv.inputs {
                        for dy in 0..3 {
                            for dx in 0..3 {
                                let (sy, sx) = (yy as isize + dy as isize - 1, xx as isize + dx as isize - 1);
                                if sy >= 0 && sx >= 0 && (sy as usize) < h && (sx as usize) < w {
                                    let v = x[i * h * w + sy as usize * w + sx as usize];
                                    acc += v * conv.w[(i * 9 + dy * 3 + dx) * conv.outputs + o];
                                }
                            }
                        }
                    }
                    y[o * h * w + yy * w + xx] = acc;
                }
            }
        }
        y
    }

    #[test]
    fn im2col_convolution_equals_the_definition() {
        let mut g = Gen(5);
        for (i, o, h, w) in [(1, 1, 1, 1), (3, 4, 5, 7), (8, 8, 6, 6)] {
            let conv = Conv3::random(&mut g, i, o);
            let x = g.fill(i * h * w, 1.0);
            let (mut cols, mut y) = (Vec::new(), Vec::new());
            conv.forward(&x, h, w, &mut cols, &mut y);
            let want = direct(&conv, &x, h, w);
            let err = y.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(err < 1e-4, "{i}x{o} on {h}x{w}: max error {err}");
        }
    }

    #[test]
    fn the_network_is_deterministic_and_depends_on_its_input() {
        let shape = CnnShape { in_channels: 3, channels: 8, height: 8, width: 8, classes: 10 };
        let (a, b) = (Cnn::new(shape, 1), Cnn::new(shape, 1));
        let x: Vec<f32> = (0..a.input_len()).map(|i| (i as f32 * 0.1).sin()).collect();
        let (mut ya, mut yb) = (vec![0.0; 10], vec![0.0; 10]);
        a.forward(&x, &mut ya);
        b.forward(&x, &mut yb);
        assert_eq!(ya, yb);
        let mut x2 = x.clone();
        x2[0] += 1.0;
        b.forward(&x2, &mut yb);
        assert_ne!(ya, yb);
        assert!(ya.iter().all(|v| v.is_finite()));
    }
}
