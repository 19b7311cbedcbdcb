//! Model shards and the rank shard wired together in one thread, for the
//! simulator. Every message between them is a timed event: it is delivered
//! `msg_delay` after it was sent, in send order, through `on_timeout`. Model
//! `m` lives on shard `m % shards`.

use std::collections::VecDeque;

use super::{models_of, shard_of, CandidateRule, ModelShard, RankShard, ShardOutput, ToModel, ToRank};
use crate::time::Nanos;
use crate::types::{BackendId, BatchDone, ClusterSpec, ModelId, Output, Request, Scheduler};

#[derive(Debug)]
enum Envelope {
    ToRank(ToRank),
    ToModel(ToModel),
}

#[derive(Debug)]
pub struct Symphony {
    shards: Vec<ModelShard>,
    rank: RankShard,
    /// Messages in flight, in delivery order (all share one delay).
    mailbox: VecDeque<(Nanos, Envelope)>,
    msg_delay: Nanos,
    out: VecDeque<Output>,
}

impl Symphony {
    pub fn new(spec: &ClusterSpec, rule: CandidateRule, shards: usize, msg_delay: Nanos) -> Self {
        assert!(shards >= 1);
        let n = spec.models.len();
        let shards = (0..shards).map(|s| ModelShard::new(spec, &models_of(s, shards, n), rule)).collect();
        Self {
            shards,
            rank: RankShard::new(n, spec.backends, spec.delay),
            mailbox: VecDeque::new(),
            msg_delay,
            out: VecDeque::new(),
        }
    }

    fn shard_of(&self, model: ModelId) -> usize {
        shard_of(model, self.shards.len())
    }

    fn collect_shard(&mut self, now: Nanos, s: usize) {
        while let Some(o) = self.shards[s].poll_output() {
            match o {
                ShardOutput::ToRank(m) => self.mailbox.push_back((now + self.msg_delay, Envelope::ToRank(m))),
                ShardOutput::Decision(d) => self.out.push_back(d),
            }
        }
    }

    fn collect_rank(&mut self, now: Nanos) {
        while let Some(m) = self.rank.poll_output() {
            self.mailbox.push_back((now + self.msg_delay, Envelope::ToModel(m)));
        }
    }
}

impl Scheduler for Symphony {
    fn on_request(&mut self, now: Nanos, req: Request) {
        let s = self.shard_of(req.model);
        self.shards[s].on_request(now, req);
        self.collect_shard(now, s);
    }

    /// Symphony plans with predicted batch times; a completion tells the
    /// rank shard when the backend really freed.
    fn on_batch_done(&mut self, now: Nanos, done: &BatchDone<'_>) {
        let msg = ToRank::BatchDone { backend: done.backend, at: now };
        self.mailbox.push_back((now + self.msg_delay, Envelope::ToRank(msg)));
    }

    /// The rank shard hears of it like a completion, one message delay later.
    fn on_backend_failed(&mut self, now: Nanos, backend: BackendId) {
        let msg = ToRank::BackendFailed { backend };
        self.mailbox.push_back((now + self.msg_delay, Envelope::ToRank(msg)));
    }

    fn on_backend_joined(&mut self, now: Nanos, backend: BackendId) {
        let msg = ToRank::BackendJoined { backend, at: now };
        self.mailbox.push_back((now + self.msg_delay, Envelope::ToRank(msg)));
    }

    fn on_timeout(&mut self, now: Nanos) {
        loop {
            let mut progressed = false;
            while let Some(&(at, _)) = self.mailbox.front() {
                if at > now {
                    break;
                }
                progressed = true;
                match crate::fifo::pop_front(&mut self.mailbox).map(|(_, e)| e) {
                    Some(Envelope::ToRank(m)) => {
                        self.rank.on_message(m);
                        self.collect_rank(now);
                    }
                    Some(Envelope::ToModel(m)) => {
                        let model = match m {
                            ToModel::Grant { model, .. } | ToModel::Invalidated { model, .. } => model,
                        };
                        let s = self.shard_of(model);
                        self.shards[s].on_message(now, m);
                        self.collect_shard(now, s);
                    }
                    None => unreachable!("front was Some"),
                }
            }
            for s in 0..self.shards.len() {
                if self.shards[s].next_timeout().is_some_and(|t| t <= now) {
                    progressed = true;
                    self.shards[s].on_timeout(now);
                    self.collect_shard(now, s);
                }
            }
            if self.rank.next_timeout().is_some_and(|t| t <= now) {
                progressed = true;
                self.rank.on_timeout(now);
                self.collect_rank(now);
            }
            if !progressed {
                return;
            }
        }
    }

    fn next_timeout(&self) -> Option<Nanos> {
        let mail = self.mailbox.front().map(|&(at, _)| at);
        let shards = self.shards.iter().filter_map(|s| s.next_timeout()).min();
        [mail, shards, self.rank.next_timeout()].into_iter().flatten().min()
    }

    fn poll_output(&mut self) -> Option<Output> {
        crate::fifo::pop_front(&mut self.out)
    }
}
