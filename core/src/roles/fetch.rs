//! How a backend gets a batch's inputs: one-sided RDMA READs from the
//! frontends' registered memory where it can (`baton_net::rdma`), TCP
//! fetch (`FetchInputs` → `Inputs`) for the rest.
//!
//! A plan says where each registered input lies (`BatchPlan.inputs`, from
//! the frontends' `RequestMeta.input` through the scheduler). For a
//! frontend the backend has a connected queue pair to, it posts one READ
//! per such request; anything else — an input the frontend kept inline,
//! a frontend not connected yet, a READ the reader refuses — is fetched
//! over TCP, as without RDMA. A backend offers each frontend a queue pair
//! (`RdmaConnect`) when it joins, or at the first plan naming its
//! registered inputs if it has not yet; the frontend's answer connects it
//! (or says why not, and the backend keeps fetching over TCP from it).
//!
//! A READ that completes with an error falls back to a TCP fetch of that
//! request, and the queue pair is dropped (a reliable connection in error
//! fails every later READ; the next plan offers a new one). A READ that
//! finds its slot no longer holding the request (`Stale`: answered
//! already) leaves the request out of the run, as a TCP fetch leaves out a
//! request its frontend no longer holds.

use baton_net::rdma::{InputReader, InputStore, QpEnd, RdmaError, Region, Remote};
use baton_wire::{fb, Message};

use super::{frontend_of, Addr, Envelope};
use crate::pool;

pub fn input_at(r: Remote) -> fb::InputAt {
    fb::InputAt { addr: r.addr, rkey: r.rkey, len: r.len }
}

fn remote(a: &fb::InputAt) -> Remote {
    Remote { addr: a.addr, rkey: a.rkey, len: a.len }
}

fn end_of(c: &fb::RdmaConnect) -> QpEnd {
    let gid = c.gid.as_deref().and_then(|g| <[u8; 16]>::try_from(g).ok()).unwrap_or_default();
    QpEnd { qp_num: c.qp_num, lid: c.lid, gid, psn: c.psn }
}

