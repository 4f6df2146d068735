//! The replicated log that keeps the master's state on a few voters and
//! elects the master among them: raft (tikv's raft-rs, sans-IO) with one
//! kind of entry, the master's whole state as bytes.
//!
//! Why whole states and not commands: a daemon's master state is small
//! (kilobytes: hosts, jobs, the allocation map), the master is then free to
//! change it however it likes between entries, a follower needs only the
//! newest entry to take over, and the log compacts to its last few entries
//! at no cost (a snapshot is the newest state).
//!
//! What lives here: the raft node, its in-memory log, turning what raft
//! says ("ready") into messages to send and states committed; terms, the
//! leader, the voters. What does not: sockets (the server carries the
//! messages over its links between daemons), clocks (`tick` is called every
//! `TICK`), what the bytes mean (`Master::export/import`).
//!
//! A voter's log lives in memory only: a daemon that restarts joins as a new
//! host with a new voter id, never as the voter it was, so a forgotten vote
//! can never be cast twice.

use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeSingle, ConfChangeType, ConfChangeV2, Entry, EntryType, Message, Snapshot,
};
use raft::storage::MemStorage;
use raft::{GetEntriesContext, RaftState, RawNode, StateRole, Storage};
use thiserror::Error;

/// How often `tick` must be called.
pub const TICK: Duration = Duration::from_millis(50);
/// Ticks without a leader's word before a voter stands for election (raft
/// picks a timeout at random between this and twice this): 0.5 to 1 s.
const ELECTION_TICKS: usize = 10;
/// Ticks between a leader's heartbeats.
const HEARTBEAT_TICKS: usize = 2;
/// Entries kept behind the last applied one for followers a little behind
/// (further behind, they get the newest state as a snapshot).
const KEEP: u64 = 8;

/// What went wrong.
#[derive(Debug, Error)]
pub enum ConsensusError {
    /// raft refused (not the leader, a change under way, ...).
    #[error("consensus: {0}")]
    Raft(#[from] raft::Error),
    /// A message that is not a raft message.
    #[error("not a consensus message: {0}")]
    Garbled(#[from] protobuf::ProtobufError),
}

/// What the caller must do.
#[derive(Debug, Clone, PartialEq)]
pub enum Said {
    /// Send `msg` to voter `to`.
    Send {
        /// The voter.
        to: u64,
        /// The bytes (for `Consensus::step` there).
        msg: Vec<u8>,
    },
}

/// The log: raft's in-memory storage, whose snapshot carries the newest
/// state committed.
struct Log {
    mem: MemStorage,
    /// The newest state applied, and its index.
    newest: Option<(u64, Vec<u8>)>,
}

impl Storage for Log {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.mem.initial_state()
    }
    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.mem.entries(low, high, max_size, context)
    }
    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.mem.term(idx)
    }
    fn first_index(&self) -> raft::Result<u64> {
        self.mem.first_index()
    }
    fn last_index(&self) -> raft::Result<u64> {
        self.mem.last_index()
    }
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        // Everything committed is applied as it commits: the newest state
        // is the state at the commit index the snapshot carries.
        let mut s = self.mem.snapshot(request_index, to)?;
        if let Some((_, bytes)) = &self.newest {
            s.data = bytes.clone().into();
        }
        Ok(s)
    }
}

/// One voter.
pub struct Consensus {
    node: RawNode<Log>,
}

impl Consensus {
    /// The first voter of a new virtual machine: alone, so the leader at once.
    pub fn founding(id: u64) -> Result<Consensus, ConsensusError> {
        // The log begins with a snapshot naming this voter, not with an
        // entry: a voter added later then starts from a snapshot, and so
        // learns of this one (an entry-by-entry replay would not).
        let mem = MemStorage::new();
        let mut first = Snapshot::default();
        first.mut_metadata().index = 1;
        first.mut_metadata().term = 1;
        first.mut_metadata().mut_conf_state().voters = vec![id];
        mem.wl().apply_snapshot(first)?;
        let mut c = Consensus::with(id, mem)?;
        c.node.campaign()?;
        c.ready();
        Ok(c)
    }

