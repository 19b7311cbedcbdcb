//! An executor that fails or stalls some of its batches, from a seed.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use baton_gpu::{Batch, ExecError, Executor, ModelInfo};
use baton_sched::rng::Rng;

/// What the executors of a run did wrong, shared with the world.
#[derive(Default)]
pub struct ExecFaults {
    pub failed: Cell<u64>,
    pub stalled: Cell<u64>,
    /// The drain phase: no more faults.
    pub calm: Cell<bool>,
}

pub struct Faulty {
    pub inner: Box<dyn Executor>,
    pub rng: Rng,
    pub p_fail: f64,
    pub p_stall: f64,
    pub stall_max: Duration,
    pub faults: Rc<ExecFaults>,
}

impl Executor for Faulty {
    fn models(&self) -> &[ModelInfo] {
        self.inner.models()
    }

    /// Runs the batch; then, outside the drain, fails it (a device error:
    /// its requests are dropped `BackendFailed`) or adds a stall to its time.
    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        let took = self.inner.run(batch, outputs)?;
        if self.faults.calm.get() {
            return Ok(took);
        }
        let u = self.rng.unit();
        if u < self.p_fail {
            self.faults.failed.set(self.faults.failed.get() + 1);
            return Err(ExecError::Device("injected: the device failed the batch".into()));
        }
        if u < self.p_fail + self.p_stall {
            self.faults.stalled.set(self.faults.stalled.get() + 1);
            return Ok(took + self.stall_max.mul_f64(self.rng.unit()));
        }
        Ok(took)
    }
}
