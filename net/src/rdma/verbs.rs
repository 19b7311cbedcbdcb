//! libibverbs (through rdma-sys): the `InputStore` and `InputReader` on a
//! real RDMA device. One protection domain per device; a frontend's store
//! registers one region (remote READ allowed) and connects one RC queue
//! pair per backend that offers; a backend's reader registers a landing
//! region for READs, holds one RC queue pair per frontend, and polls one
//! completion queue on its shard.
//!
//! Queue pairs go RESET → INIT → RTR → RTS with the peer's end from
//! `RdmaConnect` (queue pair number, LID, GID, first packet sequence
//! number); the address vector uses the GID (RoCE and routed InfiniBand)
//! when the port has one, the LID alone otherwise. Every verbs object is
//! owned by an RAII wrapper that destroys it, queue pairs before the
//! completion queue and memory regions before the protection domain (the
//! fields' order).
//!
//! Every `unsafe` block here is a call into libibverbs; each says what it
//! relies on.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use rdma_sys::*;

use super::slots::{self, Slab, Slots};
use super::{InputReader, InputStore, QpEnd, RdmaError, ReadDone, Region, Remote};

/// The port used on the device.
const PORT: u8 = 1;
/// The GID table index used for RoCE addressing.
const GID_INDEX: u8 = 0;

fn errno(call: &'static str) -> RdmaError {
    RdmaError::Verbs { call, errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0) }
}

fn check(call: &'static str, rc: i32) -> Result<(), RdmaError> {
    match rc {
        0 => Ok(()),
        e if e > 0 => Err(RdmaError::Verbs { call, errno: e }),
        _ => Err(errno(call)),
    }
}

/// An opened device, its protection domain and what its port says.
pub struct Device {
    name: String,
    pd: *mut ibv_pd,
    ctx: *mut ibv_context,
    lid: u16,
    gid: [u8; 16],
    mtu: ibv_mtu::Type,
    max_mr: u64,
    rd_atom: u8,
}

// SAFETY: libibverbs' context and protection domain may be used from any
// thread (verbs calls are thread-safe, ibv_open_device(3)); `Device` only
// hands them to verbs calls.
unsafe impl Send for Device {}
// SAFETY: as above; nothing in `Device` is mutated after `open`.
unsafe impl Sync for Device {}

