//! Framing: every message on a byte stream is an 8-byte header followed by
//! a flatbuffer payload.
//!
//! ```text
//! offset 0  u32 LE  payload length (bytes after the header)
//! offset 4  u8      kind (which root table the payload holds, `Kind`)
//! offset 5  u8      protocol version (`VERSION`)
//! offset 6  u16     reserved, must be zero
//! ```
//!
//! A length above `MAX_FRAME` is refused before any byte of the payload is
//! buffered, so a peer cannot make a reader allocate more than that.

/// Bytes in a frame header.
pub const HEADER_LEN: usize = 8;
/// Largest payload accepted (16 MiB: a batch of image tensors fits).
pub const MAX_FRAME: usize = 16 << 20;
/// The protocol version this build speaks.
pub const VERSION: u8 = 1;

macro_rules! kinds {
    ($($name:ident = $tag:literal),* $(,)?) => {
        /// Which root table a frame's payload holds.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Kind {
            $($name = $tag,)*
        }

        impl Kind {
            pub const ALL: &'static [Kind] = &[$(Kind::$name,)*];
        }
    };
}

kinds!(
    InferRequest = 1,
    InferResponse = 2,
    RequestMeta = 3,
    BatchPlan = 4,
    FetchInputs = 5,
    Inputs = 6,
    Results = 7,
    BatchDone = 8,
    Dropped = 9,
    BackendStatus = 10,
    ModelLoad = 11,
    ModelUnload = 12,
    Stats = 13,
    Hello = 14,
    RdmaConnect = 15,
);

impl Kind {
    pub fn from_u8(b: u8) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|&k| k as u8 == b)
    }
}

/// Why a header was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    TooLarge { len: usize, max: usize },
    UnknownKind(u8),
    Version { got: u8, want: u8 },
    ReservedNonZero(u16),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { len, max } => write!(f, "frame of {len} bytes exceeds the limit of {max}"),
            FrameError::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            FrameError::Version { got, want } => write!(f, "protocol version {got}, this build speaks {want}"),
            FrameError::ReservedNonZero(r) => write!(f, "reserved header bits set ({r:#06x})"),
        }
    }
}

impl std::error::Error for FrameError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub len: usize,
    pub kind: Kind,
}

impl FrameHeader {
    pub fn new(kind: Kind, len: usize) -> Result<Self, FrameError> {
        if len > MAX_FRAME {
            return Err(FrameError::TooLarge { len, max: MAX_FRAME });
        }
        Ok(FrameHeader { len, kind })
    }

    pub fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..4].copy_from_slice(&(self.len as u32).to_le_bytes());
        b[4] = self.kind as u8;
        b[5] = VERSION;
        b
    }

    pub fn parse(b: &[u8; HEADER_LEN]) -> Result<Self, FrameError> {
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let kind = Kind::from_u8(b[4]).ok_or(FrameError::UnknownKind(b[4]))?;
        if b[5] != VERSION {
            return Err(FrameError::Version { got: b[5], want: VERSION });
        }
        let reserved = u16::from_le_bytes([b[6], b[7]]);
        if reserved != 0 {
            return Err(FrameError::ReservedNonZero(reserved));
        }
        FrameHeader::new(kind, len)
    }
}

/// A whole frame found at the start of a buffer: its header, its payload
/// and how many bytes of the buffer it took.
pub type Split<'a> = (FrameHeader, &'a [u8], usize);

/// Splits the first whole frame off `buf`: `Ok(None)` while more bytes are
/// needed. A bad header is an error as soon as its 8 bytes are in.
pub fn split(buf: &[u8]) -> Result<Option<Split<'_>>, FrameError> {
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else { return Ok(None) };
    let h = FrameHeader::parse(head)?;
    let end = HEADER_LEN + h.len;
    Ok((buf.len() >= end).then(|| (h, &buf[HEADER_LEN..end], end)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_are_typed() {
        for &k in Kind::ALL {
            let h = FrameHeader::new(k, 1234).unwrap();
            assert_eq!(FrameHeader::parse(&h.to_bytes()), Ok(h));
        }
        let mut b = FrameHeader::new(Kind::Stats, 5).unwrap().to_bytes();
        b[4] = 0;
        assert_eq!(FrameHeader::parse(&b), Err(FrameError::UnknownKind(0)));
        b[4] = Kind::Stats as u8;
        b[5] = 9;
        assert_eq!(FrameHeader::parse(&b), Err(FrameError::Version { got: 9, want: VERSION }));
        b[5] = VERSION;
        b[7] = 1;
        assert_eq!(FrameHeader::parse(&b), Err(FrameError::ReservedNonZero(256)));
        b[7] = 0;
        b[..4].copy_from_slice(&((MAX_FRAME + 1) as u32).to_le_bytes());
        assert!(matches!(FrameHeader::parse(&b), Err(FrameError::TooLarge { .. })));
    }

    #[test]
    fn split_waits_for_whole_frames() {
        let h = FrameHeader::new(Kind::Dropped, 3).unwrap();
        let mut buf = h.to_bytes().to_vec();
        buf.extend_from_slice(&[7, 8, 9, 1]);
        for cut in 0..HEADER_LEN + 3 {
            assert_eq!(split(&buf[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(split(&buf), Ok(Some((h, &[7u8, 8, 9][..], HEADER_LEN + 3))));
    }
}
