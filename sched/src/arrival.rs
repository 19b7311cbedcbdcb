//! Arrival laws: how a model's (or query's) requests arrive at a given mean
//! rate, as scenario files write them.
//!
//! - `poisson`, `uniform` (evenly spaced), `gamma:<shape>` (CV² = 1/shape);
//! - `bursty:<base share>,<cv2>` — SuperServe's bursty traces: a share of
//!   the rate as a Poisson base, the rest with gamma gaps of CV² `cv2`;
//! - `accel:<start share>,<ramp share per s>,<cv2>` — SuperServe's
//!   time-varying traces: the rate starts at `start share` of the nominal
//!   rate and grows by `ramp share` of it per second up to the full rate
//!   (lambda1 -> lambda2 at tau q/s²), gamma gaps of CV² `cv2`;
//! - `trace:<file>` — the per-minute shape of an Azure-Functions-schema CSV
//!   (`trace.rs`), compressed over the run so its mean is the nominal rate;
//!   Poisson within each minute. The file is read by whoever loads the
//!   scenario (`Scenario::attach_traces`), never by `sched`.

use std::sync::Arc;

#[derive(Clone, Debug, PartialEq)]
pub enum Arrival {
    Poisson,
    Uniform,
    Gamma(f64),
    Bursty {
        base_share: f64,
        cv2: f64,
    },
    Accel {
        start_share: f64,
        ramp_per_s: f64,
        cv2: f64,
    },
    /// `shape` is None until the file is attached.
    Trace {
        file: String,
        shape: Option<Arc<[f64]>>,
    },
}

fn numbers(s: &str, prefix: &str) -> Vec<f64> {
    s[prefix.len()..].split(',').map(|x| x.trim().parse().unwrap_or(f64::NAN)).collect()
}

impl Arrival {
    pub fn parse(s: &str) -> Result<Self, String> {
        let finite_positive = |x: f64| x > 0.0 && x.is_finite();
        match s {
            "poisson" => Ok(Arrival::Poisson),
            "uniform" => Ok(Arrival::Uniform),
            _ if s.starts_with("bursty:") => match numbers(s, "bursty:")[..] {
                [share, cv2] if (0.0..1.0).contains(&share) && finite_positive(cv2) => {
                    Ok(Arrival::Bursty { base_share: share, cv2 })
                }
                _ => Err(format!("`{s}`: expected bursty:<base share in [0, 1)>,<cv2 > 0>")),
            },
            _ if s.starts_with("accel:") => match numbers(s, "accel:")[..] {
                [start, ramp, cv2]
                    if start > 0.0 && start <= 1.0 && ramp >= 0.0 && ramp.is_finite() && finite_positive(cv2) =>
                {
                    Ok(Arrival::Accel { start_share: start, ramp_per_s: ramp, cv2 })
                }
                _ => Err(format!("`{s}`: expected accel:<start share in (0, 1]>,<ramp share per s >= 0>,<cv2 > 0>")),
            },
            _ if s.starts_with("trace:") && s.len() > "trace:".len() => {
                Ok(Arrival::Trace { file: s["trace:".len()..].to_string(), shape: None })
            }
            _ => match s.strip_prefix("gamma:").map(str::parse::<f64>) {
                Some(Ok(k)) if finite_positive(k) => Ok(Arrival::Gamma(k)),
                Some(_) => Err(format!("`{s}`: the gamma shape must be a positive number")),
                None => Err(format!(
                    "`{s}` is not one of \"poisson\", \"uniform\", \"gamma:<shape>\", \"bursty:<base share>,<cv2>\", \
                     \"accel:<start share>,<ramp share per s>,<cv2>\", \"trace:<file>\""
                )),
            },
        }
    }

    /// The rate at `t_s` seconds into a run of `span_s`, as a share of the
    /// nominal rate (1 for stationary laws).
    pub fn share_at(&self, t_s: f64, span_s: f64) -> f64 {
        match self {
            Arrival::Accel { start_share, ramp_per_s, .. } => (start_share + ramp_per_s * t_s).min(1.0),
            Arrival::Trace { shape: Some(shape), .. } => {
                let mean = shape.iter().sum::<f64>() / shape.len() as f64;
                let bin = ((t_s / span_s * shape.len() as f64) as usize).min(shape.len() - 1);
                shape[bin] / mean
            }
            _ => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_law_and_rejects_bad_ones() {
        assert_eq!(
            Arrival::parse("accel:0.3,0.05,8"),
            Ok(Arrival::Accel { start_share: 0.3, ramp_per_s: 0.05, cv2: 8.0 })
        );
        assert_eq!(Arrival::parse("bursty:0.3,2"), Ok(Arrival::Bursty { base_share: 0.3, cv2: 2.0 }));
        assert!(matches!(Arrival::parse("trace:maf.csv"), Ok(Arrival::Trace { shape: None, .. })));
        for bad in ["accel:0,1,1", "accel:0.5,1", "bursty:1,2", "bursty:0.5,x", "trace:", "gamma:0", "weird"] {
            assert!(Arrival::parse(bad).is_err(), "{bad}");
        }
        let a = Arrival::parse("accel:0.25,0.25,1").unwrap();
        assert_eq!(a.share_at(0.0, 10.0), 0.25);
        assert_eq!(a.share_at(2.0, 10.0), 0.75);
        assert_eq!(a.share_at(9.0, 10.0), 1.0);
        let t = Arrival::Trace { file: "x".into(), shape: Some(vec![1.0, 3.0].into()) };
        assert_eq!(t.share_at(1.0, 10.0), 0.5);
        assert_eq!(t.share_at(6.0, 10.0), 1.5);
    }
}
