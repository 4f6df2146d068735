//! The worker's side of moves: where each local VP is in its move, and the
//! images on their way out, parked on disk, or arriving.
//!
//! What lives here: the [`MoveTable`], which owns that state, with one
//! [`Move`] per VP whose move has begun, and the pure parts of each end
//! (`outgoing`: which parts of an image go when; `incoming`: an image taken
//! in part by part, checked on the way). What does not: sockets, signals and
//! processes (the server asks the table and carries out what it answers).

pub mod incoming;
pub mod outbound;
pub mod outgoing;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use libmig::msg::{StartVp, Tid};
use mio::Token;

pub use incoming::{Incoming, Refused};
pub use outbound::{Outbound, Sending, ACK_WINDOW, COPY_PART, WINDOW};
pub use outgoing::{map_image, remaining_ranges, Outgoing, IMAGE_PART};

/// Where a VP asked for its image goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// To another host, which starts it from the image.
    Host(String),
    /// To this host's disk: parked while the owner has the host, its
    /// process ended so the owner gets the memory back.
    Disk,
}

/// Where one local VP is in its move.
#[derive(Debug)]
pub enum Move {
    /// Asked to write its image at its next safe point (resumed for that,
    /// and nudged), since `since`.
    Asked {
        /// Where the image goes.
        dest: Dest,
        /// How the target starts it.
        start: StartVp,
        /// When it was asked.
        since: Instant,
        /// It is saved from outside (by the checkpointer: no safe point to
        /// wait for, so never called off as late).
        outside: bool,
    },
    /// Past its safe point and writing its image (or being saved from
    /// outside), whose whole parts go on to `to` as they are written.
    Streaming {
        /// The target host.
        to: String,
        /// How the target starts it.
        start: StartVp,
        /// When it was asked.
        since: Instant,
        /// What went so far, and on which link.
        out: Outgoing,
        /// It is saved from outside (by the checkpointer), not writing its
        /// own image.
        outside: bool,
    },
    /// It reached no safe point in time: it stays here (running, or stopped
    /// while the owner has the host).
    CalledOff,
    /// Its image went to another host or is parked here: its process ends,
    /// and that end is no exit.
    Left,
    /// It wrote its image after its move was called off: once its process
    /// has ended it starts again here from that image.
    RestartHere {
        /// How it was started.
        start: StartVp,
        /// The image.
        path: PathBuf,
    },
}

impl Move {
    /// On its way to a safe point or writing its image: neither the owner
    /// nor a slot switch stops it.
    pub fn under_way(&self) -> bool {
        matches!(self, Move::Asked { .. } | Move::Streaming { .. })
    }

    /// Not to be stopped, by the owner's return or a slot switch: on its
    /// way to a safe point, writing its image, or ending after it went.
    pub fn let_run(&self) -> bool {
        matches!(
            self,
            Move::Asked { .. } | Move::Streaming { .. } | Move::Left
        )
    }

    /// Its process's end is not the VP's exit.
    pub fn left(&self) -> bool {
        matches!(self, Move::Left | Move::RestartHere { .. })
    }
}

/// A VP parked on this host's disk.
#[derive(Debug, Clone)]
pub struct Parked {
    /// How to start it again.
    pub start: StartVp,
    /// Its image.
    pub path: PathBuf,
}

/// What a VP that wrote its image asked for.
#[derive(Debug)]
pub enum Written {
    /// Send it to `to`; `streamed`: the link the first parts went on and
    /// how many bytes.
    Send {
        /// The target host.
        to: String,
        /// How it starts there.
        start: StartVp,
        /// Parts already sent on while it was written.
        streamed: Option<(Token, u64)>,
    },
    /// Park it on this host's disk.
    Park {
        /// How to start it again.
        start: StartVp,
    },
    /// Nobody asked (any more): its move was called off.
    Unasked,
}

/// What a host still has of a VP whose move's other end died (see
/// [`MoveTable::recall`]).
#[derive(Debug)]
pub enum Recalled {
    /// It had not reached its safe point: the move is called off and its
    /// process stays here.
    StaysHere,
    /// It is writing its image: once written, it starts again here from
    /// it (as a move called off late does).
    Writing,
    /// Its image went, and was kept until it ran there: it starts again
    /// here from it.
    Kept(Parked),
    /// Nothing here.
    Nothing,
}

/// How long after a try to park a VP that is still here it is tried again.
pub const PARK_RETRY: Duration = Duration::from_secs(5);

