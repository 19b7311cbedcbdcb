//! How a shard's pump exchanges messages with the rest of the cluster:
//! through SPSC rings to the other shards of the same process (`baton
//! serve`), or through TCP connections to roles in other processes (the
//! `Router`). The pump does not know which.
//!
//! Within a process, shards also carry Symphony's own messages between its
//! model shards and its rank shard (`ShardMsg::Rank`, `ShardMsg::Model`);
//! those never leave the process.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use baton_net::mesh::{SendError, ShardLinks};
use baton_sched::symphony::{shard_of, ToModel, ToRank};
use baton_sched::time::Nanos;
use baton_wire::{fb, Message};

use super::park::Bell;
use super::router::Router;
use crate::roles::symphony::model_of;
use crate::roles::{Addr, Envelope};

/// What moves between shards. Every hop moves it (out of a deque, through
/// a ring, into the next list), so it is kept small: the one message per
/// request, a request's metadata for its scheduler, travels inline
/// (`Meta`, 64 bytes of fields), and every other role message, one or a
/// few per batch, boxed (`Env`: a `Message` is 192 bytes). Inline, every
/// message was 200 bytes, and memmove 16.5% of a loaded core's samples
/// (4.8% after; perf/results/engine_profile.txt, at 800,000 r/s).
#[derive(Debug)]
pub enum ShardMsg {
    /// `Message::RequestMeta(meta)` for `Addr::Scheduler(to)`.
    Meta {
        to: u32,
        meta: fb::RequestMeta,
    },
    /// Any other role message (`ShardMsg::env` makes both).
    Env(Box<Envelope>),
    Rank(ToRank),
    Model(ToModel),
    /// The connection to a role in another process opened or closed (from
    /// the `Router`; never on a ring).
    Peer {
        peer: Addr,
        up: bool,
    },
}

impl ShardMsg {
    /// `e` as a shard message: a request's metadata inline, others boxed.
    pub fn env(e: Envelope) -> Self {
        match e {
            Envelope { to: Addr::Scheduler(to), msg: Message::RequestMeta(meta) } => ShardMsg::Meta { to, meta },
            e => ShardMsg::Env(boxed(e)),
        }
    }

    /// The role message inside, or the message back if it is Symphony's
    /// own or a peer notice.
    pub fn into_envelope(self) -> Result<Envelope, Self> {
        match self {
            ShardMsg::Meta { to, meta } => Ok(Envelope { to: Addr::Scheduler(to), msg: Message::RequestMeta(meta) }),
            ShardMsg::Env(e) => Ok(open(e)),
            m => Err(m),
        }
    }
}

thread_local! {
    /// Boxes opened on this thread (`open`), each holding a placeholder,
    /// for the next `ShardMsg::env` here: the few role messages of every
    /// batch cross the rings without an allocation each (they were the
    /// one-core stress harness's most frequent, 54% of its mallocs). The
    /// boxes' allocations are what is kept, so a list of boxes.
    #[allow(clippy::vec_box)]
    static BOXES: RefCell<Vec<Box<Envelope>>> = const { RefCell::new(Vec::new()) };
}

/// Boxes a thread keeps at most: more than its rounds have in flight. A
/// shard that only opens what another thread boxed keeps this many and
/// frees the rest, as without the list.
const MAX_BOXES: usize = 4096;

/// `e` in a box, reused where one was opened on this thread.
fn boxed(e: Envelope) -> Box<Envelope> {
    // A thread being torn down has no list any more: a new box then.
    match BOXES.try_with(|b| b.borrow_mut().pop()).ok().flatten() {
        Some(mut b) => {
            *b = e;
            b
        }
        None => Box::new(e),
    }
}

/// The envelope out of its box (`ShardMsg::Env`); the box, left holding a
/// placeholder that owns nothing, goes back for the next `boxed` here.
pub fn open(mut b: Box<Envelope>) -> Envelope {
    let placeholder = Envelope { to: Addr::Scheduler(0), msg: Message::Stats(fb::Stats::default()) };
    let e = std::mem::replace(&mut *b, placeholder);
    let _ = BOXES.try_with(|boxes| {
        let mut boxes = boxes.borrow_mut();
        if boxes.len() < MAX_BOXES {
            boxes.push(b);
        }
    });
    e
}

