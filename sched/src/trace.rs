//! Real-shaped traces in the schema of the Azure Functions 2019 dataset
//! (`HashOwner,HashApp,HashFunction,Trigger,1,...,1440`: one row per
//! function, invocations per minute of one day), and a generator that
//! writes such files with the dataset's published character (Shahrad et
//! al., ATC'20): per-function rates heavy-tailed over orders of magnitude,
//! timer functions firing periodically, HTTP/queue functions following a
//! diurnal swing, and a share of bursty functions that switch on and off.
//! The full trace cannot be downloaded here, so the generator stands in.
//!
//! Pure text in, text out: reading and writing files is the caller's job.

use crate::rng::Rng;

pub const MINUTES: usize = 1440;
const HEADER_FIXED: [&str; 4] = ["HashOwner", "HashApp", "HashFunction", "Trigger"];

#[derive(Clone, Debug, PartialEq)]
pub enum TraceError {
    Header(String),
    Row { line: usize, message: String },
    Empty,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header(m) => write!(f, "header: {m}"),
            Self::Row { line, message } => write!(f, "line {line}: {message}"),
            Self::Empty => write!(f, "no invocations in the trace"),
        }
    }
}

/// Sums every function's per-minute invocations: the trace's shape.
pub fn parse_azure_csv(text: &str) -> Result<Vec<f64>, TraceError> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or(TraceError::Empty)?.split(',').map(str::trim).collect();
    if header.len() < 5 || header[..4] != HEADER_FIXED {
        return Err(TraceError::Header(format!("expected {},1,...", HEADER_FIXED.join(","))));
    }
    let minutes = header.len() - 4;
    for (i, h) in header[4..].iter().enumerate() {
        if h.parse::<usize>().ok() != Some(i + 1) {
            return Err(TraceError::Header(format!("column {} is `{h}`, expected {}", i + 5, i + 1)));
        }
    }
    let mut total = vec![0.0; minutes];
    for (n, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != header.len() {
            return Err(TraceError::Row {
                line: n + 2,
                message: format!("{} fields, header has {}", cells.len(), header.len()),
            });
        }
        for (m, c) in cells[4..].iter().enumerate() {
            let v: f64 = c
                .trim()
                .parse()
                .map_err(|_| TraceError::Row { line: n + 2, message: format!("`{c}` is not a count") })?;
            if !(v >= 0.0 && v.is_finite()) {
                return Err(TraceError::Row { line: n + 2, message: format!("`{c}` is not a count") });
            }
            total[m] += v;
        }
    }
    if total.iter().all(|&x| x == 0.0) {
        return Err(TraceError::Empty);
    }
    Ok(total)
}

/// Writes `functions` rows of a synthetic day in the Azure schema.
pub fn generate_azure_csv(seed: u64, functions: usize) -> String {
    let mut rng = Rng::new(seed);
    let mut out = String::from("HashOwner,HashApp,HashFunction,Trigger");
    for m in 1..=MINUTES {
        out += &format!(",{m}");
    }
    out.push('\n');
    for f in 0..functions {
        // Mean invocations per minute: lognormal, spanning orders of magnitude.
        let mean = (rng.normal() * 2.0 + 1.0).exp();
        let kind = rng.below(10);
        let trigger = match kind {
            0..=2 => "timer",
            3..=7 => "http",
            _ => "queue",
        };
        let period = 1 + rng.below(60) as usize;
        let phase = rng.unit() * std::f64::consts::TAU;
        let mut on = true;
        out += &format!("o{:08x},a{:08x},f{:08x},{trigger}", rng.next_u64() as u32, rng.next_u64() as u32, f);
        for m in 0..MINUTES {
            let rate = match kind {
                // Timers: a burst every `period` minutes.
                0..=2 => {
                    if m % period == 0 {
                        mean * period as f64
                    } else {
                        0.0
                    }
                }
                // HTTP: a diurnal swing around the mean.
                3..=7 => mean * (1.0 + 0.8 * ((m as f64 / MINUTES as f64) * std::f64::consts::TAU + phase).sin()),
                // Queues: on/off bursts (mean on and off spells of 20 minutes).
                _ => {
                    if rng.below(20) == 0 {
                        on = !on;
                    }
                    if on {
                        2.0 * mean
                    } else {
                        0.0
                    }
                }
            };
            // Poisson-ish count: the rate plus its noise, never negative.
            let count = (rate + rate.sqrt() * rng.normal()).round().max(0.0);
            out += &format!(",{count}");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_traces_parse_and_are_bursty() {
        let text = generate_azure_csv(4, 200);
        let shape = parse_azure_csv(&text).unwrap();
        assert_eq!(shape.len(), MINUTES);
        let mean = shape.iter().sum::<f64>() / MINUTES as f64;
        let peak = shape.iter().copied().fold(0.0, f64::max);
        assert!(peak > 1.5 * mean, "no bursts: peak {peak}, mean {mean}");
        assert_eq!(text, generate_azure_csv(4, 200), "the generator is deterministic");
    }

    #[test]
    fn bad_files_are_typed_errors() {
        assert!(matches!(parse_azure_csv(""), Err(TraceError::Empty)));
        assert!(matches!(parse_azure_csv("a,b,c\n"), Err(TraceError::Header(_))));
        let ok = "HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,3,4\n";
        assert_eq!(parse_azure_csv(ok), Ok(vec![3.0, 4.0]));
        let row = |minutes: &str| format!("HashOwner,HashApp,HashFunction,Trigger,1,2\no,a,f,http,{minutes}\n");
        assert!(matches!(parse_azure_csv(&row("3")), Err(TraceError::Row { line: 2, .. })));
        assert!(matches!(parse_azure_csv(&row("x,4")), Err(TraceError::Row { line: 2, .. })));
        assert!(matches!(parse_azure_csv(&row("0,0")), Err(TraceError::Empty)));
    }
}
