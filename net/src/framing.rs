//! Framed connections, independent of the socket type: `FrameBuf` turns
//! the bytes a stream delivers into verified messages, `Outbox` gathers
//! many encoded frames into one buffer so a single write (one io_uring
//! submission) carries them all.
//!
//! A bad frame *header* (unknown kind, wrong version, a length over
//! `MAX_FRAME`) desynchronises the stream: the connection must close. A bad
//! *payload* leaves the stream in sync: that one message is refused with a
//! typed error and the next frame is read normally.

use baton_wire::frame::{split, FrameError, Kind, HEADER_LEN};
use baton_wire::message::{decode_payload, view, View};
use baton_wire::{encode_answer_into, encode_into, fb, DecodeError, Limits, Message};

/// Bytes asked of the socket per read.
pub const READ_CHUNK: usize = 64 << 10;

/// One frame read off a stream.
pub type Frame = Result<Message, DecodeError>;

pub struct FrameBuf {
    buf: Vec<u8>,
    /// Start of the first byte not yet consumed.
    start: usize,
    /// End of the bytes read so far.
    end: usize,
    limits: Limits,
}

impl Default for FrameBuf {
    fn default() -> Self {
        Self::new(Limits::default())
    }
}

impl FrameBuf {
    pub fn new(limits: Limits) -> Self {
        Self { buf: vec![0; READ_CHUNK], start: 0, end: 0, limits }
    }

    /// Room to read at least `READ_CHUNK` more bytes into (consumed bytes
    /// are reclaimed first). A frame larger than the buffer grows it, up to
    /// its announced size, which the header check has capped.
    pub fn spare(&mut self) -> &mut [u8] {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < READ_CHUNK {
            self.buf.resize(self.end + READ_CHUNK, 0);
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes were read into `spare()`.
    pub fn filled(&mut self, n: usize) {
        assert!(self.end + n <= self.buf.len(), "filled more than the spare room");
        self.end += n;
    }

    /// Bytes of a frame begun but not complete (0 at a frame boundary).
    pub fn partial(&self) -> usize {
        self.end - self.start
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed, or the
    /// header error that ends the connection.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        Ok(self.next_payload()?.map(|(kind, at)| decode_payload(kind, &self.buf[at], &self.limits)))
    }

    /// The same, the frame read in place (`View`): a client's request or
    /// answer is verified, not copied. The view borrows the buffer until
    /// the next call.
    pub fn next_view(&mut self) -> Result<Option<Result<View<'_>, DecodeError>>, FrameError> {
        Ok(self.next_raw()?.map(|r| r.view()))
    }

    /// The next whole frame unread: its kind and payload, for a reader
    /// that looks at a payload before it is verified (`Raw::view`
    /// verifies it as `next_view` does).
    pub fn next_raw(&mut self) -> Result<Option<Raw<'_>>, FrameError> {
        Ok(self.next_payload()?.map(|(kind, at)| Raw { kind, payload: &self.buf[at], limits: &self.limits }))
    }

    /// The next whole frame's kind and where its payload lies, consumed.
    fn next_payload(&mut self) -> Result<Option<(Kind, std::ops::Range<usize>)>, FrameError> {
        let Some((header, payload, used)) = split(&self.buf[self.start..self.end])? else {
            return Ok(None);
        };
        debug_assert_eq!(used, HEADER_LEN + header.len);
        let at = self.start + HEADER_LEN..self.start + HEADER_LEN + payload.len();
        self.start += used;
        Ok(Some((header.kind, at)))
    }
}

/// A frame split off the stream, not verified yet (`FrameBuf::next_raw`).
pub struct Raw<'a> {
    pub kind: Kind,
    pub payload: &'a [u8],
    limits: &'a Limits,
}

impl<'a> Raw<'a> {
    /// The payload verified and read in place, as `FrameBuf::next_view`.
    pub fn view(self) -> Result<View<'a>, DecodeError> {
        view(self.kind, self.payload, self.limits)
    }
}

/// Encoded frames waiting to be written, and the flatbuffers builder
/// they are encoded with (kept, so encoding does not allocate).
/// Two buffers take turns: while the writer writes one (`take`), frames
/// are encoded into the other, and the written one comes back
/// (`recycle`) to be filled next, so a busy connection does not allocate.
#[derive(Default)]
pub struct Outbox {
    buf: Vec<u8>,
    /// The buffer written last, empty, to fill after `buf` is taken.
    spare: Vec<u8>,
    frames: usize,
    builder: baton_wire::Builder,
}

/// The largest buffer an outbox keeps for reuse: one a slow reader grew
/// is given back to the allocator.
const KEEP: usize = 1 << 20;

impl Outbox {
    /// Appends `m` as one frame. A message too large for a frame is an error
    /// and nothing is appended.
    pub fn push(&mut self, m: &Message) -> Result<(), FrameError> {
        encode_into(m, &mut self.builder, &mut self.buf)?;
        self.frames += 1;
        Ok(())
    }