    /// A voter the leader is adding: empty; it learns the log from the
    /// leader.
    pub fn joining(id: u64) -> Result<Consensus, ConsensusError> {
        Consensus::with(id, MemStorage::new())
    }

    fn with(id: u64, mem: MemStorage) -> Result<Consensus, ConsensusError> {
        let cfg = raft::Config {
            id,
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            // A leader cut off from the others keeps its role but cannot
            // commit, and the master acts only on what is committed: it is
            // frozen, not wrong. Without this check a second's pause of
            // most voters does not cost an election. (A master stopped
            // outright steps down when it resumes: `step_down`.)
            check_quorum: false,
            pre_vote: true,
            max_size_per_msg: 4 << 20,
            max_inflight_msgs: 64,
            ..Default::default()
        };
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let log = Log { mem, newest: None };
        Ok(Consensus {
            node: RawNode::new(&cfg, log, &logger)?,
        })
    }

    /// This voter's id.
    pub fn id(&self) -> u64 {
        self.node.raft.id
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.node.raft.term
    }

    /// The leader this voter knows of (0: none).
    pub fn leader(&self) -> u64 {
        self.node.raft.leader_id
    }

    /// Is this voter the leader, with everything earlier leaders committed
    /// applied (its own first entry of the term is committed)? Only then
    /// does it hold the newest state.
    pub fn leads(&self) -> bool {
        let r = &self.node.raft;
        r.state == StateRole::Leader && r.raft_log.term(r.raft_log.committed).ok() == Some(r.term)
    }

    /// The voters.
    pub fn voters(&self) -> Vec<u64> {
        self.node
            .store()
            .initial_state()
            .map(|s| s.conf_state.voters)
            .unwrap_or_default()
    }

    /// The newest state committed and applied here, and its index.
    pub fn newest(&self) -> Option<(u64, &[u8])> {
        self.node
            .store()
            .newest
            .as_ref()
            .map(|(i, b)| (*i, b.as_slice()))
    }

    /// The index up to which entries are committed (and applied).
    pub fn committed(&self) -> u64 {
        self.node.raft.raft_log.committed
    }

    /// Time passed by one `TICK`.
    pub fn tick(&mut self) -> Vec<Said> {
        self.node.tick();
        self.ready()
    }

    /// A message from another voter.
    pub fn step(&mut self, bytes: &[u8]) -> Result<Vec<Said>, ConsensusError> {
        let m = Message::parse_from_bytes(bytes)?;
        self.node.step(m)?;
        Ok(self.ready())
    }

    /// On the leader: a new state. Its index (it counts once `committed`
    /// reaches it).
    pub fn propose(&mut self, state: Vec<u8>) -> Result<(u64, Vec<Said>), ConsensusError> {
        self.node.propose(Vec::new(), state)?;
        let index = self.node.raft.raft_log.last_index();
        Ok((index, self.ready()))
    }

    /// On the leader: `add` become voters and `remove` vote no more, in one
    /// change (through a joint configuration when there are several, left
    /// on its own once committed).
    pub fn change_voters(
        &mut self,
        add: &[u64],
        remove: &[u64],
    ) -> Result<Vec<Said>, ConsensusError> {
        let single = |id: u64, change_type| ConfChangeSingle {
            change_type,
            node_id: id,
            ..Default::default()
        };
        let mut cc = ConfChangeV2::default();
        cc.set_changes(
            add.iter()
                .map(|&id| single(id, ConfChangeType::AddNode))
                .chain(
                    remove
                        .iter()
                        .map(|&id| single(id, ConfChangeType::RemoveNode)),
                )
                .collect::<Vec<_>>()
                .into(),
        );
        self.node.propose_conf_change(Vec::new(), cc)?;
        Ok(self.ready())
    }

