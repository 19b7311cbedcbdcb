//! GPU spatial partitions for glet, as CUDA green contexts: the device's
//! streaming multiprocessors (SMs) split into two disjoint groups, each a
//! context of its own. Work submitted in one runs on its SMs only (memory
//! bandwidth and L2 stay shared — the interference glet models), so an
//! executor built on a partition's context measures L(b, p).
//!
//! A partition's size is a share p of the SMs; the driver rounds the SM
//! count up to its split granularity, so `sms` says what was granted.
//!
//! The green contexts live as long as the process: cudarc would destroy the
//! derived context with `cuCtxDestroy`, which green contexts do not
//! support, so their `CudaContext`s are never dropped (the partitions are
//! built once, by `baton profile --partitions`).

use std::mem::MaybeUninit;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdevResourceType, CUgreenCtxCreate_flags};
use cudarc::driver::CudaContext;

use super::device::{open_context, CudaError, DeviceInfo};

/// One group of SMs and the context that runs on them.
#[derive(Clone)]
pub struct Partition {
    pub ctx: Arc<CudaContext>,
    pub sms: u32,
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partition").field("sms", &self.sms).finish_non_exhaustive()
    }
}

fn check(what: &str, r: sys::CUresult) -> Result<(), CudaError> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(CudaError::Driver(format!("{what}: {e:?}"))),
    }
}

/// The device's whole SM resource.
fn sm_resource(dev: sys::CUdevice) -> Result<sys::CUdevResource, CudaError> {
    let mut res = MaybeUninit::<sys::CUdevResource>::zeroed();
    // SAFETY: `res` is a zeroed out-parameter of the right type; `dev` is a
    // device handle from an open context.
    check("cuDeviceGetDevResource", unsafe {
        sys::cuDeviceGetDevResource(dev, res.as_mut_ptr(), CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM)
    })?;
    // SAFETY: the driver filled it in.
    Ok(unsafe { res.assume_init() })
}

/// SMs of a resource.
fn sms_of(r: &sys::CUdevResource) -> u32 {
    // SAFETY: an SM resource's union holds its `sm` member.
    unsafe { r.__bindgen_anon_1.sm.smCount }
}

/// A green context on the SMs of `res`, as a `CudaContext` (never dropped;
/// see the module's comment).
fn green_context(info: &DeviceInfo, dev: sys::CUdevice, mut res: sys::CUdevResource) -> Result<Partition, CudaError> {
    let sms = sms_of(&res);
    let mut desc = MaybeUninit::<sys::CUdevResourceDesc>::uninit();
    let mut green = MaybeUninit::<sys::CUgreenCtx>::uninit();
    let mut ctx = MaybeUninit::<sys::CUcontext>::uninit();
    // SAFETY: each call fills its out-parameter from valid inputs: one SM
    // resource the split produced, the descriptor made of it, the green
    // context made of that.
    unsafe {
        check("cuDevResourceGenerateDesc", sys::cuDevResourceGenerateDesc(desc.as_mut_ptr(), &mut res, 1))?;
        check(
            "cuGreenCtxCreate",
            sys::cuGreenCtxCreate(
                green.as_mut_ptr(),
                desc.assume_init(),
                dev,
                CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32,
            ),
        )?;
        check("cuCtxFromGreenCtx", sys::cuCtxFromGreenCtx(ctx.as_mut_ptr(), green.assume_init()))?;
    }
    // SAFETY: a valid context of device `dev`, whose ownership passes to
    // cudarc; it is kept alive for the process (module comment).
    let ctx = unsafe { CudaContext::from_raw_context(info.ordinal, dev, ctx.assume_init()) }?;
    std::mem::forget(Arc::clone(&ctx));
    Ok(Partition { ctx, sms })
}

/// The SMs of device `ordinal`.
pub fn device_sms(ordinal: usize) -> Result<u32, CudaError> {
    let (ctx, _) = open_context(ordinal)?;
    Ok(sms_of(&sm_resource(ctx.cu_device())?))
}

/// Splits device `ordinal` into a partition of at least `sms` SMs and one
/// of the rest (both as granted by the driver).
pub fn split(ordinal: usize, sms: u32) -> Result<(Partition, Partition), CudaError> {
    let (primary, info) = open_context(ordinal)?;
    let dev = primary.cu_device();
    let whole = sm_resource(dev)?;
    let mut part = MaybeUninit::<sys::CUdevResource>::zeroed();
    let mut rest = MaybeUninit::<sys::CUdevResource>::zeroed();
    let mut groups = 1u32;
    // SAFETY: one result slot (`groups` = 1), one remainder, from the
    // device's whole SM resource.
    check("cuDevSmResourceSplitByCount", unsafe {
        sys::cuDevSmResourceSplitByCount(part.as_mut_ptr(), &mut groups, &whole, rest.as_mut_ptr(), 0, sms)
    })?;
    if groups != 1 {
        return Err(CudaError::Driver(format!("splitting off {sms} SMs gave {groups} groups")));
    }
    // SAFETY: the driver filled both.
    let (part, rest) = unsafe { (part.assume_init(), rest.assume_init()) };
    if sms_of(&rest) == 0 {
        return Err(CudaError::Driver(format!("splitting off {sms} of {} SMs leaves none", sms_of(&whole))));
    }
    Ok((green_context(&info, dev, part)?, green_context(&info, dev, rest)?))
}
