//! The conformance suite every executor runs (emulated, the CPU references
//! and supernet, and CUDA): the same bad batches get the same typed errors,
//! outputs have the declared shape, and running is deterministic. A
//! dynamic model's inputs carry valid work (its longest and its shortest),
//! and an input whose work is out of range is refused.

use crate::executor::{Batch, ExecError, Executor, Work};

/// Runs every check against `exec`; panics with the executor's name and
/// the check that failed. A request's output must not depend on its batch
/// mates, bit for bit.
pub fn check(exec: &mut dyn Executor, name: &str) {
    check_within(exec, name, 0.0)
}

/// As `check`, but a request's output may move by `rel` (relative to the
/// largest magnitude of the output) with its batch: a GPU's GEMM library
/// picks its algorithm, and so its summation order, by matrix size.
pub fn check_within(exec: &mut dyn Executor, name: &str, rel: f32) {
    check_with(exec, name, rel, &|_, len, salt| {
        (0..len).map(|i| if salt == 0 { (i as f32 * 0.37).sin() } else { (i as f32 * 0.11).cos() }).collect()
    })
}

/// As `check_within`, with the two valid inputs of each model (salt 0
/// and 1) made by `input(model, input_len, salt)`, for models whose
/// inputs must be well formed (token ids, say).
pub fn check_with(exec: &mut dyn Executor, name: &str, rel: f32, input: &dyn Fn(usize, usize, u64) -> Vec<f32>) {
    let models = exec.models().to_vec();
    assert!(!models.is_empty(), "{name}: serves no model");
    let mut out = Vec::new();
    let n = models.len() as u32;
    assert_eq!(
        exec.run(&Batch { model: n, variant: None, heads: None, inputs: &[&[0.0]] }, &mut out),
        Err(ExecError::UnknownModel { model: n }),
        "{name}: unknown model"
    );
    for (i, m) in models.iter().enumerate() {
        let model = i as u32;
        let (mut x, mut y) = (input(i, m.input_len, 0), input(i, m.input_len, 1));
        let work = match &m.work {
            Some(Work::Micros { max_us }) => Some((*max_us, max_us / 2.0)),
            Some(Work::Levels { solo }) => Some((solo.len() as f32, 1.0)),
            None => None,
        };
        if let Some((most, least)) = work {
            (x[0], y[0]) = (most, least);
            let mut bad = x.clone();
            bad[0] = f32::NAN;
            let r = exec.run(&Batch { model, variant: None, heads: None, inputs: &[&x[..], &bad[..]] }, &mut out);
            assert!(matches!(r, Err(ExecError::Work { request: 1, .. })), "{name}: out-of-range work: {r:?}");
        }
        // A model of heads on a shared trunk runs every input on head 0
        // here (a request's output then cannot depend on its position).
        let zeros = vec![0u16; m.max_batch as usize + 1];
        let run = |exec: &mut dyn Executor, variant, inputs: &[&[f32]], out: &mut Vec<Vec<f32>>| {
            let heads = (m.heads > 0).then(|| &zeros[..inputs.len()]);
            exec.run(&Batch { model, variant, heads, inputs }, out)
        };
        if m.heads > 0 {
            let past = [m.heads];
            let r = exec.run(&Batch { model, variant: None, heads: Some(&past), inputs: &[&x[..]] }, &mut out);
            assert!(matches!(r, Err(ExecError::Heads(_))), "{name}: a head past the last: {r:?}");
            let r = exec.run(&Batch { model, variant: None, heads: None, inputs: &[&x[..]] }, &mut out);
            assert!(matches!(r, Err(ExecError::Heads(_))), "{name}: a trunk's batch without heads: {r:?}");
        }
        assert_eq!(run(exec, None, &[], &mut out), Err(ExecError::EmptyBatch), "{name}: empty batch");
        let too_many: Vec<&[f32]> = vec![&x[..]; m.max_batch as usize + 1];
        assert_eq!(
            run(exec, None, &too_many, &mut out),
            Err(ExecError::BatchTooLarge { batch: m.max_batch as usize + 1, max: m.max_batch }),
            "{name}: oversize batch"
        );
        let short = &x[..m.input_len - 1];
        assert_eq!(
            run(exec, None, &[&x[..], short], &mut out),
            Err(ExecError::InputSize { request: 1, got: m.input_len - 1, want: m.input_len }),
            "{name}: input size"
        );
        assert_eq!(
            run(exec, Some(m.variants), &[&x[..]], &mut out),
            Err(ExecError::UnknownVariant { model, variant: m.variants }),
            "{name}: unknown variant"
        );
        for variant in (0..m.variants).map(Some).chain([None]) {
            // The buffers given are the last batch's, or anything: a
            // backend hands its executor the spare ones of a finished batch.
            out = vec![vec![f32::NAN; m.output_len + 1]; 3];
            run(exec, variant, &[&x[..], &y[..]], &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(out.len(), 2, "{name}: one output per request");
            assert!(out.iter().all(|o| o.len() == m.output_len), "{name}: output length");
            let first = out.clone();
            // A request's output does not depend on its batch mates or on reruns.
            run(exec, variant, &[&x[..]], &mut out).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(out.len(), 1, "{name}: the outputs given are replaced");
            let scale = first[0].iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let moved = out[0].iter().zip(&first[0]).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(moved <= rel * scale, "{name}: output depends on the batch ({moved} of {scale})");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::emulated::{Emulated, EmulatedModel, Pacing};
    use crate::executor::ModelInfo;

    #[test]
    fn the_emulated_executor_conforms_and_takes_its_profile() {
        let info = |name: &str| ModelInfo::fixed(name, 8, 3, 4);
        let lat = |us: u64| (1..=4).map(|b| Duration::from_micros(us * b)).collect();
        let mut e = Emulated::new(
            vec![EmulatedModel::fixed(info("a"), lat(50)), EmulatedModel::fixed(info("b"), lat(80))],
            0.0,
            1,
        );
        check(&mut e, "emulated");
        let x = [1.0f32; 8];
        let mut out = Vec::new();
        let took = e.run(&Batch { model: 1, variant: None, heads: None, inputs: &[&x, &x, &x] }, &mut out).unwrap();
        assert!(took >= Duration::from_micros(240), "ran {took:?}, profile says 240 µs");
        assert_eq!(out[2], vec![8.0; 3]);

        // Deferred pacing: the same checks and outputs, the profile's time
        // returned instead of spent.
        let mut d =
            Emulated::new(vec![EmulatedModel::fixed(info("a"), lat(50_000))], 0.0, 1).with_pacing(Pacing::Deferred);
        check(&mut d, "emulated-deferred");
        let took = d.run(&Batch { model: 0, variant: None, heads: None, inputs: &[&x, &x] }, &mut out).unwrap();
        assert_eq!(took, Duration::from_millis(100));
        assert_eq!(out[1], vec![8.0; 3]);
    }
}