    /// `push` of an answer held by reference.
    pub fn push_answer(&mut self, a: &fb::InferResponse) -> Result<(), FrameError> {
        encode_answer_into(a, &mut self.buf)?;
        self.frames += 1;
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn len_bytes(&self) -> usize {
        self.buf.len()
    }

    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The bytes to write, leaving the outbox empty: frames pushed next
    /// go into the spare buffer. Hand the bytes back with `recycle` once
    /// written.
    pub fn take(&mut self) -> Vec<u8> {
        self.frames = 0;
        let next = std::mem::take(&mut self.spare);
        std::mem::replace(&mut self.buf, next)
    }

    /// A buffer `take` gave, written: kept (emptied) as the spare unless
    /// the spare is larger or it is larger than `KEEP`.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() > self.spare.capacity() && buf.capacity() <= KEEP {
            buf.clear();
            self.spare = buf;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_wire::encode;
    use baton_wire::frame::{FrameHeader, Kind};

    fn msg(i: u64) -> Message {
        Message::Dropped(fb::Dropped {
            requests: Some(vec![i; (i % 7) as usize]),
            reason: fb::DropReason::Shed,
            message: None,
        })
    }

    /// Feeds `bytes` to a FrameBuf in chunks of `chunk`, collecting frames.
    fn feed(bytes: &[u8], chunk: usize) -> (Vec<Frame>, Result<(), FrameError>) {
        let mut fb = FrameBuf::default();
        let mut out = Vec::new();
        for c in bytes.chunks(chunk) {
            let spare = fb.spare();
            spare[..c.len()].copy_from_slice(c);
            fb.filled(c.len());
            loop {
                match fb.next_frame() {
                    Ok(Some(f)) => out.push(f),
                    Ok(None) => break,
                    Err(e) => return (out, Err(e)),
                }
            }
        }
        (out, Ok(()))
    }

    /// A writer that takes, writes while more frames are pushed, and
    /// recycles, turns between two buffers: no new one once both have
    /// grown to what a turn holds (frames of one size here), every frame
    /// written once and in order; a buffer over `KEEP` is not kept.
    #[test]
    fn two_buffers_take_turns_between_the_writer_and_the_encoder() {
        let fixed = |i: u64| {
            Message::Dropped(fb::Dropped { requests: Some(vec![i; 3]), reason: fb::DropReason::Shed, message: None })
        };
        let mut ob = Outbox::default();
        let (mut written, mut seen) = (Vec::new(), std::collections::BTreeSet::new());
        let mut in_flight: Option<Vec<u8>> = None;
        for i in 0..40 {
            ob.push(&fixed(i)).unwrap();
            ob.push(&fixed(i + 1000)).unwrap();
            if let Some(done) = in_flight.take() {
                ob.recycle(done);
            }
            let bytes = ob.take();
            assert!(ob.is_empty() && ob.frames() == 0);
            if i >= 2 {
                seen.insert(bytes.as_ptr() as usize);
            }
            written.extend_from_slice(&bytes);
            in_flight = Some(bytes);
        }
        assert_eq!(seen.len(), 2, "two buffers in turn");
        let (frames, end) = feed(&written, 4096);
        assert_eq!(end, Ok(()));
        let want: Vec<Message> = (0..40).flat_map(|i| [fixed(i), fixed(i + 1000)]).collect();
        assert_eq!(frames.into_iter().map(|f| f.unwrap()).collect::<Vec<_>>(), want);

        let mut ob = Outbox::default();
        ob.recycle(Vec::with_capacity(KEEP + 1));
        ob.push(&msg(1)).unwrap();
        let _ = ob.take();
        assert_eq!(ob.take().capacity(), 0, "a buffer over KEEP is not kept");
    }

    #[test]
    fn frames_come_out_whole_whatever_the_read_sizes() {
        let mut ob = Outbox::default();
        for i in 0..200 {
            ob.push(&msg(i)).unwrap();
        }
        assert_eq!(ob.frames(), 200);
        let bytes = ob.take();
        for chunk in [1, 3, 8, 9, 100, 4096, 1 << 20] {
            let (frames, end) = feed(&bytes, chunk);
            assert_eq!(end, Ok(()));
            let got: Vec<Message> = frames.into_iter().map(|f| f.unwrap()).collect();
            assert_eq!(got, (0..200).map(msg).collect::<Vec<_>>(), "chunk {chunk}");
        }
    }

    #[test]
    fn a_bad_payload_is_one_error_and_a_bad_header_ends_the_stream() {
        let mut bytes = FrameHeader::new(Kind::InferRequest, 3).unwrap().to_bytes().to_vec();
        bytes.extend_from_slice(&[1, 2, 3]);
        bytes.extend_from_slice(&encode(&msg(5)).unwrap());
        let (frames, end) = feed(&bytes, 5);
        assert_eq!(end, Ok(()));
        assert!(matches!(frames[0], Err(DecodeError::Malformed { kind: Kind::InferRequest, .. })));
        assert_eq!(frames[1], Ok(msg(5)));

        let mut garbage = encode(&msg(1)).unwrap();
        garbage.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let (frames, end) = feed(&garbage, 64);
        assert_eq!(frames, vec![Ok(msg(1))]);
        assert!(end.is_err());

        let mut huge = FrameHeader::new(Kind::Stats, 0).unwrap().to_bytes();
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let (_, end) = feed(&huge, 8);
        assert!(matches!(end, Err(FrameError::TooLarge { .. })), "{end:?}");
    }
}
