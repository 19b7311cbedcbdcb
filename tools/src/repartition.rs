//! Re-partitioning at epoch boundaries (Symphony's sub-clusters): every
//! epoch, each model's rate over the epoch — answers its frontends gave,
//! read from their `/metrics` as any outside controller would — is
//! re-planned against the routing table in force (`partition::plan_with`,
//! at most `moves` models change sub-cluster, none for nothing), and the
//! new table says which models and GPUs move (`Routes::replanned`).
//! Applying it is the caller's: GPUs by their backend processes leaving
//! one scheduler and joining another, models by publishing the table to
//! the frontends (`partitioned.rs`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use baton_core::routes::{Change, Routes};
use baton_sched::partition::{plan_with, Options};
use baton_sched::Scenario;

/// How often to re-plan, and how many models one re-plan may move.
#[derive(Clone, Copy, Debug)]
pub struct Epochs {
    pub every: Duration,
    pub moves: usize,
}

/// The controller's state between epochs: each model's answers so far.
pub struct Controller {
    pub epochs: Epochs,
    counted: Vec<u64>,
}

impl Controller {
    pub fn new(s: &Scenario, epochs: Epochs) -> Self {
        Self { epochs, counted: vec![0; s.models.len()] }
    }

    /// One epoch boundary: `answered[i]`, model i's answers so far over
    /// every frontend, `span` after the last boundary. The new table and
    /// its steps, or None if the plan keeps the table as it is — or if
    /// the epoch saw no answer at all (a cluster without traffic, before
    /// its clients come or after they leave, is left as it is: no rate
    /// says where the GPUs should go).
    pub fn step(
        &mut self,
        s: &Scenario,
        table: &Routes,
        answered: Vec<u64>,
        span: Duration,
    ) -> Result<Option<(Routes, Vec<Change>)>, String> {
        assert_eq!(answered.len(), self.counted.len(), "a count per model");
        let secs = span.as_secs_f64().max(1e-3);
        let rates: Vec<f64> =
            answered.iter().zip(&self.counted).map(|(&now, &was)| now.saturating_sub(was) as f64 / secs).collect();
        self.counted = answered;
        if rates.iter().all(|&r| r == 0.0) {
            return Ok(None);
        }
        let opts = Options { current: Some((table.assignment(), self.epochs.moves)), ..Options::default() };
        let plan = plan_with(s, table.subclusters.len(), &rates, &opts).map_err(|e| e.to_string())?;
        let (next, changes) = table.replanned(&plan).map_err(|e| e.to_string())?;
        Ok((!changes.is_empty()).then_some((next, changes)))
    }
}

/// Each of `s`'s models' answers so far in a frontend's `/metrics` text
/// (`baton_requests_total{model="…",…} n`, every outcome).
pub fn answered_by_model(s: &Scenario, metrics: &str) -> Vec<u64> {
    let mut out = vec![0u64; s.models.len()];
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("baton_requests_total{model=\"") else { continue };
        let Some((name, value)) = label_value(rest).zip(line.rsplit(' ').next()) else { continue };
        let Some(i) = s.models.iter().position(|m| m.spec.name == name) else { continue };
        out[i] += value.parse::<f64>().map_or(0, |v| v as u64);
    }
    out
}

/// A label's value up to its closing quote, unescaped (`\\`, `\"`, `\n`).
fn label_value(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                c => out.push(c),
            },
            c => out.push(c),
        }
    }
    None
}

/// A frontend's `/metrics` body, over plain HTTP.
pub fn scrape(http: SocketAddr) -> Result<String, String> {
    let fail = |e: std::io::Error| format!("scraping {http}/metrics: {e}");
    let mut s = TcpStream::connect_timeout(&http, Duration::from_secs(2)).map_err(fail)?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(fail)?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n").map_err(fail)?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(fail)?;
    match out.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") => Ok(body.to_string()),
        _ => Err(format!("scraping {http}/metrics: {}", out.lines().next().unwrap_or("no answer"))),
    }
}

#[cfg(test)]
mod tests {
    use baton_core::routes::Subcluster;

    use super::*;

    #[test]
    fn answers_are_summed_per_model_over_outcomes() {
        let s = Scenario::parse(include_str!("../scenarios/serve-default.toml")).unwrap();
        let first = s.models[0].spec.name.clone();
        let text = format!(
            "# TYPE baton_requests_total counter\n\
             baton_requests_total{{model=\"{first}\",outcome=\"ok\",reason=\"\"}} 10\n\
             baton_requests_total{{model=\"{first}\",outcome=\"dropped\",reason=\"Late\"}} 2\n\
             baton_requests_total{{model=\"(unknown)\",outcome=\"error\",reason=\"BadModel\"}} 5\n\
             baton_request_latency_seconds_count{{model=\"{first}\"}} 10\n"
        );
        let mut want = vec![0; s.models.len()];
        want[0] = 12;
        assert_eq!(answered_by_model(&s, &text), want);
        assert_eq!(label_value(r#"a\"b\\c" rest"#).as_deref(), Some(r#"a"b\c"#));
        assert_eq!(label_value("unterminated"), None);
    }

    #[test]
    fn an_epoch_without_answers_leaves_the_table_and_the_next_counts_from_it() {
        let s = Scenario::parse(include_str!("../scenarios/serve-default.toml")).unwrap();
        let n = s.models.len();
        // Every model in sub-cluster 0 with one GPU, the rest in 1: any
        // traffic moves GPUs to sub-cluster 0.
        let all = Subcluster { models: (0..n).collect(), backends: vec![0] };
        let rest = Subcluster { models: vec![], backends: (1..s.cluster.backends).collect() };
        let table = Routes { subclusters: vec![all, rest] };
        table.check(&s).expect("the table fits");
        let mut c = Controller::new(&s, Epochs { every: Duration::from_secs(1), moves: 1 });
        let second = Duration::from_secs(1);
        assert_eq!(c.step(&s, &table, vec![0; n], second), Ok(None), "no answers: nothing to plan for");
        let busy = vec![1_000; n];
        let (next, changes) = c.step(&s, &table, busy.clone(), second).unwrap().expect("traffic re-plans");
        assert!(changes.iter().any(|c| matches!(c, Change::Gpu { to: 0, .. })), "{changes:?}");
        next.check(&s).expect("the new table fits");
        // The clients left: the same totals a second later are no answers.
        assert_eq!(c.step(&s, &next, busy, second), Ok(None));
    }
}
