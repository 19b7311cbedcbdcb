//! Work a policy hands out to run away from its dispatch path.
//!
//! A policy's long computations — glet's re-plan at an epoch's end takes
//! milliseconds (`perf`'s `glet_replan`: 1–8 ms) — stall every request
//! behind them when they run in the call that needs them, on the shard
//! that makes every dispatch decision. The simulator does not see that
//! stall: its virtual time stands still while a policy computes. So a
//! policy asked to (`Scheduler::offload`) wraps such a computation, with
//! everything it reads, into an `Offload`, and the caller takes it
//! (`Scheduler::take_offload`), runs it wherever it likes (the engine: on
//! a helper thread) and gives the result back (`Scheduler::on_offloaded`);
//! meanwhile the policy goes on deciding with what it has. A policy not
//! asked runs the same computation in place: the simulator never asks, so
//! its results do not depend on any of this.
//!
//! The job owns what it reads (no reference into the policy), so nothing
//! the policy does meanwhile can change it; the policy applies its result
//! as of when it comes back, and hands out at most one job at a time.

use std::any::Any;

/// A computation handed out by a policy, with everything it reads.
pub struct Offload(Box<dyn FnOnce() -> Offloaded + Send>);

/// What an `Offload` computed, for the policy that handed it out.
pub struct Offloaded(Box<dyn Any + Send>);

impl Offload {
    /// `job`, to be run once, anywhere.
    pub fn new<T: Any + Send>(job: impl FnOnce() -> T + Send + 'static) -> Self {
        Self(Box::new(move || Offloaded(Box::new(job()))))
    }

    pub fn run(self) -> Offloaded {
        (self.0)()
    }
}

impl Offloaded {
    /// The result as the policy's own type. Panics on another type: a
    /// result given to a policy that did not hand out its job is a bug.
    pub fn take<T: Any>(self) -> T {
        match self.0.downcast() {
            Ok(t) => *t,
            Err(_) => panic!("an offloaded result of another type than {}", std::any::type_name::<T>()),
        }
    }
}

impl std::fmt::Debug for Offload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Offload")
    }
}

impl std::fmt::Debug for Offloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Offloaded")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job may cross threads (its caller runs it on one of its own:
    /// `core/src/roles/offload.rs`, whose tests do); here it runs in place.
    #[test]
    fn a_job_runs_once_and_its_result_comes_back_typed() {
        fn crosses_threads<T: Send>(_: &T) {}
        let data = [1u64, 2, 3];
        let job = Offload::new(move || data.iter().sum::<u64>());
        crosses_threads(&job);
        assert_eq!(job.run().take::<u64>(), 6);
    }

    #[test]
    #[should_panic(expected = "another type")]
    fn a_result_of_another_type_is_a_bug() {
        Offload::new(|| 1u32).run().take::<u64>();
    }
}
