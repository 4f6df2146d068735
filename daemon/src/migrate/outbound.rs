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

use libmig::msg::{ImageId, PeerMsg, StartVp, Tid};
use libmig::Payload;
use mio::Token;

use super::source::{remaining_ranges, IMAGE_PART};

/// Bytes a link may have queued before an image's next part goes on it.
pub const WINDOW: usize = IMAGE_PART;

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
    parts: VecDeque<(PeerMsg, Payload)>,
    /// Every part is in `parts` (an image still being written gets more).
    whole: bool,
}

impl Outbound {
    /// `image` (already sent up to `from`, on `link`) to `to` for `what`;
    /// a restore's first part says how to start the VP (`start`). The
    /// parts left to send it whole, then the preamble if it went early.
    pub fn whole(
        to: String,
        what: Sending,
        image: Payload,
        (from, link): (usize, Option<Token>),
        start: Option<StartVp>,
        now: Instant,
    ) -> Outbound {
        let mut o = Outbound {
            to,
            what,
            link,
            since: now,
            parts: VecDeque::new(),
            whole: false,
        };
        o.add_rest(image, from, start);
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
        }
    }

    /// A part of the image written so far, at `at`, while it is written
    /// (its size is not known yet); the first says how to start the VP.
    pub fn add_written(&mut self, at: u64, part: Payload, start: Option<StartVp>) {
        if let Sending::Restore(tid) = self.what {
            let msg = PeerMsg::RestorePart {
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
    /// before went while it was written), then its preamble if any part
    /// went early; the last part completes it.
    pub fn add_rest(&mut self, image: Payload, from: usize, mut start: Option<StartVp>) {
        let len = image.len();
        let ranges: Vec<Range<usize>> = remaining_ranges(len, from);
        let n = ranges.len();
        for (i, (part, r)) in image.pieces(&ranges).into_iter().zip(ranges).enumerate() {
            let (at, total, last) = (r.start as u64, len as u64, i + 1 == n);
            let msg = match &self.what {
                Sending::Restore(tid) => PeerMsg::RestorePart {
                    tid: *tid,
                    at,
                    total,
                    last,
                    start: start.take(),
                },
                Sending::Copy(image) => PeerMsg::ImagePart {
                    image: image.clone(),
                    at,
                    total,
                    last,
                },
            };
            self.parts.push_back((msg, part));
        }
        self.whole = true;
    }

    /// The next part to send, if one is ready.
    pub fn next_part(&mut self) -> Option<(PeerMsg, Payload)> {
        self.parts.pop_front()
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
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![3u8; len]).unwrap();
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
        }
    }

    #[test]
    fn a_copy_goes_in_parts_the_last_completing_it() {
        let image = ImageId {
            job: "j1".into(),
            gen: 4,
            tid: 7,
        };
        let len = 2 * IMAGE_PART + 10;
        let mut o = Outbound::whole(
            "h2".into(),
            Sending::Copy(image.clone()),
            mapped(len),
            (0, None),
            None,
            Instant::now(),
        );
        let mut got = Vec::new();
        while let Some((msg, part)) = o.next_part() {
            let PeerMsg::ImagePart {
                at, total, last, ..
            } = msg
            else {
                panic!("{msg:?}")
            };
            got.push((at, part.len(), total, last));
        }
        let (p, t) = (IMAGE_PART, len as u64);
        assert_eq!(
            got,
            vec![
                (0, p, t, false),
                (p as u64, p, t, false),
                (2 * p as u64, 10, t, true)
            ]
        );
        assert!(o.done());
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
            let PeerMsg::RestorePart {
                at, last, start, ..
            } = msg
            else {
                panic!()
            };
            seen.push((at, last, start.is_some()));
        }
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
}
