//! The CUDA device, as far as the executor has been built (issue 8): the
//! driver is loaded at run time (cudarc's dynamic loading; the build needs
//! no CUDA toolkit), and a machine without a driver or a device gets a
//! typed `ExecError::NoDevice` — never a panic (cudarc's context
//! constructor panics when libcuda is absent, so presence is checked
//! first).
//!
//! Not built yet: the models (CNN, transformer block), CUDA graphs per
//! batch size, `baton profile`, partitions. Opening a device is what a GPU
//! machine can check today.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::executor::ExecError;

pub struct CudaDevice {
    pub ordinal: usize,
    pub name: String,
    pub total_mem_bytes: usize,
    /// Kept open for the executor that will run on it.
    _ctx: Arc<CudaContext>,
}

/// Opens CUDA device `ordinal`, or says why there is none.
pub fn open(ordinal: usize) -> Result<CudaDevice, ExecError> {
    let no = |why: String| ExecError::NoDevice(why);
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
    let name = ctx.name().map_err(|e| no(format!("CUDA device {ordinal}: {e:?}")))?;
    let total_mem_bytes = ctx.total_mem().map_err(|e| no(format!("CUDA device {ordinal}: {e:?}")))?;
    Ok(CudaDevice { ordinal, name, total_mem_bytes, _ctx: ctx })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_opens_or_its_absence_is_a_typed_error() {
        match open(0) {
            Ok(d) => assert!(!d.name.is_empty() && d.total_mem_bytes > 0),
            Err(ExecError::NoDevice(why)) => assert!(why.contains("CUDA"), "{why}"),
            Err(e) => panic!("not a device error: {e}"),
        }
        assert!(matches!(open(1 << 20), Err(ExecError::NoDevice(_))));
    }
}