/// The moves of this host's VPs, and the images it holds for them.
#[derive(Debug, Default)]
pub struct MoveTable {
    moves: HashMap<Tid, Move>,
    parked: HashMap<Tid, Parked>,
    /// Images sent to another host, kept until the VP runs there (if that
    /// host dies first, the VP starts again here from its image).
    sent: HashMap<Tid, Parked>,
    /// Tries that missed their safe point, by VP.
    missed: HashMap<Tid, u32>,
    /// VPs asked to park while the owner has the host this time, and when.
    park_tried: HashMap<Tid, Instant>,
    incoming: HashMap<Tid, Incoming>,
}

impl MoveTable {
    /// Where `tid` is in its move, if one began.
    pub fn get(&self, tid: Tid) -> Option<&Move> {
        self.moves.get(&tid)
    }

    /// Is `tid` on its way to a safe point or writing its image?
    pub fn under_way(&self, tid: Tid) -> bool {
        self.moves.get(&tid).is_some_and(Move::under_way)
    }

    /// Is `tid` not to be stopped (see [`Move::let_run`])?
    pub fn let_run(&self, tid: Tid) -> bool {
        self.moves.get(&tid).is_some_and(Move::let_run)
    }

    /// `tid` is asked for its image, for `dest`.
    pub fn ask(&mut self, tid: Tid, dest: Dest, start: StartVp, now: Instant) {
        self.asked(tid, dest, start, now, false);
    }

    /// `tid` is saved from outside for `dest`.
    pub fn ask_outside(&mut self, tid: Tid, dest: Dest, start: StartVp, now: Instant) {
        self.asked(tid, dest, start, now, true);
    }

    fn asked(&mut self, tid: Tid, dest: Dest, start: StartVp, since: Instant, outside: bool) {
        self.moves.insert(
            tid,
            Move::Asked {
                dest,
                start,
                since,
                outside,
            },
        );
    }

    /// Is `tid` being saved from outside for a move still asked for
    /// (its image perhaps streaming)?
    pub fn saving_outside(&self, tid: Tid) -> bool {
        matches!(
            self.moves.get(&tid),
            Some(Move::Asked { outside: true, .. } | Move::Streaming { outside: true, .. })
        )
    }

    /// Moves asked for more than `limit` ago whose VP has not begun to
    /// write: called off. Their VPs, with where each was to go and how it
    /// starts there (for a move from outside instead).
    pub fn call_off_overdue(&mut self, now: Instant, limit: Duration) -> Vec<(Tid, Dest, StartVp)> {
        let late: Vec<Tid> = self
            .moves
            .iter()
            .filter(|(_, m)| {
                matches!(m, Move::Asked { since, outside: false, .. } if now.saturating_duration_since(*since) > limit)
            })
            .map(|(&t, _)| t)
            .collect();
        let mut off = Vec::new();
        for t in late {
            if let Some(Move::Asked { dest, start, .. }) = self.moves.insert(t, Move::CalledOff) {
                off.push((t, dest, start));
            }
            *self.missed.entry(t).or_default() += 1;
        }
        off
    }

    /// `tid`, being saved from outside instead of at the safe point it
    /// missed, was found writing its own image after all: its move waits
    /// for that image again, from `now`.
    pub fn back_to_safe_point(&mut self, tid: Tid, now: Instant) {
        if let Some(Move::Asked { since, outside, .. }) = self.moves.get_mut(&tid) {
            *since = now;
            *outside = false;
        }
    }

    /// How many tries to move `tid` missed their safe point.
    pub fn missed(&self, tid: Tid) -> u32 {
        self.missed.get(&tid).copied().unwrap_or(0)
    }

    /// When the first move still short of its safe point becomes overdue.
    pub fn next_overdue(&self, limit: Duration) -> Option<Instant> {
        self.moves
            .values()
            .filter_map(|m| match m {
                Move::Asked {
                    since,
                    outside: false,
                    ..
                } => Some(*since + limit),
                _ => None,
            })
            .min()
    }

    /// The target host of `tid`'s move, if it is asked for or streaming
    /// its image to another host.
    pub fn target(&self, tid: Tid) -> Option<(&str, &StartVp)> {
        match self.moves.get(&tid)? {
            Move::Asked {
                dest: Dest::Host(to),
                start,
                ..
            }
            | Move::Streaming { to, start, .. } => Some((to, start)),
            _ => None,
        }
    }

    /// `tid`, asked for its image for another host, has begun to write it
    /// (or its daemon to save it from outside): the parts go on over
    /// `out`'s link from now on.
    pub fn stream(&mut self, tid: Tid, out: Outgoing) {
        let next = match self.moves.remove(&tid) {
            Some(
                Move::Asked {
                    dest: Dest::Host(to),
                    start,
                    since,
                    outside,
                }
                | Move::Streaming {
                    to,
                    start,
                    since,
                    outside,
                    ..
                },
            ) => Move::Streaming {
                to,
                start,
                since,
                out,
                outside,
            },
            Some(other) => other,
            None => return,
        };
        self.moves.insert(tid, next);
    }

