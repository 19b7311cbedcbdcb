//! Measured L(b, p) of the CUDA executor's models on GPU partitions
//! (green contexts, `partition.rs`), alone and next to a co-runner on the
//! rest of the GPU — the two tables glet plans with — written in the
//! format of the shipped partition profiles (`inference.csv`,
//! `interference.csv`; see `baton_sched::glet::profiles`).
//!
//! For a share p < 100 the device is split into p% of its SMs (rounded up
//! to the driver's granularity) and the rest; each side gets its own
//! executor. Solo: the model runs on the p% side, the rest idle. Co-run:
//! a second thread runs the co-runner back to back on the rest while the
//! model is timed. p = 100 is the whole device (solo only). Each number is
//! the median of `reps` batches' device times.

use std::sync::mpsc;
use std::time::Duration;

use super::check::inputs;
use super::partition::{device_sms, split, Partition};
use super::profile::median_latency;
use super::{CudaConfig, CudaExecutor};
use crate::executor::{Batch, ExecError, Executor, ModelInfo};

#[derive(Clone, Debug, PartialEq)]
pub struct Solo {
    pub model: String,
    pub batch: usize,
    pub partition: u32,
    pub sms: u32,
    pub latency: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CoRun {
    pub model: String,
    pub batch: usize,
    pub partition: u32,
    pub co_model: String,
    pub co_batch: usize,
    pub latency: Duration,
}

#[derive(Clone, Debug, Default)]
pub struct PartitionProfile {
    pub device_sms: u32,
    pub solo: Vec<Solo>,
    pub co_runs: Vec<CoRun>,
}

/// The median device time of `reps` batches of `b` of model `m`.
fn time(exec: &mut CudaExecutor, m: usize, b: usize, reps: usize) -> Result<Duration, ExecError> {
    median_latency(exec, m, b, 1, reps)
}

/// A batch of `b` inputs of model `m`, kept for reruns.
struct Job {
    m: usize,
    xs: Vec<Vec<f32>>,
}

impl Job {
    fn new(info: &ModelInfo, m: usize, b: usize) -> Self {
        Self { m, xs: inputs(b, info.input_len, 99) }
    }

    fn run(&self, exec: &mut CudaExecutor) -> Result<(), ExecError> {
        let refs: Vec<&[f32]> = self.xs.iter().map(Vec::as_slice).collect();
        exec.run(&Batch { model: self.m as u32, variant: None, heads: None, inputs: &refs }, &mut Vec::new()).map(drop)
    }
}

/// The co-runner: an executor on `part` in a thread of its own (a CUDA
/// context's graphs stay on their thread). Each order `(model, batch)` is
/// run back to back until the next order; the first batch of each is
/// acknowledged. The thread ends when the orders' sender is dropped.
struct CoRunner {
    orders: mpsc::Sender<(usize, usize)>,
    acks: mpsc::Receiver<Result<(), ExecError>>,
    handle: std::thread::JoinHandle<()>,
}

impl CoRunner {
    fn start(cfg: CudaConfig, part: Partition) -> Result<Self, ExecError> {
        let (orders, order_rx) = mpsc::channel::<(usize, usize)>();
        let (ack_tx, acks) = mpsc::channel();
        let handle = std::thread::spawn(move || {
            let mut exec = match CudaExecutor::on_partition(&cfg, &part) {
                Ok(e) => e,
                Err(e) => return drop(ack_tx.send(Err(e))),
            };
            let _ = ack_tx.send(Ok(()));
            let mut job: Option<Job> = None;
            loop {
                let next = match &job {
                    None => order_rx.recv().ok(),
                    Some(j) => match order_rx.try_recv() {
                        Ok(o) => Some(o),
                        Err(mpsc::TryRecvError::Empty) => {
                            if j.run(&mut exec).is_err() {
                                job = None;
                            }
                            continue;
                        }
                        Err(mpsc::TryRecvError::Disconnected) => None,
                    },
                };
                let Some((m, b)) = next else { return };
                let j = Job::new(&exec.models()[m].clone(), m, b);
                let first = j.run(&mut exec);
                job = first.is_ok().then_some(j);
                let _ = ack_tx.send(first);
            }
        });
        let runner = Self { orders, acks, handle };
        runner.ack()?;
        Ok(runner)
    }