/// A frontend's answer to backend `offer.backend`'s offer: its end of a
/// queue pair connected to the backend's and the region its inputs are
/// in, or why it has none.
pub fn answer(store: Option<&mut (dyn InputStore + 'static)>, frontend: u32, offer: &fb::RdmaConnect) -> Envelope {
    let mut reply = fb::RdmaConnect { answer: true, backend: offer.backend, frontend, ..Default::default() };
    match store.map(|s| s.accept(offer.backend, &end_of(offer))) {
        None => reply.error = Some("this frontend keeps no inputs in registered memory".into()),
        Some(Err(e)) => reply.error = Some(e.to_string()),
        Some(Ok((end, region))) => {
            (reply.qp_num, reply.lid, reply.gid, reply.psn) = (end.qp_num, end.lid, Some(end.gid.to_vec()), end.psn);
            (reply.region_addr, reply.region_len, reply.rkey) = (region.addr, region.len, region.rkey);
        }
    }
    Envelope { to: Addr::Backend(offer.backend), msg: Message::RdmaConnect(reply) }
}

/// What came of one READ.
pub enum Read {
    Got(Vec<u8>),
    /// The request was answered already: it is left out of the run.
    Gone,
    /// Fetched over TCP instead (the `FetchInputs` is sent).
    Refetched,
}

/// A READ's completion for batch `batch`.
pub struct Reaped {
    pub batch: u64,
    pub id: u64,
    pub frontend: u32,
    pub read: Read,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Inputs read with one-sided READs.
    pub reads: u64,
    /// READs that failed or could not be posted, fetched over TCP instead.
    pub fallbacks: u64,
    /// Queue pairs connected, and offers a frontend refused.
    pub connected: u64,
    pub refused: u64,
}

#[derive(Default)]
pub struct Fetcher {
    reader: Option<Box<dyn InputReader>>,
    /// Frontends offered a queue pair (connected or not) since they were
    /// last lost.
    offered: Vec<u32>,
    /// A plan's requests by frontend, for its fetches (kept: its lists
    /// are the fetches', taken from the pool).
    by_frontend: Vec<(u32, Vec<u64>)>,
    pub stats: FetchStats,
}

impl Fetcher {
    /// Reads registered inputs with `reader`.
    pub fn reading(reader: Box<dyn InputReader>) -> Self {
        Fetcher { reader: Some(reader), ..Default::default() }
    }

    /// Starts getting `plan`'s inputs: READs posted, `FetchInputs` sent to
    /// `out`. Says the frontends whose `Inputs` to wait for and the
    /// requests being read.
    pub fn start(&mut self, backend: u32, plan: &fb::BatchPlan, out: &mut Vec<Envelope>) -> (Vec<u32>, Vec<u64>) {
        let requests = plan.requests.as_deref().unwrap_or(&[]);
        let at = plan.inputs.as_deref().unwrap_or(&[]);
        let mut tcp = std::mem::take(&mut self.by_frontend);
        let mut reading = Vec::new();
        for (i, &id) in requests.iter().enumerate() {
            let fe = frontend_of(id);
            if let Some(at) = at.get(i).filter(|a| a.len > 0) {
                if self.read(backend, fe, id, at, plan.batch_id, out) {
                    reading.push(id);
                    continue;
                }
            }
            let k = match tcp.iter().position(|(f, _)| *f == fe) {
                Some(k) => k,
                None => {
                    // Room for the rest of the batch: most are one frontend's.
                    // Given back by the frontend once it has read it (`pool`).
                    tcp.push((fe, pool::with_room(requests.len() - i)));
                    tcp.len() - 1
                }
            };
            tcp[k].1.push(id);
        }
        let mut awaiting = pool::take();
        awaiting.extend(tcp.iter().map(|(fe, _)| *fe));
        for (fe, ids) in tcp.drain(..) {
            let fetch = fb::FetchInputs { batch_id: plan.batch_id, requests: Some(ids), backend };
            out.push(Envelope { to: Addr::Frontend(fe), msg: Message::FetchInputs(fetch) });
        }
        self.by_frontend = tcp;
        (awaiting, reading)
    }

    /// Posts a READ of request `id` if connected to its frontend (offering
    /// a queue pair if not offered yet); false if it must go over TCP.
    fn read(&mut self, backend: u32, fe: u32, id: u64, at: &fb::InputAt, batch: u64, out: &mut Vec<Envelope>) -> bool {
        let Some(reader) = self.reader.as_mut() else { return false };
        if reader.connected(fe) {
            let posted = reader.post(fe, id, remote(at), batch).is_ok();
            self.stats.fallbacks += u64::from(!posted);
            return posted;
        }
        self.offer(backend, fe, out);
        false
    }

    /// Offers frontend `fe` a queue pair, unless offered one since it was
    /// last lost (or there is no reader).
    pub fn offer(&mut self, backend: u32, fe: u32, out: &mut Vec<Envelope>) {
        let Some(reader) = self.reader.as_mut().filter(|_| !self.offered.contains(&fe)) else { return };
        self.offered.push(fe);
        match reader.offer(fe) {
            Ok(end) => {
                let offer = fb::RdmaConnect {
                    backend,
                    frontend: fe,
                    qp_num: end.qp_num,
                    lid: end.lid,
                    gid: Some(end.gid.to_vec()),
                    psn: end.psn,
                    ..Default::default()
                };
                out.push(Envelope { to: Addr::Frontend(fe), msg: Message::RdmaConnect(offer) });
            }
            Err(_) => self.stats.refused += 1,
        }
    }

    /// A frontend's answer to an offer: connects its queue pair, unless it
    /// refused or the connection fails (then inputs from it go over TCP).
    pub fn on_answer(&mut self, c: &fb::RdmaConnect) {
        let Some(reader) = self.reader.as_mut() else { return };
        if !c.answer || c.error.is_some() || !self.offered.contains(&c.frontend) {
            self.stats.refused += 1;
            return;
        }
        let region = Region { addr: c.region_addr, len: c.region_len, rkey: c.rkey };
        match reader.connect(c.frontend, &end_of(c), region) {
            Ok(()) => self.stats.connected += 1,
            Err(_) => self.stats.refused += 1,
        }
    }

    /// Frontend `fe` is gone: its queue pair closes; the next plan naming
    /// it offers a new one.
    pub fn lost(&mut self, fe: u32) {
        self.offered.retain(|&f| f != fe);
        if let Some(r) = self.reader.as_mut() {
            r.forget(fe);
        }
    }

    /// READs in flight.
    pub fn in_flight(&self) -> bool {
        self.reader.as_ref().is_some_and(|r| r.in_flight() > 0)
    }

    /// Completed READs; a failed one is fetched over TCP (sent to `out`).
    pub fn reap(&mut self, backend: u32, out: &mut Vec<Envelope>) -> Vec<Reaped> {
        // Polled every round of the backend's shard: nothing to do (and no
        // allocation) while no READ is in flight.
        let mut done = Vec::new();
        match self.reader.as_mut().filter(|r| r.in_flight() > 0) {
            Some(reader) => reader.poll(&mut done),
            None => return Vec::new(),
        }
        let mut reaped = Vec::with_capacity(done.len());
        for d in done {
            let read = match d.input {
                Ok(bytes) => {
                    self.stats.reads += 1;
                    Read::Got(bytes)
                }
                Err(RdmaError::Stale { .. }) => Read::Gone,
                Err(_) => {
                    self.stats.fallbacks += 1;
                    self.lost(d.frontend);
                    let fetch = fb::FetchInputs { batch_id: d.tag, requests: Some(vec![d.id]), backend };
                    out.push(Envelope { to: Addr::Frontend(d.frontend), msg: Message::FetchInputs(fetch) });
                    Read::Refetched
                }
            };
            reaped.push(Reaped { batch: d.tag, id: d.id, frontend: d.frontend, read });
        }
        reaped
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use baton_net::rdma::loopback::Loopback;

    use super::*;
    use crate::roles::FRONTEND_SHIFT;

    const FE: u32 = 2;
    const BACKEND: u32 = 7;

    fn id(seq: u64) -> u64 {
        (u64::from(FE) << FRONTEND_SHIFT) | seq
    }

    fn plan(ids: &[u64], at: Vec<fb::InputAt>) -> fb::BatchPlan {
        let frontends = vec![FE; ids.len()];
        fb::BatchPlan {
            batch_id: 9,
            requests: Some(ids.to_vec()),
            frontends: Some(frontends),
            inputs: Some(at),
            ..Default::default()
        }
    }

    /// A fetcher connected to frontend `FE`'s store.
    fn connected(fabric: &Arc<Loopback>) -> (Fetcher, Box<dyn InputStore>) {
        let mut store: Box<dyn InputStore> = Box::new(fabric.store(4096).unwrap());
        let mut f = Fetcher::reading(Box::new(fabric.reader(4096, 64)));
        let mut out = Vec::new();
        f.offer(BACKEND, FE, &mut out);
        f.offer(BACKEND, FE, &mut out);
        let [Envelope { to: Addr::Frontend(FE), msg: Message::RdmaConnect(offer) }] = &out[..] else {
            panic!("one offer to the frontend: {out:?}")
        };
        let reply = answer(Some(store.as_mut()), FE, offer);
        assert_eq!(reply.to, Addr::Backend(BACKEND));
        let Message::RdmaConnect(reply) = reply.msg else { panic!("an RdmaConnect answer") };
        f.on_answer(&reply);
        assert_eq!(f.stats.connected, 1);
        (f, store)
    }

    #[test]
    fn a_connected_backend_reads_registered_inputs_and_fetches_the_rest() {
        let fabric = Arc::new(Loopback::default());
        let (mut f, mut store) = connected(&fabric);
        let at = input_at(store.put(id(1), b"registered").unwrap());
        let inline = fb::InputAt { addr: 0, rkey: 0, len: 0 };
        let mut out = Vec::new();
        let (awaiting, reading) = f.start(BACKEND, &plan(&[id(1), id(2)], vec![at, inline]), &mut out);
        assert_eq!((awaiting, reading), (vec![FE], vec![id(1)]));
        assert!(matches!(&out[..], [Envelope { msg: Message::FetchInputs(x), .. }] if x.requests == Some(vec![id(2)])));
        assert!(f.in_flight());
        let reaped = f.reap(BACKEND, &mut out);
        assert!(
            matches!(&reaped[..], [Reaped { id: got, read: Read::Got(b), .. }] if *got == id(1) && b == b"registered")
        );
        assert_eq!(f.stats.reads, 1);
    }

    #[test]
    fn a_failed_read_is_fetched_over_tcp_and_a_stale_one_left_out() {
        let fabric = Arc::new(Loopback::default());
        let (mut f, mut store) = connected(&fabric);
        let good = store.put(id(1), &[1; 16]).unwrap();
        let bad_key = fb::InputAt { rkey: good.rkey + 1, ..input_at(good) };
        let mut out = Vec::new();
        f.start(BACKEND, &plan(&[id(1)], vec![bad_key]), &mut out);
        let reaped = f.reap(BACKEND, &mut out);
        assert!(matches!(&reaped[..], [Reaped { read: Read::Refetched, .. }]));
        assert!(matches!(&out[..], [Envelope { msg: Message::FetchInputs(x), .. }] if x.requests == Some(vec![id(1)])));
        assert_eq!(f.stats.fallbacks, 1);
        // The queue pair was dropped: the next plan offers a new one.
        out.clear();
        f.start(BACKEND, &plan(&[id(1)], vec![input_at(good)]), &mut out);
        assert!(matches!(&out[1..], [Envelope { msg: Message::FetchInputs(_), .. }]));
        assert!(matches!(&out[0], Envelope { msg: Message::RdmaConnect(c), .. } if !c.answer));

        let (mut f, mut store) = connected(&fabric);
        let at = store.put(id(3), &[3; 16]).unwrap();
        store.release(at);
        store.put(id(4), &[4; 16]).unwrap();
        f.start(BACKEND, &plan(&[id(3)], vec![input_at(at)]), &mut out);
        assert!(matches!(&f.reap(BACKEND, &mut out)[..], [Reaped { read: Read::Gone, .. }]));
    }

    #[test]
    fn a_frontend_without_registered_memory_refuses_and_inputs_go_over_tcp() {
        let fabric = Arc::new(Loopback::default());
        let mut f = Fetcher::reading(Box::new(fabric.reader(4096, 64)));
        let mut out = Vec::new();
        f.offer(BACKEND, FE, &mut out);
        let Message::RdmaConnect(offer) = &out[0].msg else { panic!("an offer") };
        let Message::RdmaConnect(reply) = answer(None, FE, offer).msg else { panic!("an answer") };
        assert!(reply.error.is_some());
        f.on_answer(&reply);
        assert_eq!((f.stats.connected, f.stats.refused), (0, 1));
        out.clear();
        let at = fb::InputAt { addr: 64, rkey: 1, len: 64 };
        let (awaiting, reading) = f.start(BACKEND, &plan(&[id(1)], vec![at]), &mut out);
        assert_eq!((awaiting, reading), (vec![FE], vec![]));
    }
}