/// A frontend shard's messages waiting for room on the links, in two
/// queues: what carries work already under way (a planned batch's inputs
/// for its backend, a query's next stages) leaves before new arrivals'
/// metadata. A backlog of arrivals then never holds up a batch already
/// planned: behind 200,000 queued arrivals, batches waited on their
/// inputs past their deadlines and requests were answered `Lost`
/// (perf/results/stress_ab.txt). Nothing under way refers to an arrival
/// still queued (a batch's members reached the scheduler first).
#[derive(Default)]
pub struct Outbound {
    pub under_way: VecDeque<ShardMsg>,
    pub arrivals: VecDeque<ShardMsg>,
}

impl Outbound {
    pub fn len(&self) -> usize {
        self.under_way.len() + self.arrivals.len()
    }

    pub fn is_empty(&self) -> bool {
        self.under_way.is_empty() && self.arrivals.is_empty()
    }

    /// When the oldest arrival still waiting arrived: how long requests
    /// wait on their way to the scheduler (`Frontend::set_waiting`).
    pub fn oldest_arrival(&self) -> Option<Nanos> {
        match self.arrivals.front() {
            Some(ShardMsg::Meta { meta, .. }) => Some(meta.arrival_ns),
            _ => None,
        }
    }
}

/// Which shard of a `baton serve` process runs what: shards `0..frontends`
/// the frontends (frontend `f` on shard `f`), then the scheduler (or
/// Symphony's rank shard), then `model_shards` Symphony model shards
/// (none: the policy runs whole on the scheduler shard), then
/// `backend_shards` shards of backends only, each a contiguous range of the
/// `backends` (none: every backend on the scheduler shard).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub frontends: usize,
    pub model_shards: usize,
    pub backend_shards: usize,
    pub backends: u32,
}

/// The first frontend's shard (the only one of in-process clients).
pub const FRONTEND_SHARD: usize = 0;

impl Layout {
    pub fn shards(&self) -> usize {
        self.frontends + 1 + self.model_shards + self.backend_shards
    }

    /// The backends shard `j` of the backend shards holds (all of them on
    /// the scheduler shard when there are none).
    pub fn backends_of(&self, j: usize) -> std::ops::Range<u32> {
        let n = u64::from(self.backends);
        let at = |j: usize| (n * j as u64 / self.backend_shards.max(1) as u64) as u32;
        at(j)..at(j + 1)
    }

    /// The shard that holds backend `b`.
    fn backend_shard(&self, b: u32) -> usize {
        if self.backend_shards == 0 || b >= self.backends {
            return self.sched();
        }
        // Shard j starts at floor(n j / B): the last one starting at or
        // below b is ceil((b + 1) B / n) - 1.
        let (n, shards) = (u64::from(self.backends), self.backend_shards as u64);
        let j = ((u64::from(b) + 1) * shards).div_ceil(n) as usize - 1;
        debug_assert!(self.backends_of(j).contains(&b), "backend {b} is not shard {j}'s");
        self.sched() + 1 + self.model_shards + j
    }

    /// The shard of the scheduler (or Symphony's rank shard).
    pub fn sched(&self) -> usize {
        self.frontends
    }

    /// The scheduler-side shards: the scheduler's, then the model shards.
    pub fn sched_shards(&self) -> std::ops::Range<usize> {
        self.sched()..self.shards()
    }

    fn model_shard(&self, model: u32) -> usize {
        self.sched() + 1 + shard_of(baton_sched::types::ModelId(model), self.model_shards)
    }

    /// The shard a message goes to. Frontends of one process are numbered
    /// from 0, so frontend `f` is shard `f`; the ring refuses any other.
    pub fn shard_for(&self, m: &ShardMsg) -> usize {
        match m {
            ShardMsg::Meta { meta, .. } => match self.model_shards {
                0 => self.sched(),
                _ => self.model_shard(meta.model),
            },
            ShardMsg::Env(e) => match e.to {
                Addr::Frontend(f) => f as usize,
                Addr::Backend(b) => self.backend_shard(b),
                Addr::Scheduler(_) => self.sched(),
            },
            ShardMsg::Rank(_) | ShardMsg::Peer { .. } => self.sched(),
            ShardMsg::Model(m) => self.model_shard(model_of(m).0),
        }
    }
}

