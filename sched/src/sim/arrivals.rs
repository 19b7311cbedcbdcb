//! Open-loop arrivals: one independent stream per model (its direct
//! requests) and per query (query arrivals), each from its own seeded RNG,
//! merged in time order (ties by stream index). Which app a request belongs
//! to and its solo time come from a second stream per model, so adding apps
//! never moves arrival times.

use crate::arrival::Arrival;
use crate::heap::IndexedMinHeap;
use crate::rng::Rng;
use crate::scenario::Scenario;
use crate::time::{Nanos, NANOS_PER_MS, NANOS_PER_S};
use crate::types::{AppId, DynamicExec, ModelId};

struct Stream {
    law: Arrival,
    /// The run's length, over which time-varying laws unfold.
    span_ns: f64,
    mean_gap_ns: f64,
    next_ns: f64,
    /// Bursty streams superpose a Poisson base and a gamma part; this is
    /// the gamma part's next arrival (`next_ns` the base's).
    next_burst_ns: f64,
    rng: Rng,
}

impl Stream {
    /// The gap after an arrival at `next_ns`.
    fn gap(&mut self) -> f64 {
        match &self.law {
            Arrival::Poisson => self.mean_gap_ns * self.rng.exp1(),
            Arrival::Uniform => self.mean_gap_ns,
            &Arrival::Gamma(k) => self.mean_gap_ns * self.rng.gamma(k) / k,
            &Arrival::Bursty { base_share, .. } => self.mean_gap_ns / base_share.max(1e-12) * self.rng.exp1(),
            &Arrival::Accel { cv2, .. } => {
                let share = self.law.share_at(self.next_ns / 1e9, self.span_ns / 1e9);
                let k = 1.0 / cv2;
                self.mean_gap_ns / share * self.rng.gamma(k) / k
            }
            Arrival::Trace { shape, .. } => {
                let shape = shape.as_ref().expect("trace files are attached before a run (Scenario::attach_traces)");
                // Skip minutes without invocations, then a Poisson gap at the minute's rate.
                let bin_ns = self.span_ns / shape.len() as f64;
                let mut bin = ((self.next_ns / bin_ns) as usize).min(shape.len() - 1);
                let mut skip = 0.0;
                while shape[bin] == 0.0 {
                    bin += 1;
                    if bin == shape.len() {
                        return f64::INFINITY;
                    }
                    skip = bin as f64 * bin_ns - self.next_ns;
                }
                let share = self.law.share_at((self.next_ns + skip) / 1e9, self.span_ns / 1e9);
                skip + self.mean_gap_ns / share * self.rng.exp1()
            }
        }
    }

    fn burst_gap(&mut self) -> f64 {
        let Arrival::Bursty { base_share, cv2 } = self.law else { return f64::INFINITY };
        let k = 1.0 / cv2;
        self.mean_gap_ns / (1.0 - base_share) * self.rng.gamma(k) / k
    }

    /// The next arrival time of the superposed stream.
    fn next(&self) -> f64 {
        self.next_ns.min(self.next_burst_ns)
    }

    /// Moves past the arrival at `next()`.
    fn advance(&mut self) {
        if self.next_burst_ns < self.next_ns {
            self.next_burst_ns += self.burst_gap();
        } else {
            self.next_ns += self.gap();
        }
    }
}

/// What arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Model(ModelId),
    Query(usize),
}

pub struct Arrivals {
    streams: Vec<Stream>,
    models: usize,
    /// Per model: its apps' mix and the stream drawing app and solo time.
    content: Vec<Option<(DynamicExec, f64, Rng)>>,
    next: IndexedMinHeap,
    end: Nanos,
    popped: usize,
}

