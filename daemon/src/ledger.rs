//! What a local VP has said and been given on its socket, as its daemon
//! sees the frames go by: the last sequence number it sent to each peer,
//! and up to which number every message from each peer has been handed to
//! it (queued on its socket), and the calls to the master it made that are
//! not answered yet. For a VP that libmig does not checkpoint
//! itself (one saved from outside) only its memory knows these otherwise,
//! and a job checkpoint needs them: the first is what it says it sent
//! (`SnapReport::Paused`), the second what its image must hold before it
//! is taken (`SnapOrder::Now`'s `expect`). The record goes with the VP
//! when it moves (in its image, `mig_ckpt::SocketState::notes`).
//!
//! What lives here: the record, its answers and its encoding. Pure: what
//! does not is where it is kept (the server's `host::LocalVp`) and when it
//! is written (`server/vp.rs` on a VP's frames, `server/routing.rs` on
//! deliveries).

use std::collections::{BTreeMap, BTreeSet};

use libmig::msg::{Envelope, Tid};
use serde::{Deserialize, Serialize};

/// A VP's messages, numbered per peer, as its daemon saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    /// It ever wrote a frame to its daemon.
    pub spoke: bool,
    /// Per receiver, the highest number it sent through its daemon.
    sent: BTreeMap<Tid, u64>,
    /// Per sender, what was handed to it.
    given: BTreeMap<Tid, Given>,
    /// It said it moves itself at its safe points (`VpMsg::Movable`): the
    /// daemon it is restored under asks it so again.
    pub movable: bool,
    /// The calls it made to the master (`VpMsg::Call` ids) still waiting
    /// for their answers: where it is restored, those answers are let
    /// through to it (`returns`).
    pub calls: BTreeSet<u64>,
}

/// A record as images written before `movable` was kept have it.
#[derive(Deserialize)]
struct Before {
    spoke: bool,
    sent: BTreeMap<Tid, u64>,
    given: BTreeMap<Tid, Given>,
}

/// A record as images written before `calls` was kept have it.
#[derive(Deserialize)]
struct BeforeCalls {
    spoke: bool,
    sent: BTreeMap<Tid, u64>,
    given: BTreeMap<Tid, Given>,
    movable: bool,
}

/// The messages of one sender handed to a VP: all up to `upto`, and
/// those numbered above it that came early.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Given {
    upto: u64,
    early: BTreeSet<u64>,
}

impl Ledger {
    /// The VP sent `env` through its daemon.
    pub fn sent(&mut self, env: &Envelope) {
        if env.seq == 0 {
            return;
        }
        let n = self.sent.entry(env.to).or_default();
        *n = (*n).max(env.seq);
    }

    /// `env` was handed to the VP (queued on its socket). Notices (number
    /// 0) have no order and count for nothing.
    pub fn given(&mut self, env: &Envelope) {
        if env.seq == 0 {
            return;
        }
        let g = self.given.entry(env.from).or_default();
        if env.seq <= g.upto {
            return;
        }
        g.early.insert(env.seq);
        while g.early.remove(&(g.upto + 1)) {
            g.upto += 1;
        }
    }

    /// The highest number it sent to each receiver (as libmig says it in
    /// `SnapStep::Paused`).
    pub fn sent_to(&self) -> Vec<(Tid, u64)> {
        self.sent.iter().map(|(&t, &n)| (t, n)).collect()
    }

    /// Has every message of `expect` (sender, up to number) been handed to
    /// it?
    pub fn has(&self, expect: &[(Tid, u64)]) -> bool {
        expect
            .iter()
            .all(|&(from, n)| n == 0 || self.given.get(&from).is_some_and(|g| g.upto >= n))
    }

    /// Its bytes, for an image.
    pub fn encode(&self) -> Vec<u8> {
        postcard::to_stdvec(self).unwrap_or_default()
    }

