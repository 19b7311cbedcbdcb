//! glet's interference model (section 4): when two partitions of one GPU
//! run together, each slows down by
//!
//! ```text
//! factor = c1*L2_self + c2*L2_other + c3*mem_self + c4*mem_other + c5
//! ```
//!
//! where L2 and mem are each model's L2 and DRAM utilisation when it runs
//! alone on its partition at its batch (`mem_util.csv`). The coefficients
//! are fitted by least squares (normal equations, 5x5) on measured pairs:
//! factor = co-run latency / solo latency.

use serde::Serialize;

use super::profiles::PartitionProfiles;
use crate::time::Nanos;

#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct InterferenceModel {
    pub c: [f64; 5],
}

impl InterferenceModel {
    /// Predicted slowdown of a model with (mem, l2) utilisation `own` next
    /// to one with `other`. Never below 1: a co-runner never speeds one up.
    pub fn factor(&self, own: (f64, f64), other: (f64, f64)) -> f64 {
        let c = &self.c;
        (c[0] * own.1 + c[1] * other.1 + c[2] * own.0 + c[3] * other.0 + c[4]).max(1.0)
    }
}

/// A sample: the features and the measured factor.
fn samples(p: &PartitionProfiles) -> Vec<([f64; 5], f64)> {
    p.co_runs
        .iter()
        .filter_map(|r| {
            let solo = p.measured(r.model, r.batch, r.partition)?;
            let own = p.utilisation(r.model, r.batch, r.partition)?;
            let other = p.utilisation(r.co_model, r.co_batch, 100 - r.partition)?;
            Some(([own.1, other.1, own.0, other.0, 1.0], r.latency as f64 / solo as f64))
        })
        .collect()
}

/// Solves the 5x5 normal equations by Gaussian elimination with partial pivoting.
fn least_squares(rows: &[([f64; 5], f64)]) -> Option<[f64; 5]> {
    let mut a = [[0.0f64; 6]; 5];
    for (x, y) in rows {
        for i in 0..5 {
            for j in 0..5 {
                a[i][j] += x[i] * x[j];
            }
            a[i][5] += x[i] * y;
        }
    }
    for col in 0..5 {
        let pivot = (col..5).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col];
        for (row, r) in a.iter_mut().enumerate() {
            if row != col {
                let k = r[col] / pivot_row[col];
                for (x, p) in r.iter_mut().zip(pivot_row).skip(col) {
                    *x -= k * p;
                }
            }
        }
    }
    Some([a[0][5] / a[0][0], a[1][5] / a[1][1], a[2][5] / a[2][2], a[3][5] / a[3][3], a[4][5] / a[4][4]])
}

#[derive(Clone, Debug, Serialize)]
pub struct FitReport {
    pub model: InterferenceModel,
    pub train_pairs: usize,
    pub held_out_pairs: usize,
    /// Relative error of the predicted co-run latency on held-out pairs.
    pub p50_error: f64,
    pub p90_error: f64,
    /// Share of held-out pairs predicted within 10.3% (the paper's figure).
    pub within_10_3: f64,
    /// The same errors if interference were ignored (factor 1).
    pub p90_error_ignoring: f64,
}

/// Fits on 4 of every 5 measured pairs and tests on the fifth.
pub fn fit_interference(p: &PartitionProfiles) -> Option<FitReport> {
    let all = samples(p);
    let (test, train): (Vec<_>, Vec<_>) = all.iter().enumerate().partition(|(i, _)| i % 5 == 0);
    let train: Vec<([f64; 5], f64)> = train.into_iter().map(|(_, s)| *s).collect();
    let test: Vec<([f64; 5], f64)> = test.into_iter().map(|(_, s)| *s).collect();
    let c = least_squares(&train)?;
    let model = InterferenceModel { c };
    let errors = |predict: &dyn Fn(&[f64; 5]) -> f64| {
        let mut e: Vec<f64> = test.iter().map(|(x, y)| (predict(x) - y).abs() / y).collect();
        e.sort_by(f64::total_cmp);
        e
    };
    let with = errors(&|x| model.factor((x[2], x[0]), (x[3], x[1])));
    let without = errors(&|_| 1.0);
    let q = |e: &[f64], q: f64| e[((e.len() as f64 * q) as usize).min(e.len() - 1)];
    Some(FitReport {
        model,
        train_pairs: train.len(),
        held_out_pairs: test.len(),
        p50_error: q(&with, 0.5),
        p90_error: q(&with, 0.9),
        within_10_3: with.iter().filter(|&&e| e <= 0.103).count() as f64 / with.len() as f64,
        p90_error_ignoring: q(&without, 0.9),
    })
}

/// The co-run latency the model predicts for `model` at `batch` on
/// `partition` next to `other` at `other_batch` on the rest of the GPU.
pub fn predicted_latency(
    p: &PartitionProfiles,
    m: &InterferenceModel,
    model: usize,
    batch: u32,
    partition: u32,
    other: usize,
    other_batch: u32,
) -> Option<Nanos> {
    let solo = p.latency(model, batch, partition)?;
    let own = p.utilisation(model, batch.next_power_of_two().min(64), partition)?;
    let co = p.utilisation(other, other_batch.next_power_of_two().min(64), 100 - partition)?;
    Some((solo as f64 * m.factor(own, co)).round() as Nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_recovers_a_known_plane() {
        let c = [0.01, 0.02, -0.005, 0.004, 1.1];
        let rows: Vec<([f64; 5], f64)> = (0..200)
            .map(|i| {
                let x = [(i % 17) as f64, (i % 11) as f64 * 3.0, (i % 7) as f64 * 5.0, (i % 13) as f64, 1.0];
                (x, x.iter().zip(&c).map(|(a, b)| a * b).sum())
            })
            .collect();
        let got = least_squares(&rows).unwrap();
        for (g, w) in got.iter().zip(&c) {
            assert!((g - w).abs() < 1e-9, "{got:?}");
        }
    }
}
