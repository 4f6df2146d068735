//! A VP as the master knows it: where it is in its life (`VpState`, each
//! state carrying what belongs to it), the one way it goes from one state
//! to another (`VpRec::go`), what it may do in each (exhaustive
//! predicates), and the form it is replicated in.
//!
//! What does not live here: deciding what happens to a VP (placing, moving,
//! ending it: the master's other files), and telling hosts and users about
//! it (the `Out`s those return).
//!
//! The replicated form is the flat record of earlier releases, byte for
//! byte (postcard is positional): a master of this release and one of the
//! last read each other's state, so no format or protocol version changes.
//! The old bytes are pinned in the tests below.

use std::borrow::Cow;

use libmig::msg::{ExitInfo, Loc, SpawnSpec, Tid};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Out;

/// Where a VP is in its life, as the master sees it, with what belongs to
/// that state. Changed only by `VpRec::go`.
#[derive(Debug, Clone)]
pub(super) enum VpState {
    /// Not placed: waiting for a processor.
    Waiting,
    /// `host` was told to start it (from the beginning, or from where it
    /// was parked).
    Starting {
        /// Where it starts.
        host: String,
        /// A hold on it, a move still to make.
        plan: Plan,
    },
    /// Its process runs on `host` (or is stopped by the host's owner or
    /// slicer).
    Running {
        /// Where.
        host: String,
        /// Its process, as the host said (none: it came back from a move
        /// of its parked image that failed).
        pid: Option<u32>,
        /// A hold on it, a move still to make.
        plan: Plan,
    },
    /// Moving out of `from` (its image written there) to be started again
    /// on `to` (recalled: `to` is `from`, which runs it again from what it
    /// still has).
    Moving {
        /// The host it is on.
        from: String,
        /// The host it goes to.
        to: String,
        /// Its process on `from`, as that host said, while it lasts.
        pid: Option<u32>,
        /// A hold on it, a move to make after this one.
        plan: Plan,
    },
    /// Being started again on `host` from its job's checkpoint.
    Restoring {
        /// Where.
        host: String,
    },
    /// Its image parked on `host`'s disk while the owner has it; no process.
    Parked {
        /// Where its image is.
        host: String,
        /// A hold on it, a move still to make.
        plan: Plan,
    },
    /// Ended for good.
    Exited {
        /// Where it last was (none: it never started).
        host: Option<String>,
        /// Its last process, as its host said.
        pid: Option<u32>,
        /// How it ended.
        exit: ExitInfo,
    },
}

/// What the master means to do with a VP placed on a host, beside its
/// state.
#[derive(Debug, Clone, Default)]
pub(super) struct Plan {
    /// Its host holds it stopped (its job was suspended) until the
    /// scheduler places it again.
    pub(super) held: bool,
    /// Where the scheduler wants it, when a move there is still to be made:
    /// after the move under way, or after one that failed.
    pub(super) wants: Option<Wanted>,
}

/// A move the scheduler asked for that has not happened yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Wanted {
    pub(super) to: String,
    /// Attempts that failed so far.
    pub(super) failures: u32,
    /// When to try again (not replicated: a new master tries at once).
    #[serde(skip)]
    pub(super) retry_at: Option<std::time::Instant>,
}

/// Whether the scheduler may move a VP: a property of its program, kept
/// whatever its state.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mobility {
    /// Its program has not said it can be moved: the scheduler keeps it
    /// where it is.
    Pinned,
    /// It cannot be moved, but the scheduler was told it may be started
    /// again elsewhere (vacated: see `Master::release_vacated`).
    Released,
    /// Its program said it can be moved (see `VpMsg::Movable`).
    Movable,
}

