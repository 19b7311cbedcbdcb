//! # baton-gpu — executors (not yet built)
//!
//! **Will own:** one `Executor` trait and its implementations: emulated
//! (runs for the profile's l(b)), CPU (real arithmetic), CUDA (cudarc, one
//! CUDA graph per model and batch size, partitions) and the SubNetAct
//! supernet; plus the conformance suite every executor runs.
//!
//! **Is not:** a scheduler: an executor runs the batch it is given, when it
//! is told. The simulator's emulated backends live in `baton-sched::sim`,
//! because they are part of the deterministic simulation, not of a server.
//!
//! Nothing is implemented yet: executors are the subject of their own issues.