impl Arrivals {
    /// Arrivals at aggregate `rate_rps`, split by weight, until `end`.
    pub fn new(scenario: &Scenario, rate_rps: f64, seed: u64, end: Nanos) -> Self {
        let laws =
            scenario.models.iter().map(|m| m.arrival.clone()).chain(scenario.queries.iter().map(|q| q.arrival.clone()));
        let rates = scenario.direct_rates(rate_rps).into_iter().chain(scenario.query_rates(rate_rps));
        let mut next = IndexedMinHeap::with_capacity(scenario.models.len() + scenario.queries.len());
        let streams = laws
            .zip(rates)
            .enumerate()
            .map(|(i, (law, r))| {
                let mut s = Stream {
                    law,
                    span_ns: end as f64,
                    mean_gap_ns: if r > 0.0 { NANOS_PER_S as f64 / r } else { f64::INFINITY },
                    next_ns: 0.0,
                    next_burst_ns: f64::INFINITY,
                    rng: Rng::stream(seed, i as u64),
                };
                // Evenly spaced streams start at a random phase, others at a first gap.
                s.next_ns = match s.law {
                    Arrival::Uniform => s.mean_gap_ns * s.rng.unit(),
                    _ => s.gap(),
                };
                s.next_burst_ns = s.burst_gap();
                if s.next() < end as f64 {
                    next.set(i, s.next() as Nanos);
                }
                s
            })
            .collect();
        let content = scenario
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                m.spec.dynamic.clone().map(|d| {
                    let total = d.apps.iter().map(|a| a.weight).sum();
                    (d, total, Rng::stream(seed, (1 << 32) | i as u64))
                })
            })
            .collect();
        Self { streams, models: scenario.models.len(), content, next, end, popped: 0 }
    }

    pub fn peek(&self) -> Option<Nanos> {
        self.next.peek().map(|(_, t)| t)
    }

    /// The next arrival: its time and source.
    pub fn pop(&mut self) -> Option<(Nanos, Source)> {
        let (i, t) = self.next.peek()?;
        let s = &mut self.streams[i];
        s.advance();
        if s.next() < self.end as f64 {
            self.next.set(i, s.next() as Nanos);
        } else {
            self.next.remove(i);
        }
        let source = if i < self.models { Source::Model(ModelId(i as u32)) } else { Source::Query(i - self.models) };
        self.popped += 1;
        Some((t, source))
    }

    /// How many arrivals `pop` has given: the last one's ordinal plus one.
    pub fn popped(&self) -> usize {
        self.popped
    }

    /// The app and solo time of a new request of `model` (0 for models
    /// whose batches follow their profile: the simulator knows their l(1)).
    pub fn content(&mut self, model: ModelId) -> (AppId, Nanos) {
        let (app, draw, _) = self.draw(model, false);
        (app, draw)
    }

    /// What a client sends for a new request of `model`: its app, and for
    /// a dynamic model the first float of its input — the solo time drawn
    /// as `content` draws it, in µs, or where the app says how its inputs
    /// carry their work (`AppSpec::work`), a whole length drawn from that.
    /// The same stream as `content`, so without `work` a client's requests
    /// take the simulator's solo times one for one.
    pub fn input(&mut self, model: ModelId) -> (AppId, Option<f32>) {
        let (app, draw, by_work) = self.draw(model, true);
        let work = match by_work {
            true => (draw as f64 / NANOS_PER_MS as f64).round().max(1.0),
            false => draw as f64 / 1e3,
        };
        (app, self.content[model.index()].is_some().then_some(work as f32))
    }

    /// An app, and a draw from its solo-time distribution — or from its
    /// work distribution when `work` is asked for and the app has one
    /// (then the third value is true).
    fn draw(&mut self, model: ModelId, work: bool) -> (AppId, Nanos, bool) {
        let Some((d, total, rng)) = &mut self.content[model.index()] else { return (AppId(0), 0, false) };
        let mut pick = rng.unit() * *total;
        let j = d.apps.iter().position(|a| {
            pick -= a.weight;
            pick < 0.0
        });
        let j = j.unwrap_or(d.apps.len() - 1);
        let app = &d.apps[j];
        match app.work.as_ref().filter(|_| work) {
            Some(w) => (AppId(j as u32), w.sample(rng), true),
            None => (AppId(j as u32), app.exec.sample(rng), false),
        }
    }
}
