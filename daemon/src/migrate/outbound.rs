//! An image going to another host over the data link, a part at a time:
//! the next part is queued on the link only once it has drained below
//! `WINDOW`, and at most one a turn of the loop, so a 256 MiB image never
//! stands in front of the consensus's and the VPs' messages on the same
//! link for more than a part or two, nor takes a turn's time (an image
//! queued whole there held a voter's heartbeats long enough for an
//! election). The parts share the image's mapping; none is copied.
//!
//! What lives here: the parts still to go and what each says (no sockets).
//! What does not: the link (the server's `pump_outbound`).

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Instant;

use libmig::msg::{DataLink, ImageId, StartVp, Tid};
use libmig::Payload;
use mio::Token;

use super::outgoing::{remaining_ranges, written_last, IMAGE_PART};

/// Bytes a link may have queued before an image's next part goes on it.
pub const WINDOW: usize = IMAGE_PART;

/// The size of the parts a copy of a job checkpoint's image goes in: the
/// sender seals a part a turn and the receiver opens one, and a copy is
/// never urgent (a move's parts are larger: its VP waits).
pub const COPY_PART: usize = 1 << 20;

/// Bytes of a copy sent ahead of what the other end has written.
pub const ACK_WINDOW: u64 = 8 << 20;

/// What an image goes to another host for.
#[derive(Debug, Clone, PartialEq)]
pub enum Sending {
    /// VP `tid` starts there from it (a move, or a restart from a copy of
    /// its job's checkpoint).
    Restore(Tid),
    /// A copy of a job checkpoint's image, kept there.
    Copy(ImageId),
}

/// An image on its way to `to`.
#[derive(Debug)]
pub struct Outbound {
    /// The host it goes to.
    pub to: String,
    /// What for.
    pub what: Sending,
    /// The link its first part went on (all go on one link, or none).
    pub link: Option<Token>,
    /// When it was set going.
    pub since: Instant,
    parts: VecDeque<(DataLink, Payload)>,
    /// Every part is in `parts` (an image still being written gets more).
    whole: bool,
    /// Of a copy: bytes sent, and written at the other end (it says).
    sent: u64,
    acked: u64,
}

impl Outbound {
    /// VP `tid`'s `image` to `to`, which starts the VP from it (`start`
    /// says how, with the first part).
    pub fn whole(
        to: String,
        tid: Tid,
        image: Payload,
        start: Option<StartVp>,
        now: Instant,
    ) -> Outbound {
        let mut o = Outbound {
            to,
            what: Sending::Restore(tid),
            link: None,
            since: now,
            parts: VecDeque::new(),
            whole: false,
            sent: 0,
            acked: 0,
        };
        o.add_rest(image, 0, start);
        o
    }

    /// A restore of VP `tid` sent while its image is written (see
    /// `add_written`), on `link`.
    pub fn streaming(to: String, tid: Tid, link: Token, now: Instant) -> Outbound {
        Outbound {
            to,
            what: Sending::Restore(tid),
            link: Some(link),
            since: now,
            parts: VecDeque::new(),
            whole: false,
            sent: 0,
            acked: 0,
        }
    }

    /// A copy of `image` of `total` bytes, read as it goes (see
    /// `add_read`).
    pub fn copy(to: String, image: ImageId, now: Instant) -> Outbound {
        Outbound {
            to,
            what: Sending::Copy(image),
            link: None,
            since: now,
            parts: VecDeque::new(),
            whole: false,
            sent: 0,
            acked: 0,
        }
    }

    /// A part of a copy read, at `at` of `total` bytes; the one that ends
    /// the image completes it.
    pub fn add_read(&mut self, at: u64, part: Vec<u8>, total: u64) {
        if let Sending::Copy(image) = &self.what {
            let last = at + part.len() as u64 >= total;
            let msg = DataLink::ImagePart {
                image: image.clone(),
                at,
                total,
                last,
            };
            self.parts.push_back((msg, Payload::from(part)));
            self.whole |= last;
        }
    }

    /// Bytes of a copy sent and not yet written at the other end (a
    /// restore's other end says nothing: its parts go as the link drains).
    pub fn unacked(&self) -> u64 {
        match self.what {
            Sending::Copy(_) => self.sent.saturating_sub(self.acked),
            Sending::Restore(_) => 0,
        }
    }

    /// The other end wrote a copy up to `upto`.
    pub fn acked(&mut self, upto: u64) {
        self.acked = self.acked.max(upto);
    }

    /// A part of the image written so far, at `at`, while it is written
    /// (its size is not known yet); the first says how to start the VP.
    pub fn add_written(&mut self, at: u64, part: Payload, start: Option<StartVp>) {
        if let Sending::Restore(tid) = self.what {
            let msg = DataLink::RestorePart {
                tid,
                at,
                total: 0,
                last: false,
                start,
            };
            self.parts.push_back((msg, part));
        }
    }

    /// The rest of `image` once it is written, from `from` on (the parts
    /// before went while it was written), then what its writer wrote over
    /// at its start (a VP's preamble) if any part went early; the last
    /// part completes it.
    pub fn add_rest(&mut self, image: Payload, from: usize, mut start: Option<StartVp>) {
        let Sending::Restore(tid) = self.what else {
            return;
        };
        let len = image.len();
        // (Copied, not read from the mapping: a VP that cut its file short
        // must not crash this daemon.)
        let first = image.copy_checked(0..8.min(len)).unwrap_or_default();
        let ranges: Vec<Range<usize>> = remaining_ranges(len, from, written_last(&first));
        let n = ranges.len();
        for (i, (part, r)) in image.pieces(&ranges).into_iter().zip(ranges).enumerate() {
            let msg = DataLink::RestorePart {
                tid,
                at: r.start as u64,
                total: len as u64,
                last: i + 1 == n,
                start: start.take(),
            };
            self.parts.push_back((msg, part));
        }
        self.whole = true;
    }

