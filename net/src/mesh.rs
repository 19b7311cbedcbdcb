//! The in-process transport between shards: a fixed mesh of bounded SPSC
//! rings, one per ordered pair of shards (Seastar's `smp` queues). Each
//! shard owns its row of producers and its column of consumers, so no two
//! threads ever share a ring end, and a full ring is backpressure the
//! sender sees at once (the message comes back to it).

use std::collections::VecDeque;

use crate::ring::{ring, Consumer, Producer};

/// One shard's ends of the mesh.
pub struct ShardLinks<T> {
    id: usize,
    to: Vec<Option<Producer<T>>>,
    from: Vec<Option<Consumer<T>>>,
    /// Where the next `poll` starts, so no peer starves the others.
    cursor: usize,
}

/// Why a send did not happen.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError<T> {
    /// The ring to that shard is full; the message is handed back.
    Full(T),
    /// No such shard, or the shard itself.
    NoRoute { to: usize, shards: usize },
}

/// Builds the mesh for `shards` shards with rings of `capacity` messages;
/// element `i` is shard `i`'s ends, to move onto its thread.
pub fn mesh<T>(shards: usize, capacity: usize) -> Vec<ShardLinks<T>> {
    let mut links: Vec<ShardLinks<T>> = (0..shards)
        .map(|id| ShardLinks {
            id,
            to: (0..shards).map(|_| None).collect(),
            from: (0..shards).map(|_| None).collect(),
            cursor: 0,
        })
        .collect();
    for a in 0..shards {
        for b in (0..shards).filter(|&b| b != a) {
            let (p, c) = ring(capacity);
            links[a].to[b] = Some(p);
            links[b].from[a] = Some(c);
        }
    }
    links
}

impl<T> ShardLinks<T> {
    pub fn id(&self) -> usize {
        self.id
    }

    pub fn shards(&self) -> usize {
        self.to.len()
    }

    fn route(&mut self, to: usize) -> Result<&mut Producer<T>, SendError<T>> {
        let shards = self.to.len();
        self.to.get_mut(to).and_then(Option::as_mut).ok_or(SendError::NoRoute { to, shards })
    }

    pub fn send(&mut self, to: usize, msg: T) -> Result<(), SendError<T>> {
        self.route(to)?.try_push(msg).map_err(SendError::Full)
    }

    /// Sends from the front of `msgs` until the ring is full (one index
    /// publication); returns how many went.
    pub fn send_batch(&mut self, to: usize, msgs: &mut VecDeque<T>) -> Result<usize, SendError<T>> {
        Ok(self.route(to)?.push_batch(msgs))
    }

    /// Whether any peer has a message waiting (a snapshot).
    pub fn pending(&self) -> bool {
        self.from.iter().flatten().any(|c| !c.is_empty())
    }

    /// Receives up to `budget` messages, visiting peers round-robin from
    /// where the last poll stopped; `f(from, msg)` gets each. Returns how
    /// many were received.
    pub fn poll(&mut self, budget: usize, mut f: impl FnMut(usize, T)) -> usize {
        let n = self.from.len();
        let mut got = 0;
        let mut idle = 0;
        while got < budget && idle < n {
            let peer = self.cursor;
            self.cursor = (self.cursor + 1) % n;
            match self.from[peer].as_mut().and_then(Consumer::try_pop) {
                Some(m) => {
                    f(peer, m);
                    got += 1;
                    idle = 0;
                }
                None => idle += 1,
            }
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_checked() {
        let mut m = mesh::<u8>(3, 4);
        assert_eq!(m[1].send(1, 0), Err(SendError::NoRoute { to: 1, shards: 3 }));
        assert_eq!(m[1].send(7, 0), Err(SendError::NoRoute { to: 7, shards: 3 }));
        for i in 0..4 {
            m[0].send(2, i).unwrap();
        }
        assert_eq!(m[0].send(2, 9), Err(SendError::Full(9)), "backpressure hands the message back");
    }

    /// Four shards on four threads each send 20,000 messages to every
    /// other through rings of 16: each arrives exactly once, and in order
    /// per sender.
    #[test]
    fn all_to_all_delivers_each_message_once_in_order() {
        const SHARDS: usize = 4;
        const PER_PEER: u64 = 20_000;
        let threads: Vec<_> = mesh::<(usize, u64)>(SHARDS, 16)
            .into_iter()
            .map(|mut links| {
                std::thread::spawn(move || {
                    let me = links.id();
                    let mut next_out = [0u64; SHARDS];
                    let mut next_in = [0u64; SHARDS];
                    let expected = PER_PEER * (SHARDS as u64 - 1);
                    let mut received = 0;
                    while received < expected || next_out.iter().enumerate().any(|(p, &n)| p != me && n < PER_PEER) {
                        for peer in (0..SHARDS).filter(|&p| p != me) {
                            if next_out[peer] < PER_PEER && links.send(peer, (me, next_out[peer])).is_ok() {
                                next_out[peer] += 1;
                            }
                        }
                        received += links.poll(8, |from, (sender, seq)| {
                            assert_eq!(from, sender);
                            assert_eq!(seq, next_in[from], "in order from {from}");
                            next_in[from] += 1;
                        }) as u64;
                    }
                    next_in
                })
            })
            .collect();
        for (me, t) in threads.into_iter().enumerate() {
            let got = t.join().unwrap();
            for (peer, &n) in got.iter().enumerate() {
                assert_eq!(n, if peer == me { 0 } else { PER_PEER });
            }
        }
    }
}
