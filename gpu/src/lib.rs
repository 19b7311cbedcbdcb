//! # baton-gpu — executors
//!
//! **Owns:** one `Executor` trait (`executor.rs`) and its implementations:
//! the emulated executor (runs for the profile's l(b)), the SubNetAct
//! supernet on the CPU (`supernet/`, real arithmetic), and later CUDA
//! (cudarc, one CUDA graph per model and batch size, partitions); plus the
//! conformance suite every executor runs (`conformance.rs`).
//!
//! **Is not:** a scheduler: an executor runs the batch it is given, when it
//! is told. The simulator's emulated backends live in `baton-sched::sim`,
//! because they are part of the deterministic simulation, not of a server.

pub mod conformance;
pub mod cuda;
pub mod emulated;
pub mod executor;
pub mod supernet;

pub use executor::{Batch, ExecError, Executor, ModelInfo};