impl VpState {
    /// May it be moved now by hand (`mig migrate`) or be part of a job
    /// checkpoint? Only with a process that runs where the master thinks
    /// it does.
    pub(super) fn can_migrate(&self) -> bool {
        match self {
            VpState::Running { .. } => true,
            VpState::Waiting
            | VpState::Starting { .. }
            | VpState::Moving { .. }
            | VpState::Restoring { .. }
            | VpState::Parked { .. }
            | VpState::Exited { .. } => false,
        }
    }

    /// May a move the scheduler wants begin now (a parked VP ships its
    /// image from disk)?
    pub(super) fn can_begin_move(&self) -> bool {
        match self {
            VpState::Running { .. } | VpState::Parked { .. } => true,
            VpState::Waiting
            | VpState::Starting { .. }
            | VpState::Moving { .. }
            | VpState::Restoring { .. }
            | VpState::Exited { .. } => false,
        }
    }

    /// Does it hold a processor of its host (for `mig hosts`)?
    pub(super) fn on_a_processor(&self) -> bool {
        match self {
            VpState::Running { .. } | VpState::Starting { .. } => true,
            VpState::Waiting
            | VpState::Moving { .. }
            | VpState::Restoring { .. }
            | VpState::Parked { .. }
            | VpState::Exited { .. } => false,
        }
    }

    /// Has it ended for good?
    pub(super) fn ended(&self) -> bool {
        match self {
            VpState::Exited { .. } => true,
            VpState::Waiting
            | VpState::Starting { .. }
            | VpState::Running { .. }
            | VpState::Moving { .. }
            | VpState::Restoring { .. }
            | VpState::Parked { .. } => false,
        }
    }

    /// The host the master records it on: where it starts, runs, is
    /// restored or parked, the source of its move, where it ended.
    pub(super) fn host(&self) -> Option<&str> {
        match self {
            VpState::Waiting => None,
            VpState::Starting { host, .. }
            | VpState::Running { host, .. }
            | VpState::Restoring { host }
            | VpState::Parked { host, .. } => Some(host),
            VpState::Moving { from, .. } => Some(from),
            VpState::Exited { host, .. } => host.as_deref(),
        }
    }

    /// The host its move under way takes it to.
    pub(super) fn moving_to(&self) -> Option<&str> {
        match self {
            VpState::Moving { to, .. } => Some(to),
            VpState::Waiting
            | VpState::Starting { .. }
            | VpState::Running { .. }
            | VpState::Restoring { .. }
            | VpState::Parked { .. }
            | VpState::Exited { .. } => None,
        }
    }

    /// Is `host` where it is, or where its move takes it?
    pub(super) fn at_or_bound_for(&self, host: &str) -> bool {
        self.host() == Some(host) || self.moving_to() == Some(host)
    }

    /// Its process, as its host said.
    pub(super) fn pid(&self) -> Option<u32> {
        match self {
            VpState::Running { pid, .. }
            | VpState::Moving { pid, .. }
            | VpState::Exited { pid, .. } => *pid,
            VpState::Waiting
            | VpState::Starting { .. }
            | VpState::Restoring { .. }
            | VpState::Parked { .. } => None,
        }
    }

    /// How it ended, if it has.
    pub(super) fn exit(&self) -> Option<&ExitInfo> {
        match self {
            VpState::Exited { exit, .. } => Some(exit),
            VpState::Waiting
            | VpState::Starting { .. }
            | VpState::Running { .. }
            | VpState::Moving { .. }
            | VpState::Restoring { .. }
            | VpState::Parked { .. } => None,
        }
    }

    /// What the master means to do with it, if it is placed on a host.
    pub(super) fn plan(&self) -> Option<&Plan> {
        match self {
            VpState::Starting { plan, .. }
            | VpState::Running { plan, .. }
            | VpState::Moving { plan, .. }
            | VpState::Parked { plan, .. } => Some(plan),
            VpState::Waiting | VpState::Restoring { .. } | VpState::Exited { .. } => None,
        }
    }

    /// Does its host hold it stopped (its job suspended)?
    pub(super) fn held(&self) -> bool {
        self.plan().is_some_and(|p| p.held)
    }