    /// Is a change of the voters under way (one at a time)?
    pub fn changing(&self) -> bool {
        let joint = self
            .node
            .store()
            .initial_state()
            .is_ok_and(|s| !s.conf_state.voters_outgoing.is_empty());
        joint || self.node.raft.pending_conf_index > self.node.raft.raft_log.applied
    }

    /// A voter that was cut off (stopped, say) must not act as leader on
    /// what it knew before: it steps down and, if it is still the one the
    /// others want, is elected again.
    pub fn step_down(&mut self) -> Vec<Said> {
        if self.node.raft.state == StateRole::Leader && self.voters().len() > 1 {
            let term = self.node.raft.term;
            self.node.raft.become_follower(term, raft::INVALID_ID);
        }
        self.ready()
    }

    /// Hand over what raft has ready: messages, entries to keep, committed
    /// entries to apply.
    fn ready(&mut self) -> Vec<Said> {
        let mut said = Vec::new();
        if !self.node.has_ready() {
            return said;
        }
        let mut rd = self.node.ready();
        send(&mut said, rd.take_messages());
        if !rd.snapshot().is_empty() {
            let s = rd.snapshot().clone();
            let index = s.get_metadata().index;
            let data = s.data.to_vec();
            if self.node.mut_store().mem.wl().apply_snapshot(s).is_ok() && !data.is_empty() {
                self.node.mut_store().newest = Some((index, data));
            }
        }
        self.apply(rd.take_committed_entries());
        let _ = self.node.mut_store().mem.wl().append(rd.entries());
        if let Some(hs) = rd.hs() {
            self.node.mut_store().mem.wl().set_hardstate(hs.clone());
        }
        send(&mut said, rd.take_persisted_messages());
        let mut light = self.node.advance(rd);
        if let Some(commit) = light.commit_index() {
            self.node.mut_store().mem.wl().mut_hard_state().commit = commit;
        }
        send(&mut said, light.take_messages());
        self.apply(light.take_committed_entries());
        self.node.advance_apply();
        self.compact();
        said
    }

