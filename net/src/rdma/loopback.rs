//! The loopback fabric: RDMA's semantics without a NIC, for roles in one
//! process. A region is a shared slice of atomic words; a READ is a copy
//! of the words at the remote address, done when the reader polls (as a
//! completion comes some time after the post). Like a NIC it refuses a
//! READ with a remote key it does not know, outside the region, of a
//! region deregistered since, or beyond the queue's depth; a queue pair is
//! usable only once connected with the peer's answer.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::slots::{self, Slab};
use super::{InputReader, InputStore, QpEnd, RdmaError, ReadDone, Region, Remote};

/// The largest region the stand-in registers (a NIC's `max_mr_size`).
pub const MAX_REGION: usize = 1 << 34;

/// The fabric: every registered region by remote key.
#[derive(Default)]
pub struct Loopback {
    regions: Mutex<HashMap<u32, Weak<[AtomicU64]>>>,
    next: AtomicU32,
}

impl Loopback {
    fn next(&self) -> u32 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The fake address region `rkey` starts at: regions never overlap.
    fn base(rkey: u32) -> u64 {
        u64::from(rkey) << 36
    }

    /// Registers `bytes` of memory for a frontend's inputs.
    pub fn store(self: &Arc<Self>, bytes: usize) -> Result<LoopbackStore, RdmaError> {
        if bytes > MAX_REGION {
            return Err(RdmaError::TooLarge { len: bytes, max: MAX_REGION });
        }
        let words = bytes / 8;
        let mem: Arc<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        let rkey = self.next();
        self.regions.lock().expect("not poisoned").insert(rkey, Arc::downgrade(&mem));
        let region = Region { addr: Self::base(rkey), len: (words * 8) as u64, rkey };
        Ok(LoopbackStore { fabric: Arc::clone(self), slab: Slab::new(mem, region), qps: HashMap::new() })
    }

    /// A backend's reader with at most `depth` READs and `landing` bytes
    /// in flight.
    pub fn reader(self: &Arc<Self>, landing: usize, depth: usize) -> LoopbackReader {
        LoopbackReader {
            fabric: Arc::clone(self),
            offered: HashMap::new(),
            conns: HashMap::new(),
            posted: VecDeque::new(),
            depth,
            landing,
        }
    }
}

pub struct LoopbackStore {
    fabric: Arc<Loopback>,
    slab: Slab<Arc<[AtomicU64]>>,
    /// The queue pair serving each backend.
    qps: HashMap<u32, u32>,
}

impl Drop for LoopbackStore {
    fn drop(&mut self) {
        if let Ok(mut r) = self.fabric.regions.lock() {
            r.remove(&self.slab.region.rkey);
        }
    }
}

impl InputStore for LoopbackStore {
    fn put(&mut self, id: u64, bytes: &[u8]) -> Result<Remote, RdmaError> {
        self.slab.put(id, bytes)
    }

    fn get(&self, id: u64, at: Remote) -> Result<Vec<u8>, RdmaError> {
        self.slab.get(id, at)
    }

    fn release(&mut self, at: Remote) {
        self.slab.release(at)
    }

    fn accept(&mut self, backend: u32, theirs: &QpEnd) -> Result<(QpEnd, Region), RdmaError> {
        let qp_num = self.fabric.next();
        self.qps.insert(backend, qp_num);
        Ok((QpEnd { qp_num, psn: theirs.psn, ..QpEnd::default() }, self.slab.region))
    }

    fn forget(&mut self, backend: u32) {
        self.qps.remove(&backend);
    }
}

struct Conn {
    region: Region,
    mem: Weak<[AtomicU64]>,
}

struct Post {
    frontend: u32,
    id: u64,
    at: Remote,
    tag: u64,
}

pub struct LoopbackReader {
    fabric: Arc<Loopback>,
    /// Queue pairs offered to frontends and not yet connected.
    offered: HashMap<u32, u32>,
    conns: HashMap<u32, Conn>,
    posted: VecDeque<Post>,
    depth: usize,
    /// Bytes READs in flight may land in (a NIC's registered landing
    /// region); what they use now is their slots' sum.
    landing: usize,
}

impl LoopbackReader {
    /// What the NIC does for one posted READ.
    fn read(&self, p: &Post) -> Result<Vec<u8>, RdmaError> {
        let conn = self.conns.get(&p.frontend).ok_or(RdmaError::NotConnected { frontend: p.frontend })?;
        let denied = RdmaError::RemoteAccess { addr: p.at.addr, len: p.at.len };
        let off = p.at.addr.checked_sub(conn.region.addr).ok_or(denied.clone())?;
        let inside =
            off.is_multiple_of(8) && p.at.len.is_multiple_of(8) && off + u64::from(p.at.len) <= conn.region.len;
        if p.at.rkey != conn.region.rkey || !inside {
            return Err(denied);
        }
        let mem = conn.mem.upgrade().ok_or(denied)?;
        slots::parse(&slots::copy(&mem, (off / 8) as usize, p.at.len as usize / 8), p.id)
    }
}