    /// The move the scheduler still wants of it, if one.
    pub(super) fn wants(&self) -> Option<&Wanted> {
        self.plan().and_then(|p| p.wants.as_ref())
    }

    /// Where hosts send its messages (`ToHost::Directory`).
    pub(super) fn loc(&self) -> Loc {
        match (self.ended(), self.host()) {
            (true, _) => Loc::Gone,
            (false, Some(h)) => Loc::At(h.to_string()),
            (false, None) => Loc::Waiting,
        }
    }

    /// The same state, recorded on `host` instead (a VP lost with its host,
    /// to be restored on another); none for a VP that has no host to change.
    pub(super) fn on(&self, host: &str) -> Option<VpState> {
        let host = host.to_string();
        let mut next = self.clone();
        match &mut next {
            VpState::Waiting => return None,
            VpState::Starting { host: h, .. }
            | VpState::Running { host: h, .. }
            | VpState::Restoring { host: h }
            | VpState::Parked { host: h, .. }
            | VpState::Moving { from: h, .. } => *h = host,
            VpState::Exited { host: h, .. } => *h = Some(host),
        }
        Some(next)
    }

    /// The state it ends in, as `exit` says: where it was, and its last
    /// process, kept.
    pub(super) fn ended_as(&self, exit: ExitInfo) -> VpState {
        VpState::Exited {
            host: self.host().map(String::from),
            pid: self.pid(),
            exit,
        }
    }

    /// Its name, for the log.
    fn name(&self) -> &'static str {
        match self {
            VpState::Waiting => "waiting",
            VpState::Starting { .. } => "starting",
            VpState::Running { .. } => "running",
            VpState::Moving { .. } => "moving",
            VpState::Restoring { .. } => "restoring",
            VpState::Parked { .. } => "parked",
            VpState::Exited { .. } => "exited",
        }
    }

    /// Can a VP in state `from` go to this one? An ended VP comes back only
    /// restored from its job's checkpoint; a process is reported only for a
    /// VP placed on a host; only a running VP is parked; a VP not placed,
    /// or being restored, does not begin a move.
    fn may_follow(&self, from: &VpState) -> bool {
        use VpState::*;
        match self {
            Waiting | Starting { .. } | Exited { .. } => match from {
                Waiting
                | Starting { .. }
                | Running { .. }
                | Moving { .. }
                | Restoring { .. }
                | Parked { .. } => true,
                Exited { .. } => false,
            },
            Restoring { .. } => match from {
                Waiting
                | Starting { .. }
                | Running { .. }
                | Moving { .. }
                | Restoring { .. }
                | Parked { .. }
                | Exited { .. } => true,
            },
            Running { .. } => match from {
                Starting { .. }
                | Running { .. }
                | Moving { .. }
                | Restoring { .. }
                | Parked { .. } => true,
                Waiting | Exited { .. } => false,
            },
            Moving { .. } => match from {
                Starting { .. } | Running { .. } | Moving { .. } | Parked { .. } => true,
                Waiting | Restoring { .. } | Exited { .. } => false,
            },
            Parked { .. } => match from {
                Running { .. } | Parked { .. } => true,
                Waiting | Starting { .. } | Moving { .. } | Restoring { .. } | Exited { .. } => {
                    false
                }
            },
        }
    }
}

/// A VP as the master knows it.
#[derive(Debug, Clone)]
pub(super) struct VpRec {
    pub(super) tid: Tid,
    pub(super) program: String,
    pub(super) args: Vec<String>,
    pub(super) parent: Option<Tid>,
    /// Where it is in its life (changed by `go` alone).
    state: VpState,
    /// May the scheduler move it?
    pub(super) mobility: Mobility,
    /// When its process first started (ms since the Unix epoch).
    pub(super) started_ms: Option<u64>,
    /// CPU time (ms) its process has used, as its host last said (final
    /// once it has ended).
    pub(super) cpu_ms: Option<u64>,
    /// Why its last move failed, if it did (`mig ps`, `mig migrate`).
    pub(super) move_failed: Option<String>,
}

