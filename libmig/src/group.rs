//! Named groups and their collectives, as PVM's group library has them.
//!
//! Membership and barriers live in the master (a VP joins and gets the
//! lowest free instance number; a VP that exits leaves its groups). The
//! data collectives are built here on point-to-point messages: broadcast is
//! a multicast to the members; reduce and gather send to the root, which
//! combines the values in instance order (so a reduction gives the same
//! answer on every run); scatter sends each member its part. Every member
//! of a collective must call it with the same tag and root.
//!
//! What does not live here: the message layer (`vm`).

use serde::{de::DeserializeOwned, Serialize};

use crate::msg::{Tid, VpCall, VpRet};
use crate::vm::{unexpected, MigError, Vm};

/// Built-in reduction operations (any `Fn(T, T) -> T` works as well).
pub mod op {
    /// a + b.
    pub fn sum<T: std::ops::Add<Output = T>>(a: T, b: T) -> T {
        a + b
    }
    /// a × b.
    pub fn product<T: std::ops::Mul<Output = T>>(a: T, b: T) -> T {
        a * b
    }
    /// The smaller.
    pub fn min<T: PartialOrd>(a: T, b: T) -> T {
        if b < a {
            b
        } else {
            a
        }
    }
    /// The larger.
    pub fn max<T: PartialOrd>(a: T, b: T) -> T {
        if b > a {
            b
        } else {
            a
        }
    }
    /// Apply `f` element by element to two vectors of the same length (the
    /// way PVM reduces arrays).
    pub fn elementwise<T>(f: impl Fn(T, T) -> T) -> impl Fn(Vec<T>, Vec<T>) -> Vec<T> {
        move |a, b| a.into_iter().zip(b).map(|(x, y)| f(x, y)).collect()
    }
}

impl Vm {
    /// Join `group`; returns this VP's instance number in it.
    pub fn join_group(&mut self, group: &str) -> Result<u32, MigError> {
        match self.call(VpCall::Join {
            group: group.to_string(),
        })? {
            VpRet::Instance(i) => Ok(i),
            other => Err(unexpected(other)),
        }
    }

    /// Leave `group`.
    pub fn leave_group(&mut self, group: &str) -> Result<(), MigError> {
        self.call(VpCall::Leave {
            group: group.to_string(),
        })
        .map(|_| ())
    }

    /// The members of `group`: (instance, Tid), by instance.
    pub fn members(&mut self, group: &str) -> Result<Vec<(u32, Tid)>, MigError> {
        match self.call(VpCall::Members {
            group: group.to_string(),
        })? {
            VpRet::Members(m) => Ok(m),
            other => Err(unexpected(other)),
        }
    }

    /// How many VPs are in `group`.
    pub fn group_size(&mut self, group: &str) -> Result<usize, MigError> {
        Ok(self.members(group)?.len())
    }

    /// Wait until `count` members of `group` have called `barrier` (0: as
    /// many as the group has members).
    pub fn barrier(&mut self, group: &str, count: u32) -> Result<(), MigError> {
        self.call(VpCall::Barrier {
            group: group.to_string(),
            count,
        })
        .map(|_| ())
    }

    /// Send `value` to every other member of `group`.
    pub fn bcast<T: Serialize + ?Sized>(
        &mut self,
        group: &str,
        tag: i32,
        value: &T,
    ) -> Result<(), MigError> {
        let me = self.tid();
        let to: Vec<Tid> = self
            .members(group)?
            .into_iter()
            .map(|(_, t)| t)
            .filter(|&t| t != me)
            .collect();
        self.mcast(&to, tag, value)
    }

    fn root_tid(members: &[(u32, Tid)], group: &str, root: u32) -> Result<Tid, MigError> {
        members
            .iter()
            .find(|(i, _)| *i == root)
            .map(|&(_, t)| t)
            .ok_or_else(|| MigError::Refused(format!("group {group} has no instance {root}")))
    }

    /// Gather one value from every member at instance `root`: the root gets
    /// them all by instance, the others `None`.
    pub fn gather<T: Serialize + DeserializeOwned>(
        &mut self,
        group: &str,
        tag: i32,
        root: u32,
        value: T,
    ) -> Result<Option<Vec<T>>, MigError> {
        let members = self.members(group)?;
        let root_tid = Self::root_tid(&members, group, root)?;
        if root_tid != self.tid() {
            self.send(root_tid, tag, &value)?;
            return Ok(None);
        }
        let mut out = Vec::with_capacity(members.len());
        let mut mine = Some(value);
        for &(_, t) in &members {
            if t == root_tid {
                if let Some(v) = mine.take() {
                    out.push(v);
                }
            } else {
                out.push(self.recv(Some(t), Some(tag))?.decode()?);
            }
        }
        Ok(Some(out))
    }

    /// Combine every member's `value` with `f` at instance `root`, in
    /// instance order: the root gets the result, the others `None`.
    pub fn reduce<T: Serialize + DeserializeOwned>(
        &mut self,
        group: &str,
        tag: i32,
        root: u32,
        value: T,
        f: impl Fn(T, T) -> T,
    ) -> Result<Option<T>, MigError> {
        Ok(self
            .gather(group, tag, root, value)?
            .and_then(|vs| vs.into_iter().reduce(f)))
    }

    /// The root (instance `root`) gives member `i` its `values[i]` (by
    /// position in instance order); every member, the root too, gets its
    /// part.
    pub fn scatter<T: Serialize + DeserializeOwned>(
        &mut self,
        group: &str,
        tag: i32,
        root: u32,
        values: Option<Vec<T>>,
    ) -> Result<T, MigError> {
        let members = self.members(group)?;
        let root_tid = Self::root_tid(&members, group, root)?;
        if root_tid != self.tid() {
            return self.recv(Some(root_tid), Some(tag))?.decode();
        }
        let values = values
            .ok_or_else(|| MigError::Refused("scatter: the root must give the values".into()))?;
        if values.len() != members.len() {
            return Err(MigError::Refused(format!(
                "scatter: {} values for {} members of {group}",
                values.len(),
                members.len()
            )));
        }
        let mut mine = None;
        for (&(_, t), v) in members.iter().zip(values) {
            if t == root_tid {
                mine = Some(v);
            } else {
                self.send(t, tag, &v)?;
            }
        }
        mine.ok_or_else(|| MigError::Refused("scatter: the root is not a member".into()))
    }
}