    /// What is being sent on of `tid`'s image, if it streams.
    pub fn outgoing(&mut self, tid: Tid) -> Option<&mut Outgoing> {
        match self.moves.get_mut(&tid)? {
            Move::Streaming { out, .. } => Some(out),
            _ => None,
        }
    }

    /// `tid` stops streaming (its link failed): the image goes whole once
    /// written.
    pub fn stop_streaming(&mut self, tid: Tid) {
        match self.moves.remove(&tid) {
            Some(Move::Streaming {
                to,
                start,
                since,
                outside,
                ..
            }) => {
                let dest = Dest::Host(to);
                self.moves.insert(
                    tid,
                    Move::Asked {
                        dest,
                        start,
                        since,
                        outside,
                    },
                );
            }
            Some(other) => {
                self.moves.insert(tid, other);
            }
            None => {}
        }
    }

    /// `tid` wrote its image: what was asked of it. The move is not over
    /// until [`MoveTable::left`] (the image may be unusable).
    pub fn written(&self, tid: Tid) -> Written {
        match self.moves.get(&tid) {
            Some(Move::Asked {
                dest: Dest::Disk,
                start,
                ..
            }) => Written::Park {
                start: start.clone(),
            },
            Some(Move::Asked {
                dest: Dest::Host(to),
                start,
                ..
            }) => Written::Send {
                to: to.clone(),
                start: start.clone(),
                streamed: None,
            },
            Some(Move::Streaming { to, start, out, .. }) => Written::Send {
                to: to.clone(),
                start: start.clone(),
                streamed: Some((out.link, out.sent)),
            },
            _ => Written::Unasked,
        }
    }

    /// `tid`'s image went (or is parked): its process's end is no exit.
    /// When it was asked to move, if it was.
    pub fn left(&mut self, tid: Tid) -> Option<Instant> {
        match self.moves.insert(tid, Move::Left) {
            Some(Move::Asked { since, .. } | Move::Streaming { since, .. }) => Some(since),
            _ => None,
        }
    }

    /// `tid` wrote its image (now at `path`) although its move was called
    /// off: it starts again here from it once its process has ended.
    pub fn restart_here(&mut self, tid: Tid, start: StartVp, path: PathBuf) {
        self.moves.insert(tid, Move::RestartHere { start, path });
    }

    /// `tid`'s move is called off (its image could not be written): it
    /// stays here.
    pub fn call_off(&mut self, tid: Tid) {
        if self.moves.contains_key(&tid) {
            self.moves.insert(tid, Move::CalledOff);
        }
    }

    /// `tid`'s process ended (or a new one replaces it): its move is over.
    pub fn ended(&mut self, tid: Tid) -> Option<Move> {
        self.missed.remove(&tid);
        self.moves.remove(&tid)
    }

    /// Keep `tid` parked on disk.
    pub fn park(&mut self, tid: Tid, start: StartVp, path: PathBuf) {
        self.parked.insert(tid, Parked { start, path });
    }

    /// Take `tid` out of the parked VPs.
    pub fn unpark(&mut self, tid: Tid) -> Option<Parked> {
        self.parked.remove(&tid)
    }

    /// Take every parked VP out, and every image kept after it was sent
    /// (this host was fenced: they run elsewhere).
    pub fn unpark_all(&mut self) -> Vec<Parked> {
        let sent = std::mem::take(&mut self.sent).into_values();
        std::mem::take(&mut self.parked)
            .into_values()
            .chain(sent)
            .collect()
    }

    /// `tid`'s image, at `path`, went to another host: kept until it runs
    /// there. An image kept earlier for it, if any (to be removed).
    pub fn keep_sent(&mut self, tid: Tid, start: StartVp, path: PathBuf) -> Option<Parked> {
        self.sent.insert(tid, Parked { start, path })
    }

    /// `tid` runs elsewhere now (or ended): its kept image, to be removed.
    pub fn arrived(&mut self, tid: Tid) -> Option<Parked> {
        self.sent.remove(&tid)
    }

