//! SubNetAct on the CPU: memory of one weight-shared supernet against the
//! same subnets extracted as separate networks, and the cost of switching
//! subnet per batch — measured as the time of a batch sequence that
//! alternates subnets against the same batches grouped by subnet — next
//! to what a switch costs without weight sharing (copying a subnet out).

use std::hint::black_box;
use std::time::Instant;

use serde::Serialize;

use baton_gpu::supernet::{default_subnets, Supernet, SupernetConfig, SupernetExecutor};
use baton_gpu::{Batch, Executor};

#[derive(Clone, Debug, Serialize)]
pub struct SubnetActResult {
    pub subnets: usize,
    pub supernet_params: usize,
    pub extracted_params: usize,
    pub memory_ratio: f64,
    /// Mean time per batch, grouped by subnet and alternating.
    pub grouped_us: f64,
    pub alternating_us: f64,
    /// alternating - grouped: what switching costs per batch.
    pub switch_us: f64,
    /// Copying the largest subnet out (the switch without weight sharing).
    pub extract_us: f64,
}

pub fn run(rounds: usize) -> SubnetActResult {
    let cfg = SupernetConfig { input: 256, max_depth: 8, max_width: 512, classes: 100, seed: 11 };
    let subnets = default_subnets(&cfg);
    let net = Supernet::new(cfg, &subnets);
    let extracted_params: usize = subnets.iter().map(|s| net.extract(s).parameters()).sum();
    let supernet_params = net.parameters();
    let t = Instant::now();
    let largest = subnets.last().expect("subnets");
    black_box(net.extract(largest));
    let extract_us = t.elapsed().as_secs_f64() * 1e6;
    let n = subnets.len();
    let mut exec = SupernetExecutor::new(net, subnets, 16);
    let xs: Vec<Vec<f32>> = (0..16).map(|i| (0..256).map(|k| ((i * 31 + k) as f32 * 0.01).sin()).collect()).collect();
    let inputs: Vec<&[f32]> = xs.iter().map(|x| &x[..]).collect();
    let mut out = Vec::new();
    let mut time = |order: &dyn Fn(usize) -> u16| {
        let t = Instant::now();
        for i in 0..rounds * n {
            exec.run(&Batch { model: 0, variant: Some(order(i)), heads: None, inputs: &inputs }, &mut out)
                .expect("valid batch");
            black_box(&out);
        }
        t.elapsed().as_secs_f64() * 1e6 / (rounds * n) as f64
    };
    // The same batches, in two orders.
    let grouped_us = time(&|i| (i / rounds) as u16);
    let alternating_us = time(&|i| (i % n) as u16);
    SubnetActResult {
        subnets: n,
        supernet_params,
        extracted_params,
        memory_ratio: extracted_params as f64 / supernet_params as f64,
        grouped_us,
        alternating_us,
        switch_us: alternating_us - grouped_us,
        extract_us,
    }
}
