//! What a daemon is in its virtual machine: the master, which decides, or a
//! worker, which talks to the master over one link and forwards its local
//! users' requests to it (see `Proxied`, kept by the daemon whatever its
//! role: a worker elected master still answers what it forwarded).

use std::collections::HashMap;

use libmig::msg::ToHost;
use mio::Token;

use crate::master::Master;

/// The master, or a worker.
pub(super) enum Role {
    /// The master: its `Master` answers every event with `Out`s; what it
    /// decided for hosts with no link yet (kept while it holds them alive:
    /// they attach again) goes with the role, so a master that steps down
    /// sends none of it later.
    Master {
        m: Box<Master>,
        unsent_to: HashMap<String, Vec<ToHost>>,
    },
    /// A worker.
    Worker {
        /// The link to the master (none while there is none: lost, and
        /// no new one elected yet).
        link: Option<Token>,
    },
}

impl Role {
    /// A worker not joined yet.
    pub(super) fn worker() -> Role {
        Role::Worker { link: None }
    }

    /// The master, deciding with `m`.
    pub(super) fn master_with(m: Master) -> Role {
        Role::Master {
            m: Box::new(m),
            unsent_to: HashMap::new(),
        }
    }

    /// The master's state, if this is the master.
    pub(super) fn master(&mut self) -> Option<&mut Master> {
        match self {
            Role::Master { m, .. } => Some(m),
            Role::Worker { .. } => None,
        }
    }

    /// What the master keeps for hosts with no link (none on a worker).
    pub(super) fn unsent_to(&mut self) -> Option<&mut HashMap<String, Vec<ToHost>>> {
        match self {
            Role::Master { unsent_to, .. } => Some(unsent_to),
            Role::Worker { .. } => None,
        }
    }

    /// Has the master nothing kept for hosts with no link?
    pub(super) fn all_sent(&self) -> bool {
        match self {
            Role::Master { unsent_to, .. } => unsent_to.is_empty(),
            Role::Worker { .. } => true,
        }
    }

    /// What was kept for hosts given up since is not sent.
    pub(super) fn forget_unsent_to_dead(&mut self) {
        if let Role::Master { m, unsent_to } = self {
            unsent_to.retain(|h, _| m.is_alive(h));
        }
    }

    /// Is this the master?
    pub(super) fn is_master(&self) -> bool {
        matches!(self, Role::Master { .. })
    }

    /// A worker's link to its master.
    pub(super) fn link(&self) -> Option<Token> {
        match self {
            Role::Worker { link } => *link,
            Role::Master { .. } => None,
        }
    }

    /// A worker joined its master over `t`.
    pub(super) fn joined(&mut self, t: Token) {
        if let Role::Worker { link } = self {
            *link = Some(t);
        }
    }

    /// A worker lost its master.
    pub(super) fn lost_master(&mut self) {
        if let Role::Worker { link } = self {
            *link = None;
        }
    }
}

/// Control requests a worker forwarded to its master, by the id the master
/// answers with, and the local connection each came on.
#[derive(Default)]
pub(super) struct Proxied {
    /// The connection, and whether an answer came already (a stream of
    /// answers follows: a job's output).
    by_id: HashMap<u64, (Token, bool)>,
    next: u64,
}

impl Proxied {
    /// A request from local connection `t` goes to the master: its id.
    pub(super) fn forward(&mut self, t: Token) -> u64 {
        self.next += 1;
        self.by_id.insert(self.next, (t, false));
        self.next
    }

    /// Connection `t`'s stream, begun when this daemon was the master,
    /// goes on under `id` (see `master::LOCAL_ID`).
    pub(super) fn adopt(&mut self, id: u64, t: Token) {
        self.by_id.insert(id, (t, true));
    }

    /// The master answered request `id`; `more`: further answers follow
    /// (a job's output, its VPs' ends). The connection to answer on.
    pub(super) fn answered(&mut self, id: u64, more: bool) -> Option<Token> {
        if more {
            let e = self.by_id.get_mut(&id)?;
            e.1 = true;
            Some(e.0)
        } else {
            self.by_id.remove(&id).map(|(t, _)| t)
        }
    }

    /// Local connection `t` closed: its requests are answered no more.
    pub(super) fn closed(&mut self, t: Token) {
        self.by_id.retain(|_, (tok, _)| *tok != t);
    }

    /// The master went away: the connections of requests it never
    /// answered (they are forgotten), but those of `keep` (not sent yet:
    /// the next master gets them). Streams it began (a job's output) are
    /// kept: the next master goes on with them.
    pub(super) fn unanswered(&mut self, keep: &[u64]) -> Vec<Token> {
        let mut out = Vec::new();
        self.by_id.retain(|id, (t, began)| {
            let stays = *began || keep.contains(id);
            if !stays {
                out.push(*t);
            }
            stays
        });
        out
    }
}