    /// The other end of `tid`'s move died: what this host still has of it.
    /// A move short of its safe point or writing its image is called off
    /// (one being saved from outside stays here whole: its processes are
    /// still there, stopped); a kept image is taken out of the table.
    pub fn recall(&mut self, tid: Tid) -> Recalled {
        match self.moves.get(&tid) {
            Some(Move::Asked { .. } | Move::Streaming { outside: true, .. }) => {
                self.moves.insert(tid, Move::CalledOff);
                return Recalled::StaysHere;
            }
            Some(Move::Streaming { .. }) => {
                self.moves.insert(tid, Move::CalledOff);
                return Recalled::Writing;
            }
            _ => {}
        }
        match self.sent.remove(&tid) {
            Some(kept) => Recalled::Kept(kept),
            None => Recalled::Nothing,
        }
    }

    /// Should `tid` be asked to park now? Once, then again every
    /// `PARK_RETRY` while it is still here (a try that missed its safe
    /// point cost the owner at most its deadline).
    pub fn try_park(&mut self, tid: Tid, now: Instant) -> bool {
        if self.let_run(tid) {
            return false;
        }
        match self.park_tried.get(&tid) {
            Some(&at) if now.saturating_duration_since(at) < PARK_RETRY => false,
            _ => {
                self.park_tried.insert(tid, now);
                true
            }
        }
    }

    /// The owner left: VPs may be parked again next time.
    pub fn owner_left(&mut self) {
        self.park_tried.clear();
    }

    /// An image begins to arrive for `tid`.
    pub fn arriving(&mut self, tid: Tid, inc: Incoming) {
        if let Some(old) = self.incoming.insert(tid, inc) {
            old.discard();
        }
    }

    /// The image arriving for `tid`.
    pub fn incoming(&mut self, tid: Tid) -> Option<&mut Incoming> {
        self.incoming.get_mut(&tid)
    }

    /// Take the image arriving for `tid` out of the table.
    pub fn take_incoming(&mut self, tid: Tid) -> Option<Incoming> {
        self.incoming.remove(&tid)
    }