    /// From an image's bytes (none: an empty record, as for an image
    /// written before records were kept).
    pub fn decode(bytes: &[u8]) -> Result<Ledger, String> {
        if bytes.is_empty() {
            return Ok(Ledger::default());
        }
        // (Each older form is a prefix of the newer ones: a record of one
        // ends too soon to be read as a newer one.)
        postcard::from_bytes(bytes)
            .or_else(|e| {
                postcard::from_bytes::<BeforeCalls>(bytes)
                    .map(|b| Ledger {
                        spoke: b.spoke,
                        sent: b.sent,
                        given: b.given,
                        movable: b.movable,
                        calls: BTreeSet::new(),
                    })
                    .or_else(|_| {
                        postcard::from_bytes::<Before>(bytes).map(|b| Ledger {
                            spoke: b.spoke,
                            sent: b.sent,
                            given: b.given,
                            movable: false,
                            calls: BTreeSet::new(),
                        })
                    })
                    .map_err(|_| e)
            })
            .map_err(|e| format!("its record of messages: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(from: Tid, to: Tid, seq: u64) -> Envelope {
        Envelope {
            from,
            to,
            tag: 1,
            seq,
            incarnation: 0,
        }
    }

    #[test]
    fn what_was_sent_is_the_highest_number_per_receiver() {
        let mut l = Ledger::default();
        for (to, seq) in [(2, 1), (2, 2), (3, 1), (2, 3), (9, 0)] {
            l.sent(&env(1, to, seq));
        }
        assert_eq!(l.sent_to(), vec![(2, 3), (3, 1)], "a notice counts not");
    }

    #[test]
    fn a_number_counts_as_given_once_all_before_it_are() {
        let mut l = Ledger::default();
        l.given(&env(5, 1, 1));
        l.given(&env(5, 1, 3));
        assert!(l.has(&[(5, 1)]));
        assert!(!l.has(&[(5, 3)]), "2 has not come yet");
        l.given(&env(5, 1, 2));
        assert!(l.has(&[(5, 3)]));
        l.given(&env(5, 1, 2));
        assert!(l.has(&[(5, 3), (7, 0)]) && !l.has(&[(7, 1)]));
        l.given(&env(0, 1, 0));
        assert!(!l.has(&[(0, 1)]), "a notice counts not");
    }

    #[test]
    fn a_record_goes_through_its_bytes_whole() {
        let mut l = Ledger {
            spoke: true,
            ..Ledger::default()
        };
        l.sent(&env(1, 2, 4));
        l.given(&env(2, 1, 1));
        l.given(&env(2, 1, 3));
        l.calls.extend([3, 9]);
        assert_eq!(Ledger::decode(&l.encode()), Ok(l));
        assert_eq!(Ledger::decode(&[]), Ok(Ledger::default()));
        assert!(Ledger::decode(&[0xff; 3]).is_err());
    }

    #[test]
    fn a_record_from_before_movable_was_kept_reads_as_not_movable() {
        let mut l = Ledger {
            spoke: true,
            movable: true,
            ..Ledger::default()
        };
        l.sent(&env(1, 2, 4));
        let before = postcard::to_stdvec(&(true, &l.sent, &l.given)).expect("bytes");
        let read = Ledger::decode(&before).expect("read");
        assert_eq!(
            read,
            Ledger {
                movable: false,
                ..l
            }
        );
    }

    #[test]
    fn a_record_from_before_calls_were_kept_has_none_waiting() {
        let mut l = Ledger {
            spoke: true,
            movable: true,
            ..Ledger::default()
        };
        l.sent(&env(1, 2, 4));
        l.given(&env(2, 1, 1));
        let before = postcard::to_stdvec(&(true, &l.sent, &l.given, true)).expect("bytes");
        assert_eq!(Ledger::decode(&before), Ok(l.clone()));
        l.calls.insert(7);
        assert_eq!(Ledger::decode(&l.encode()).map(|r| r.calls.len()), Ok(1));
    }
}
