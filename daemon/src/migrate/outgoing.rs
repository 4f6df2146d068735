//! The source end of a move, without I/O on sockets: which parts of an
//! image go when. An image is sent on in whole parts while it is written
//! (by its VP, or by its daemon saving it from outside: [`Outgoing`]);
//! once written, the rest goes and then what was written over at the end
//! ([`written_last`]: a VP's preamble; nothing of an image saved from
//! outside, written in order), see [`remaining_ranges`].

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use libmig::Payload;
use mio::Token;

/// The size of the parts images travel in between hosts.
pub const IMAGE_PART: usize = 4 << 20;

/// An image sent on while its VP writes it.
#[derive(Debug)]
pub struct Outgoing {
    /// The file being written, and its name (a VP's process writes its own).
    pub file: File,
    /// Its path.
    pub path: PathBuf,
    /// Bytes of it sent so far (whole parts).
    pub sent: u64,
    /// The data link they went on.
    pub link: Token,
}

impl Outgoing {
    /// Nothing sent yet of `file` (at `path`) over `link`.
    pub fn new(file: File, path: PathBuf, link: Token) -> Outgoing {
        Outgoing {
            file,
            path,
            sent: 0,
            link,
        }
    }

    /// The VP says it wrote `upto` bytes: the whole parts written and not
    /// sent yet, mapped (offset, bytes), and counted as sent. Never past
    /// what the file holds, whatever the VP says (a mapping past a file's
    /// end faults when read).
    pub fn due_parts(&mut self, upto: u64) -> Result<Vec<(u64, Payload)>, String> {
        let size = self.file.metadata().map_or(0, |m| m.len());
        let end = upto.min(size) / IMAGE_PART as u64 * IMAGE_PART as u64;
        let mut parts = Vec::new();
        while self.sent < end {
            let p = Payload::map_file_at(&self.file, self.sent, IMAGE_PART)
                .map_err(|e| format!("cannot map its image as it is written: {e}"))?;
            parts.push((self.sent, p));
            self.sent += IMAGE_PART as u64;
        }
        Ok(parts)
    }
}

/// The bytes at the start of an image beginning with `first` that its
/// writer writes over once the rest is written: a VP's preamble (libmig
/// writes it last, its sum and size known only then); none of an image
/// saved from outside (`mig_ckpt` writes its header, metadata, pages and
/// trailer in order, each once).
pub fn written_last(first: &[u8]) -> usize {
    if crate::transparent::is_image(first) {
        0
    } else {
        libmig::checkpoint::PREAMBLE
    }
}

/// The parts of an image of `len` bytes still to send once it is written,
/// when `from` bytes of it went while it was written: the rest in parts,
/// then its first `last` bytes (written over at the end, so never right
/// when sent early: see [`written_last`]) if anything went. One part at
/// least, the last of which says the image is whole: an empty one at its
/// end when all of it went already.
pub fn remaining_ranges(len: usize, from: usize, last: usize) -> Vec<Range<usize>> {
    let from = from.min(len);
    let mut ranges: Vec<Range<usize>> = (from..len)
        .step_by(IMAGE_PART)
        .map(|at| at..(at + IMAGE_PART).min(len))
        .collect();
    if from > 0 && last > 0 {
        ranges.push(0..last.min(len));
    }
    if ranges.is_empty() {
        ranges.push(len..len);
    }
    ranges
}

/// A checkpoint image file, mapped read-only (no copy) after checking its
/// size against the largest image there can be.
pub fn map_image(path: &Path) -> Result<Payload, String> {
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let len = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let limit = libmig::checkpoint::MAX_IMAGE + libmig::checkpoint::PREAMBLE as u64;
    if len > limit {
        return Err(format!(
            "{}: {len} bytes, larger than any image",
            path.display()
        ));
    }
    Payload::map_file(&f, len as usize, false).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_image_sent_whole_goes_in_parts_and_a_streamed_one_ends_with_its_preamble() {
        let p = IMAGE_PART;
        let pre = libmig::checkpoint::PREAMBLE;
        assert_eq!(remaining_ranges(10, 0, pre), vec![0..10]);
        assert_eq!(
            remaining_ranges(2 * p + 5, 0, pre),
            vec![0..p, p..2 * p, 2 * p..2 * p + 5]
        );
        assert_eq!(
            remaining_ranges(2 * p + 5, p, pre),
            vec![p..2 * p, 2 * p..2 * p + 5, 0..pre]
        );
        // All of it went while written but the preamble.
        assert_eq!(remaining_ranges(p, p, pre), vec![0..pre]);
        // Saved from outside, written in order: nothing goes twice.
        assert_eq!(
            remaining_ranges(2 * p + 5, p, 0),
            vec![p..2 * p, 2 * p..2 * p + 5]
        );
        assert_eq!(remaining_ranges(p, p, 0), vec![p..p], "it is whole");
    }

    #[test]
    fn only_a_vps_own_image_is_written_over_at_its_start() {
        assert_eq!(written_last(&mig_ckpt::image::MAGIC), 0);
        assert_eq!(
            written_last(&libmig::checkpoint::MAGIC),
            libmig::checkpoint::PREAMBLE,
            "libmig's"
        );
        assert_eq!(written_last(&[0; 8]), libmig::checkpoint::PREAMBLE);
    }

    #[test]
    fn parts_go_only_as_far_as_the_file_holds_whatever_the_vp_says() {
        let mut f = tempfile::tempfile().expect("temp file");
        f.write_all(&vec![7u8; IMAGE_PART + IMAGE_PART / 2])
            .expect("write");
        let mut o = Outgoing::new(f, PathBuf::from("x"), Token(1));
        assert!(o.due_parts(100).expect("parts").is_empty());
        let parts = o.due_parts(u64::MAX).expect("parts");
        assert_eq!(parts.len(), 1, "one whole part written");
        assert_eq!(parts[0].0, 0);
        assert_eq!(o.sent, IMAGE_PART as u64);
        assert!(o.due_parts(u64::MAX).expect("parts").is_empty());
    }
}
