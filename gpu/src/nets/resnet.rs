//! ResNet-50 (He et al. 2016, torchvision's v1.5: the stride on the 3x3
//! convolution of a bottleneck), for inference: every batch normalisation
//! folded into the convolution before it, so each convolution has a bias
//! (a trained model's BN with scale γ, shift β, mean μ and variance σ²
//! folds as `w' = w γ / sqrt(σ² + ε)`, `b' = β - μ γ / sqrt(σ² + ε)`).
//!
//! - stem: conv 7x7/2 (3 → 64) + ReLU, max pool 3x3/2;
//! - four stages of bottlenecks, `depths = [3, 4, 6, 3]`, of `planes = 64,
//!   128, 256, 512` and `4 planes` outputs: conv 1x1 + ReLU, conv 3x3/s +
//!   ReLU (s = 2 in the first block of stages 2-4), conv 1x1, plus the
//!   shortcut (the input, or a 1x1/s convolution where the shape changes),
//!   ReLU;
//! - global average pool, linear 2048 → 1000.
//!
//! An input is one image, CHW (`3 x 224 x 224` floats, as a framework's
//! NCHW tensor holds it); the output its 1000 logits. Activations are HWC
//! inside (`conv.rs`). Tensors are named as torchvision names them (`conv1`,
//! `layer2.0.downsample.0`, `fc`), weights `.weight` `[in*k*k x out]`
//! (`conv.rs`: PyTorch's `weight[o][i][dy][dx]` at row `i*k*k + dy*k +
//! dx`), biases `.bias`.
//!
//! Weights are drawn with He's scale `sqrt(6 / fan_in)` (uniform, variance
//! `2 / fan_in`), the last convolution of each bottleneck and each
//! shortcut convolution scaled down by 4 so that the 16 residual additions
//! keep activations near unit size.

use super::conv::{chw_to_hwc, conv, global_avgpool, maxpool, ConvSpec};
use super::layout::{Id, Layer, Layout};
use crate::reference::ops::{gemm, relu};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResNetConfig {
    /// The input image's side (224).
    pub image: usize,
    pub in_channels: usize,
    /// The stem's outputs and the first stage's planes (64).
    pub width: usize,
    pub depths: [usize; 4],
    pub classes: usize,
}

impl ResNetConfig {
    pub const RESNET50: Self = Self { image: 224, in_channels: 3, width: 64, depths: [3, 4, 6, 3], classes: 1000 };

    /// ResNet-50's structure, narrower and on smaller images (for tests).
    pub const fn scaled(width: usize, image: usize, classes: usize) -> Self {
        Self { image, in_channels: 3, width, depths: [3, 4, 6, 3], classes }
    }

    pub fn name(&self) -> &'static str {
        if *self == Self::RESNET50 {
            "resnet50"
        } else {
            "resnet50-scaled"
        }
    }

    pub fn input_len(&self) -> usize {
        self.in_channels * self.image * self.image
    }

    /// The layer list, without building weights.
    pub fn layers(&self) -> Vec<Layer> {
        ResNet::declare(*self, &mut Layout::shapes_only()).layers()
    }

    pub fn check(&self) -> Result<(), String> {
        if [self.in_channels, self.width, self.classes].contains(&0) || self.depths.contains(&0) {
            return Err(format!("{self:?}: every size must be positive"));
        }
        // Stem /2, pool /2, three stages /2: the image must survive 32x.
        if self.image < 32 {
            return Err(format!("an image of {} pixels is smaller than the network's stride of 32", self.image));
        }
        Ok(())
    }
}

struct ConvLayer {
    name: String,
    spec: ConvSpec,
    relu: bool,
    w: Id,
    b: Id,
}

struct Bottleneck {
    convs: [ConvLayer; 3],
    shortcut: Option<ConvLayer>,
}

pub struct ResNet {
    pub config: ResNetConfig,
    weights: Layout,
    stem: ConvLayer,
    blocks: Vec<Bottleneck>,
    fc: (Id, Id),
}

const POOL: (usize, usize, usize) = (3, 2, 1);
const EXPANSION: usize = 4;

impl ResNet {
    pub fn new(config: ResNetConfig, seed: u64) -> Self {
        Self::declare(config, &mut Layout::seeded(seed))
    }