impl Device {
    /// Opens the device named `name` (None: the first), or says there is
    /// none.
    pub fn open(name: Option<&str>) -> Result<Self, RdmaError> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed below.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            // ENOSYS: the kernel has no verbs support at all.
            return Err(match std::io::Error::last_os_error().raw_os_error() {
                Some(38) => RdmaError::NoDevice,
                _ => errno("ibv_get_device_list"),
            });
        }
        // SAFETY: `list` holds `n` device pointers, each with a valid name.
        let devices: Vec<(*mut ibv_device, String)> = (0..n.max(0) as usize)
            .map(|i| unsafe {
                let d = *list.add(i);
                (d, CStr::from_ptr(ibv_get_device_name(d)).to_string_lossy().into_owned())
            })
            .collect();
        let picked = match name {
            None => devices.first(),
            Some(want) => devices.iter().find(|(_, n)| n == want),
        };
        let opened = match picked {
            None if devices.is_empty() => Err(RdmaError::NoDevice),
            None => Err(RdmaError::UnknownDevice {
                name: name.unwrap_or_default().into(),
                found: devices.iter().map(|d| d.1.clone()).collect(),
            }),
            // SAFETY: the device pointer comes from the live list.
            Some((d, name)) => match unsafe { ibv_open_device(*d) } {
                ctx if ctx.is_null() => Err(errno("ibv_open_device")),
                ctx => Ok((ctx, name.clone())),
            },
        };
        // SAFETY: an opened context stays valid after its list is freed.
        unsafe { ibv_free_device_list(list) };
        let (ctx, name) = opened?;
        Self::on(ctx, name).inspect_err(|_| {
            // SAFETY: `ctx` was opened above and nothing else holds it.
            unsafe { ibv_close_device(ctx) };
        })
    }

    fn on(ctx: *mut ibv_context, name: String) -> Result<Self, RdmaError> {
        // SAFETY: all-zero is a valid value of these plain C structs (their
        // fields are integers, arrays and unions of those).
        let (mut dev, mut port, mut gid): (ibv_device_attr, ibv_port_attr, ibv_gid) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: `ctx` is an open context; the out-pointers are valid.
        unsafe {
            check("ibv_query_device", ibv_query_device(ctx, &mut dev))?;
            check("ibv_query_port", ___ibv_query_port(ctx, PORT, &mut port))?;
            check("ibv_query_gid", ibv_query_gid(ctx, PORT, i32::from(GID_INDEX), &mut gid))?;
        }
        // SAFETY: `ctx` is an open context.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(errno("ibv_alloc_pd"));
        }
        Ok(Device {
            name,
            pd,
            ctx,
            lid: port.lid,
            // SAFETY: every bit pattern is a valid `raw` view of the union.
            gid: unsafe { gid.raw },
            mtu: port.active_mtu,
            max_mr: dev.max_mr_size,
            rd_atom: dev.max_qp_rd_atom.clamp(1, 16) as u8,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Registers `words` zeroed words with `access`.
    fn region(&self, words: usize, access: ibv_access_flags) -> Result<(Box<[AtomicU64]>, Mr), RdmaError> {
        let bytes = words * 8;
        if bytes as u64 > self.max_mr {
            return Err(RdmaError::TooLarge { len: bytes, max: self.max_mr as usize });
        }
        let mem: Box<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        // SAFETY: `mem` is a live allocation of `bytes` bytes that is not
        // moved (a boxed slice) and outlives the registration (`Mr` is
        // dropped first by every owner: field order).
        let mr = unsafe { ibv_reg_mr(self.pd, mem.as_ptr() as *mut _, bytes, access.0 as i32) };
        if mr.is_null() {
            return Err(errno("ibv_reg_mr"));
        }
        Ok((mem, Mr(mr)))
    }

    fn cq(&self, depth: usize) -> Result<Cq, RdmaError> {
        // SAFETY: `ctx` is open; no channel, no context pointer.
        let cq = unsafe { ibv_create_cq(self.ctx, depth.max(1) as i32, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(errno("ibv_create_cq"));
        }
        Ok(Cq(cq))
    }

    /// A reliable-connection queue pair in INIT, its peers allowed `access`.
    fn qp(&self, cq: &Cq, depth: usize, access: ibv_access_flags) -> Result<Qp, RdmaError> {
        // SAFETY: all-zero is valid for the init attributes (null pointers,
        // zero integers).
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq.0;
        init.recv_cq = cq.0;
        init.cap = ibv_qp_cap {
            max_send_wr: depth as u32,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        // SAFETY: `pd` is live and `init` valid for the call.
        let qp = unsafe { ibv_create_qp(self.pd, &mut init) };
        if qp.is_null() {
            return Err(errno("ibv_create_qp"));
        }
        let qp = Qp(qp);
        let mut a = attr();
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = PORT;
        a.qp_access_flags = access.0;
        use ibv_qp_attr_mask as M;
        qp.modify(&mut a, M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS)?;
        Ok(qp)
    }

    /// This end of `qp`, sending from `psn`.
    fn end(&self, qp: &Qp, psn: u32) -> QpEnd {
        QpEnd { qp_num: qp.num(), lid: self.lid, gid: self.gid, psn }
    }

    /// Connects `qp` (in INIT) to the peer's end: RTR, then RTS from `psn`.
    fn connect(&self, qp: &Qp, theirs: &QpEnd, psn: u32) -> Result<(), RdmaError> {
        use ibv_qp_attr_mask as M;
        let mut a = attr();
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = self.mtu;
        a.dest_qp_num = theirs.qp_num;
        a.rq_psn = theirs.psn;
        a.max_dest_rd_atomic = self.rd_atom;
        a.min_rnr_timer = 12;
        a.ah_attr.dlid = theirs.lid;
        a.ah_attr.port_num = PORT;
        if theirs.gid != [0; 16] {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = ibv_gid { raw: theirs.gid };
            a.ah_attr.grh.sgid_index = GID_INDEX;
            a.ah_attr.grh.hop_limit = 64;
        }
        let rtr = M::IBV_QP_STATE
            | M::IBV_QP_AV
            | M::IBV_QP_PATH_MTU
            | M::IBV_QP_DEST_QPN
            | M::IBV_QP_RQ_PSN
            | M::IBV_QP_MAX_DEST_RD_ATOMIC
            | M::IBV_QP_MIN_RNR_TIMER;
        qp.modify(&mut a, rtr)?;
        let mut a = attr();
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = psn;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = self.rd_atom;
        let rts = M::IBV_QP_STATE
            | M::IBV_QP_TIMEOUT
            | M::IBV_QP_RETRY_CNT
            | M::IBV_QP_RNR_RETRY
            | M::IBV_QP_SQ_PSN
            | M::IBV_QP_MAX_QP_RD_ATOMIC;
        qp.modify(&mut a, rts)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every region, queue and queue pair holds an `Arc` of the
        // device, so none is left; the domain then the context go.
        unsafe {
            ibv_dealloc_pd(self.pd);
            ibv_close_device(self.ctx);
        }
    }
}

fn attr() -> ibv_qp_attr {
    // SAFETY: all-zero is a valid `ibv_qp_attr` (integers and unions of
    // integers and byte arrays).
    unsafe { std::mem::zeroed() }
}

/// A first packet sequence number (24 bits) that differs between queue pairs.
fn psn(qp: &Qp) -> u32 {
    qp.num().wrapping_mul(2_654_435_761) & 0xff_ffff
}

struct Mr(*mut ibv_mr);

impl Mr {
    fn keys(&self) -> (u32, u32) {
        // SAFETY: the region is registered until `drop`.
        unsafe { ((*self.0).lkey, (*self.0).rkey) }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by `Device::region`, deregistered once here.
        unsafe { ibv_dereg_mr(self.0) };
    }
}

struct Cq(*mut ibv_cq);

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created by `Device::cq`; its queue pairs are gone (owners
        // drop them first: field order).
        unsafe { ibv_destroy_cq(self.0) };
    }
}

struct Qp(*mut ibv_qp);

impl Qp {
    fn num(&self) -> u32 {
        // SAFETY: the queue pair lives until `drop`.
        unsafe { (*self.0).qp_num }
    }

    fn modify(&self, a: &mut ibv_qp_attr, mask: ibv_qp_attr_mask) -> Result<(), RdmaError> {
        // SAFETY: the queue pair is live and `a` valid for the call.
        check("ibv_modify_qp", unsafe { ibv_modify_qp(self.0, a, mask.0 as i32) })
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created by `Device::qp`, destroyed once here.
        unsafe { ibv_destroy_qp(self.0) };
    }
}

// SAFETY: the wrappers own their verbs objects, which libibverbs lets any
// thread use; each is used by one owner at a time (`&mut self`).
unsafe impl Send for Mr {}
// SAFETY: as for `Mr`.
unsafe impl Send for Cq {}
// SAFETY: as for `Mr`.
unsafe impl Send for Qp {}

/// A frontend's registered inputs on a device.
pub struct Store {
    qps: HashMap<u32, Qp>,
    /// Held for the registration: dropped (deregistered) before the words.
    _mr: Mr,
    cq: Cq,
    slab: Slab<Box<[AtomicU64]>>,
    device: Arc<Device>,
}

impl Store {
    pub fn new(device: Arc<Device>, bytes: usize) -> Result<Self, RdmaError> {
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        let (mem, mr) = device.region(bytes / 8, access)?;
        let cq = device.cq(1)?;
        // The boxed words never move: their address is the region's.
        let region = Region { addr: mem.as_ptr() as u64, len: (mem.len() * 8) as u64, rkey: mr.keys().1 };
        Ok(Store { qps: HashMap::new(), _mr: mr, cq, slab: Slab::new(mem, region), device })
    }
}

impl InputStore for Store {
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
        let qp = self.device.qp(&self.cq, 1, ibv_access_flags::IBV_ACCESS_REMOTE_READ)?;
        let own = psn(&qp);
        self.device.connect(&qp, theirs, own)?;
        let end = self.device.end(&qp, own);
        self.qps.insert(backend, qp);
        Ok((end, self.slab.region))
    }

    fn forget(&mut self, backend: u32) {
        self.qps.remove(&backend);
    }
}

struct Pending {
    frontend: u32,
    id: u64,
    tag: u64,
    landing: usize,
    words: usize,
}

/// A backend's READs on a device.
pub struct Reader {
    offered: HashMap<u32, Qp>,
    conns: HashMap<u32, (Qp, Region)>,
    mr: Mr,
    cq: Cq,
    landing: Box<[AtomicU64]>,
    slots: Slots,
    pending: HashMap<u64, Pending>,
    /// READs that ended without a completion (their queue pair closed).
    ended: Vec<ReadDone>,
    next_wr: u64,
    depth: usize,
    device: Arc<Device>,
}

impl Reader {
    pub fn new(device: Arc<Device>, landing: usize, depth: usize) -> Result<Self, RdmaError> {
        let (mem, mr) = device.region(landing / 8, ibv_access_flags::IBV_ACCESS_LOCAL_WRITE)?;
        let cq = device.cq(depth)?;
        Ok(Reader {
            offered: HashMap::new(),
            conns: HashMap::new(),
            mr,
            cq,
            slots: Slots::new(mem.len()),
            landing: mem,
            pending: HashMap::new(),
            ended: Vec::new(),
            next_wr: 0,
            depth,
            device,
        })
    }
}

impl InputReader for Reader {
    fn offer(&mut self, frontend: u32) -> Result<QpEnd, RdmaError> {
        let qp = self.device.qp(&self.cq, self.depth, ibv_access_flags(0))?;
        let end = self.device.end(&qp, psn(&qp));
        self.offered.insert(frontend, qp);
        Ok(end)
    }

    fn connect(&mut self, frontend: u32, theirs: &QpEnd, region: Region) -> Result<(), RdmaError> {
        let qp = self.offered.remove(&frontend).ok_or(RdmaError::NotConnected { frontend })?;
        self.device.connect(&qp, theirs, psn(&qp))?;
        self.conns.insert(frontend, (qp, region));
        Ok(())
    }

    fn connected(&self, frontend: u32) -> bool {
        self.conns.contains_key(&frontend)
    }

    fn forget(&mut self, frontend: u32) {
        self.offered.remove(&frontend);
        if self.conns.remove(&frontend).is_none() {
            return;
        }
        // The queue pair is destroyed: its READs will not complete.
        let gone: Vec<u64> = self.pending.iter().filter(|(_, p)| p.frontend == frontend).map(|(&w, _)| w).collect();
        for wr in gone {
            let p = self.pending.remove(&wr).expect("listed");
            self.slots.free(p.landing);
            let input = Err(RdmaError::NotConnected { frontend });
            self.ended.push(ReadDone { tag: p.tag, id: p.id, frontend, input });
        }
    }

    fn post(&mut self, frontend: u32, id: u64, at: Remote, tag: u64) -> Result<(), RdmaError> {
        let (qp, region) = self.conns.get(&frontend).ok_or(RdmaError::NotConnected { frontend })?;
        if self.pending.len() >= self.depth {
            return Err(RdmaError::QueueFull { depth: self.depth });
        }
        let words = at.len as usize / 8;
        let inside = at.addr.checked_sub(region.addr).is_some_and(|off| off + u64::from(at.len) <= region.len);
        if at.rkey != region.rkey || !inside || !words.is_power_of_two() || words < slots::MIN_WORDS {
            return Err(RdmaError::RemoteAccess { addr: at.addr, len: at.len });
        }
        let landing = self.slots.alloc((words - slots::OVERHEAD_WORDS) * 8)?;
        let mut sge = ibv_sge { addr: self.landing[landing..].as_ptr() as u64, length: at.len, lkey: self.mr.keys().0 };
        // SAFETY: all-zero is a valid work request (null pointers, zero
        // integers, unions of those).
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = self.next_wr;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.rdma = rdma_t { remote_addr: at.addr, rkey: at.rkey };
        let mut bad = std::ptr::null_mut();
        // SAFETY: the queue pair is connected; `wr` and `sge` are valid for
        // the call (the device copies them); the landing words stay
        // registered and unused by anyone else until the completion.
        let rc = unsafe { ibv_post_send(qp.0, &mut wr, &mut bad) };
        if let Err(e) = check("ibv_post_send", rc) {
            self.slots.free(landing);
            return Err(e);
        }
        self.pending.insert(self.next_wr, Pending { frontend, id, tag, landing, words });
        self.next_wr += 1;
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<ReadDone>) {
        out.append(&mut self.ended);
        loop {
            // SAFETY: all-zero is a valid completion (integers and a union
            // of integers).
            let mut wcs: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
            // SAFETY: the queue is live and `wcs` has room for 16 entries.
            let n = unsafe { ibv_poll_cq(self.cq.0, wcs.len() as i32, wcs.as_mut_ptr()) };
            for wc in wcs.iter().take(n.max(0) as usize) {
                let Some(p) = self.pending.remove(&wc.wr_id) else { continue };
                let input = match wc.status {
                    ibv_wc_status::IBV_WC_SUCCESS => {
                        slots::parse(&slots::copy(&self.landing, p.landing, p.words), p.id)
                    }
                    status => Err(RdmaError::Completion { status }),
                };
                self.slots.free(p.landing);
                out.push(ReadDone { tag: p.tag, id: p.id, frontend: p.frontend, input });
            }
            if n < wcs.len() as i32 {
                return;
            }
        }
    }

    fn in_flight(&self) -> usize {
        self.pending.len() + self.ended.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a device the error is the typed one; with one, a store and
    /// a reader on it pass what the loopback fabric passes.
    #[test]
    fn no_device_is_a_typed_error_and_a_device_conforms() {
        let device = match Device::open(None) {
            Err(RdmaError::NoDevice) => return,
            Err(e) => panic!("opening the first RDMA device: {e}"),
            Ok(d) => Arc::new(d),
        };
        let mut store = Store::new(Arc::clone(&device), 1 << 20).unwrap();
        let mut reader = Reader::new(device, 1 << 20, 16).unwrap();
        crate::rdma::conformance::carries_inputs_and_catches_reuse(&mut store, &mut reader);
    }

    #[test]
    fn an_unknown_device_name_is_a_typed_error() {
        match Device::open(Some("no-such-device")) {
            Err(RdmaError::NoDevice | RdmaError::UnknownDevice { .. }) => {}
            other => panic!("{:?}", other.map(|d| d.name().to_owned())),
        }
    }
}
