//! `baton profile --executor cpu`: measures the CPU executor's models
//! (`baton_gpu::reference::CpuConfig::serving`, on its own thread, pinned
//! with `--core`) as `measure.rs` measures any executor's, and the shared
//! trunk (`mlp`) and one of its heads, b = 1..B, each the median of `reps`
//! runs, timed apart on the calling thread (through the executor a variant
//! runs whole): a prefix group's two profiles. The scenarios are
//! `dynamic_scenario.rs`'s.

use baton_gpu::reference::varlen::{self, Varlen};
use baton_gpu::reference::CpuConfig;
use baton_gpu::ExecError;

use super::dynamic_scenario::{DynamicProfile, PrefixProfile};
use super::measure::{profile, DynamicModel, Options, Site};

pub fn measure(o: &Options) -> Result<DynamicProfile, ExecError> {
    let cfg = CpuConfig { max_batch: o.max_batch, core: o.core, ..CpuConfig::serving() };
    let mut exec = cfg.executor()?;
    let device = format!("one CPU thread{}", o.core.map_or(String::new(), |c| format!(" (core {c})")));
    let site = Site { name: "cpu-varlen", device, ctrl_delay_us: 100 };
    let shape = cfg.varlen;
    let input = |len, salt| Varlen::input(shape, len, salt);
    let dynamic = DynamicModel { name: varlen::NAME, seq: shape.seq, input: &input };
    let mut p = profile(&mut exec, site, &cfg.shapes.supernet, dynamic, o)?;
    let shared = cfg.build_shared();
    let parts: Vec<_> = (1..=o.max_batch as usize).map(|b| shared.time_parts(b, o.reps)).collect();
    p.prefix = Some(PrefixProfile {
        trunk_name: baton_gpu::reference::cpu::SHARED_TRUNK.into(),
        heads: cfg.shared.heads,
        trunk: parts.iter().map(|p| p.0).collect(),
        head: parts.iter().map(|p| p.1).collect(),
    });
    Ok(p)
}