impl InputReader for LoopbackReader {
    fn offer(&mut self, frontend: u32) -> Result<QpEnd, RdmaError> {
        let qp_num = self.fabric.next();
        self.offered.insert(frontend, qp_num);
        Ok(QpEnd { qp_num, psn: qp_num & 0xff_ffff, ..QpEnd::default() })
    }

    fn connect(&mut self, frontend: u32, _theirs: &QpEnd, region: Region) -> Result<(), RdmaError> {
        self.offered.remove(&frontend).ok_or(RdmaError::NotConnected { frontend })?;
        let regions = self.fabric.regions.lock().expect("not poisoned");
        let mem = regions.get(&region.rkey).cloned().ok_or(RdmaError::RemoteAccess { addr: region.addr, len: 0 })?;
        self.conns.insert(frontend, Conn { region, mem });
        Ok(())
    }

    fn connected(&self, frontend: u32) -> bool {
        self.conns.contains_key(&frontend)
    }

    fn forget(&mut self, frontend: u32) {
        self.offered.remove(&frontend);
        self.conns.remove(&frontend);
    }

    fn post(&mut self, frontend: u32, id: u64, at: Remote, tag: u64) -> Result<(), RdmaError> {
        if !self.connected(frontend) {
            return Err(RdmaError::NotConnected { frontend });
        }
        if self.posted.len() >= self.depth {
            return Err(RdmaError::QueueFull { depth: self.depth });
        }
        let landed: usize = self.posted.iter().map(|p| p.at.len as usize).sum();
        if landed + at.len as usize > self.landing {
            return Err(RdmaError::RegionFull { need: at.len as usize });
        }
        self.posted.push_back(Post { frontend, id, at, tag });
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<ReadDone>) {
        while let Some(p) = self.posted.pop_front() {
            let input = self.read(&p);
            out.push(ReadDone { tag: p.tag, id: p.id, frontend: p.frontend, input });
        }
    }

    fn in_flight(&self) -> usize {
        self.posted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(fabric: &Arc<Loopback>) -> (LoopbackStore, LoopbackReader) {
        let (mut store, mut reader) = (fabric.store(4096).unwrap(), fabric.reader(256, 4));
        let offer = reader.offer(3).unwrap();
        assert!(!reader.connected(3));
        let (theirs, region) = store.accept(9, &offer).unwrap();
        reader.connect(3, &theirs, region).unwrap();
        (store, reader)
    }

    fn poll(reader: &mut LoopbackReader) -> Vec<ReadDone> {
        let mut out = Vec::new();
        reader.poll(&mut out);
        out
    }

    #[test]
    fn the_loopback_fabric_conforms() {
        let fabric = Arc::new(Loopback::default());
        let (mut store, mut reader) = (fabric.store(1 << 16).unwrap(), fabric.reader(1 << 16, 16));
        crate::rdma::conformance::carries_inputs_and_catches_reuse(&mut store, &mut reader);
    }

    #[test]
    fn the_nic_refuses_what_a_nic_refuses() {
        let fabric = Arc::new(Loopback::default());
        let (mut store, mut reader) = pair(&fabric);
        let at = store.put(1, &[0; 8]).unwrap();
        assert_eq!(reader.post(4, 1, at, 0), Err(RdmaError::NotConnected { frontend: 4 }));
        let wrong_key = Remote { rkey: at.rkey + 100, ..at };
        let outside = Remote { addr: at.addr + 4096, ..at };
        for bad in [wrong_key, outside] {
            reader.post(3, 1, bad, 0).unwrap();
            assert!(matches!(poll(&mut reader)[0].input, Err(RdmaError::RemoteAccess { .. })));
        }
        for _ in 0..4 {
            reader.post(3, 1, at, 0).unwrap();
        }
        assert_eq!(reader.post(3, 1, at, 0), Err(RdmaError::QueueFull { depth: 4 }));
        poll(&mut reader);
        let big = store.put(2, &[0; 200]).unwrap();
        reader.post(3, 2, big, 0).unwrap();
        assert_eq!(reader.post(3, 2, big, 0), Err(RdmaError::RegionFull { need: 256 }), "no room to land");
        drop(store);
        assert!(poll(&mut reader).iter().all(|d| matches!(d.input, Err(RdmaError::RemoteAccess { .. }))));
        assert!(fabric.store(MAX_REGION + 8).is_err());
    }

    #[test]
    fn a_frontend_forgotten_is_not_read() {
        let fabric = Arc::new(Loopback::default());
        let (mut store, mut reader) = pair(&fabric);
        let at = store.put(5, &[9; 16]).unwrap();
        reader.post(3, 5, at, 0).unwrap();
        reader.forget(3);
        assert_eq!(poll(&mut reader)[0].input, Err(RdmaError::NotConnected { frontend: 3 }));
        assert_eq!(
            reader.connect(3, &QpEnd::default(), Region::default()),
            Err(RdmaError::NotConnected { frontend: 3 })
        );
    }
}
