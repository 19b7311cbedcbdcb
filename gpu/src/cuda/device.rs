//! One CUDA device as the executor uses it: a context, the one stream all
//! work goes to, a cuBLAS handle on that stream with a preallocated
//! workspace (so that cuBLAS allocates nothing while a graph is being
//! captured), the NVRTC kernels, and device memory taken from a configured
//! limit at start-up — nothing is allocated while batches run.
//!
//! The driver is loaded at run time (cudarc's dynamic loading; the build
//! needs no CUDA toolkit). A machine without a driver or a device gets a
//! typed `CudaError::NoDevice`, never a panic: cudarc's context constructor
//! panics when libcuda is absent, so its presence is checked first.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

use super::kernels::Kernels;
use crate::executor::ExecError;

/// A raw device address (`CUdeviceptr`) inside a buffer `Gpu` owns; the
/// models keep these to address their weights and activations, offsets
/// included, as cuBLAS and the kernels take them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevPtr(pub u64);

impl DevPtr {
    pub const NULL: DevPtr = DevPtr(0);

    /// The address `floats` f32s further on.
    pub fn at(self, floats: usize) -> DevPtr {
        DevPtr(self.0 + 4 * floats as u64)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum CudaError {
    /// No driver, no device, or the device would not open.
    NoDevice(String),
    /// The models need more device memory than the configured limit.
    Memory {
        need_mib: usize,
        limit_mib: usize,
    },
    /// NVRTC refused the kernels (the log says why).
    Compile(String),
    Driver(String),
    Blas(String),
}

impl std::fmt::Display for CudaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoDevice(why) => write!(f, "{why}"),
            Self::Memory { need_mib, limit_mib } => {
                write!(f, "the models need {need_mib} MiB of device memory, the limit is {limit_mib} MiB")
            }
            Self::Compile(log) => write!(f, "NVRTC could not compile the kernels: {log}"),
            Self::Driver(e) => write!(f, "CUDA driver: {e}"),
            Self::Blas(e) => write!(f, "cuBLAS: {e}"),
        }
    }
}

impl std::error::Error for CudaError {}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Self::Driver(format!("{e}"))
    }
}

impl From<cudarc::cublas::result::CublasError> for CudaError {
    fn from(e: cudarc::cublas::result::CublasError) -> Self {
        Self::Blas(format!("{e}"))
    }
}

impl From<CudaError> for ExecError {
    fn from(e: CudaError) -> Self {
        match e {
            CudaError::NoDevice(why) => ExecError::NoDevice(why),
            other => ExecError::Device(other.to_string()),
        }
    }
}

/// What `open` found.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub total_mem_bytes: usize,
    pub compute_capability: (i32, i32),
}

/// Opens the context of CUDA device `ordinal`, or says why there is none.
pub fn open_context(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo), CudaError> {
    let no = |why: String| CudaError::NoDevice(why);
    // SAFETY: `is_culib_present` only tries to load the driver library and
    // reports whether that worked; it has no other effect.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(no("no CUDA device: the CUDA driver (libcuda) is not installed".into()));
    }
    let count = CudaContext::device_count().map_err(|e| no(format!("no CUDA device: the driver says {e:?}")))?;
    if ordinal >= count.max(0) as usize {
        return Err(no(format!("no CUDA device {ordinal}: the driver sees {count}")));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| no(format!("CUDA device {ordinal}: {e:?}")))?;
    let info = DeviceInfo {
        ordinal,
        name: ctx.name()?,
        total_mem_bytes: ctx.total_mem()?,
        compute_capability: ctx.compute_capability()?,
    };
    Ok((ctx, info))
}

/// The device, its stream, cuBLAS, the kernels and the memory budget.
pub struct Gpu {
    pub info: DeviceInfo,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub blas: CudaBlas,
    pub kernels: Kernels,
    /// Every device buffer, owned here so that the `DevPtr`s into them
    /// stay valid as long as the `Gpu` does.
    buffers: Vec<CudaSlice<f32>>,
    used_bytes: usize,
    limit_bytes: usize,
}

/// cuBLAS's workspace, given to it up front so that no GEMM allocates
/// while a graph is captured (cuBLAS's advice for graph capture).
const BLAS_WORKSPACE_BYTES: usize = 32 << 20;

impl Gpu {
    /// Opens device `ordinal` with at most `limit_bytes` of device memory
    /// for buffers (cuBLAS's workspace included).
    pub fn open(ordinal: usize, limit_bytes: usize) -> Result<Self, CudaError> {
        let (ctx, info) = open_context(ordinal)?;
        Self::on_context(ctx, info, limit_bytes)
    }

    /// As `open`, on a given context of the device (a GPU partition's).
    pub fn on_context(ctx: Arc<CudaContext>, info: DeviceInfo, limit_bytes: usize) -> Result<Self, CudaError> {
        // SAFETY: every kernel, copy and GEMM goes to the one stream below,
        // in order, so the per-buffer events cudarc records to order work
        // across streams are not needed — and they could not be recorded
        // while a graph is captured.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let blas = CudaBlas::new(stream.clone())?;
        let kernels = Kernels::compile(&stream)?;
        let mut gpu = Self { info, ctx, stream, blas, kernels, buffers: Vec::new(), used_bytes: 0, limit_bytes };
        let ws = gpu.alloc(BLAS_WORKSPACE_BYTES / 4)?;
        // SAFETY: `ws` is a device buffer of BLAS_WORKSPACE_BYTES that lives
        // as long as `gpu`, which owns the handle.
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(*gpu.blas.handle(), ws.0 as *mut _, BLAS_WORKSPACE_BYTES)
                .result()?
        };
        Ok(gpu)
    }

    /// A zeroed device buffer of `floats` f32s, charged to the limit.
    pub fn alloc(&mut self, floats: usize) -> Result<DevPtr, CudaError> {
        let bytes = floats.max(1) * 4;
        if self.used_bytes + bytes > self.limit_bytes {
            return Err(CudaError::Memory {
                need_mib: (self.used_bytes + bytes).div_ceil(1 << 20),
                limit_mib: self.limit_bytes >> 20,
            });
        }
        let buf = self.stream.alloc_zeros::<f32>(floats.max(1))?;
        let ptr = DevPtr(buf.device_ptr(&self.stream).0);
        self.buffers.push(buf);
        self.used_bytes += bytes;
        Ok(ptr)
    }

    /// A device copy of `data` (weights), charged to the limit.
    pub fn upload(&mut self, data: &[f32]) -> Result<DevPtr, CudaError> {
        let ptr = self.alloc(data.len())?;
        // SAFETY: `ptr` addresses data.len() floats; the copy is waited for
        // before `data` can go away.
        unsafe { cudarc::driver::result::memcpy_htod_async(ptr.0, data, self.stream.cu_stream()) }?;
        self.stream.synchronize()?;
        Ok(ptr)
    }

    /// Device memory charged so far, in bytes.
    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    /// A copy of `floats` f32s at `ptr` (tests and checks; synchronous).
    pub fn download(&self, ptr: DevPtr, floats: usize) -> Result<Vec<f32>, CudaError> {
        let mut out = vec![0.0f32; floats];
        // SAFETY: `ptr` addresses at least `floats` floats of a buffer this
        // `Gpu` owns; the stream is synchronised before `out` is read.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut out, ptr.0, self.stream.cu_stream()) }?;
        self.stream.synchronize()?;
        Ok(out)
    }
}
