//! The elementwise kernels of the GPU models, compiled with NVRTC when a
//! device is opened (no CUDA toolkit at build time). Each is the GPU twin
//! of an operator in `reference/ops.rs`, and the reference models check
//! them end to end (`cuda/check.rs`).
//!
//! Every kernel loops grid-stride or takes one block per row, so a launch's
//! shape depends only on the batch size: a captured graph replays it as is.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{CompileOptions, Ptx};

use super::device::{CudaError, DevPtr};

const SOURCE: &str = r#"
#define NEG_INF __int_as_float(0xff800000)

__device__ float block_reduce(float v, float* sh, bool is_max) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffff, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < warps ? sh[lane] : (is_max ? NEG_INF : 0.0f);
        for (int o = 16; o > 0; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffff, v, o);
            v = is_max ? fmaxf(v, w) : v + w;
        }
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

// The patches of a zero-padded 3x3 stride-1 convolution over B images:
// row (b*H + y)*W + x, column ch*9 + dy*3 + dx. Element (b, ch, y, x) of
// the source is at b*C*H*W + ch*cs + (y*W + x)*ps (CHW: cs = H*W, ps = 1;
// NHWC: cs = 1, ps = C).
extern "C" __global__ void im2col3(const float* src, float* dst, int B, int C, int H, int W, int cs, int ps) {
    long long n = (long long)B * H * W * C * 9;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int col = (int)(i % (C * 9));
        long long row = i / (C * 9);
        int ch = col / 9, t = col % 9;
        int p = (int)(row % (H * W));
        long long b = row / (H * W);
        int y = p / W + t / 3 - 1, x = p % W + t % 3 - 1;
        dst[i] = (y >= 0 && y < H && x >= 0 && x < W)
            ? src[b * C * H * W + (long long)ch * cs + (long long)(y * W + x) * ps] : 0.0f;
    }
}

// y[r][c] = act(y[r][c] + bias[c] + res[r][c]), res optional (null);
// act 0: none, 1: ReLU, 2: GELU (tanh form).
extern "C" __global__ void bias_act(float* y, const float* bias, const float* res, long long rows, int n, int act) {
    long long total = rows * n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        float v = y[i] + bias[i % n];
        if (res) v += res[i];
        if (act == 1) v = fmaxf(v, 0.0f);
        if (act == 2) v = 0.5f * v * (1.0f + tanhf(0.7978846f * (v + 0.044715f * v * v * v)));
        y[i] = v;
    }
}

// y[r][c] = max(y[r][c] * scale[c] + shift[c], 0): a normalisation with
// the bias folded in, then ReLU.
extern "C" __global__ void scale_shift_relu(float* y, const float* scale, const float* shift, long long rows, int n) {
    long long total = rows * n;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        int c = (int)(i % n);
        y[i] = fmaxf(y[i] * scale[c] + shift[c], 0.0f);
    }
}

// dst[b][c] = mean over the HW pixels of src[b*HW + p][c].
extern "C" __global__ void avgpool(const float* src, float* dst, int B, int HW, int C) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < B * C; i += gridDim.x * blockDim.x) {
        int b = i / C, c = i % C;
        const float* s = src + (long long)b * HW * C + c;
        float acc = 0.0f;
        for (int p = 0; p < HW; p++) acc += s[(long long)p * C];
        dst[i] = acc / HW;
    }
}

// One block per row of d: y = (x - mean) / sqrt(var + 1e-5).
extern "C" __global__ void layernorm(const float* x, float* y, int d) {
    __shared__ float sh[32];
    const float* r = x + (long long)blockIdx.x * d;
    float* o = y + (long long)blockIdx.x * d;
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) s += r[i];
    float mean = block_reduce(s, sh, false) / d;
    float v = 0.0f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) { float t = r[i] - mean; v += t * t; }
    float inv = 1.0f / sqrtf(block_reduce(v, sh, false) / d + 1e-5f);
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = (r[i] - mean) * inv;
}

// One block's row r of n, in place: softmax over its first len (1 <= len
// <= n), zeros past them.
__device__ void softmax_row(float* r, int len, int n, float* sh) {
    float m = NEG_INF;
    for (int i = threadIdx.x; i < len; i += blockDim.x) m = fmaxf(m, r[i]);
    m = block_reduce(m, sh, true);
    float s = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) { float e = expf(r[i] - m); r[i] = e; s += e; }
    float inv = 1.0f / block_reduce(s, sh, false);
    for (int i = threadIdx.x; i < n; i += blockDim.x) r[i] = i < len ? r[i] * inv : 0.0f;
}