pub enum Link {
    Ring(Ring),
    Tcp(Rc<Router>),
}

/// A shard's rings to the other shards of its process.
pub struct Ring {
    pub links: ShardLinks<ShardMsg>,
    pub layout: Layout,
    /// `bells[i]` wakes shard `i` when it has parked (`park.rs`).
    pub bells: Vec<Bell>,
}

impl Link {
    /// Whether messages are waiting (a snapshot, for parking).
    pub fn pending(&self) -> bool {
        match self {
            Link::Ring(r) => r.links.pending(),
            Link::Tcp(r) => r.pending(),
        }
    }

    /// The shard is about to park: a peer's completion wakes it from now
    /// on (`Router::arm_wake`; rings wake it by its bell).
    pub fn arm_wake(&self) {
        if let Link::Tcp(r) = self {
            r.arm_wake();
        }
    }

    pub fn disarm_wake(&self) {
        if let Link::Tcp(r) = self {
            r.disarm_wake();
        }
    }

    /// Hands the kernel what this round sent to peers (and the greetings'
    /// replies), in one system call; rings need nothing.
    pub fn submit(&self) {
        if let Link::Tcp(r) = self {
            r.flush();
        }
    }

    /// Messages sent to schedulers that have not left this process yet (beyond
    /// the caller's own queue): those in the outbox of a connection whose
    /// peer is not reading; none on rings, whose slots are their bound.
    pub fn unsent_to_schedulers(&self) -> usize {
        match self {
            Link::Ring(_) => 0,
            Link::Tcp(r) => r.unsent_to_schedulers(),
        }
    }

    /// Messages that arrived since the last call.
    pub fn poll(&mut self, out: &mut Vec<ShardMsg>) {
        match self {
            Link::Ring(r) => {
                r.links.poll(4096, |_, m| out.push(m));
            }
            Link::Tcp(r) => {
                r.poll();
                // A peer's last messages before its connection closed come first.
                out.extend(r.inbox.borrow_mut().drain(..).map(ShardMsg::env));
                out.extend(r.notices.borrow_mut().drain(..).map(|(peer, up)| ShardMsg::Peer { peer, up }));
            }
        }
    }

    /// Sends what it can of `q`, work under way first (`Outbound`).
    pub fn flush_outbound(&mut self, q: &mut Outbound) {
        self.flush(&mut q.under_way);
        if q.under_way.is_empty() {
            self.flush(&mut q.arrivals);
        }
    }

