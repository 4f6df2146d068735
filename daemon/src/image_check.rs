//! Checking a checkpoint image as its bytes arrive, whichever kind it is:
//! a VP's own (libmig's `MIGCKPT`, whose preamble may come last: it is
//! sent while the VP writes it) or one saved from outside (`mig_ckpt`'s
//! `MIGPROC`, sent in order, while it is written or once whole), known by
//! the magic of its first bytes. Used where images arrive (a move's
//! target, a copy of a job checkpoint's image) and where a kept image is
//! read through.
//!
//! What lives here: the verdict and the image's sum. What does not:
//! reading or writing files (the callers).

use libmig::checkpoint::Checker;

/// An image being checked.
#[derive(Debug, Default)]
pub struct ImageCheck {
    kind: Kind,
    /// Its first bytes, up to a `MIGPROC` header's length (its sum).
    head: Vec<u8>,
}

#[derive(Debug, Default)]
enum Kind {
    /// Nothing arrived yet.
    #[default]
    Unknown,
    /// libmig's.
    Vp(Checker),
    /// Saved from outside, and the offset its next bytes must come at.
    Outside(Box<mig_ckpt::image::StreamCheck>, u64),
}

/// Bytes of an image kept to say its sum: a `MIGPROC` header.
const HEAD: usize = mig_ckpt::image::HEADER_LEN;

impl ImageCheck {
    /// Take in bytes at offset `at` (see `Checker::update_at`; an image
    /// saved from outside must come in order).
    pub fn update_at(&mut self, at: u64, part: &[u8]) -> Result<(), String> {
        if matches!(self.kind, Kind::Unknown) {
            self.kind = if at == 0 && crate::transparent::is_image(part) {
                Kind::Outside(Box::default(), 0)
            } else {
                Kind::Vp(Checker::default())
            };
        }
        if at <= self.head.len() as u64 && (self.head.len() as u64) < at + part.len() as u64 {
            let from = self.head.len() - at as usize;
            let take = (HEAD - self.head.len()).min(part.len() - from);
            self.head.extend_from_slice(&part[from..from + take]);
        }
        match &mut self.kind {
            Kind::Unknown => Ok(()),
            Kind::Vp(c) => c.update_at(at, part).map_err(|e| e.to_string()),
            Kind::Outside(c, next) => {
                if at != *next {
                    return Err(format!("a piece at {at} where {next} was next"));
                }
                *next += part.len() as u64;
                c.update(part).map_err(|e| e.to_string())
            }
        }
    }

    /// Take in the next bytes, in order.
    pub fn update(&mut self, part: &[u8]) -> Result<(), String> {
        self.update_at(self.seen(), part)
    }

    /// Bytes taken in so far.
    pub fn seen(&self) -> u64 {
        match &self.kind {
            Kind::Unknown => 0,
            Kind::Vp(c) => c.seen(),
            Kind::Outside(_, next) => *next,
        }
    }

    /// The verdict on everything taken in, and the image's sum (the one
    /// its preamble announces; for an image saved from outside, its
    /// header's, which covers its metadata's).
    pub fn finish(self) -> Result<u32, String> {
        let word = |at: usize| {
            self.head
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u32::from_le_bytes)
        };
        let (vp_sum, outside_sum) = (word(12), word(60));
        match self.kind {
            Kind::Unknown => Err("no byte of the image arrived".into()),
            Kind::Vp(c) => c.finish().map(|()| vp_sum).map_err(|e| e.to_string()),
            Kind::Outside(c, _) => c.finish().map(|_| outside_sum).map_err(|e| e.to_string()),
        }
    }
}