// One block per row of n, in place: x = exp(x - max) / sum.
extern "C" __global__ void softmax(float* x, int n) {
    __shared__ float sh[32];
    softmax_row(x + (long long)blockIdx.x * n, n, n, sh);
}

// A token's length or id read from an input float: a whole number in
// [lo, hi], anything else (NaN, out of range) clamped into it.
__device__ int clamp_index(float x, int lo, int hi) {
    return x >= (float)lo && x <= (float)hi ? (int)x : lo;
}

// Variable-length token sequences (B inputs of 1 + seq floats: the length
// L, then seq token ids) embedded into B padded sequences of S <= seq rows
// of d: row t of sequence b is emb[id] + pos[t] for t < L, zeros past it.
extern "C" __global__ void embed(const float* in, const float* emb, const float* pos, float* out, int B, int S, int seq, int d, int vocab) {
    long long n = (long long)B * S * d;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        int k = (int)(i % d);
        long long row = i / d;
        int t = (int)(row % S), b = (int)(row / S);
        const float* x = in + (long long)b * (1 + seq);
        int len = clamp_index(x[0], 1, S);
        out[i] = t < len ? emb[(long long)clamp_index(x[1 + t], 0, vocab - 1) * d + k] + pos[(long long)t * d + k] : 0.0f;
    }
}

// softmax over the first L of each row of n, zeros past them, in place:
// row r belongs to sequence r / per_seq, whose length L is the first float
// of its input (inputs of 1 + seq floats, clamped to [1, n]).
extern "C" __global__ void softmax_masked(float* x, int n, const float* in, int seq, int per_seq) {
    __shared__ float sh[32];
    int len = clamp_index(in[(long long)(blockIdx.x / per_seq) * (1 + seq)], 1, n);
    softmax_row(x + (long long)blockIdx.x * n, len, n, sh);
}

// Does nothing: a mark in a profiler's kernel list (`mem_util.rs`).
extern "C" __global__ void marker(int tag) {}

// dst[b][:] = src[b * stride + :d] for B rows of d: each sequence's first row.
extern "C" __global__ void take_rows(const float* src, float* dst, int B, long long stride, int d) {
    long long n = (long long)B * d;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = src[(i / d) * stride + i % d];
    }
}
"#;

/// Threads per block of every launch (a multiple of the warp size, as the
/// block reduction needs).
const THREADS: u32 = 256;
/// Grid-stride kernels use at most this many blocks.
const MAX_BLOCKS: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    None = 0,
    Relu = 1,
    Gelu = 2,
}

pub struct Kernels {
    im2col3: CudaFunction,
    bias_act: CudaFunction,
    scale_shift_relu: CudaFunction,
    avgpool: CudaFunction,
    layernorm: CudaFunction,
    softmax: CudaFunction,
    embed: CudaFunction,
    softmax_masked: CudaFunction,
    take_rows: CudaFunction,
    marker: CudaFunction,
}

/// Variable-length token inputs (`cuda/varlen.rs`): `b` inputs of `1 +
/// seq` floats (the length, then the ids) at `ptr`.
#[derive(Clone, Copy, Debug)]
pub struct Tokens {
    pub ptr: DevPtr,
    pub b: usize,
    pub seq: usize,
}

/// The kernels as PTX, compiled by NVRTC (loaded at run time).
pub fn ptx() -> Result<Ptx, CudaError> {
    // SAFETY: only tries to load the NVRTC library and reports whether that
    // worked (cudarc panics on first use of a library it cannot load).
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CudaError::Compile("NVRTC (libnvrtc) is not installed".into()));
    }
    let opts = CompileOptions { name: Some("baton_kernels.cu".into()), ..Default::default() };
    cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts).map_err(|e| CudaError::Compile(format!("{e}")))
}

