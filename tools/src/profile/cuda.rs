//! `baton profile --dynamic`: the CUDA executor measured as `measure.rs`
//! measures any executor — l(b) of its static models and of every subnet of
//! its supernet (each run in place from the one copy of the weights), and
//! its dynamic model (`encoder-tokens`: the BERT-base layer over
//! 1..=1,024 tokens) as an Orloj model: solo times per app, kappa. Times are the
//! executor's device time of a batch (input copy, graph, output copy).

use baton_gpu::cuda::{varlen, CudaConfig, CudaExecutor};
use baton_gpu::reference::tokens::TokenEncoder;
use baton_gpu::ExecError;

use super::dynamic_scenario::DynamicProfile;
use super::measure::{profile, DynamicModel, Options, Site};

pub fn measure(cfg: &CudaConfig, o: &Options) -> Result<DynamicProfile, ExecError> {
    let shape = cfg.varlen.ok_or_else(|| ExecError::Device("the configuration has no dynamic model".into()))?;
    let mut exec = CudaExecutor::new(cfg)?;
    let site = Site { name: "cuda-varlen", device: exec.device().name.clone(), ctrl_delay_us: 200 };
    let input = |len, salt| TokenEncoder::input(shape.tokens, len, salt);
    let dynamic = DynamicModel { name: varlen::NAME, seq: shape.tokens.enc.seq, input: &input };
    profile(&mut exec, site, &cfg.shapes.supernet, dynamic, o)
}
