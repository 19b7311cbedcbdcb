//! The clients' side of a chaos run, kept apart from the system it checks:
//! every request sent, the one answer it may get, and the findings.

use baton_sched::time::Nanos;
use baton_wire::fb;

use crate::roles::frontend::f32s;

/// Client requests and their answers, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub sent: u64,
    pub ok: u64,
    /// Of `ok`, after the deadline.
    pub late: u64,
    pub dropped: u64,
    /// Of `dropped`, answered `Lost`.
    pub lost: u64,
    pub errors: u64,
    /// Refused by the transport: their frontend was down.
    pub refused: u64,
    /// Accepted, then their frontend crashed: the client saw its
    /// connection close.
    pub closed: u64,
}

impl Tally {
    pub fn add(&mut self, o: &Tally) {
        self.sent += o.sent;
        self.ok += o.ok;
        self.late += o.late;
        self.dropped += o.dropped;
        self.lost += o.lost;
        self.errors += o.errors;
        self.refused += o.refused;
        self.closed += o.closed;
    }

    pub fn answered(&self) -> u64 {
        self.ok + self.dropped + self.errors + self.refused + self.closed
    }
}

struct Sent {
    frontend: u32,
    incarnation: u32,
    deadline: Nanos,
    /// The output an ok answer must carry: its input's checksum.
    expect: f32,
    answered: bool,
}

#[derive(Default)]
pub struct Ledger {
    sent: Vec<Sent>,
    pub tally: Tally,
    pub violations: Vec<String>,
}

/// The input of client request `id`: its output (the emulated models'
/// checksum) tells it from every other request's.
pub fn input_of(id: u64, floats: usize) -> Vec<f32> {
    let mut x = vec![1.0; floats];
    x[0] = (id % (1 << 20)) as f32;
    x
}

impl Ledger {
    /// A request is sent at `now` to frontend `fe` (in its `incarnation`);
    /// its id.
    pub fn send(&mut self, fe: u32, incarnation: u32, now: Nanos, slo: Nanos, input: &[f32]) -> u64 {
        self.tally.sent += 1;
        let expect = input.iter().sum();
        self.sent.push(Sent { frontend: fe, incarnation, deadline: now + slo, expect, answered: false });
        self.sent.len() as u64 - 1
    }

    /// The transport refused request `id` (its frontend was down).
    pub fn refused(&mut self, id: u64) {
        self.close(id);
        self.tally.refused += 1;
    }

    fn close(&mut self, id: u64) {
        let s = &mut self.sent[id as usize];
        assert!(!s.answered, "request {id} refused after an answer");
        s.answered = true;
    }

    /// Frontend `fe`'s `incarnation` crashed: its clients' connections
    /// close, and every request it had accepted and not answered ends so.
    pub fn frontend_crashed(&mut self, fe: u32, incarnation: u32) {
        for s in self.sent.iter_mut().filter(|s| s.frontend == fe && s.incarnation == incarnation && !s.answered) {
            s.answered = true;
            self.tally.closed += 1;
        }
    }

    /// An answer reaches its client at `now`. Returns whether it was ok and
    /// after its deadline, for the late-count check.
    pub fn answer(&mut self, now: Nanos, fe: u32, a: &fb::InferResponse) -> bool {
        let Some(s) = self.sent.get_mut(a.id as usize) else {
            self.violations.push(format!("an answer for request {}, which no client sent", a.id));
            return false;
        };
        if s.frontend != fe {
            self.violations.push(format!("request {} answered by frontend {fe}, sent to {}", a.id, s.frontend));
        }
        if std::mem::replace(&mut s.answered, true) {
            self.violations.push(format!("request {} answered twice (again {:?} at {now})", a.id, a.status));
            return false;
        }
        match a.status {
            fb::Status::Ok => {
                self.tally.ok += 1;
                let out = a.outputs.as_deref().and_then(|o| o.first()).and_then(|t| t.data.as_deref());
                let got = out.map(f32s).unwrap_or_default();
                if got.first() != Some(&s.expect) {
                    self.violations.push(format!(
                        "request {} got {:?}, its input's output is {}: another request's answer",
                        a.id,
                        got.first(),
                        s.expect
                    ));
                }
                let late = now > s.deadline;
                self.tally.late += u64::from(late);
                late
            }
            fb::Status::Dropped => {
                self.tally.dropped += 1;
                self.tally.lost += u64::from(a.drop_reason == fb::DropReason::Lost);
                false
            }
            fb::Status::Error => {
                self.tally.errors += 1;
                false
            }
        }
    }

    /// Requests not answered.
    pub fn pending(&self) -> u64 {
        self.tally.sent - self.tally.answered()
    }

    /// The first few requests never answered, for the report.
    pub fn unanswered(&self, at_most: usize) -> Vec<u64> {
        (0..self.sent.len() as u64).filter(|&i| !self.sent[i as usize].answered).take(at_most).collect()
    }
}
