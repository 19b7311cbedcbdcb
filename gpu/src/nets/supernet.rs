//! A ResNet-50-shaped supernet served in place with SubNetAct's three
//! operators (SuperServe, seeds/004 section 3), the realistic-size
//! counterpart of `crate::supernet`'s MLP:
//!
//! - **LayerSelect**: a subnet of depth `d` runs the first `min(d, depth
//!   of the stage)` bottlenecks of each stage (the first, which changes
//!   the shape, always runs);
//! - **WeightSlice**: a subnet of width `w` percent runs each bottleneck's
//!   inner convolutions on the first `ceil(planes · w / 100)` channels:
//!   the first columns of conv1's weights, the first rows and columns of
//!   conv2's, the first rows of conv3's, read in place through the
//!   weights' row stride (`conv.rs` lays weights out so that a slice is a
//!   prefix of rows and columns);
//! - **SubnetNorm**: batch normalisation after every convolution, its
//!   scale and shift shared (sliced with the channels) and its mean and
//!   variance kept per subnet, calibrated on a fixed batch of images run
//!   through that subnet (a sliced or shortened network's activations have
//!   other statistics).
//!
//! `extract` copies one subnet out as a dense network of its own (the
//! slices copied contiguously, that subnet's statistics only), which must
//! compute the supernet's output for that subnet bit for bit: what
//! actuating in place promises.

use super::conv::{chw_to_hwc, conv, global_avgpool, maxpool, ConvSpec};
use super::layout::{Id, Layout};
use super::resnet::ResNetConfig;
use crate::reference::ops::{gemm, relu};

const EPS: f32 = 1e-5;
const POOL: (usize, usize, usize) = (3, 2, 1);
const EXPANSION: usize = 4;
/// Images in the batch each subnet's statistics are calibrated on.
pub const CALIBRATION_IMAGES: usize = 4;

/// One subnet: blocks per stage (capped by the stage's depth) and the
/// bottlenecks' inner width in percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResSubnet {
    pub depth: usize,
    pub width: usize,
}

impl ResSubnet {
    /// Nine subnets by depth then width, from the smallest (depth 2,
    /// width 50%) to the whole network (depth 6, width 100%).
    pub fn defaults() -> Vec<Self> {
        [2, 4, 6].iter().flat_map(|&depth| [50, 75, 100].map(|width| Self { depth, width })).collect()
    }

    pub fn name(&self) -> String {
        format!("d{}-w{}", self.depth, self.width)
    }

    fn inner(&self, planes: usize) -> usize {
        (planes * self.width).div_ceil(100).max(1)
    }
}

/// A convolution followed by batch normalisation (scale and shift shared
/// by every subnet).
struct NormConv {
    spec: ConvSpec,
    w: Id,
    gamma: Id,
    beta: Id,
}

struct Bottleneck {
    convs: [NormConv; 3],
    shortcut: Option<NormConv>,
}

/// Per-channel mean and 1/sqrt(variance + eps) of one convolution's
/// outputs under one subnet.
#[derive(Clone, Debug, PartialEq)]
struct Stats {
    mean: Vec<f32>,
    inv_std: Vec<f32>,
}