impl VpRec {
    /// A new VP `tid` of `spec`'s program, spawned by `parent`, waiting for
    /// a processor.
    pub(super) fn waiting(tid: Tid, spec: &SpawnSpec, parent: Option<Tid>) -> VpRec {
        VpRec {
            tid,
            program: spec.program.clone(),
            args: spec.args.clone(),
            parent,
            state: VpState::Waiting,
            mobility: Mobility::Pinned,
            started_ms: None,
            cpu_ms: None,
            move_failed: None,
        }
    }

    /// Where it is in its life.
    pub(super) fn state(&self) -> &VpState {
        &self.state
    }

    /// The host the master records it on (see `VpState::host`).
    pub(super) fn host(&self) -> Option<&str> {
        self.state.host()
    }

    /// What the master means to do with it, if it is placed on a host (a
    /// hold, a move to make: they change within its state).
    pub(super) fn plan_mut(&mut self) -> Option<&mut Plan> {
        match &mut self.state {
            VpState::Starting { plan, .. }
            | VpState::Running { plan, .. }
            | VpState::Moving { plan, .. }
            | VpState::Parked { plan, .. } => Some(plan),
            VpState::Waiting | VpState::Restoring { .. } | VpState::Exited { .. } => None,
        }
    }

    /// The move the scheduler still wants of it, if one, to count a
    /// failure or set when to try again.
    pub(super) fn wants_mut(&mut self) -> Option<&mut Wanted> {
        self.plan_mut().and_then(|p| p.wants.as_mut())
    }

    /// Has its program said it can be moved?
    pub(super) fn movable(&self) -> bool {
        match self.mobility {
            Mobility::Movable => true,
            Mobility::Pinned | Mobility::Released => false,
        }
    }

    /// The one way its state changes: to `next`, if a VP where it is can go
    /// there (see `VpState::may_follow`); else it stays, and the refusal
    /// says why (for the log: a report that came too late, say).
    pub(super) fn go(&mut self, next: VpState) -> Result<(), Refused> {
        if !next.may_follow(&self.state) {
            return Err(Refused {
                tid: self.tid,
                from: self.state.name(),
                to: next.name(),
            });
        }
        self.state = next;
        Ok(())
    }
}

/// A change of state `VpRec::go` refused: the VP stays as it was.
#[derive(Debug, thiserror::Error)]
#[error("VP t{tid:x} cannot go from {from} to {to}: it stays {from}")]
pub(super) struct Refused {
    tid: Tid,
    from: &'static str,
    to: &'static str,
}

impl From<Refused> for Out {
    fn from(r: Refused) -> Out {
        Out::Log(r.to_string())
    }
}

/// How a VP record is replicated: the flat record of earlier releases,
/// field for field, borrowed to write and owned when read.
#[derive(Serialize, Deserialize)]
struct Flat<'a> {
    tid: Tid,
    program: Cow<'a, str>,
    args: Cow<'a, [String]>,
    parent: Option<Tid>,
    host: Option<Cow<'a, str>>,
    pid: Option<u32>,
    state: FlatState<'a>,
    exit: Option<Cow<'a, ExitInfo>>,
    wants: Option<Cow<'a, Wanted>>,
    movable: bool,
    released: bool,
    started_ms: Option<u64>,
    held: bool,
    cpu_ms: Option<u64>,
    move_failed: Option<Cow<'a, str>>,
}

/// The earlier state without its data (`Moving`: the target host).
#[derive(Serialize, Deserialize)]
enum FlatState<'a> {
    Waiting,
    Starting,
    Running,
    Moving(Cow<'a, str>),
    Restoring,
    Parked,
    Exited,
}

