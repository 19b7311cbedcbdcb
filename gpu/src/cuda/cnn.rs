//! The ResNet-style CNN of `reference/cnn.rs` on the GPU, for a batch of b
//! images at once. Activations are NHWC (`[b*h*w x channels]`, one row per
//! pixel), so each 3x3 convolution is im2col into `[b*h*w x c*9]` and one
//! GEMM with the reference's `[c*9 x out]` weights; bias, ReLU and the
//! residual add are one elementwise pass. Inputs arrive per request as CHW,
//! which the first im2col reads through its strides.

use super::blas::linear;
use super::device::{CudaError, DevPtr, Gpu};
use super::kernels::Act;
use crate::reference::cnn::{Cnn, CnnShape, Conv3};

struct ConvW {
    w: DevPtr,
    b: DevPtr,
    inputs: usize,
    outputs: usize,
}

impl ConvW {
    fn upload(gpu: &mut Gpu, c: &Conv3) -> Result<Self, CudaError> {
        Ok(Self { w: gpu.upload(&c.w)?, b: gpu.upload(&c.b)?, inputs: c.inputs, outputs: c.outputs })
    }
}

pub struct GpuCnn {
    shape: CnnShape,
    stem: ConvW,
    conv1: ConvW,
    conv2: ConvW,
    fc: DevPtr,
    fc_b: DevPtr,
    pub input: DevPtr,
    cols: DevPtr,
    a: DevPtr,
    t: DevPtr,
    r: DevPtr,
    pooled: DevPtr,
    pub output: DevPtr,
}

impl GpuCnn {
    /// Uploads `cpu`'s weights and sizes the activations for `max_batch`.
    pub fn new(gpu: &mut Gpu, cpu: &Cnn, max_batch: usize) -> Result<Self, CudaError> {
        let s = cpu.shape;
        let pixels = max_batch * s.height * s.width;
        let widest = s.in_channels.max(s.channels);
        Ok(Self {
            shape: s,
            stem: ConvW::upload(gpu, &cpu.stem)?,
            conv1: ConvW::upload(gpu, &cpu.conv1)?,
            conv2: ConvW::upload(gpu, &cpu.conv2)?,
            fc: gpu.upload(&cpu.fc)?,
            fc_b: gpu.upload(&cpu.fc_b)?,
            input: gpu.alloc(max_batch * s.in_channels * s.height * s.width)?,
            cols: gpu.alloc(pixels * widest * 9)?,
            a: gpu.alloc(pixels * s.channels)?,
            t: gpu.alloc(pixels * s.channels)?,
            r: gpu.alloc(pixels * s.channels)?,
            pooled: gpu.alloc(max_batch * s.channels)?,
            output: gpu.alloc(max_batch * s.classes)?,
        })
    }

    /// `y = act(conv(x) + bias + res)` over b images; `chw` says whether
    /// `x` is the CHW input or an NHWC activation.
    #[allow(clippy::too_many_arguments)]
    fn conv(
        &self,
        gpu: &Gpu,
        c: &ConvW,
        x: DevPtr,
        chw: bool,
        y: DevPtr,
        res: DevPtr,
        b: usize,
    ) -> Result<(), CudaError> {
        let CnnShape { height: h, width: w, .. } = self.shape;
        let strides = if chw { (h * w, 1) } else { (1, c.inputs) };
        gpu.kernels.im2col3(&gpu.stream, x, self.cols, b, c.inputs, (h, w), strides)?;
        let rows = b * h * w;
        linear(gpu, self.cols, c.w, y, (rows, c.inputs * 9, c.outputs))?;
        gpu.kernels.bias_act(&gpu.stream, y, c.b, res, (rows, c.outputs), Act::Relu)
    }

    /// Enqueues the forward pass of the first `b` images in `input` on the
    /// stream; the logits land in `output` (`[b x classes]`).
    pub fn enqueue(&self, gpu: &Gpu, b: usize) -> Result<(), CudaError> {
        let CnnShape { height: h, width: w, channels: c, classes, .. } = self.shape;
        self.conv(gpu, &self.stem, self.input, true, self.a, DevPtr::NULL, b)?;
        self.conv(gpu, &self.conv1, self.a, false, self.t, DevPtr::NULL, b)?;
        self.conv(gpu, &self.conv2, self.t, false, self.r, self.a, b)?;
        gpu.kernels.avgpool(&gpu.stream, self.r, self.pooled, b, h * w, c)?;
        linear(gpu, self.pooled, self.fc, self.output, (b, c, classes))?;
        gpu.kernels.bias_act(&gpu.stream, self.output, self.fc_b, DevPtr::NULL, (b, classes), Act::None)
    }
}