    fn apply(&mut self, entries: Vec<Entry>) {
        for e in entries {
            match e.get_entry_type() {
                EntryType::EntryNormal if !e.data.is_empty() => {
                    self.node.mut_store().newest = Some((e.index, e.data.to_vec()));
                }
                EntryType::EntryConfChange => {
                    if let Ok(cc) = ConfChange::parse_from_bytes(&e.data) {
                        if let Ok(cs) = self.node.apply_conf_change(&cc) {
                            self.node.mut_store().mem.wl().set_conf_state(cs);
                        }
                    }
                }
                EntryType::EntryConfChangeV2 => {
                    // (Empty: leave the joint configuration.)
                    if let Ok(cc) = ConfChangeV2::parse_from_bytes(&e.data) {
                        if let Ok(cs) = self.node.apply_conf_change(&cc) {
                            self.node.mut_store().mem.wl().set_conf_state(cs);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Drop entries well behind the last applied (each is a whole state).
    fn compact(&mut self) {
        let applied = self.node.raft.raft_log.applied;
        let to = applied.saturating_sub(KEEP);
        let store = self.node.mut_store();
        if to > store.mem.first_index().unwrap_or(0) {
            let _ = store.mem.wl().compact(to);
        }
    }
}

fn send(said: &mut Vec<Said>, msgs: Vec<Message>) {
    for m in msgs {
        if let Ok(bytes) = m.write_to_bytes() {
            said.push(Said::Send {
                to: m.to,
                msg: bytes,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// Voters passing messages in memory; `down` ones hear nothing.
    struct Net {
        v: BTreeMap<u64, Consensus>,
        down: BTreeSet<u64>,
        queue: Vec<(u64, Vec<u8>)>,
    }

    impl Net {
        /// Queue what a voter said, for `settle` to carry.
        fn post(&mut self, said: Vec<Said>) {
            for Said::Send { to, msg } in said {
                self.queue.push((to, msg));
            }
        }
        /// Carry messages until none are left.
        fn settle(&mut self) {
            while !self.queue.is_empty() {
                for (to, msg) in std::mem::take(&mut self.queue) {
                    if self.down.contains(&to) {
                        continue;
                    }
                    if let Some(c) = self.v.get_mut(&to) {
                        let said = c.step(&msg).expect("a raft message");
                        self.post(said);
                    }
                }
            }
        }
        fn ticks(&mut self, n: usize) {
            for _ in 0..n {
                let ids: Vec<u64> = self.v.keys().copied().collect();
                for id in ids {
                    if self.down.contains(&id) {
                        continue;
                    }
                    let said = self.v.get_mut(&id).map(|c| c.tick()).unwrap_or_default();
                    self.post(said);
                }
                self.settle();
            }
        }
        fn leaders(&self) -> Vec<u64> {
            self.v
                .iter()
                .filter(|(id, c)| !self.down.contains(id) && c.leads())
                .map(|(id, _)| *id)
                .collect()
        }
    }

    #[test]
    fn three_voters_replicate_the_state_and_elect_a_new_leader_that_has_it() {
        let mut net = Net {
            v: BTreeMap::new(),
            down: BTreeSet::new(),
            queue: Vec::new(),
        };
        net.v.insert(1, Consensus::founding(1).expect("founding"));
        assert!(net.v[&1].leads());
        let (i, said) = net.v.get_mut(&1).unwrap().propose(b"s1".to_vec()).unwrap();
        net.post(said);
        assert!(net.v[&1].committed() >= i, "a lone voter commits at once");
        // Two voters added at once: never two voters, where losing one
        // would leave no majority.
        for id in [2, 3] {
            net.v.insert(id, Consensus::joining(id).expect("joining"));
        }
        let said = net
            .v
            .get_mut(&1)
            .unwrap()
            .change_voters(&[2, 3], &[])
            .unwrap();
        net.post(said);
        net.settle();
        net.ticks(4);
        assert_eq!(net.v[&1].voters(), vec![1, 2, 3]);
        assert!(!net.v[&1].changing(), "the joint configuration was left");
        let (i, said) = net.v.get_mut(&1).unwrap().propose(b"s2".to_vec()).unwrap();
        net.post(said);
        net.settle();
        net.ticks(2);
        for id in [2, 3] {
            assert_eq!(net.v[&id].newest(), Some((i, &b"s2"[..])), "voter {id}");
        }
        // The leader dies: one of the others is elected, with the newest
        // state, in a later term. Election timeouts are random, so two
        // candidates can split a round; a few rounds settle it.
        let term = net.v[&1].term();
        net.down.insert(1);
        for _ in 0..20 * ELECTION_TICKS {
            net.ticks(1);
            if !net.leaders().is_empty() {
                break;
            }
        }
        let leaders = net.leaders();
        assert_eq!(leaders.len(), 1, "{leaders:?}");
        let new = &net.v[&leaders[0]];
        assert!(new.term() > term);
        assert_eq!(new.newest().map(|(_, b)| b.to_vec()), Some(b"s2".to_vec()));
        // It goes on with two of three; the old leader, back, follows it.
        let l = leaders[0];
        let (i, said) = net.v.get_mut(&l).unwrap().propose(b"s3".to_vec()).unwrap();
        net.post(said);
        net.settle();
        assert!(net.v[&l].committed() >= i);
        net.down.remove(&1);
        net.ticks(2 * ELECTION_TICKS);
        assert_eq!(net.leaders(), vec![l]);
        assert!(!net.v[&1].leads());
        assert_eq!(
            net.v[&1].newest().map(|(_, b)| b.to_vec()),
            Some(b"s3".to_vec())
        );
    }

    #[test]
    fn garbage_is_refused() {
        let mut c = Consensus::founding(1).expect("founding");
        assert!(c.step(b"\xff\xfe\x00garbage").is_err());
        assert!(c.leads());
    }
}