impl<'a> From<&'a VpRec> for Flat<'a> {
    fn from(v: &'a VpRec) -> Flat<'a> {
        let state = match &v.state {
            VpState::Waiting => FlatState::Waiting,
            VpState::Starting { .. } => FlatState::Starting,
            VpState::Running { .. } => FlatState::Running,
            VpState::Moving { to, .. } => FlatState::Moving(Cow::Borrowed(to)),
            VpState::Restoring { .. } => FlatState::Restoring,
            VpState::Parked { .. } => FlatState::Parked,
            VpState::Exited { .. } => FlatState::Exited,
        };
        let plan = v.state.plan();
        Flat {
            tid: v.tid,
            program: Cow::Borrowed(&v.program),
            args: Cow::Borrowed(&v.args),
            parent: v.parent,
            host: v.state.host().map(Cow::Borrowed),
            pid: v.state.pid(),
            state,
            exit: v.state.exit().map(Cow::Borrowed),
            wants: plan.and_then(|p| p.wants.as_ref()).map(Cow::Borrowed),
            movable: v.movable(),
            released: match v.mobility {
                Mobility::Released => true,
                Mobility::Pinned | Mobility::Movable => false,
            },
            started_ms: v.started_ms,
            held: plan.is_some_and(|p| p.held),
            cpu_ms: v.cpu_ms,
            move_failed: v.move_failed.as_deref().map(Cow::Borrowed),
        }
    }
}

impl From<Flat<'_>> for VpRec {
    /// What the flat record says, in the state it names. What does not
    /// belong to that state is dropped (an earlier master kept a hold or a
    /// wanted move on a VP that had ended, say); a state that needs a host
    /// and has none is taken for waiting.
    fn from(f: Flat<'_>) -> VpRec {
        let plan = Plan {
            held: f.held,
            wants: f.wants.map(Cow::into_owned),
        };
        let host = f.host.map(Cow::into_owned);
        let state = match (f.state, host) {
            (FlatState::Exited, host) => VpState::Exited {
                host,
                pid: f.pid,
                exit: f.exit.map(Cow::into_owned).unwrap_or(ExitInfo {
                    code: None,
                    signal: None,
                    error: None,
                    cpu_ms: None,
                }),
            },
            (FlatState::Waiting, _)
            | (
                FlatState::Starting
                | FlatState::Running
                | FlatState::Moving(_)
                | FlatState::Restoring
                | FlatState::Parked,
                None,
            ) => VpState::Waiting,
            (FlatState::Starting, Some(host)) => VpState::Starting { host, plan },
            (FlatState::Running, Some(host)) => VpState::Running {
                host,
                pid: f.pid,
                plan,
            },
            (FlatState::Moving(to), Some(from)) => VpState::Moving {
                from,
                to: to.into_owned(),
                pid: f.pid,
                plan,
            },
            (FlatState::Restoring, Some(host)) => VpState::Restoring { host },
            (FlatState::Parked, Some(host)) => VpState::Parked { host, plan },
        };
        VpRec {
            tid: f.tid,
            program: f.program.into_owned(),
            args: f.args.into_owned(),
            parent: f.parent,
            state,
            mobility: match (f.movable, f.released) {
                (true, _) => Mobility::Movable,
                (false, true) => Mobility::Released,
                (false, false) => Mobility::Pinned,
            },
            started_ms: f.started_ms,
            cpu_ms: f.cpu_ms,
            move_failed: f.move_failed.map(Cow::into_owned),
        }
    }
}