    /// The network's structure, its tensors declared in `weights` (taken
    /// over) in torchvision's order.
    fn declare(config: ResNetConfig, weights: &mut Layout) -> Self {
        let mut weights = std::mem::replace(weights, Layout::shapes_only());
        let mut conv = |name: String, spec: ConvSpec, relu: bool, damp: f32| {
            let fan_in = (spec.k * spec.k * spec.inputs) as f32;
            let w = weights.push(
                format!("{name}.weight"),
                &[spec.k * spec.k * spec.inputs, spec.outputs],
                0.0,
                damp * (6.0 / fan_in).sqrt(),
            );
            let b = weights.push(format!("{name}.bias"), &[spec.outputs], 0.0, 0.05);
            ConvLayer { name, spec, relu, w, b }
        };
        let spec = |inputs, outputs, k, stride| ConvSpec { inputs, outputs, k, stride, pad: k / 2 };
        let stem = conv("conv1".into(), spec(config.in_channels, config.width, 7, 2), true, 1.0);
        let mut blocks = Vec::new();
        let mut inputs = config.width;
        for (stage, &depth) in config.depths.iter().enumerate() {
            let planes = config.width << stage;
            for i in 0..depth {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                let at = format!("layer{}.{i}", stage + 1);
                let out = planes * EXPANSION;
                let convs = [
                    conv(format!("{at}.conv1"), spec(inputs, planes, 1, 1), true, 1.0),
                    conv(format!("{at}.conv2"), spec(planes, planes, 3, stride), true, 1.0),
                    conv(format!("{at}.conv3"), spec(planes, out, 1, 1), false, 0.25),
                ];
                let shortcut = (stride != 1 || inputs != out)
                    .then(|| conv(format!("{at}.downsample.0"), spec(inputs, out, 1, stride), false, 0.25));
                blocks.push(Bottleneck { convs, shortcut });
                inputs = out;
            }
        }
        let fc_w = weights.push("fc.weight", &[inputs, config.classes], 0.0, (3.0 / inputs as f32).sqrt());
        let fc_b = weights.push("fc.bias", &[config.classes], 0.0, 0.05);
        Self { config, weights, stem, blocks, fc: (fc_w, fc_b) }
    }

    pub fn weights(&self) -> &Layout {
        &self.weights
    }

    fn features(&self) -> usize {
        self.blocks.last().map_or(self.config.width, |b| b.convs[2].spec.outputs)
    }

    /// Every layer in order, with its shapes (HWC) on the configured image.
    pub fn layers(&self) -> Vec<Layer> {
        let mut out = Vec::new();
        let conv_layer = |c: &ConvLayer, (h, w): (usize, usize), residual: bool| {
            let s = c.spec;
            let act = match (residual, c.relu) {
                (true, _) => " +shortcut +relu",
                (false, true) => " +relu",
                (false, false) => "",
            };
            Layer {
                name: c.name.clone(),
                op: format!("conv {}x{}/{}{act}", s.k, s.k, s.stride),
                input: vec![h, w, s.inputs],
                output: vec![s.out_side(h), s.out_side(w), s.outputs],
                weights: s.weights() + s.outputs,
                macs: s.macs(h, w),
            }
        };
        let mut hw = (self.config.image, self.config.image);
        out.push(conv_layer(&self.stem, hw, false));
        hw = (self.stem.spec.out_side(hw.0), self.stem.spec.out_side(hw.1));
        let c = self.stem.spec.outputs;
        let pooled = (
            super::conv::pooled_side(hw.0, POOL.0, POOL.1, POOL.2),
            super::conv::pooled_side(hw.1, POOL.0, POOL.1, POOL.2),
        );
        out.push(Layer {
            name: "maxpool".into(),
            op: "max pool 3x3/2".into(),
            input: vec![hw.0, hw.1, c],
            output: vec![pooled.0, pooled.1, c],
            weights: 0,
            macs: 0,
        });
        hw = pooled;
        for b in &self.blocks {
            let mut at = hw;
            for (i, c) in b.convs.iter().enumerate() {
                out.push(conv_layer(c, at, i == 2));
                at = (c.spec.out_side(at.0), c.spec.out_side(at.1));
            }
            if let Some(s) = &b.shortcut {
                out.push(conv_layer(s, hw, false));
            }
            hw = at;
        }
        let f = self.features();
        out.push(Layer {
            name: "avgpool".into(),
            op: "global average pool".into(),
            input: vec![hw.0, hw.1, f],
            output: vec![f],
            weights: 0,
            macs: 0,
        });
        let classes = self.config.classes;
        out.push(Layer {
            name: "fc".into(),
            op: "linear".into(),
            input: vec![f],
            output: vec![classes],
            weights: f * classes + classes,
            macs: (f * classes) as u64,
        });
        out
    }

    /// `y = act(conv(x) + bias (+ shortcut))`.
    fn run_conv(
        &self,
        c: &ConvLayer,
        x: &[f32],
        hw: (usize, usize),
        cols: &mut Vec<f32>,
        shortcut: Option<&[f32]>,
    ) -> (Vec<f32>, (usize, usize)) {
        let mut y = Vec::new();
        let ohw =
            conv(x, hw, &c.spec, (self.weights.get(c.w), c.spec.outputs, Some(self.weights.get(c.b))), cols, &mut y);
        if let Some(s) = shortcut {
            y.iter_mut().zip(s).for_each(|(v, s)| *v += s);
        }
        if c.relu || shortcut.is_some() {
            relu(&mut y);
        }
        (y, ohw)
    }