    /// The next part to send, if one is ready.
    pub fn next_part(&mut self) -> Option<(DataLink, Payload)> {
        let next = self.parts.pop_front();
        if let Some((_, p)) = &next {
            self.sent += p.len() as u64;
        }
        next
    }

    /// Is a part ready to go?
    pub fn ready(&self) -> bool {
        !self.parts.is_empty()
    }

    /// Every part went.
    pub fn done(&self) -> bool {
        self.whole && self.parts.is_empty()
    }

    /// Is this VP `tid`'s image?
    pub fn restores(&self, tid: Tid) -> bool {
        self.what == Sending::Restore(tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn mapped(len: usize) -> Payload {
        mapped_from(&[], len)
    }

    /// `len` bytes beginning with `first`.
    fn mapped_from(first: &[u8], len: usize) -> Payload {
        let mut f = tempfile::tempfile().unwrap();
        let mut bytes = vec![3u8; len];
        bytes[..first.len()].copy_from_slice(first);
        f.write_all(&bytes).unwrap();
        Payload::map_file(&f, len, false).unwrap()
    }

    fn start() -> StartVp {
        StartVp {
            tid: 7,
            job: "j1".into(),
            vp: 0,
            nvps: 1,
            program: "/bin/true".into(),
            args: vec![],
            cwd: "/".into(),
            env: vec![],
            parent: None,
            incarnation: 0,
            stdin: false,
            memory_mb: None,
            io: None,
            independent: false,
        }
    }

    #[test]
    fn a_copy_goes_in_parts_the_last_completing_it() {
        let image = ImageId {
            job: "j1".into(),
            gen: 4,
            tid: 7,
        };
        let len = 2 * COPY_PART + 10;
        let mut o = Outbound::copy("h2".into(), image.clone(), Instant::now());
        for at in (0..len).step_by(COPY_PART) {
            o.add_read(at as u64, vec![1; COPY_PART.min(len - at)], len as u64);
        }
        let mut got = Vec::new();
        while let Some((msg, part)) = o.next_part() {
            let DataLink::ImagePart {
                at, total, last, ..
            } = msg
            else {
                panic!("{msg:?}")
            };
            got.push((at, part.len(), total, last));
        }
        let (p, t) = (COPY_PART, len as u64);
        assert_eq!(
            got,
            vec![
                (0, p, t, false),
                (p as u64, p, t, false),
                (2 * p as u64, 10, t, true)
            ]
        );
        assert!(o.done());
        // What went and what the other end wrote.
        assert_eq!(o.unacked(), t);
        o.acked(p as u64);
        o.acked(1);
        assert_eq!(o.unacked(), t - p as u64);
    }

    #[test]
    fn a_restore_sent_while_written_ends_with_its_preamble_and_says_how_to_start_once() {
        let mut o = Outbound::streaming("h1".into(), 7, Token(5), Instant::now());
        assert!(o.restores(7) && !o.restores(8));
        o.add_written(0, mapped(IMAGE_PART), Some(start()));
        assert!(!o.done(), "more is being written");
        let len = IMAGE_PART + 100;
        o.add_rest(mapped(len), IMAGE_PART, None);
        let mut seen = Vec::new();
        while let Some((msg, _)) = o.next_part() {
            let DataLink::RestorePart {
                at, last, start, ..
            } = msg
            else {
                panic!()
            };
            seen.push((at, last, start.is_some()));
        }
        assert_eq!(
            o.unacked(),
            0,
            "a restore waits for no word from its target"
        );
        assert_eq!(
            seen,
            vec![
                (0, false, true),
                (IMAGE_PART as u64, false, false),
                (0, true, false)
            ]
        );
        assert!(o.done());
    }

    #[test]
    fn an_image_saved_from_outside_sent_while_written_goes_in_order_each_byte_once() {
        let magic = mig_ckpt::image::MAGIC;
        let mut o = Outbound::streaming("h1".into(), 7, Token(5), Instant::now());
        o.add_written(0, mapped_from(&magic, IMAGE_PART), Some(start()));
        o.add_written(IMAGE_PART as u64, mapped_from(&[], IMAGE_PART), None);
        let len = 2 * IMAGE_PART + 100;
        o.add_rest(mapped_from(&magic, len), 2 * IMAGE_PART, None);
        let mut seen = Vec::new();
        while let Some((msg, part)) = o.next_part() {
            let DataLink::RestorePart { at, last, .. } = msg else {
                panic!()
            };
            seen.push((at, part.len(), last));
        }
        let p = IMAGE_PART;
        assert_eq!(
            seen,
            vec![
                (0, p, false),
                (p as u64, p, false),
                (2 * p as u64, 100, true)
            ]
        );
        // All of it went while written: an empty last part says it is whole.
        let mut o = Outbound::streaming("h1".into(), 7, Token(5), Instant::now());
        o.add_written(0, mapped_from(&magic, IMAGE_PART), Some(start()));
        o.add_rest(mapped_from(&magic, IMAGE_PART), IMAGE_PART, None);
        o.next_part();
        let Some((
            DataLink::RestorePart {
                at, total, last, ..
            },
            part,
        )) = o.next_part()
        else {
            panic!()
        };
        assert_eq!((at, total, last, part.len()), (p as u64, p as u64, true, 0));
        assert!(o.done());
    }
}