impl Serialize for VpRec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Flat::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for VpRec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<VpRec, D::Error> {
        Flat::deserialize(d).map(VpRec::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records as the flat `VpRec` of the release before this one wrote
    /// them (postcard), one per state and flag that mattered then.
    const OLD: [(&str, &str); 11] = [
        ("waiting", "818010092f62696e2f7472756501022d78000000000000000000000000"),
        ("starting", "818010092f62696e2f7472756501022d78000102683100010000000000000000"),
        ("running", "818010092f62696e2f7472756501022d78000102683101d20902000001000180d095ffbc310001fa0100"),
        ("running_held_wanting", "818010092f62696e2f7472756501022d78000102683101630200010268320200000001000117683220636f756c64206e6f742074616b6520697420696e"),
        ("moving", "818010092f62696e2f7472756501022d780001026831014d03026832000102683300010000000000"),
        ("recalled", "818010092f62696e2f7472756501022d780001026831014d030268310000010000000000"),
        ("restoring", "818010092f62696e2f7472756501022d78000102683200040000000000000000"),
        ("parked", "818010092f62696e2f7472756501022d78000102683100050000010000010000"),
        ("exited", "818010092f62696e2f7472756501022d780001026831000601010600000132000000010500013200"),
        ("never_started", "818010092f62696e2f7472756501022d780000000601000112000000000000000000"),
        ("released", "818010092f62696e2f7472756501022d7800010268310105020000000100000000"),
    ];

    fn bytes(hex: &str) -> Vec<u8> {
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn describe(v: &VpRec) -> String {
        let plan = |p: &Plan| {
            let held = if p.held { " held" } else { "" };
            let wants = p.wants.as_ref().map_or(String::new(), |w| {
                format!(" wants {} after {} failures", w.to, w.failures)
            });
            format!("{held}{wants}")
        };
        let state = match v.state() {
            VpState::Waiting => "waiting".to_string(),
            VpState::Starting { host, plan: p } => format!("starting on {host}{}", plan(p)),
            VpState::Running { host, pid, plan: p } => {
                format!("running on {host} as {pid:?}{}", plan(p))
            }
            VpState::Moving {
                from,
                to,
                pid,
                plan: p,
            } => format!("moving {from} to {to} as {pid:?}{}", plan(p)),
            VpState::Restoring { host } => format!("restoring on {host}"),
            VpState::Parked { host, plan: p } => format!("parked on {host}{}", plan(p)),
            VpState::Exited { host, pid, exit } => {
                format!("exited on {host:?} as {pid:?}: {exit}")
            }
        };
        format!(
            "{state}; {:?}, started {:?}, cpu {:?}, failed {:?}",
            v.mobility, v.started_ms, v.cpu_ms, v.move_failed
        )
    }

    #[test]
    fn records_of_the_last_release_read_as_the_state_they_name_and_write_the_same_bytes() {
        let want = [
            "waiting; Pinned, started None, cpu None, failed None",
            "starting on h1; Pinned, started None, cpu None, failed None",
            "running on h1 as Some(1234); Movable, started Some(1700000000000), cpu Some(250), \
             failed None",
            "running on h1 as Some(99) held wants h2 after 2 failures; Pinned, started None, \
             cpu None, failed Some(\"h2 could not take it in\")",
            "moving h1 to h2 as Some(77) wants h3 after 0 failures; Movable, started None, \
             cpu None, failed None",
            "moving h1 to h1 as Some(77); Movable, started None, cpu None, failed None",
            "restoring on h2; Pinned, started None, cpu None, failed None",
            "parked on h1 held; Movable, started None, cpu None, failed None",
            "exited on Some(\"h1\") as None: exit 3; Pinned, started Some(5), cpu Some(50), \
             failed None",
            "exited on None as None: killed by signal 9; Pinned, started None, cpu None, \
             failed None",
            "running on h1 as Some(5); Released, started None, cpu None, failed None",
        ];
        for ((name, hex), want) in OLD.iter().zip(want) {
            let old = bytes(hex);
            let v: VpRec = postcard::from_bytes(&old).expect("old bytes");
            assert_eq!(describe(&v), want, "{name}");
            assert_eq!(postcard::to_allocvec(&v).expect("bytes"), old, "{name}");
        }
    }

    /// An old record whose flags disagree with its state.
    fn flat(state: FlatState<'static>, host: Option<&'static str>) -> Vec<u8> {
        let f = Flat {
            tid: 0x40001,
            program: "/bin/true".into(),
            args: Cow::Owned(Vec::new()),
            parent: None,
            host: host.map(Cow::Borrowed),
            pid: Some(7),
            state,
            exit: None,
            wants: Some(Cow::Owned(Wanted {
                to: "h9".into(),
                failures: 1,
                retry_at: None,
            })),
            movable: true,
            released: true,
            started_ms: None,
            held: true,
            cpu_ms: None,
            move_failed: None,
        };
        postcard::to_allocvec(&f).expect("bytes")
    }

    #[test]
    fn what_an_old_record_kept_beside_its_state_is_dropped_where_it_does_not_belong() {
        let read = |b: Vec<u8>| describe(&postcard::from_bytes(&b).expect("a record"));
        // A hold and a wanted move on a VP not placed, or ended.
        assert_eq!(
            read(flat(FlatState::Waiting, None)),
            "waiting; Movable, started None, cpu None, failed None"
        );
        assert_eq!(
            read(flat(FlatState::Exited, Some("h1"))),
            "exited on Some(\"h1\") as Some(7): ended; Movable, started None, cpu None, failed None"
        );
        // Running nowhere is waiting.
        assert_eq!(
            read(flat(FlatState::Running, None)),
            "waiting; Movable, started None, cpu None, failed None"
        );
        // And it is kept where it belongs.
        assert_eq!(
            read(flat(FlatState::Parked, Some("h1"))),
            "parked on h1 held wants h9 after 1 failures; Movable, started None, cpu None, \
             failed None"
        );
    }

    /// One VP in each state, in `VpState`'s order.
    fn one_of_each() -> Vec<VpState> {
        vec![
            VpState::Waiting,
            VpState::Starting {
                host: "h1".into(),
                plan: Plan::default(),
            },
            VpState::Running {
                host: "h1".into(),
                pid: Some(1),
                plan: Plan::default(),
            },
            VpState::Moving {
                from: "h1".into(),
                to: "h2".into(),
                pid: Some(1),
                plan: Plan::default(),
            },
            VpState::Restoring { host: "h1".into() },
            VpState::Parked {
                host: "h1".into(),
                plan: Plan::default(),
            },
            VpState::Exited {
                host: Some("h1".into()),
                pid: None,
                exit: ExitInfo::ended_by_mig(0, "test".into()),
            },
        ]
    }

    #[test]
    fn a_vp_goes_only_where_it_can_and_a_refusal_leaves_it_as_it_was() {
        // From each state (rows) to each (columns), in `VpState`'s order:
        // waiting, starting, running, moving, restoring, parked, exited.
        let table = [
            "yy..y.y", // waiting: placed, restored, or killed before it ran
            "yyyyy.y", // starting
            "yyyyyyy", // running
            "yyyyy.y", // moving
            "yyy.y.y", // restoring
            "yyyyyyy", // parked
            "....y..", // exited: comes back only restored from a checkpoint
        ];
        for (from, row) in one_of_each().into_iter().zip(table) {
            for (to, may) in one_of_each().into_iter().zip(row.chars()) {
                let mut v = VpRec::waiting(0x40001, &crate::master::tests::spec(1), None);
                v.state = from.clone();
                let was = describe(&v);
                let said = format!("{} -> {}", from.name(), to.name());
                match (v.go(to.clone()), may) {
                    (Ok(()), 'y') => assert_eq!(v.state().name(), to.name(), "{said}"),
                    (Err(e), '.') => {
                        assert_eq!(describe(&v), was, "{said}");
                        let why = format!(
                            "VP t40001 cannot go from {0} to {1}: it stays {0}",
                            from.name(),
                            to.name()
                        );
                        assert_eq!(Out::from(e), Out::Log(why), "{said}");
                    }
                    (got, _) => panic!("{said}: {got:?}"),
                }
            }
        }
    }
}
