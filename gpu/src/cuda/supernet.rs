//! SubNetAct on the GPU: the supernet of `crate::supernet` serving every
//! subnet from one copy of its weights, for a batch of b inputs at once.
//!
//! - **LayerSelect**: subnet (depth, width) runs the first `depth` blocks.
//! - **WeightSlice**: block k's weights are `[max_width x cols]` row-major
//!   (z = W x); the subnet uses the first `width` rows and the first
//!   `in` columns, read in place: the GEMM `Z[b x width] = X[b x in] ·
//!   W[:width, :in]ᵀ` takes W with its full row stride `cols` as leading
//!   dimension, so no weight is copied or moved.
//! - **SubnetNorm**: each subnet's own per-channel statistics, folded with
//!   the bias at load into `y = max(z * inv_std + (bias - mean) * inv_std,
//!   0)` — a few floats per channel per subnet.

use super::blas::{gemm, Mat, B};
use super::device::{CudaError, DevPtr, Gpu};
use super::kernels::Act;
use crate::supernet::{SubnetConfig, Supernet};

struct Weights {
    w: DevPtr,
    cols: usize,
}

/// One subnet's folded normalisation, per block it runs.
struct SubnetNorms {
    config: SubnetConfig,
    /// (scale, shift) of each of the first `depth` blocks.
    blocks: Vec<(DevPtr, DevPtr)>,
}

pub struct GpuSupernet {
    input_len: usize,
    classes: usize,
    blocks: Vec<Weights>,
    head: Weights,
    head_bias: DevPtr,
    subnets: Vec<SubnetNorms>,
    pub input: DevPtr,
    act: [DevPtr; 2],
    pub output: DevPtr,
}

impl GpuSupernet {
    /// Uploads `net`'s weights once and every subnet's statistics.
    pub fn new(gpu: &mut Gpu, net: &Supernet, subnets: &[SubnetConfig], max_batch: usize) -> Result<Self, CudaError> {
        let cfg = *net.config();
        let mut blocks = Vec::with_capacity(net.blocks.len());
        for b in &net.blocks {
            blocks.push(Weights { w: gpu.upload(&b.weights)?, cols: b.cols });
        }
        let mut norms = Vec::with_capacity(subnets.len());
        for s in subnets {
            let mut per_block = Vec::with_capacity(s.depth);
            for (b, n) in net.blocks.iter().zip(net.norms_of(s)) {
                let shift: Vec<f32> = (0..s.width).map(|c| (b.bias[c] - n.mean[c]) * n.inv_std[c]).collect();
                per_block.push((gpu.upload(&n.inv_std)?, gpu.upload(&shift)?));
            }
            norms.push(SubnetNorms { config: *s, blocks: per_block });
        }
        Ok(Self {
            input_len: cfg.input,
            classes: cfg.classes,
            blocks,
            head: Weights { w: gpu.upload(&net.head.weights)?, cols: net.head.cols },
            head_bias: gpu.upload(&net.head.bias)?,
            subnets: norms,
            input: gpu.alloc(max_batch * cfg.input)?,
            act: [gpu.alloc(max_batch * cfg.max_width)?, gpu.alloc(max_batch * cfg.max_width)?],
            output: gpu.alloc(max_batch * cfg.classes)?,
        })
    }

    /// `Y[b x rows] = X[b x k] · W[:rows, :k]ᵀ`, W read in place.
    fn sliced(
        &self,
        gpu: &Gpu,
        x: DevPtr,
        w: &Weights,
        y: DevPtr,
        (b, k, rows): (usize, usize, usize),
    ) -> Result<(), CudaError> {
        let weights = Mat { ptr: w.w, ld: w.cols, stride: 0 };
        gemm(gpu, (b, rows, k), 1.0, Mat::dense(x, k), (weights, B::Transposed), Mat::dense(y, rows), 1)
    }

    /// Enqueues subnet `variant` over the first `b` inputs; logits land in
    /// `output` (`[b x classes]`).
    pub fn enqueue(&self, gpu: &Gpu, variant: usize, b: usize) -> Result<(), CudaError> {
        let s = &self.subnets[variant];
        let w = s.config.width;
        let (mut x, mut k) = (self.input, self.input_len);
        for (i, (blk, &(scale, shift))) in self.blocks.iter().zip(&s.blocks).enumerate() {
            let y = self.act[i % 2];
            self.sliced(gpu, x, blk, y, (b, k, w))?;
            gpu.kernels.scale_shift_relu(&gpu.stream, y, scale, shift, (b, w))?;
            (x, k) = (y, w);
        }
        self.sliced(gpu, x, &self.head, self.output, (b, w, self.classes))?;
        gpu.kernels.bias_act(&gpu.stream, self.output, self.head_bias, DevPtr::NULL, (b, self.classes), Act::None)
    }
}