    /// The logits of one CHW image.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        let ResNetConfig { image: side, in_channels: c, classes, .. } = self.config;
        assert_eq!((x.len(), out.len()), (self.config.input_len(), classes), "resnet input and output");
        let hwc = chw_to_hwc(x, c, side);
        let mut cols = Vec::new();
        let (a, hw) = self.run_conv(&self.stem, &hwc, (side, side), &mut cols, None);
        let mut x = Vec::new();
        let mut hw = maxpool(&a, hw, self.stem.spec.outputs, POOL, &mut x);
        for b in &self.blocks {
            let (t1, hw1) = self.run_conv(&b.convs[0], &x, hw, &mut cols, None);
            let (t2, hw2) = self.run_conv(&b.convs[1], &t1, hw1, &mut cols, None);
            let shortcut = b.shortcut.as_ref().map(|s| self.run_conv(s, &x, hw, &mut cols, None).0);
            let (y, _) = self.run_conv(&b.convs[2], &t2, hw2, &mut cols, Some(shortcut.as_deref().unwrap_or(&x)));
            (x, hw) = (y, hw2);
        }
        let f = self.features();
        let pooled = global_avgpool(&x, f);
        let (w, b) = self.fc;
        gemm(&pooled, self.weights.get(w), Some(self.weights.get(b)), 1, f, classes, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ResNet-50 as torchvision counts it: 25,557,032 parameters (each
    /// BN's scale and shift counted, where the folded network holds one
    /// bias per channel), 4.09 G multiply-accumulates at 224x224.
    #[test]
    fn the_layer_list_is_resnet50s() {
        let layers = ResNetConfig::RESNET50.layers();
        let convs: Vec<&Layer> = layers.iter().filter(|l| l.op.starts_with("conv")).collect();
        assert_eq!(convs.len(), 53, "49 in the main path and 4 shortcut convolutions");
        let folded: usize = layers.iter().map(|l| l.weights).sum();
        let bn_channels: usize = convs.iter().map(|l| l.output[2]).sum();
        assert_eq!(folded, 25_530_472);
        assert_eq!(folded + bn_channels, 25_557_032, "torchvision's count");
        let macs: u64 = layers.iter().map(|l| l.macs).sum();
        assert_eq!(macs, 4_089_184_256);
        let shape = |name: &str| layers.iter().find(|l| l.name == name).unwrap().output.clone();
        assert_eq!(shape("conv1"), [112, 112, 64]);
        assert_eq!(shape("maxpool"), [56, 56, 64]);
        assert_eq!(shape("layer1.2.conv3"), [56, 56, 256]);
        assert_eq!(shape("layer2.0.downsample.0"), [28, 28, 512]);
        assert_eq!(shape("layer3.5.conv3"), [14, 14, 1024]);
        assert_eq!(shape("layer4.2.conv3"), [7, 7, 2048]);
        assert_eq!(shape("fc"), [1000]);
        // The weights' table holds what the layer list counts.
        let net = ResNet::declare(ResNetConfig::RESNET50, &mut Layout::shapes_only());
        assert_eq!(net.weights().len(), folded);
        assert_eq!(net.weights().tensors()[0].name, "conv1.weight");
    }

    #[test]
    fn the_scaled_network_is_deterministic_finite_and_depends_on_its_input() {
        let cfg = ResNetConfig::scaled(4, 32, 10);
        let (a, b) = (ResNet::new(cfg, 1), ResNet::new(cfg, 1));
        let x: Vec<f32> = (0..cfg.input_len()).map(|i| (i as f32 * 0.1).sin()).collect();
        let (mut ya, mut yb) = (vec![0.0; 10], vec![0.0; 10]);
        a.forward(&x, &mut ya);
        b.forward(&x, &mut yb);
        assert_eq!(ya, yb);
        assert!(ya.iter().all(|v| v.is_finite() && v.abs() < 1e3), "{ya:?}");
        let mut x2 = x.clone();
        x2[5] += 1.0;
        b.forward(&x2, &mut yb);
        assert_ne!(ya, yb);
        assert_eq!(ResNet::new(cfg, 2).weights().tensors(), a.weights().tensors());
    }

    /// The whole network at its real size runs and stays finite (about
    /// 8 GFLOP: a second or two).
    #[test]
    fn resnet50_runs_at_224() {
        let net = ResNet::new(ResNetConfig::RESNET50, 7);
        let x: Vec<f32> = (0..net.config.input_len()).map(|i| (i as f32 * 0.001).cos()).collect();
        let mut y = vec![0.0; 1000];
        net.forward(&x, &mut y);
        assert!(y.iter().all(|v| v.is_finite()) && y.iter().any(|&v| v != y[0]), "{:?}", &y[..4]);
    }
}
