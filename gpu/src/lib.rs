//! # baton-gpu — executors
//!
//! **Owns:** one `Executor` trait (`executor.rs`) and its implementations:
//! the emulated executor (runs for the profile's l(b)), the SubNetAct
//! supernet on the CPU (`supernet/`, real arithmetic), the reference models
//! on the CPU (`reference/`: a ResNet-style CNN and a transformer encoder
//! block, as GEMMs and elementwise kernels), the whole networks on the CPU
//! (`nets/`: ResNet-50, BERT-base and a ResNet-50-shaped supernet, with
//! their layer lists and weight layouts), and the CUDA executor
//! (`cuda/`: those models and the supernet on an NVIDIA GPU with cuBLAS and
//! NVRTC kernels, checked against the CPU references; one CUDA graph per
//! model, subnet and batch size; GPU partitions as green contexts; the
//! profiling behind `baton profile`); plus the conformance suite every
//! executor runs (`conformance.rs`); and `Threaded` (`threaded.rs`), which
//! runs any executor on a dedicated thread so that CPU compute does not
//! block its caller.
//!
//! **Is not:** a scheduler: an executor runs the batch it is given, when it
//! is told. The simulator's emulated backends live in `baton-sched::sim`,
//! because they are part of the deterministic simulation, not of a server.

pub mod conformance;
pub mod cuda;
pub mod emulated;
pub mod executor;
pub mod nets;
pub mod reference;
pub mod supernet;
pub mod threaded;
mod weights;

pub use executor::{Batch, ExecError, Executor, Launched, ModelInfo, Waker, Work};
pub use threaded::Threaded;