    /// Link `link` closed: the images arriving on it never will.
    pub fn cut_off(&mut self, link: Token) -> Vec<Incoming> {
        let cut: Vec<Tid> = self
            .incoming
            .iter()
            .filter(|(_, inc)| inc.from() == link)
            .map(|(&t, _)| t)
            .collect();
        cut.into_iter()
            .filter_map(|t| self.incoming.remove(&t))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn start(tid: Tid) -> StartVp {
        StartVp {
            tid,
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
    fn a_move_goes_from_asked_to_left_and_its_end_is_no_exit() {
        let mut t = MoveTable::default();
        let now = Instant::now();
        t.ask(1, Dest::Host("h2".into()), start(1), now);
        assert!(t.under_way(1));
        assert_eq!(t.target(1).map(|(h, _)| h), Some("h2"));
        assert!(matches!(t.written(1), Written::Send { streamed: None, .. }));
        t.left(1);
        assert!(!t.under_way(1));
        assert!(t.ended(1).is_some_and(|m| m.left()));
        assert!(t.get(1).is_none());
    }

    #[test]
    fn a_move_not_at_a_safe_point_in_time_is_called_off_but_one_writing_is_not() {
        let mut t = MoveTable::default();
        let now = Instant::now();
        t.ask(1, Dest::Host("h2".into()), start(1), now);
        t.ask(2, Dest::Disk, start(2), now);
        t.ask(3, Dest::Host("h2".into()), start(3), now);
        let file = tempfile::tempfile().expect("temp file");
        t.stream(3, Outgoing::new(file, PathBuf::from("x"), Token(9)));
        // Saved from outside: no safe point to wait for.
        t.ask_outside(4, Dest::Host("h2".into()), start(4), now);
        let limit = Duration::from_secs(1);
        assert!(t.call_off_overdue(now, limit).is_empty());
        assert_eq!(t.next_overdue(limit), Some(now + limit));
        let mut late: Vec<(Tid, Dest)> = t
            .call_off_overdue(now + Duration::from_secs(2), limit)
            .into_iter()
            .map(|(tid, dest, start)| {
                assert_eq!(start.tid, tid, "each with how it starts");
                (tid, dest)
            })
            .collect();
        late.sort_by_key(|(tid, _)| *tid);
        assert_eq!(late, vec![(1, Dest::Host("h2".into())), (2, Dest::Disk)]);
        assert!(t.saving_outside(4) && t.let_run(4) && !t.saving_outside(1));
        assert_eq!(t.next_overdue(limit), None);
        assert!(matches!(t.get(1), Some(Move::CalledOff)));
        assert!(matches!(t.written(1), Written::Unasked));
        assert!(
            t.under_way(3),
            "one writing its image is past its safe point"
        );
        // Written late, it restarts here once its process ended.
        t.restart_here(1, start(1), PathBuf::from("/s/t1.restore"));
        assert!(
            matches!(t.ended(1), Some(Move::RestartHere { path, .. }) if path == Path::new("/s/t1.restore"))
        );
    }

    #[test]
    fn parking_is_asked_once_per_owner_visit_and_the_image_is_kept_until_placed() {
        let mut t = MoveTable::default();
        let now = Instant::now();
        assert!(t.try_park(1, now));
        assert!(!t.try_park(1, now + Duration::from_secs(1)), "asked once");
        assert!(t.try_park(1, now + PARK_RETRY), "asked again later");
        t.ask(1, Dest::Disk, start(1), Instant::now());
        assert!(matches!(t.written(1), Written::Park { .. }));
        t.left(1);
        t.park(1, start(1), PathBuf::from("/s/t1.parked"));
        assert!(t.ended(1).is_some_and(|m| m.left()));
        assert_eq!(
            t.unpark(1).map(|p| p.path),
            Some(PathBuf::from("/s/t1.parked"))
        );
        assert!(t.unpark(1).is_none());
        t.owner_left();
        assert!(t.try_park(1, now + PARK_RETRY), "the owner came back again");
    }

    #[test]
    fn a_recalled_move_stays_restarts_from_its_image_or_is_missing() {
        let mut t = MoveTable::default();
        let now = Instant::now();
        t.ask(1, Dest::Host("h2".into()), start(1), now);
        assert!(matches!(t.recall(1), Recalled::StaysHere));
        assert!(matches!(t.get(1), Some(Move::CalledOff)));
        assert!(
            matches!(t.written(1), Written::Unasked),
            "a late image restarts it here"
        );
        t.ask(2, Dest::Host("h2".into()), start(2), now);
        let file = tempfile::tempfile().expect("temp file");
        t.stream(2, Outgoing::new(file, PathBuf::from("x"), Token(3)));
        assert!(matches!(t.recall(2), Recalled::Writing));
        assert!(matches!(t.written(2), Written::Unasked));
        // Sent: kept until it runs there, or recalled.
        t.ask(3, Dest::Host("h2".into()), start(3), now);
        t.left(3);
        assert!(t
            .keep_sent(3, start(3), PathBuf::from("/s/t3.sent"))
            .is_none());
        assert!(matches!(t.recall(3), Recalled::Kept(p) if p.path == Path::new("/s/t3.sent")));
        assert!(matches!(t.recall(3), Recalled::Nothing), "taken once");
        t.keep_sent(4, start(4), PathBuf::from("/s/t4.sent"));
        assert!(t.arrived(4).is_some());
        assert!(matches!(t.recall(4), Recalled::Nothing));
        t.keep_sent(5, start(5), PathBuf::from("/s/t5.sent"));
        assert_eq!(t.unpark_all().len(), 1, "a fenced host drops what it kept");
    }

    #[test]
    fn a_streamed_image_says_how_much_went_and_on_which_link() {
        let mut t = MoveTable::default();
        t.ask(5, Dest::Host("h1".into()), start(5), Instant::now());
        let file = tempfile::tempfile().expect("temp file");
        t.stream(5, Outgoing::new(file, PathBuf::from("t5.tmp.1"), Token(42)));
        if let Some(o) = t.outgoing(5) {
            o.sent = 8 << 20;
        }
        assert!(matches!(
            t.written(5),
            Written::Send { streamed: Some((Token(42), n)), .. } if n == 8 << 20
        ));
        // A failed link: the image goes whole once written.
        t.stop_streaming(5);
        assert!(matches!(t.written(5), Written::Send { streamed: None, .. }));
    }

    #[test]
    fn an_image_saved_from_outside_streams_and_its_vp_stays_whole_when_recalled() {
        let mut t = MoveTable::default();
        t.ask_outside(6, Dest::Host("h1".into()), start(6), Instant::now());
        let file = tempfile::tempfile().expect("temp file");
        t.stream(
            6,
            Outgoing::new(file, PathBuf::from("t6.dumping"), Token(4)),
        );
        assert!(t.outgoing(6).is_some() && t.saving_outside(6));
        assert_eq!(t.target(6).map(|(h, _)| h), Some("h1"));
        t.stop_streaming(6);
        assert!(t.saving_outside(6), "still saved from outside");
        let file = tempfile::tempfile().expect("temp file");
        t.stream(
            6,
            Outgoing::new(file, PathBuf::from("t6.dumping"), Token(4)),
        );
        // Its target died: its processes, stopped here, are the VP.
        assert!(matches!(t.recall(6), Recalled::StaysHere));
        assert!(matches!(t.written(6), Written::Unasked));
    }
}
