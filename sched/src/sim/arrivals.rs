//! Open-loop arrivals: one independent stream per model, each from its own
//! seeded RNG, merged in time order (ties by model index).

use crate::heap::IndexedMinHeap;
use crate::rng::Rng;
use crate::scenario::{Arrival, Scenario};
use crate::time::{Nanos, NANOS_PER_S};
use crate::types::{AppId, DynamicExec, ModelId};

struct Stream {
    law: Arrival,
    mean_gap_ns: f64,
    next_ns: f64,
    rng: Rng,
    /// Which app each request belongs to and its solo time, for models
    /// with input-dependent execution; its own stream, so adding apps never
    /// moves arrival times.
    content: Option<(DynamicExec, f64, Rng)>,
}

impl Stream {
    fn gap(&mut self) -> f64 {
        match self.law {
            Arrival::Poisson => self.mean_gap_ns * self.rng.exp1(),
            Arrival::Uniform => self.mean_gap_ns,
            Arrival::Gamma(k) => self.mean_gap_ns * self.rng.gamma(k) / k,
        }
    }
}

pub struct Arrivals {
    streams: Vec<Stream>,
    next: IndexedMinHeap,
    end: Nanos,
}

impl Arrivals {
    /// Arrivals at aggregate `rate_rps`, split by weight, until `end`.
    pub fn new(scenario: &Scenario, rate_rps: f64, seed: u64, end: Nanos) -> Self {
        let rates = scenario.model_rates(rate_rps);
        let mut next = IndexedMinHeap::with_capacity(rates.len());
        let streams = scenario
            .models
            .iter()
            .zip(rates)
            .enumerate()
            .map(|(i, (m, r))| {
                let content = m.spec.dynamic.clone().map(|d| {
                    let total = d.apps.iter().map(|a| a.weight).sum();
                    (d, total, Rng::stream(seed, (1 << 32) | i as u64))
                });
                let mut s = Stream {
                    law: m.arrival,
                    mean_gap_ns: if r > 0.0 { NANOS_PER_S as f64 / r } else { f64::INFINITY },
                    next_ns: 0.0,
                    rng: Rng::stream(seed, i as u64),
                    content,
                };
                // Evenly spaced streams start at a random phase, others at a first gap.
                s.next_ns = match s.law {
                    Arrival::Uniform => s.mean_gap_ns * s.rng.unit(),
                    _ => s.gap(),
                };
                if s.next_ns < end as f64 {
                    next.set(i, s.next_ns as Nanos);
                }
                s
            })
            .collect();
        Self { streams, next, end }
    }

    pub fn peek(&self) -> Option<Nanos> {
        self.next.peek().map(|(_, t)| t)
    }

    /// The next arrival: its time, model, app and solo time (0 for models
    /// whose batches follow their profile: the simulator knows their l(1)).
    pub fn pop(&mut self) -> Option<(Nanos, ModelId, AppId, Nanos)> {
        let (i, t) = self.next.peek()?;
        let s = &mut self.streams[i];
        let (app, solo) = match &mut s.content {
            Some((d, total, rng)) => {
                let mut pick = rng.unit() * *total;
                let j = d.apps.iter().position(|a| {
                    pick -= a.weight;
                    pick < 0.0
                });
                let j = j.unwrap_or(d.apps.len() - 1);
                (AppId(j as u32), d.apps[j].exec.sample(rng))
            }
            None => (AppId(0), 0),
        };
        s.next_ns += s.gap();
        if s.next_ns < self.end as f64 {
            self.next.set(i, s.next_ns as Nanos);
        } else {
            self.next.remove(i);
        }
        Some((t, ModelId(i as u32), app, solo))
    }
}
