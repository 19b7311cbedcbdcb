//! `baton profile --executor cpu`: measures the CPU executor's models
//! (`baton_gpu::reference::CpuConfig::serving`, on its own thread, pinned
//! with `--core`) as `measure.rs` measures any executor's, and the shared
//! trunk (`mlp`) and one of its heads, b = 1..B, each the median of `reps`
//! runs, timed apart on the calling thread (through the executor a variant
//! runs whole): a prefix group's two profiles. The scenarios are
//! `dynamic_scenario.rs`'s.

use baton_gpu::reference::varlen::{self, Varlen};
use baton_gpu::reference::CpuConfig;
use baton_gpu::supernet::default_subnets;
use baton_gpu::ExecError;

use super::dynamic_scenario::{DynamicProfile, PrefixProfile};
use super::measure::{dynamic, fixed, model, subnets, Options};

pub fn measure(o: &Options) -> Result<DynamicProfile, ExecError> {
    let cfg = CpuConfig { max_batch: o.max_batch, core: o.core, ..CpuConfig::serving() };
    let mut exec = cfg.executor()?;
    let fixed = fixed(&mut exec, &["resnet-block", "encoder-block"], o)?;
    let subnets = subnets(&mut exec, &default_subnets(&cfg.shapes.supernet), o)?;
    let vm = model(&exec, varlen::NAME)?;
    let shape = cfg.varlen;
    let (apps, kappa) = dynamic(&mut exec, vm, shape.seq, &|len, salt| Varlen::input(shape, len, salt), o)?;
    let shared = cfg.build_shared();
    let parts: Vec<_> = (1..=o.max_batch as usize).map(|b| shared.time_parts(b, o.reps)).collect();
    let prefix = PrefixProfile {
        trunk_name: baton_gpu::reference::cpu::SHARED_TRUNK.into(),
        heads: cfg.shared.heads,
        trunk: parts.iter().map(|p| p.0).collect(),
        head: parts.iter().map(|p| p.1).collect(),
    };
    let device = format!("one CPU thread{}", o.core.map_or(String::new(), |c| format!(" (core {c})")));
    Ok(DynamicProfile {
        name: "cpu-varlen".into(),
        device,
        ctrl_delay_us: 100,
        command: o.command.clone(),
        reps: o.reps,
        max_batch: o.max_batch,
        fixed,
        subnets,
        dynamic: varlen::NAME.into(),
        kappa,
        apps,
        prefix: Some(prefix),
    })
}
