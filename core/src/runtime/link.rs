//! How a shard's pump exchanges envelopes with the rest of the cluster:
//! through an SPSC ring to the other shard of the same process (`baton
//! serve`), or through TCP connections to roles in other processes (the
//! `Router`). The pump does not know which.

use std::collections::VecDeque;
use std::rc::Rc;

use baton_net::mesh::ShardLinks;

use super::router::Router;
use crate::roles::Envelope;

pub enum Link {
    Ring { links: ShardLinks<Envelope>, peer: usize },
    Tcp(Rc<Router>),
}

impl Link {
    /// Envelopes that arrived since the last call.
    pub fn poll(&mut self, out: &mut Vec<Envelope>) {
        match self {
            Link::Ring { links, .. } => {
                links.poll(4096, |_, e| out.push(e));
            }
            Link::Tcp(r) => out.append(&mut r.inbox.borrow_mut()),
        }
    }

    /// Sends what it can of `q`; a full ring leaves the rest queued.
    pub fn flush(&mut self, q: &mut VecDeque<Envelope>) {
        match self {
            Link::Ring { links, peer } => {
                let _ = links.send_batch(*peer, q);
            }
            Link::Tcp(r) => {
                for e in q.drain(..) {
                    r.send(e);
                }
            }
        }
    }
}