fn grid_stride(n: u64) -> LaunchConfig {
    let blocks = n.div_ceil(u64::from(THREADS)).clamp(1, MAX_BLOCKS) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

fn int(v: usize) -> i32 {
    i32::try_from(v).expect("a model dimension fits an int (checked when the model is built)")
}

impl Kernels {
    /// Compiles the kernels for the stream's device and loads them.
    pub fn compile(stream: &Arc<CudaStream>) -> Result<Self, CudaError> {
        let module = stream.context().load_module(ptx()?)?;
        let f = |name: &str| module.load_function(name);
        Ok(Self {
            im2col3: f("im2col3")?,
            bias_act: f("bias_act")?,
            scale_shift_relu: f("scale_shift_relu")?,
            avgpool: f("avgpool")?,
            layernorm: f("layernorm")?,
            softmax: f("softmax")?,
            embed: f("embed")?,
            softmax_masked: f("softmax_masked")?,
            take_rows: f("take_rows")?,
            marker: f("marker")?,
        })
    }

    /// The 3x3 patches of `b` images of `c x h x w` (strides as in the
    /// kernel's comment) into `dst[b*h*w x c*9]`.
    #[allow(clippy::too_many_arguments)]
    pub fn im2col3(
        &self,
        s: &CudaStream,
        src: DevPtr,
        dst: DevPtr,
        b: usize,
        c: usize,
        (h, w): (usize, usize),
        (cs, ps): (usize, usize),
    ) -> Result<(), CudaError> {
        let cfg = grid_stride((b * h * w * c * 9) as u64);
        let (bb, cc, hh, ww, css, pss) = (int(b), int(c), int(h), int(w), int(cs), int(ps));
        let mut l = s.launch_builder(&self.im2col3);
        l.arg(&src.0).arg(&dst.0).arg(&bb).arg(&cc).arg(&hh).arg(&ww).arg(&css).arg(&pss);
        // SAFETY: the signature matches the kernel's (two pointers, six
        // ints); `src` holds b*c*h*w floats and `dst` b*h*w*c*9, as the
        // models size their buffers for their largest batch.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// `y[rows x n] = act(y + bias + res)`; `res` may be `DevPtr::NULL`.
    pub fn bias_act(
        &self,
        s: &CudaStream,
        y: DevPtr,
        bias: DevPtr,
        res: DevPtr,
        (rows, n): (usize, usize),
        act: Act,
    ) -> Result<(), CudaError> {
        let cfg = grid_stride((rows * n) as u64);
        let (r, nn, a) = (rows as i64, int(n), act as i32);
        let mut l = s.launch_builder(&self.bias_act);
        l.arg(&y.0).arg(&bias.0).arg(&res.0).arg(&r).arg(&nn).arg(&a);
        // SAFETY: signature (three pointers, long long, two ints) matches;
        // `y` and `res` (when not null) hold rows*n floats, `bias` n.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// `y[rows x n] = max(y * scale + shift, 0)`, per column.
    pub fn scale_shift_relu(
        &self,
        s: &CudaStream,
        y: DevPtr,
        scale: DevPtr,
        shift: DevPtr,
        (rows, n): (usize, usize),
    ) -> Result<(), CudaError> {
        let cfg = grid_stride((rows * n) as u64);
        let (r, nn) = (rows as i64, int(n));
        let mut l = s.launch_builder(&self.scale_shift_relu);
        l.arg(&y.0).arg(&scale.0).arg(&shift.0).arg(&r).arg(&nn);
        // SAFETY: signature (three pointers, long long, int) matches; `y`
        // holds rows*n floats, `scale` and `shift` n each.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    pub fn avgpool(
        &self,
        s: &CudaStream,
        src: DevPtr,
        dst: DevPtr,
        b: usize,
        hw: usize,
        c: usize,
    ) -> Result<(), CudaError> {
        let cfg = grid_stride((b * c) as u64);
        let (bb, hh, cc) = (int(b), int(hw), int(c));
        let mut l = s.launch_builder(&self.avgpool);
        l.arg(&src.0).arg(&dst.0).arg(&bb).arg(&hh).arg(&cc);
        // SAFETY: signature (two pointers, three ints) matches; `src` holds
        // b*hw*c floats and `dst` b*c.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    pub fn layernorm(&self, s: &CudaStream, x: DevPtr, y: DevPtr, rows: usize, d: usize) -> Result<(), CudaError> {
        let dd = int(d);
        let mut l = s.launch_builder(&self.layernorm);
        l.arg(&x.0).arg(&y.0).arg(&dd);
        // SAFETY: signature (two pointers, int) matches; one block per row
        // of `x` and `y`, each rows*d floats.
        unsafe { l.launch(per_row(rows)) }?;
        Ok(())
    }

    pub fn softmax(&self, s: &CudaStream, x: DevPtr, rows: usize, n: usize) -> Result<(), CudaError> {
        let nn = int(n);
        let mut l = s.launch_builder(&self.softmax);
        l.arg(&x.0).arg(&nn);
        // SAFETY: signature (pointer, int) matches; one block per row of
        // `x`, rows*n floats.
        unsafe { l.launch(per_row(rows)) }?;
        Ok(())
    }

    /// Embeds `tokens` into `out[b*s x d]`: `s` rows per sequence (its
    /// padded length), `emb[vocab x d]`, `pos[seq x d]`.
    pub fn embed(
        &self,
        st: &CudaStream,
        tokens: Tokens,
        (emb, pos, vocab): (DevPtr, DevPtr, usize),
        out: DevPtr,
        (s, d): (usize, usize),
    ) -> Result<(), CudaError> {
        assert!(s <= tokens.seq && vocab > 0, "padded length {s} of at most {}, vocabulary {vocab}", tokens.seq);
        let (bb, ss, seq, dd, vv) = (int(tokens.b), int(s), int(tokens.seq), int(d), int(vocab));
        let mut l = st.launch_builder(&self.embed);
        l.arg(&tokens.ptr.0).arg(&emb.0).arg(&pos.0).arg(&out.0).arg(&bb).arg(&ss).arg(&seq).arg(&dd).arg(&vv);
        // SAFETY: signature (four pointers, five ints) matches; `tokens`
        // holds b*(1+seq) floats, `emb` vocab*d, `pos` seq*d and `out`
        // b*s*d; every id and length is clamped in range by the kernel.
        unsafe { l.launch(grid_stride((tokens.b * s * d) as u64)) }?;
        Ok(())
    }

    /// Softmax over each row of `x[rows x n]` masked to its sequence's
    /// length: `per_seq` consecutive rows belong to each of `tokens`'
    /// sequences in turn.
    pub fn softmax_masked(
        &self,
        st: &CudaStream,
        x: DevPtr,
        (rows, n): (usize, usize),
        tokens: Tokens,
        per_seq: usize,
    ) -> Result<(), CudaError> {
        assert_eq!(rows, tokens.b * per_seq, "every row belongs to one of the sequences");
        let (nn, seq, per) = (int(n), int(tokens.seq), int(per_seq));
        let mut l = st.launch_builder(&self.softmax_masked);
        l.arg(&x.0).arg(&nn).arg(&tokens.ptr.0).arg(&seq).arg(&per);
        // SAFETY: signature (pointer, int, pointer, two ints) matches; one
        // block per row of `x` (rows*n floats), and row r reads the length
        // of sequence r / per_seq < b of `tokens`.
        unsafe { l.launch(per_row(rows)) }?;
        Ok(())
    }

    /// An empty kernel tagged `tag`, for a profiler's list to split at.
    pub fn marker(&self, st: &CudaStream, tag: usize) -> Result<(), CudaError> {
        let t = int(tag);
        let mut l = st.launch_builder(&self.marker);
        l.arg(&t);
        // SAFETY: signature (int) matches; the kernel touches no memory.
        unsafe { l.launch(grid_stride(1)) }?;
        Ok(())
    }

    /// `dst[b x d]`: the first `d` floats of each of `b` blocks of `stride`
    /// floats at `src`.
    pub fn take_rows(
        &self,
        st: &CudaStream,
        src: DevPtr,
        dst: DevPtr,
        (b, stride, d): (usize, usize, usize),
    ) -> Result<(), CudaError> {
        assert!(d <= stride, "a row of {d} within blocks of {stride}");
        let (bb, ss, dd) = (int(b), stride as i64, int(d));
        let mut l = st.launch_builder(&self.take_rows);
        l.arg(&src.0).arg(&dst.0).arg(&bb).arg(&ss).arg(&dd);
        // SAFETY: signature (two pointers, int, long long, int) matches;
        // `src` holds b*stride floats and `dst` b*d.
        unsafe { l.launch(grid_stride((b * d) as u64)) }?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where NVRTC is installed (GPU machines; `LD_LIBRARY_PATH` to a
    /// pip `nvidia-cuda-nvrtc` elsewhere) the kernels must compile and
    /// export every entry point; elsewhere the absence is a typed error.
    #[test]
    fn the_kernels_compile_where_nvrtc_is_installed() {
        match ptx() {
            Ok(p) => {
                let text = p.to_src();
                for k in [
                    "im2col3",
                    "bias_act",
                    "scale_shift_relu",
                    "avgpool",
                    "layernorm",
                    "softmax",
                    "embed",
                    "softmax_masked",
                    "take_rows",
                    "marker",
                ] {
                    assert!(text.contains(&format!(".entry {k}(")), "{k} missing from the PTX");
                }
            }
            Err(CudaError::Compile(why)) => assert!(why.contains("not installed"), "{why}"),
            Err(e) => panic!("{e}"),
        }
    }
}
