//! One-sided input fetch: a backend READs a batch's inputs straight out of
//! the frontends' registered memory (Symphony's data path), instead of
//! asking each frontend for them over TCP (`FetchInputs` → `Inputs`).
//!
//! ## The data path
//! A frontend copies each request's input into a *slot* of one registered
//! region (`InputStore::put`) and sends the slot's place (`InputAt`: address,
//! remote key, length) with the request's metadata to the scheduler, which
//! copies it into the batch plan. The backend posts one READ per request
//! (`InputReader::post`) on the queue pair it holds to that frontend and
//! polls completions on its own shard (`InputReader::poll`); the frontend's
//! CPU does nothing for the fetch. Compared with TCP fetch this removes a
//! round trip (the fetch request) and the frontend's copy into a socket.
//!
//! ## Slots and stale reads
//! A one-sided READ is invisible to the frontend, so it cannot know when a
//! slot is no longer read. It frees a slot when it answers the request; a
//! READ that comes later (a plan delivered late or twice) may find the slot
//! free or holding another request's input. Each slot therefore carries its
//! request's id before and after the bytes (`slots.rs`); the reader checks
//! both against the id it expected and reports `Stale` on a mismatch. The
//! writer clears both guards before it rewrites a slot, so a read torn by a
//! rewrite sees at least one guard that does not match.
//!
//! ## Connections
//! Queue pairs are connected over the roles' existing TCP connection
//! (wire `RdmaConnect`): the backend offers its end to a frontend the
//! first time a plan names that frontend's registered inputs, and fetches
//! over TCP until the answer connects it. Anything that fails — no device,
//! a full region, a refused connection, a failed or stale READ — falls back
//! to TCP fetch for the requests concerned; nothing is lost.
//!
//! ## Implementations
//! - `loopback`: a stand-in fabric for roles in one process (`baton serve
//!   --rdma-device loopback`): regions are shared memory, READs are copies
//!   done when the reader polls. It checks everything a NIC checks (remote
//!   key, bounds, queue depth) and has a NIC's racy semantics (the words
//!   are atomics), so the data-path logic is tested without a NIC.
//! - `verbs` (cargo feature `rdma`): libibverbs through rdma-sys: device,
//!   protection domain, memory regions, RC queue pairs, READs, completion
//!   polling. `open` says `NoDevice` where the machine has none.

pub mod loopback;
pub mod slots;
#[cfg(feature = "rdma")]
pub mod verbs;

/// Where bytes lie in a peer's registered memory (the wire's `InputAt`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Remote {
    pub addr: u64,
    pub rkey: u32,
    pub len: u32,
}

/// One end of a reliable connection, as `RdmaConnect` carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpEnd {
    pub qp_num: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    pub psn: u32,
}

/// A frontend's registered region, as a backend needs it to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    pub addr: u64,
    pub len: u64,
    pub rkey: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RdmaError {
    /// The machine has no RDMA device.
    NoDevice,
    /// No device of that name (the ones there are listed).
    UnknownDevice { name: String, found: Vec<String> },
    /// A verbs call failed.
    Verbs { call: &'static str, errno: i32 },
    /// The region has no free slot of that size.
    RegionFull { need: usize },
    /// A region or read larger than the device or the store allows.
    TooLarge { len: usize, max: usize },
    /// The reader already has its most READs in flight.
    QueueFull { depth: usize },
    /// No queue pair to that frontend (yet, or any more).
    NotConnected { frontend: u32 },
    /// A READ outside the peer's region or with a key it does not know.
    RemoteAccess { addr: u64, len: u32 },
    /// A completion with an error status.
    Completion { status: u32 },
    /// The slot no longer holds the request read (answered, maybe reused).
    Stale { expected: u64 },
}

impl std::fmt::Display for RdmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use RdmaError::*;
        match self {
            NoDevice => write!(f, "no RDMA device (ibv_get_device_list found none)"),
            UnknownDevice { name, found } => write!(f, "no RDMA device named `{name}` (found: {})", found.join(", ")),
            Verbs { call, errno } => write!(f, "{call} failed: {}", std::io::Error::from_raw_os_error(*errno)),
            RegionFull { need } => write!(f, "the registered region has no free slot of {need} bytes"),
            TooLarge { len, max } => write!(f, "{len} bytes, at most {max}"),
            QueueFull { depth } => write!(f, "{depth} reads in flight, the queue's depth"),
            NotConnected { frontend } => write!(f, "no RDMA connection to frontend {frontend}"),
            RemoteAccess { addr, len } => write!(f, "remote access error reading {len} bytes at {addr:#x}"),
            Completion { status } => write!(f, "a READ completed with status {status}"),
            Stale { expected } => write!(f, "the slot no longer holds request {expected}"),
        }
    }
}