    /// Sends what it can of `q`, in order; a full ring leaves the rest queued.
    pub fn flush(&mut self, q: &mut VecDeque<ShardMsg>) {
        match self {
            Link::Ring(Ring { links, layout, bells }) => {
                let mut sent_to = 0u64;
                while let Some(m) = baton_sched::fifo::pop_front(q) {
                    let to = layout.shard_for(&m);
                    match links.send(to, m) {
                        Ok(()) => sent_to |= 1 << to.min(63),
                        Err(SendError::Full(m)) => {
                            q.push_front(m);
                            break;
                        }
                        Err(SendError::NoRoute { to, shards }) => {
                            panic!("layout routes to shard {to} of {shards}")
                        }
                    }
                }
                // Each shard that got something is rung once, after its
                // messages are published (shards past 63 share the last
                // bit: a spare ring at worst, never a lost one).
                for (i, bell) in bells.iter().enumerate() {
                    if sent_to & (1 << i.min(63)) != 0 {
                        bell.ring();
                    }
                }
            }
            Link::Tcp(r) => {
                for m in q.drain(..) {
                    match m.into_envelope() {
                        Ok(e) => r.send(e),
                        // Symphony is split across shards only within one
                        // process; its own messages never reach a router.
                        Err(other) => unreachable!("{other:?} routed to another process"),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_net::mesh::mesh;

    fn arrival(id: u64) -> ShardMsg {
        ShardMsg::env(Envelope {
            to: Addr::Scheduler(0),
            msg: Message::RequestMeta(fb::RequestMeta { id, arrival_ns: 10 * id, ..Default::default() }),
        })
    }

    /// A box opened on a thread carries the next message boxed there, and
    /// what comes out of it is what went in.
    #[test]
    fn an_opened_box_carries_the_next_message() {
        let ShardMsg::Env(first) = inputs(1) else { panic!("a role message is boxed") };
        let at: *const Envelope = &*first;
        let e = open(first);
        assert!(matches!(e, Envelope { to: Addr::Backend(0), msg: Message::Inputs(fb::Inputs { batch_id: 1, .. }) }));
        let ShardMsg::Env(second) = inputs(2) else { panic!("a role message is boxed") };
        assert_eq!(&*second as *const Envelope, at, "the box is reused");
        let Ok(e) = ShardMsg::Env(second).into_envelope() else { panic!("a role message") };
        assert!(matches!(e.msg, Message::Inputs(fb::Inputs { batch_id: 2, .. })));
    }

    fn inputs(batch_id: u64) -> ShardMsg {
        ShardMsg::env(Envelope {
            to: Addr::Backend(0),
            msg: Message::Inputs(fb::Inputs { batch_id, ..Default::default() }),
        })
    }

    /// Which message it is: an arrival's id, or a batch's id negated.
    fn which(m: ShardMsg) -> i64 {
        match m.into_envelope().expect("a role message").msg {
            Message::RequestMeta(m) => m.id as i64,
            Message::Inputs(i) => -(i.batch_id as i64),
            m => panic!("unexpected {m:?}"),
        }
    }

    /// Backend shards split the backends into contiguous ranges that cover
    /// them once; a message for a backend goes to the shard holding it.
    #[test]
    fn backend_shards_cover_the_backends_once() {
        for (backends, shards) in [(10, 3), (4000, 7), (5, 5), (1, 1), (7, 0)] {
            let layout = Layout { frontends: 2, model_shards: 1, backend_shards: shards, backends };
            let mut next = 0;
            for j in 0..shards {
                let r = layout.backends_of(j);
                assert_eq!(r.start, next, "{backends} over {shards}: contiguous");
                assert!(!r.is_empty(), "{backends} over {shards}: shard {j} holds none");
                for b in r.clone() {
                    assert_eq!(layout.backend_shard(b), layout.sched() + 2 + j);
                }
                next = r.end;
            }
            if shards == 0 {
                assert_eq!(layout.backend_shard(3), layout.sched(), "no backend shards: the scheduler's");
            } else {
                assert_eq!(next, backends, "{backends} over {shards}: every backend");
            }
        }
    }

    /// Work under way leaves before queued arrivals, each queue in order;
    /// what a full ring leaves stays queued, arrivals behind work under
    /// way, and the oldest arrival waiting is the first left.
    #[test]
    fn work_under_way_leaves_before_queued_arrivals() {
        let mut ends = mesh::<ShardMsg>(2, 4).into_iter();
        let (front, mut sched) = (ends.next().unwrap(), ends.next().unwrap());
        let layout = Layout { frontends: 1, model_shards: 0, backend_shards: 0, backends: 1 };
        let mut link = Link::Ring(Ring { links: front, layout, bells: Vec::new() });
        let mut q = Outbound::default();
        q.arrivals.extend([arrival(1), arrival(2), arrival(3)]);
        q.under_way.extend([inputs(7), inputs(8)]);
        assert_eq!((q.len(), q.oldest_arrival()), (5, Some(10)));
        link.flush_outbound(&mut q);
        let mut got = Vec::new();
        sched.poll(16, |_, m| got.push(which(m)));
        assert_eq!(got, vec![-7, -8, 1, 2], "a ring of four: work under way first");
        assert_eq!((q.len(), q.oldest_arrival()), (1, Some(30)));
        q.under_way.push_back(inputs(9));
        link.flush_outbound(&mut q);
        got.clear();
        sched.poll(16, |_, m| got.push(which(m)));
        assert_eq!(got, vec![-9, 3], "the arrival left waits behind new work under way");
        assert!(q.is_empty() && q.oldest_arrival().is_none());
    }
}
