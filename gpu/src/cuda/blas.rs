//! Row-major GEMMs on cuBLAS, which is column-major.
//!
//! A row-major matrix X (rows x cols, row stride `ld`) lies in memory
//! exactly as the column-major matrix Xᵀ (cols x rows, leading dimension
//! `ld`). So the row-major product `C = A · B` is computed as the
//! column-major `Cᵀ = Bᵀ · Aᵀ`: cuBLAS gets B first and A second, with
//! m and n swapped, and no operand is transposed. When B is stored as its
//! transpose (row-major `n x k`, as the keys are in attention's `Q · Kᵀ`),
//! its memory is the column-major `B`, so cuBLAS transposes that operand.
//!
//! Every call is strided-batched: matrix `i` of an operand starts `i *
//! stride` floats after the first; one matrix is a batch of one.

use cudarc::cublas::sys::cublasOperation_t;

use super::device::{CudaError, DevPtr, Gpu};

/// A row-major operand: its first matrix, row stride, and the distance
/// between consecutive matrices of a batch (in floats).
#[derive(Clone, Copy, Debug)]
pub struct Mat {
    pub ptr: DevPtr,
    pub ld: usize,
    pub stride: usize,
}

impl Mat {
    /// A single contiguous row-major matrix with `cols` columns.
    pub fn dense(ptr: DevPtr, cols: usize) -> Self {
        Self { ptr, ld: cols, stride: 0 }
    }
}

/// How the second operand is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum B {
    /// Row-major `k x n`.
    Plain,
    /// Row-major `n x k`: the product uses its transpose.
    Transposed,
}

fn int(v: usize) -> i32 {
    i32::try_from(v).expect("GEMM dimensions fit an int (checked when the model is built)")
}

/// `C[m x n] = alpha · A[m x k] · B[k x n]` for each of `batch` matrices.
pub fn gemm(
    gpu: &Gpu,
    (m, n, k): (usize, usize, usize),
    alpha: f32,
    a: Mat,
    (b, b_is): (Mat, B),
    c: Mat,
    batch: usize,
) -> Result<(), CudaError> {
    let op_b = match b_is {
        B::Plain => cublasOperation_t::CUBLAS_OP_N,
        B::Transposed => cublasOperation_t::CUBLAS_OP_T,
    };
    let beta = 0.0f32;
    // SAFETY: the operands are device buffers the models sized for these
    // shapes and strides at their largest batch; alpha and beta are host
    // scalars read during the call (the handle's default pointer mode).
    unsafe {
        cudarc::cublas::result::sgemm_strided_batched(
            *gpu.blas.handle(),
            op_b,
            cublasOperation_t::CUBLAS_OP_N,
            int(n),
            int(m),
            int(k),
            &alpha,
            b.ptr.0 as *const f32,
            int(b.ld),
            b.stride as i64,
            a.ptr.0 as *const f32,
            int(a.ld),
            a.stride as i64,
            &beta,
            c.ptr.0 as *mut f32,
            int(c.ld),
            c.stride as i64,
            int(batch),
        )
    }?;
    Ok(())
}

/// `C[m x n] = A[m x k] · W[k x n]`, all dense: a layer's weights applied
/// to `m` rows.
pub fn linear(gpu: &Gpu, x: DevPtr, w: DevPtr, y: DevPtr, (m, k, n): (usize, usize, usize)) -> Result<(), CudaError> {
    gemm(gpu, (m, n, k), 1.0, Mat::dense(x, k), (Mat::dense(w, n), B::Plain), Mat::dense(y, n), 1)
}