impl std::error::Error for RdmaError {}

/// A frontend's registered memory for its requests' inputs.
pub trait InputStore: Send {
    /// Copies `bytes`, request `id`'s input, into a free slot.
    fn put(&mut self, id: u64, bytes: &[u8]) -> Result<Remote, RdmaError>;
    /// The input held at `at` (for a TCP fetch of a registered input).
    fn get(&self, id: u64, at: Remote) -> Result<Vec<u8>, RdmaError>;
    /// Frees the slot at `at` (its request was answered).
    fn release(&mut self, at: Remote);
    /// A backend offers its end of a queue pair: connects one of ours to
    /// it; says our end and the region.
    fn accept(&mut self, backend: u32, theirs: &QpEnd) -> Result<(QpEnd, Region), RdmaError>;
    /// The backend went away: its queue pair is closed.
    fn forget(&mut self, backend: u32);
}

/// A completed READ: request `id`'s input, or why it could not be read.
#[derive(Debug, PartialEq, Eq)]
pub struct ReadDone {
    pub tag: u64,
    pub id: u64,
    pub frontend: u32,
    pub input: Result<Vec<u8>, RdmaError>,
}

/// A backend's reader of the frontends' registered memory.
pub trait InputReader: Send {
    /// A new queue pair for `frontend`, whose end goes in the offer.
    fn offer(&mut self, frontend: u32) -> Result<QpEnd, RdmaError>;
    /// The frontend's answer connects the queue pair offered to it.
    fn connect(&mut self, frontend: u32, theirs: &QpEnd, region: Region) -> Result<(), RdmaError>;
    fn connected(&self, frontend: u32) -> bool;
    /// The frontend went away: its queue pair is closed; READs in flight
    /// on it complete with an error.
    fn forget(&mut self, frontend: u32);
    /// Posts a READ of request `id`'s slot `at` on `frontend`; its
    /// completion carries `tag`.
    fn post(&mut self, frontend: u32, id: u64, at: Remote, tag: u64) -> Result<(), RdmaError>;
    /// Completions since the last call, each checked against its slot's
    /// guards.
    fn poll(&mut self, out: &mut Vec<ReadDone>);
    /// READs posted whose completion `poll` has not yet given.
    fn in_flight(&self) -> usize;
}

/// Where inputs are fetched from, and with what.
#[derive(Clone)]
pub enum Fabric {
    Loopback(std::sync::Arc<loopback::Loopback>),
    #[cfg(feature = "rdma")]
    Verbs(std::sync::Arc<verbs::Device>),
}

impl Fabric {
    /// The fabric named by an operator: `loopback`, or a verbs device by
    /// name (None: the first there is).
    pub fn open(device: Option<&str>) -> Result<Self, OpenError> {
        if device == Some("loopback") {
            return Ok(Fabric::Loopback(std::sync::Arc::new(loopback::Loopback::default())));
        }
        #[cfg(feature = "rdma")]
        return verbs::Device::open(device).map(|d| Fabric::Verbs(std::sync::Arc::new(d))).map_err(OpenError::Rdma);
        #[cfg(not(feature = "rdma"))]
        Err(OpenError::NotBuilt)
    }

