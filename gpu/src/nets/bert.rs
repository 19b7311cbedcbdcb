//! BERT-base (Devlin et al. 2019) for inference: token, position and
//! segment embeddings with a layer norm, 12 post-norm encoder layers
//! (hidden 768, 12 heads of 64, feed-forward 3072, exact GELU, layer norms
//! with a learned scale and shift, eps 1e-12), and the pooler (`tanh(W
//! h_[CLS] + b)`), as Hugging Face's `BertModel` computes it.
//!
//! Per layer, on the sequence's hidden states `h[s x d]`:
//! `a = LN(h + attention(h) Wo + bo)`, `h' = LN(a + gelu(a W1 + b1) W2 + b2)`,
//! with `attention` the multi-head self-attention of `ops::attention` on
//! `h Wqkv + bqkv` (the query, key and value projections fused into one
//! `[d x 3d]` matrix, columns `q | k | v`, each head's `dh` columns
//! contiguous in each part). Weight matrices are stored `[in x out]`
//! (a PyTorch `Linear.weight` transposed); tensors carry Hugging Face's
//! names (`encoder.layer.3.intermediate.dense.weight`), the fused
//! projection named `encoder.layer.i.attention.self.qkv`.
//!
//! An input is `1 + seq` floats: `input[0]` the length `L` (a whole
//! number in `1..=seq`), then `seq` token ids of which the first `L` are
//! read (whole numbers below the vocabulary size; one segment, type 0).
//! The output is the pooled `d` floats.
//!
//! A batch is padded to its longest member (as `reference/varlen.rs`):
//! every GEMM runs over `b * Lmax` stacked rows, attention per member over
//! its own rows, so each member's output equals its solo run bit for bit
//! and the batch costs about `b` solo runs of length `Lmax`.
//!
//! Weights are drawn as BERT initialises them (standard deviation 0.02:
//! uniform in ±0.02·sqrt 3), layer norms' scales 1 ± 0.1 and shifts ± 0.1.

use super::layout::{Id, Layer, Layout};
use crate::reference::ops::{attention, gelu_erf, gemm, layernorm_affine};

const EPS: f32 = 1e-12;
const INIT: f32 = 0.034_641; // 0.02 * sqrt(3)

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertConfig {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    /// Rows of the position table (512).
    pub max_positions: usize,
    /// The longest input accepted (at most `max_positions`).
    pub seq: usize,
}

impl BertConfig {
    pub const BASE: Self =
        Self { layers: 12, hidden: 768, heads: 12, ffn: 3072, vocab: 30_522, max_positions: 512, seq: 512 };

    pub fn name(&self) -> &'static str {
        if *self == Self::BASE {
            "bert-base"
        } else {
            "bert-scaled"
        }
    }

    pub fn input_len(&self) -> usize {
        1 + self.seq
    }

    /// The layer list for inputs of `len` tokens, without building weights.
    pub fn layers(&self, len: usize) -> Vec<Layer> {
        Bert::declare(*self, &mut Layout::shapes_only()).layers(len)
    }

    pub fn check(&self) -> Result<(), String> {
        let c = self;
        if [c.layers, c.hidden, c.heads, c.ffn, c.vocab, c.seq].contains(&0) || !c.hidden.is_multiple_of(c.heads) {
            return Err(format!("{c:?}: every size must be positive and heads must divide hidden"));
        }
        if c.seq > c.max_positions {
            return Err(format!("inputs of {} tokens exceed the {} positions", c.seq, c.max_positions));
        }
        // Token ids travel as f32: exact below 2^24.
        if c.vocab > 1 << 24 {
            return Err(format!("a vocabulary of {} ids is not exact in f32", c.vocab));
        }
        Ok(())
    }

    /// Why `input` is not a valid input, if it is not (its length is
    /// checked by the executor).
    pub fn check_input(&self, input: &[f32]) -> Result<(), String> {
        let l = input[0];
        if !(l >= 1.0 && l <= self.seq as f32 && l.fract() == 0.0) {
            return Err(format!("length {l} is not a whole number in 1..={}", self.seq));
        }
        let bad =
            input[1..][..l as usize].iter().position(|&t| !(t >= 0.0 && t < self.vocab as f32 && t.fract() == 0.0));
        match bad {
            Some(p) => Err(format!("token {p} ({}) is not an id below {}", input[1 + p], self.vocab)),
            None => Ok(()),
        }
    }

    /// A deterministic input of `len` tokens (`salt` varies them).
    pub fn input(&self, len: usize, salt: u64) -> Vec<f32> {
        let mut x = vec![0.0; self.input_len()];
        x[0] = len as f32;
        let mut g = crate::weights::Gen(salt ^ 0xbe27);
        for t in &mut x[1..][..len] {
            *t = ((g.next() + 1.0) * 0.5 * self.vocab as f32).floor().min(self.vocab as f32 - 1.0);
        }
        x
    }
}