    fn ack(&self) -> Result<(), ExecError> {
        self.acks.recv().unwrap_or_else(|_| Err(ExecError::Device("the co-runner thread exited".into())))
    }

    /// Runs `(m, b)` back to back from its first batch on.
    fn run(&self, m: usize, b: usize) -> Result<(), ExecError> {
        self.orders.send((m, b)).map_err(|_| ExecError::Device("the co-runner thread exited".into()))?;
        self.ack()
    }

    fn stop(self) {
        drop(self.orders);
        let _ = self.handle.join();
    }
}

/// Measures every model of `cfg` on each share in `shares` (percent of the
/// SMs) at `batches`, and next to every model as co-runner at `co_batches`
/// (both sides) for the shares below 100.
pub fn measure(
    cfg: &CudaConfig,
    shares: &[u32],
    batches: &[usize],
    co_batches: &[usize],
    reps: usize,
) -> Result<PartitionProfile, ExecError> {
    let total = device_sms(cfg.ordinal)?;
    // The static models (glet plans them), which come first.
    let cfg = &CudaConfig { varlen: None, ..*cfg };
    let names: Vec<String> = cfg.model_infos().into_iter().map(|i| i.name).collect();
    let mut out = PartitionProfile { device_sms: total, ..Default::default() };
    for &p in shares {
        if p >= 100 {
            let mut exec = CudaExecutor::new(cfg)?;
            for (m, name) in names.iter().enumerate() {
                for &b in batches {
                    let latency = time(&mut exec, m, b, reps)?;
                    out.solo.push(Solo { model: name.clone(), batch: b, partition: 100, sms: total, latency });
                }
            }
            continue;
        }
        let (mine, rest) = split(cfg.ordinal, (total * p).div_ceil(100))?;
        let mut exec = CudaExecutor::on_partition(cfg, &mine)?;
        for (m, name) in names.iter().enumerate() {
            for &b in batches {
                let latency = time(&mut exec, m, b, reps)?;
                out.solo.push(Solo { model: name.clone(), batch: b, partition: p, sms: mine.sms, latency });
            }
        }
        let co = CoRunner::start(*cfg, rest)?;
        for (c, co_name) in names.iter().enumerate() {
            for &cb in co_batches {
                co.run(c, cb)?;
                for (m, name) in names.iter().enumerate() {
                    for &b in co_batches {
                        let latency = time(&mut exec, m, b, reps)?;
                        out.co_runs.push(CoRun {
                            model: name.clone(),
                            batch: b,
                            partition: p,
                            co_model: co_name.clone(),
                            co_batch: cb,
                            latency,
                        });
                    }
                }
            }
        }
        co.stop();
    }
    Ok(out)
}

impl PartitionProfile {
    /// `inference.csv`: `model,batch,partition,throughput,<r/s>,latency,<s>,1`.
    pub fn inference_csv(&self) -> String {
        let row = |s: &Solo| {
            let l = s.latency.as_secs_f64();
            format!("{},{},{},throughput,{:.3},latency,{:.7},1\n", s.model, s.batch, s.partition, s.batch as f64 / l, l)
        };
        self.solo.iter().map(row).collect()
    }

    /// `interference.csv`:
    /// `model,batch,partition,co_model,co_batch,throughput,<r/s>,latency,<s>,1`.
    pub fn interference_csv(&self) -> String {
        let row = |c: &CoRun| {
            let l = c.latency.as_secs_f64();
            format!(
                "{},{},{},{},{},throughput,{:.3},latency,{:.7},1\n",
                c.model,
                c.batch,
                c.partition,
                c.co_model,
                c.co_batch,
                c.batch as f64 / l,
                l
            )
        };
        self.co_runs.iter().map(row).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_are_in_the_shipped_profiles_format() {
        let d = Duration::from_micros(2500);
        let p = PartitionProfile {
            device_sms: 132,
            solo: vec![Solo { model: "m".into(), batch: 4, partition: 50, sms: 72, latency: d }],
            co_runs: vec![CoRun {
                model: "m".into(),
                batch: 4,
                partition: 50,
                co_model: "n".into(),
                co_batch: 16,
                latency: d * 2,
            }],
        };
        assert_eq!(p.inference_csv(), "m,4,50,throughput,1600.000,latency,0.0025000,1\n");
        assert_eq!(p.interference_csv(), "m,4,50,n,16,throughput,800.000,latency,0.0050000,1\n");
    }
}
