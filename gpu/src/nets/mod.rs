//! Whole networks on the CPU, the FP32 references a GPU executor serving
//! the same networks is checked against: ResNet-50
//! (`resnet.rs`) and BERT-base (`bert.rs`), each with its layer list
//! (`Layer`: operator, shapes, weights, multiply-accumulates), its weights
//! as one flat buffer with a table of named tensors (`layout.rs`), and
//! deterministic weights from a seed; and a ResNet-50-shaped supernet
//! served in place with SubNetAct's operators (`supernet.rs`), each subnet
//! equal to its extracted network. Convolutions are GEMMs on HWC
//! activations (`conv.rs`); the encoder's operators are the reference
//! encoder block's (`reference/ops.rs`).
//!
//! `Nets` serves them behind the `Executor` trait (model 0 the ResNet,
//! model 1 the BERT, model 2 the supernet with its subnets as variants,
//! the whole network the default), so `baton profile --executor cpu --nets` measures
//! their l(b) as it measures any executor's, and a GPU executor serving
//! the same configurations is compared with it request by request.

pub mod bert;
pub mod conv;
pub mod layout;
pub mod resnet;
pub mod supernet;

use std::time::{Duration, Instant};

use crate::executor::{validate, Batch, ExecError, Executor, ModelInfo};
use bert::{Bert, BertConfig};
use resnet::{ResNet, ResNetConfig};
use supernet::{ResNetSupernet, ResSubnet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetsConfig {
    pub resnet: ResNetConfig,
    pub bert: BertConfig,
    pub max_batch: u32,
    pub seed: u64,
}

impl NetsConfig {
    /// ResNet-50 on 224x224 images and BERT-base on up to 512 tokens.
    pub const FULL: Self = Self { resnet: ResNetConfig::RESNET50, bert: BertConfig::BASE, max_batch: 64, seed: 1 };

    /// Both structures, narrow and short: for tests.
    pub const SMALL: Self = Self {
        resnet: ResNetConfig::scaled(4, 32, 10),
        bert: BertConfig { layers: 2, hidden: 32, heads: 4, ffn: 64, vocab: 100, max_positions: 16, seq: 16 },
        max_batch: 4,
        seed: 1,
    };

    pub fn check(&self) -> Result<(), ExecError> {
        let bad = |why: String| ExecError::Device(format!("networks: {why}"));
        if self.max_batch == 0 {
            return Err(bad("max_batch must be positive".into()));
        }
        self.resnet.check().map_err(bad)?;
        self.bert.check().map_err(bad)
    }

    /// What `build` serves, without building its weights.
    pub fn infos(&self) -> Vec<ModelInfo> {
        let (r, b) = (&self.resnet, &self.bert);
        let supernet = ModelInfo {
            variants: ResSubnet::defaults().len() as u16,
            ..ModelInfo::fixed(&format!("{}-supernet", r.name()), r.input_len(), r.classes, self.max_batch)
        };
        vec![
            ModelInfo::fixed(r.name(), r.input_len(), r.classes, self.max_batch),
            ModelInfo::fixed(b.name(), b.input_len(), b.hidden, self.max_batch),
            supernet,
        ]
    }

    /// The networks with their weights (ResNet-50, BERT-base and the
    /// supernet: 161 M floats, about 0.65 GB), the supernet's statistics
    /// calibrated for each subnet (a few seconds at full size).
    pub fn build(&self) -> Result<Nets, ExecError> {
        self.check()?;
        let subnets = ResSubnet::defaults();
        Ok(Nets {
            resnet: ResNet::new(self.resnet, self.seed),
            bert: Bert::new(self.bert, self.seed ^ 0xbe27),
            supernet: ResNetSupernet::new(self.resnet, &subnets, self.seed ^ 0x5b),
            subnets,
            infos: self.infos(),
        })
    }

    /// Each model's weights (floats) and multiply-accumulates per input
    /// (BERT's on `tokens` tokens; the supernet's whole network, whose
    /// convolutions keep batch normalisation's scale and shift apart),
    /// without building any.
    pub fn sizes(&self, tokens: usize) -> Vec<(usize, u64)> {
        let total = |l: &[layout::Layer]| (l.iter().map(|l| l.weights).sum::<usize>(), l.iter().map(|l| l.macs).sum());
        let resnet = self.resnet.layers();
        let (folded, macs) = total(&resnet);
        let bn: usize = resnet.iter().filter(|l| l.op.starts_with("conv")).map(|l| l.output[2]).sum();
        vec![(folded, macs), total(&self.bert.layers(tokens)), (folded + bn, macs)]
    }

    /// A valid input of `model`, different per `salt`: an image of smooth
    /// values, or `tokens` tokens (at most the longest accepted).
    pub fn input(&self, model: u32, tokens: usize, salt: u64) -> Vec<f32> {
        match model {
            0 | 2 => {
                let k = 0.013 * salt as f32 + 0.007;
                (0..self.resnet.input_len()).map(|i| (i as f32 * k).sin()).collect()
            }
            _ => self.bert.input(tokens.clamp(1, self.bert.seq), salt),
        }
    }
}

pub struct Nets {
    resnet: ResNet,
    bert: Bert,
    supernet: ResNetSupernet,
    /// The supernet's variants, in order.
    subnets: Vec<ResSubnet>,
    infos: Vec<ModelInfo>,
}

impl Nets {
    pub fn resnet(&self) -> &ResNet {
        &self.resnet
    }

    pub fn bert(&self) -> &Bert {
        &self.bert
    }

    pub fn supernet(&self) -> (&ResNetSupernet, &[ResSubnet]) {
        (&self.supernet, &self.subnets)
    }
}

impl Executor for Nets {
    fn models(&self) -> &[ModelInfo] {
        &self.infos
    }

    fn run(&mut self, batch: &Batch<'_>, outputs: &mut Vec<Vec<f32>>) -> Result<Duration, ExecError> {
        validate(&self.infos, batch)?;
        if batch.model == 1 {
            for (request, x) in batch.inputs.iter().enumerate() {
                self.bert.config.check_input(x).map_err(|why| ExecError::Input { request, why })?;
            }
        }
        let start = Instant::now();
        match batch.model {
            0 => {
                outputs.clear();
                for x in batch.inputs {
                    let mut y = vec![0.0; self.resnet.config.classes];
                    self.resnet.forward(x, &mut y);
                    outputs.push(y);
                }
            }
            1 => self.bert.forward_batch(batch.inputs, outputs),
            _ => {
                let v = batch.variant.map_or(self.subnets.len() - 1, usize::from);
                *outputs = self.supernet.run(&self.subnets[v], batch.inputs);
            }
        }
        Ok(start.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_networks_conform_and_refuse_tokens_outside_the_vocabulary() {
        let cfg = NetsConfig::SMALL;
        let mut nets = cfg.build().unwrap();
        assert_eq!(nets.models(), cfg.infos());
        let names: Vec<&str> = nets.models().iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["resnet50-scaled", "bert-scaled", "resnet50-scaled-supernet"]);
        crate::conformance::check_with(&mut nets, "nets", 0.0, &|m, _, salt| {
            cfg.input(m as u32, 5 + salt as usize, salt)
        });
        let good = cfg.input(1, 4, 0);
        let mut bad = good.clone();
        bad[2] = 100.0;
        let r = nets.run(&Batch { model: 1, variant: None, heads: None, inputs: &[&good, &bad] }, &mut Vec::new());
        assert!(matches!(&r, Err(ExecError::Input { request: 1, why }) if why.contains("below 100")), "{r:?}");
    }

    #[test]
    fn the_full_configuration_names_the_papers_models_and_a_bad_one_is_refused() {
        let names: Vec<String> = NetsConfig::FULL.infos().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["resnet50", "bert-base", "resnet50-supernet"]);
        assert_eq!(NetsConfig::FULL.infos()[0].input_len, 3 * 224 * 224);
        assert_eq!(NetsConfig::FULL.infos()[1].input_len, 513);
        let tiny = NetsConfig { resnet: ResNetConfig::scaled(4, 16, 10), ..NetsConfig::SMALL };
        assert!(matches!(tiny.build().err(), Some(ExecError::Device(why)) if why.contains("stride of 32")));
    }
}