struct Linear {
    w: Id,
    b: Id,
    inputs: usize,
    outputs: usize,
}

impl Linear {
    fn declare(weights: &mut Layout, name: String, inputs: usize, outputs: usize) -> Self {
        Self {
            w: weights.push(format!("{name}.weight"), &[inputs, outputs], 0.0, INIT),
            b: weights.push(format!("{name}.bias"), &[outputs], 0.0, INIT),
            inputs,
            outputs,
        }
    }

    /// `y[rows x out] = x[rows x in] W + b`.
    fn run(&self, weights: &Layout, x: &[f32], rows: usize) -> Vec<f32> {
        let mut y = vec![0.0; rows * self.outputs];
        gemm(x, weights.get(self.w), Some(weights.get(self.b)), rows, self.inputs, self.outputs, &mut y);
        y
    }

    fn layer(&self, name: &str, op: &str, rows: usize) -> Layer {
        Layer {
            name: name.into(),
            op: op.into(),
            input: vec![rows, self.inputs],
            output: vec![rows, self.outputs],
            weights: self.inputs * self.outputs + self.outputs,
            macs: (rows * self.inputs * self.outputs) as u64,
        }
    }
}

struct Norm {
    gamma: Id,
    beta: Id,
}

impl Norm {
    fn declare(weights: &mut Layout, name: String, d: usize) -> Self {
        Self {
            gamma: weights.push(format!("{name}.weight"), &[d], 1.0, 0.1),
            beta: weights.push(format!("{name}.bias"), &[d], 0.0, 0.1),
        }
    }

    fn run(&self, weights: &Layout, x: &mut [f32]) {
        layernorm_affine(x, weights.get(self.gamma), weights.get(self.beta), EPS);
    }
}

struct EncoderLayer {
    qkv: Linear,
    out: Linear,
    ln1: Norm,
    up: Linear,
    down: Linear,
    ln2: Norm,
}

pub struct Bert {
    pub config: BertConfig,
    weights: Layout,
    /// Word, position and segment tables.
    embeddings: [Id; 3],
    embed_ln: Norm,
    layers: Vec<EncoderLayer>,
    pooler: Linear,
}

impl Bert {
    pub fn new(config: BertConfig, seed: u64) -> Self {
        Self::declare(config, &mut Layout::seeded(seed))
    }