    /// A frontend's store of `bytes` of registered memory.
    pub fn store(&self, bytes: usize) -> Result<Box<dyn InputStore>, RdmaError> {
        match self {
            Fabric::Loopback(l) => Ok(Box::new(l.store(bytes)?)),
            #[cfg(feature = "rdma")]
            Fabric::Verbs(d) => Ok(Box::new(verbs::Store::new(std::sync::Arc::clone(d), bytes)?)),
        }
    }

    /// A backend's reader with `landing` bytes of registered memory to
    /// read into and at most `depth` READs in flight.
    pub fn reader(&self, landing: usize, depth: usize) -> Result<Box<dyn InputReader>, RdmaError> {
        match self {
            Fabric::Loopback(l) => Ok(Box::new(l.reader(landing, depth))),
            #[cfg(feature = "rdma")]
            Fabric::Verbs(d) => Ok(Box::new(verbs::Reader::new(std::sync::Arc::clone(d), landing, depth)?)),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Fabric::Loopback(_) => "loopback".into(),
            #[cfg(feature = "rdma")]
            Fabric::Verbs(d) => d.name().into(),
        }
    }
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fabric({})", self.name())
    }
}

/// Why no fabric could be opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// This build has no verbs (built without the cargo feature `rdma`).
    NotBuilt,
    Rdma(RdmaError),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NotBuilt => write!(
                f,
                "this baton was built without RDMA verbs (build with `--features rdma`); \
                 `--rdma-device loopback` serves one process without a NIC"
            ),
            OpenError::Rdma(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// What every fabric must do, run against the loopback stand-in here and
/// against verbs where a device exists (`verbs::tests`).
#[cfg(test)]
pub(crate) mod conformance {
    use super::*;

    /// Connects `reader` to `store` as frontend 3 / backend 9.
    pub fn connect(store: &mut dyn InputStore, reader: &mut dyn InputReader) {
        let offer = reader.offer(3).unwrap();
        assert!(!reader.connected(3));
        let (theirs, region) = store.accept(9, &offer).unwrap();
        reader.connect(3, &theirs, region).unwrap();
        assert!(reader.connected(3));
    }

    /// Polls until `n` READs completed (a NIC completes them some time later).
    pub fn completions(reader: &mut dyn InputReader, n: usize) -> Vec<ReadDone> {
        let mut out = Vec::new();
        for _ in 0..10_000_000 {
            reader.poll(&mut out);
            if out.len() >= n {
                break;
            }
        }
        out
    }

    /// READs carry the bytes put, each to its tag; a slot released and
    /// reused reads stale; the store's own copy reads back.
    pub fn carries_inputs_and_catches_reuse(store: &mut dyn InputStore, reader: &mut dyn InputReader) {
        connect(store, reader);
        let inputs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 100 * usize::from(i) + 3]).collect();
        let at: Vec<Remote> = inputs.iter().enumerate().map(|(i, b)| store.put(10 + i as u64, b).unwrap()).collect();
        for (i, &a) in at.iter().enumerate() {
            reader.post(3, 10 + i as u64, a, 100 + i as u64).unwrap();
        }
        let mut done = completions(reader, 5);
        done.sort_by_key(|d| d.tag);
        for (i, d) in done.iter().enumerate() {
            assert_eq!((d.tag, d.id, d.frontend), (100 + i as u64, 10 + i as u64, 3));
            assert_eq!(d.input.as_ref(), Ok(&inputs[i]));
        }
        assert_eq!(reader.in_flight(), 0);
        assert_eq!(store.get(12, at[2]), Ok(inputs[2].clone()));
        store.release(at[0]);
        assert_eq!(store.put(20, &inputs[0]).unwrap(), at[0], "the slot is reused");
        reader.post(3, 10, at[0], 7).unwrap();
        assert_eq!(completions(reader, 1)[0].input, Err(RdmaError::Stale { expected: 10 }));
    }
}