/// How a pass treats batch normalisation.
enum Norms<'a> {
    /// Measure each convolution's statistics over the whole batch, then
    /// apply them.
    Calibrate(&'a mut Vec<Stats>),
    /// Apply stored statistics, in run order.
    Apply(&'a [Stats]),
}

pub struct ResNetSupernet {
    config: ResNetConfig,
    weights: Layout,
    stem: NormConv,
    stages: Vec<Vec<Bottleneck>>,
    fc: (Id, Id),
    /// SubNetAct's SubnetNorm: statistics per subnet, one per convolution it runs.
    norms: Vec<(ResSubnet, Vec<Stats>)>,
}

impl ResNetSupernet {
    /// The supernet of `config`'s shape with weights from `seed`, its
    /// statistics calibrated for each of `subnets`.
    pub fn new(config: ResNetConfig, subnets: &[ResSubnet], seed: u64) -> Self {
        let mut w = Layout::seeded(seed);
        let norm_conv = |w: &mut Layout, name: String, spec: ConvSpec, damp: f32| {
            let fan_in = (spec.k * spec.k * spec.inputs) as f32;
            let rows = spec.k * spec.k * spec.inputs;
            NormConv {
                spec,
                w: w.push(format!("{name}.weight"), &[rows, spec.outputs], 0.0, (6.0 / fan_in).sqrt()),
                gamma: w.push(format!("{name}.bn.weight"), &[spec.outputs], damp, 0.1 * damp),
                beta: w.push(format!("{name}.bn.bias"), &[spec.outputs], 0.0, 0.05),
            }
        };
        let spec = |inputs, outputs, k, stride| ConvSpec { inputs, outputs, k, stride, pad: k / 2 };
        let stem = norm_conv(&mut w, "conv1".into(), spec(config.in_channels, config.width, 7, 2), 1.0);
        let mut stages = Vec::new();
        let mut inputs = config.width;
        for (s, &depth) in config.depths.iter().enumerate() {
            let planes = config.width << s;
            let out = planes * EXPANSION;
            let blocks = (0..depth)
                .map(|i| {
                    let stride = if s > 0 && i == 0 { 2 } else { 1 };
                    let at = format!("layer{}.{i}", s + 1);
                    let block = Bottleneck {
                        convs: [
                            norm_conv(&mut w, format!("{at}.conv1"), spec(inputs, planes, 1, 1), 1.0),
                            norm_conv(&mut w, format!("{at}.conv2"), spec(planes, planes, 3, stride), 1.0),
                            norm_conv(&mut w, format!("{at}.conv3"), spec(planes, out, 1, 1), 0.25),
                        ],
                        shortcut: (i == 0)
                            .then(|| norm_conv(&mut w, format!("{at}.downsample"), spec(inputs, out, 1, stride), 0.25)),
                    };
                    inputs = out;
                    block
                })
                .collect();
            stages.push(blocks);
        }
        let fc = (
            w.push("fc.weight", &[inputs, config.classes], 0.0, (3.0 / inputs as f32).sqrt()),
            w.push("fc.bias", &[config.classes], 0.0, 0.05),
        );
        let mut net = Self { config, weights: w, stem, stages, fc, norms: Vec::new() };
        let images: Vec<Vec<f32>> = (0..CALIBRATION_IMAGES).map(|i| calibration_image(&config, i)).collect();
        for s in subnets {
            let mut stats = Vec::new();
            net.forward(s, &images, Norms::Calibrate(&mut stats));
            net.norms.push((*s, stats));
        }
        net
    }

    pub fn config(&self) -> &ResNetConfig {
        &self.config
    }

    pub fn subnets(&self) -> impl Iterator<Item = &ResSubnet> {
        self.norms.iter().map(|(s, _)| s)
    }

    /// The logits of each CHW image under `subnet` (one it was calibrated for).
    pub fn run(&self, subnet: &ResSubnet, images: &[&[f32]]) -> Vec<Vec<f32>> {
        let stats =
            &self.norms.iter().find(|(s, _)| s == subnet).unwrap_or_else(|| panic!("{subnet:?} was not calibrated")).1;
        let hwc: Vec<Vec<f32>> = images.iter().map(|x| to_hwc(&self.config, x)).collect();
        self.forward(subnet, &hwc, Norms::Apply(stats))
    }

    /// Multiply-accumulates of one image under `subnet`.
    pub fn macs(&self, subnet: &ResSubnet) -> u64 {
        let mut total = 0;
        self.walk(subnet, |spec, _, hw| total += spec.macs(hw.0, hw.1));
        total + (self.features() * self.config.classes) as u64
    }

    fn features(&self) -> usize {
        self.stages.last().and_then(|s| s.first()).map_or(self.config.width, |b| b.convs[2].spec.outputs)
    }

    /// Calls `f(spec as run, the convolution, input side)` for every
    /// convolution `subnet` runs, in run order.
    fn walk(&self, subnet: &ResSubnet, mut f: impl FnMut(&ConvSpec, &NormConv, (usize, usize))) {
        let side = self.config.image;
        let mut hw = (self.stem.spec.out_side(side), self.stem.spec.out_side(side));
        f(&self.stem.spec, &self.stem, (side, side));
        hw = (
            super::conv::pooled_side(hw.0, POOL.0, POOL.1, POOL.2),
            super::conv::pooled_side(hw.1, POOL.0, POOL.1, POOL.2),
        );
        for stage in &self.stages {
            for b in stage.iter().take(subnet.depth.max(1)) {
                let specs = slice(b, subnet);
                let mut at = hw;
                for (spec, c) in specs.iter().zip(&b.convs) {
                    f(spec, c, at);
                    at = (spec.out_side(at.0), spec.out_side(at.1));
                }
                if let Some(s) = &b.shortcut {
                    f(&s.spec, s, hw);
                }
                hw = at;
            }
        }
    }

    /// Runs `subnet` on HWC images, normalising as `norms` says.
    fn forward(&self, subnet: &ResSubnet, images: &[Vec<f32>], mut norms: Norms<'_>) -> Vec<Vec<f32>> {
        let mut next = 0;
        let mut cols = Vec::new();
        // conv + BN over every image, then ReLU unless a shortcut follows.
        let mut layer = |c: &NormConv, spec: &ConvSpec, xs: &[Vec<f32>], hw: (usize, usize), act: bool| {
            let full = c.spec.outputs;
            let mut hw_out = hw;
            let mut ys: Vec<Vec<f32>> = xs
                .iter()
                .map(|x| {
                    let mut y = Vec::new();
                    hw_out = conv(x, hw, spec, (self.weights.get(c.w), full, None), &mut cols, &mut y);
                    y
                })
                .collect();
            let n = spec.outputs;
            if let Norms::Calibrate(stats) = &mut norms {
                stats.push(measure(&ys, n));
            }
            let st = match &norms {
                Norms::Calibrate(stats) => &stats[next],
                Norms::Apply(stats) => &stats[next],
            };
            next += 1;
            let (gamma, beta) = (&self.weights.get(c.gamma)[..n], &self.weights.get(c.beta)[..n]);
            for y in &mut ys {
                for px in y.chunks_exact_mut(n) {
                    for (ch, v) in px.iter_mut().enumerate() {
                        *v = (*v - st.mean[ch]) * st.inv_std[ch] * gamma[ch] + beta[ch];
                    }
                }
                if act {
                    relu(y);
                }
            }
            (ys, hw_out)
        };
        let side = self.config.image;
        let (a, hw) = layer(&self.stem, &self.stem.spec, images, (side, side), true);
        let mut hw_pooled = hw;
        let mut xs: Vec<Vec<f32>> = a
            .iter()
            .map(|a| {
                let mut y = Vec::new();
                hw_pooled = maxpool(a, hw, self.stem.spec.outputs, POOL, &mut y);
                y
            })
            .collect();
        let mut hw = hw_pooled;
        for stage in &self.stages {
            for b in stage.iter().take(subnet.depth.max(1)) {
                let specs = slice(b, subnet);
                let (t1, hw1) = layer(&b.convs[0], &specs[0], &xs, hw, true);
                let (t2, hw2) = layer(&b.convs[1], &specs[1], &t1, hw1, true);
                let (mut y, _) = layer(&b.convs[2], &specs[2], &t2, hw2, false);
                let shortcut = b.shortcut.as_ref().map(|s| layer(s, &s.spec, &xs, hw, false).0);
                for (i, y) in y.iter_mut().enumerate() {
                    let s = shortcut.as_ref().map_or(&xs[i], |s| &s[i]);
                    y.iter_mut().zip(s).for_each(|(v, s)| *v += s);
                    relu(y);
                }
                (xs, hw) = (y, hw2);
            }
        }
        let f = self.features();
        let (w, bias) = self.fc;
        xs.iter()
            .map(|x| {
                let mut out = vec![0.0; self.config.classes];
                gemm(
                    &global_avgpool(x, f),
                    self.weights.get(w),
                    Some(self.weights.get(bias)),
                    1,
                    f,
                    self.config.classes,
                    &mut out,
                );
                out
            })
            .collect()
    }

    /// `subnet` copied out as a dense supernet of its own: its blocks only,
    /// its slices copied contiguously, its statistics only (served as its
    /// one subnet, `extracted_subnet`).
    pub fn extract(&self, subnet: &ResSubnet) -> ResNetSupernet {
        let stats = &self.norms.iter().find(|(s, _)| s == subnet).expect("a calibrated subnet").1;
        let mut w = Layout::seeded(0);
        let copy = |w: &mut Layout, c: &NormConv, spec: &ConvSpec| {
            let full = self.weights.get(c.w);
            let rows = spec.k * spec.k * spec.inputs;
            let sliced: Vec<f32> =
                (0..rows).flat_map(|r| full[r * c.spec.outputs..][..spec.outputs].iter().copied()).collect();
            let name = &self.weights.tensor(c.w).name;
            let n = spec.outputs;
            NormConv {
                spec: *spec,
                w: w.push_values(name.clone(), &[rows, n], &sliced),
                gamma: w.push_values(format!("{name}.bn.weight"), &[n], &self.weights.get(c.gamma)[..n]),
                beta: w.push_values(format!("{name}.bn.bias"), &[n], &self.weights.get(c.beta)[..n]),
            }
        };
        let stem = copy(&mut w, &self.stem, &self.stem.spec);
        let stages = self
            .stages
            .iter()
            .map(|stage| {
                stage
                    .iter()
                    .take(subnet.depth.max(1))
                    .map(|b| {
                        let specs = slice(b, subnet);
                        Bottleneck {
                            convs: [0, 1, 2].map(|i| copy(&mut w, &b.convs[i], &specs[i])),
                            shortcut: b.shortcut.as_ref().map(|s| copy(&mut w, s, &s.spec)),
                        }
                    })
                    .collect()
            })
            .collect();
        let fc = (
            w.push_values("fc.weight", &self.weights.tensor(self.fc.0).shape, self.weights.get(self.fc.0)),
            w.push_values("fc.bias", &[self.config.classes], self.weights.get(self.fc.1)),
        );
        let norms = vec![(Self::extracted_subnet(), stats.clone())];
        ResNetSupernet { config: self.config, weights: w, stem, stages, fc, norms }
    }

    /// The one subnet an extracted network serves: all of itself.
    pub fn extracted_subnet() -> ResSubnet {
        ResSubnet { depth: usize::MAX, width: 100 }
    }
}

/// A bottleneck's three convolutions as `subnet` runs them (WeightSlice):
/// the inner channels cut to the subnet's width.
fn slice(b: &Bottleneck, subnet: &ResSubnet) -> [ConvSpec; 3] {
    let inner = subnet.inner(b.convs[0].spec.outputs);
    let [c1, c2, c3] = [0, 1, 2].map(|i| b.convs[i].spec);
    [
        ConvSpec { outputs: inner, ..c1 },
        ConvSpec { inputs: inner, outputs: inner, ..c2 },
        ConvSpec { inputs: inner, ..c3 },
    ]
}

/// Per-channel mean and variance over every pixel of every image.
fn measure(ys: &[Vec<f32>], n: usize) -> Stats {
    let (mut sum, mut sq, mut count) = (vec![0.0f64; n], vec![0.0f64; n], 0usize);
    for px in ys.iter().flat_map(|y| y.chunks_exact(n)) {
        for (ch, &v) in px.iter().enumerate() {
            sum[ch] += f64::from(v);
            sq[ch] += f64::from(v) * f64::from(v);
        }
        count += 1;
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / count as f64).collect();
    let inv_std =
        sq.iter().zip(&mean).map(|(q, m)| (1.0 / ((q / count as f64 - m * m).max(0.0) + f64::from(EPS)).sqrt()) as f32);
    Stats { mean: mean.iter().map(|&m| m as f32).collect(), inv_std: inv_std.collect() }
}

fn to_hwc(config: &ResNetConfig, x: &[f32]) -> Vec<f32> {
    chw_to_hwc(x, config.in_channels, config.image)
}

/// The i-th image of the calibration batch (HWC), deterministic.
fn calibration_image(config: &ResNetConfig, i: usize) -> Vec<f32> {
    let mut g = crate::weights::Gen(0xca1 + i as u64);
    to_hwc(config, &g.fill(config.input_len(), 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nets::NetsConfig;

    const CFG: ResNetConfig = ResNetConfig::scaled(4, 32, 10);

    fn images(n: usize) -> Vec<Vec<f32>> {
        (0..n).map(|i| (0..CFG.input_len()).map(|k| ((k * (i + 3)) as f32 * 0.01).sin()).collect()).collect()
    }

    #[test]
    fn every_subnet_equals_its_extracted_network_bit_for_bit() {
        let subnets = ResSubnet::defaults();
        let net = ResNetSupernet::new(CFG, &subnets, 3);
        let xs = images(3);
        let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let mut seen = Vec::new();
        for s in &subnets {
            let got = net.run(s, &refs);
            let dense = net.extract(s);
            assert_eq!(got, dense.run(&ResNetSupernet::extracted_subnet(), &refs), "{}", s.name());
            // Each image's output does not depend on its batch mates.
            assert_eq!(got[1], net.run(s, &refs[1..2])[0], "{}", s.name());
            assert!(got.iter().flatten().all(|v| v.is_finite()), "{}", s.name());
            seen.push(got[0].clone());
        }
        // The subnets are different networks, smallest to largest.
        seen.dedup();
        assert_eq!(seen.len(), subnets.len());
        let macs: Vec<u64> = subnets.iter().map(|s| net.macs(s)).collect();
        let (least, most) = (macs.iter().min().unwrap(), macs.iter().max().unwrap());
        assert!(macs[0] == *least && macs[8] == *most && least < most, "{macs:?}");
    }

    #[test]
    fn the_whole_subnet_is_resnet50_and_smaller_ones_run_less() {
        let net = ResNetSupernet::new(ResNetConfig::RESNET50, &[], 1);
        let all = ResSubnet { depth: 6, width: 100 };
        assert_eq!(net.macs(&all), 4_089_184_256, "ResNet-50's multiply-accumulates");
        assert_eq!(net.weights.len(), 25_557_032, "ResNet-50's parameters, batch norms' included");
        assert_eq!(NetsConfig::FULL.sizes(128)[2], (25_557_032, 4_089_184_256));
        let least = net.macs(&ResSubnet { depth: 2, width: 50 });
        assert!(least * 3 < net.macs(&all), "{least}");
    }

    /// SubnetNorm: calibrated statistics normalise each subnet's own
    /// activations (the stem's outputs have mean 0 and variance 1 over the
    /// calibration batch before scale and shift), and differ by subnet.
    #[test]
    fn statistics_are_each_subnets_own() {
        let subnets = [ResSubnet { depth: 2, width: 50 }, ResSubnet { depth: 6, width: 100 }];
        let net = ResNetSupernet::new(CFG, &subnets, 5);
        let (a, b) = (&net.norms[0].1, &net.norms[1].1);
        assert_eq!(a[0], b[0], "the stem is not sliced: same statistics");
        assert_ne!(a[1], b[1], "a sliced convolution's statistics are its subnet's");
        assert!(a.len() < b.len(), "a shallower subnet normalises fewer convolutions");
    }
}