    /// The network's structure, its tensors declared in `weights` (taken
    /// over) in Hugging Face's order.
    fn declare(config: BertConfig, weights: &mut Layout) -> Self {
        let mut w = std::mem::replace(weights, Layout::shapes_only());
        let BertConfig { hidden: d, ffn, vocab, max_positions, .. } = config;
        let e = "embeddings";
        let embeddings = [
            w.push(format!("{e}.word_embeddings.weight"), &[vocab, d], 0.0, INIT),
            w.push(format!("{e}.position_embeddings.weight"), &[max_positions, d], 0.0, INIT),
            w.push(format!("{e}.token_type_embeddings.weight"), &[2, d], 0.0, INIT),
        ];
        let embed_ln = Norm::declare(&mut w, format!("{e}.LayerNorm"), d);
        let layers = (0..config.layers)
            .map(|i| {
                let at = format!("encoder.layer.{i}");
                EncoderLayer {
                    qkv: Linear::declare(&mut w, format!("{at}.attention.self.qkv"), d, 3 * d),
                    out: Linear::declare(&mut w, format!("{at}.attention.output.dense"), d, d),
                    ln1: Norm::declare(&mut w, format!("{at}.attention.output.LayerNorm"), d),
                    up: Linear::declare(&mut w, format!("{at}.intermediate.dense"), d, ffn),
                    down: Linear::declare(&mut w, format!("{at}.output.dense"), ffn, d),
                    ln2: Norm::declare(&mut w, format!("{at}.output.LayerNorm"), d),
                }
            })
            .collect();
        let pooler = Linear::declare(&mut w, "pooler.dense".into(), d, d);
        Self { config, weights: w, embeddings, embed_ln, layers, pooler }
    }

    pub fn weights(&self) -> &Layout {
        &self.weights
    }

    /// Every layer in order, for one input of `len` tokens.
    pub fn layers(&self, len: usize) -> Vec<Layer> {
        let BertConfig { hidden: d, heads, vocab, max_positions, .. } = self.config;
        let norm = |name: String| Layer {
            name,
            op: "+residual layer norm".into(),
            input: vec![len, d],
            output: vec![len, d],
            weights: 2 * d,
            macs: 0,
        };
        let mut out = vec![Layer {
            name: "embeddings".into(),
            op: "word + position + segment".into(),
            input: vec![len],
            output: vec![len, d],
            weights: (vocab + max_positions + 2) * d,
            macs: 0,
        }];
        out.push(Layer { op: "layer norm".into(), ..norm("embeddings.LayerNorm".into()) });
        for (i, l) in self.layers.iter().enumerate() {
            let at = format!("encoder.layer.{i}");
            out.push(l.qkv.layer(&format!("{at}.attention.self.qkv"), "linear", len));
            out.push(Layer {
                name: format!("{at}.attention.self"),
                op: format!("attention {heads} heads"),
                input: vec![len, 3 * d],
                output: vec![len, d],
                weights: 0,
                macs: (2 * len * len * d) as u64,
            });
            out.push(l.out.layer(&format!("{at}.attention.output.dense"), "linear", len));
            out.push(norm(format!("{at}.attention.output.LayerNorm")));
            out.push(l.up.layer(&format!("{at}.intermediate.dense"), "linear +gelu", len));
            out.push(l.down.layer(&format!("{at}.output.dense"), "linear", len));
            out.push(norm(format!("{at}.output.LayerNorm")));
        }
        out.push(self.pooler.layer("pooler.dense", "linear +tanh on [CLS]", 1));
        out
    }

    /// Runs `inputs` (valid: `BertConfig::check_input`) as one padded
    /// batch, one pooled output per input.
    pub fn forward_batch(&self, inputs: &[&[f32]], outputs: &mut Vec<Vec<f32>>) {
        let BertConfig { hidden: d, heads, .. } = self.config;
        let w = &self.weights;
        let lens: Vec<usize> = inputs.iter().map(|x| x[0] as usize).collect();
        let lmax = lens.iter().copied().max().unwrap_or(0);
        let rows = inputs.len() * lmax;
        let [word, position, segment] = self.embeddings.map(|id| w.get(id));
        let mut h = vec![0.0; rows * d];
        for (i, (x, &l)) in inputs.iter().zip(&lens).enumerate() {
            for (p, &token) in x[1..][..l].iter().enumerate() {
                let row = &mut h[(i * lmax + p) * d..][..d];
                let (t, q) = (&word[token as usize * d..][..d], &position[p * d..][..d]);
                for (k, v) in row.iter_mut().enumerate() {
                    *v = t[k] + q[k] + segment[k];
                }
            }
        }
        self.embed_ln.run(w, &mut h);
        for l in &self.layers {
            let qkv = l.qkv.run(w, &h, rows);
            let mut att = vec![0.0; rows * d];
            for (i, &len) in lens.iter().enumerate() {
                attention(&qkv[i * lmax * 3 * d..][..len * 3 * d], len, d, heads, &mut att[i * lmax * d..][..len * d]);
            }
            let mut a = l.out.run(w, &att, rows);
            a.iter_mut().zip(&h).for_each(|(v, r)| *v += r);
            l.ln1.run(w, &mut a);
            let mut up = l.up.run(w, &a, rows);
            gelu_erf(&mut up);
            h = l.down.run(w, &up, rows);
            h.iter_mut().zip(&a).for_each(|(v, r)| *v += r);
            l.ln2.run(w, &mut h);
        }
        outputs.clear();
        outputs.extend((0..inputs.len()).map(|i| {
            let mut y = self.pooler.run(w, &h[i * lmax * d..][..d], 1);
            y.iter_mut().for_each(|v| *v = v.tanh());
            y
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::ops::{gelu_erf, softmax};

    const SMALL: BertConfig =
        BertConfig { layers: 2, hidden: 16, heads: 4, ffn: 32, vocab: 50, max_positions: 12, seq: 10 };

    /// BERT-base as Hugging Face counts it: 109,482,240 parameters
    /// (embeddings, 12 layers, pooler); 11.2 G multiply-accumulates for
    /// 128 tokens.
    #[test]
    fn the_layer_list_is_bert_bases() {
        let layers = BertConfig::BASE.layers(128);
        let weights: usize = layers.iter().map(|l| l.weights).sum();
        assert_eq!(weights, 109_482_240);
        let net = Bert::declare(BertConfig::BASE, &mut Layout::shapes_only());
        assert_eq!(net.weights().len(), weights);
        let macs: u64 = layers.iter().map(|l| l.macs).sum();
        // Per layer 128 x 768 x (3 x 768 + 768 + 2 x 3072) + 2 x 128² x 768, plus the pooler.
        assert_eq!(macs, 12 * (128 * 768 * 9216 + 2 * 128 * 128 * 768) + 768 * 768);
        assert_eq!(layers.iter().filter(|l| l.op.starts_with("attention")).count(), 12);
    }

    /// One layer by its definition, position by position (the
    /// `ops::attention` GEMMs and the fused projection against scalar
    /// loops).
    fn naive(net: &Bert, x: &[f32]) -> Vec<f32> {
        let BertConfig { hidden: d, heads, .. } = net.config;
        let w = net.weights();
        let dh = d / heads;
        let len = x[0] as usize;
        let ln = |v: &mut Vec<f32>, n: &Norm| layernorm_affine(v, w.get(n.gamma), w.get(n.beta), EPS);
        let lin = |v: &[f32], l: &Linear, j: usize| -> f32 {
            w.get(l.b)[j] + (0..l.inputs).map(|k| v[k] * w.get(l.w)[k * l.outputs + j]).sum::<f32>()
        };
        let [word, pos, seg] = net.embeddings.map(|id| w.get(id));
        let mut h: Vec<Vec<f32>> = (0..len)
            .map(|p| {
                let t = x[1 + p] as usize;
                let mut v: Vec<f32> = (0..d).map(|k| word[t * d + k] + pos[p * d + k] + seg[k]).collect();
                ln(&mut v, &net.embed_ln);
                v
            })
            .collect();
        for l in &net.layers {
            let qkv: Vec<Vec<f32>> = h.iter().map(|v| (0..3 * d).map(|j| lin(v, &l.qkv, j)).collect()).collect();
            let mut att = vec![vec![0.0; d]; len];
            for (hd, i) in (0..heads).flat_map(|hd| (0..len).map(move |i| (hd, i))) {
                let mut p: Vec<f32> = (0..len)
                    .map(|j| {
                        (0..dh).map(|c| qkv[i][hd * dh + c] * qkv[j][d + hd * dh + c]).sum::<f32>() / (dh as f32).sqrt()
                    })
                    .collect();
                softmax(&mut p, len);
                for c in 0..dh {
                    att[i][hd * dh + c] = (0..len).map(|j| p[j] * qkv[j][2 * d + hd * dh + c]).sum();
                }
            }
            for (v, a) in h.iter_mut().zip(&att) {
                let mut x1: Vec<f32> = (0..d).map(|j| v[j] + lin(a, &l.out, j)).collect();
                ln(&mut x1, &l.ln1);
                let mut up: Vec<f32> = (0..l.up.outputs).map(|j| lin(&x1, &l.up, j)).collect();
                gelu_erf(&mut up);
                let mut x2: Vec<f32> = (0..d).map(|j| x1[j] + lin(&up, &l.down, j)).collect();
                ln(&mut x2, &l.ln2);
                *v = x2;
            }
        }
        (0..d).map(|j| lin(&h[0], &net.pooler, j).tanh()).collect()
    }

    #[test]
    fn the_network_equals_its_definition() {
        let net = Bert::new(SMALL, 4);
        for len in [1, 3, SMALL.seq] {
            let x = SMALL.input(len, len as u64);
            let mut out = Vec::new();
            net.forward_batch(&[&x], &mut out);
            let want = naive(&net, &x);
            let err = out[0].iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(err < 1e-4, "{len} tokens: max error {err}");
        }
    }

    #[test]
    fn a_padded_batch_gives_each_member_its_solo_output() {
        let net = Bert::new(SMALL, 5);
        let xs: Vec<Vec<f32>> = [4, 10, 1, 7].iter().map(|&l| SMALL.input(l, l as u64)).collect();
        let refs: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let (mut batched, mut solo) = (Vec::new(), Vec::new());
        net.forward_batch(&refs, &mut batched);
        for (x, y) in xs.iter().zip(&batched) {
            net.forward_batch(&[x], &mut solo);
            assert_eq!(*y, solo[0], "length {}", x[0]);
            assert!(y.iter().all(|v| v.is_finite() && v.abs() <= 1.0));
        }
        // Tokens past the length are not read.
        let mut noisy = xs[0].clone();
        noisy[6..].iter_mut().for_each(|t| *t = 1e9);
        net.forward_batch(&[&noisy], &mut solo);
        assert_eq!(solo[0], batched[0]);
    }

    #[test]
    fn inputs_are_checked() {
        let good = SMALL.input(3, 1);
        assert_eq!(SMALL.check_input(&good), Ok(()));
        for (at, v) in
            [(0, 0.0), (0, 11.0), (0, 2.5), (0, f32::NAN), (2, 50.0), (3, -1.0), (1, 0.5), (1, f32::INFINITY)]
        {
            let mut x = good.clone();
            x[at] = v;
            assert!(SMALL.check_input(&x).is_err(), "input[{at}] = {v}");
        }
        assert!(BertConfig { seq: 13, ..SMALL }.check().is_err());
        assert!(BertConfig { heads: 3, ..SMALL }.check().is_err());
        assert_eq!(SMALL.check(), Ok(()));
    }

    /// The whole network at its real size runs on a short input and stays
    /// finite.
    #[test]
    fn bert_base_runs_at_full_size() {
        let net = Bert::new(BertConfig::BASE, 7);
        let x = BertConfig::BASE.input(8, 3);
        let mut out = Vec::new();
        net.forward_batch(&[&x], &mut out);
        assert_eq!(out[0].len(), 768);
        assert!(out[0].iter().all(|v| v.is_finite()) && out[0].iter().any(|&v| v != out[0][0]));
    }
}
