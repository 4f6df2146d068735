//! The message mailbox PVM programs share (`pvm_putinfo`, `pvm_recvinfo`,
//! `pvm_delinfo`, `pvm_getmboxinfo`), kept by the master: named classes of
//! entries, each a message's bytes with its owner and flags. What lives
//! here: the table and PVM's rules for it (locked and overwritable
//! entries, several instances of a class, entries that outlive their owner,
//! readers waiting for an entry). What does not: what the bytes mean (the
//! PVM library packs them) and answering the callers (`master`).

use std::collections::BTreeMap;

use libmig::msg::{MboxClass, MboxRefusal, Tid};

/// An entry remains when its owner exits.
pub const PERSISTENT: u32 = 1;
/// The class may hold several entries.
pub const MULTI_INSTANCE: u32 = 2;
/// Others may replace or delete the entry.
pub const OVERWRITABLE: u32 = 4;
/// A read takes the first entry at or after the index asked for.
pub const FIRST_AVAIL: u32 = 8;
/// A read deletes what it read.
pub const READ_AND_DELETE: u32 = 16;
/// A read waits until the entry exists.
pub const WAIT_FOR_INFO: u32 = 32;
/// Bits of `flags` below this are flags; above, an index (PVM's
/// `PvmMboxDirectIndex`).
const INDEX_SHIFT: u32 = 10;

/// The most bytes one entry holds, and the most entries in all (the
/// master's state is replicated whole).
pub const MAX_ENTRY: usize = 1 << 20;
const MAX_ENTRIES: usize = 4096;
/// The longest class name.
pub const MAX_NAME: usize = 1024;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Entry {
    owner: Tid,
    flags: u32,
    data: Vec<u8>,
    /// Its owner has exited (a persistent entry): anyone may change it.
    #[serde(default)]
    orphan: bool,
}

impl Entry {
    /// May `who` replace or delete it?
    fn open_to(&self, who: Tid) -> bool {
        self.owner == who || self.orphan || self.flags & OVERWRITABLE != 0
    }
}

/// A reader waiting for an entry: the VP and its call id, what it asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Waiter {
    /// Who.
    pub tid: Tid,
    /// Its call.
    pub id: u64,
    name: String,
    index: u32,
    flags: u32,
}

/// Every class.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Mailbox {
    classes: BTreeMap<String, BTreeMap<u32, Entry>>,
    waiting: Vec<Waiter>,
}

/// An answer to a waiting reader: who, its call, the entry's bytes and
/// owner.
pub type Answer = (Tid, u64, Vec<u8>, Tid);

impl Mailbox {
    fn entries(&self) -> usize {
        self.classes.values().map(BTreeMap::len).sum()
    }

    /// `owner` puts `data` under `name` with `flags`: the entry's index,
    /// and the readers it answers.
    pub fn put(
        &mut self,
        name: &str,
        flags: u32,
        owner: Tid,
        data: Vec<u8>,
    ) -> Result<(u32, Vec<Answer>), MboxRefusal> {
        if name.is_empty() || name.len() > MAX_NAME || data.len() > MAX_ENTRY {
            return Err(MboxRefusal::BadParam);
        }
        let class = self.classes.entry(name.to_string()).or_default();
        let index = if flags & MULTI_INSTANCE != 0 {
            let from = flags >> INDEX_SHIFT;
            (from..).find(|i| !class.contains_key(i)).unwrap_or(from)
        } else {
            match class.get(&0) {
                Some(e) if !e.open_to(owner) => return Err(MboxRefusal::Denied),
                _ => 0,
            }
        };
        let replacing = class.contains_key(&index);
        if !replacing && self.entries() >= MAX_ENTRIES {
            return Err(MboxRefusal::Denied);
        }
        let class = self.classes.entry(name.to_string()).or_default();
        class.insert(
            index,
            Entry {
                owner,
                flags: flags & ((1 << INDEX_SHIFT) - 1),
                data,
                orphan: false,
            },
        );
        Ok((index, self.answer_waiters(name)))
    }

    /// Readers of `name` that can now be answered (taking entries for
    /// those who read and delete).
    fn answer_waiters(&mut self, name: &str) -> Vec<Answer> {
        let mut out = Vec::new();
        let mut still = Vec::new();
        for w in std::mem::take(&mut self.waiting) {
            if w.name != name {
                still.push(w);
                continue;
            }
            match self.read(&w.name, w.index, w.flags, w.tid) {
                Ok((data, owner)) => out.push((w.tid, w.id, data, owner)),
                Err(_) => still.push(w),
            }
        }
        self.waiting = still;
        out
    }

    fn read(
        &mut self,
        name: &str,
        index: u32,
        flags: u32,
        reader: Tid,
    ) -> Result<(Vec<u8>, Tid), MboxRefusal> {
        let class = self.classes.get_mut(name).ok_or(MboxRefusal::NotFound)?;
        let at = if flags & FIRST_AVAIL != 0 {
            class.range(index..).next().map(|(&i, _)| i)
        } else {
            class.contains_key(&index).then_some(index)
        }
        .ok_or(MboxRefusal::NotFound)?;
        let e = class.get(&at).ok_or(MboxRefusal::NotFound)?;
        let found = (e.data.clone(), e.owner);
        if flags & READ_AND_DELETE != 0 {
            if !e.open_to(reader) {
                return Err(MboxRefusal::Denied);
            }
            class.remove(&at);
            if class.is_empty() {
                self.classes.remove(name);
            }
        }
        Ok(found)
    }

    /// `reader` reads entry `index` of `name`: its bytes and owner, or
    /// `Ok(None)` when it waits (`WAIT_FOR_INFO`) for a `put` to answer it
    /// (call `id`).
    pub fn get(
        &mut self,
        name: &str,
        index: u32,
        flags: u32,
        reader: Tid,
        id: u64,
    ) -> Result<Option<(Vec<u8>, Tid)>, MboxRefusal> {
        match self.read(name, index, flags, reader) {
            Ok(found) => Ok(Some(found)),
            // (Waiters are bounded as entries are: a VP that asks without
            // waiting for its answers is refused past that.)
            Err(MboxRefusal::NotFound)
                if flags & WAIT_FOR_INFO != 0 && self.waiting.len() < MAX_ENTRIES =>
            {
                self.waiting.push(Waiter {
                    tid: reader,
                    id,
                    name: name.to_string(),
                    index,
                    flags,
                });
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// `by` deletes entry `index` of `name`.
    pub fn delete(&mut self, name: &str, index: u32, by: Tid) -> Result<(), MboxRefusal> {
        let class = self.classes.get_mut(name).ok_or(MboxRefusal::NotFound)?;
        let e = class.get(&index).ok_or(MboxRefusal::NotFound)?;
        if !e.open_to(by) {
            return Err(MboxRefusal::Denied);
        }
        class.remove(&index);
        if class.is_empty() {
            self.classes.remove(name);
        }
        Ok(())
    }

    /// The classes whose names match `pattern` (`*` any run, `?` one
    /// character), with their entries.
    pub fn list(&self, pattern: &str) -> Vec<MboxClass> {
        self.classes
            .iter()
            .filter(|(n, _)| glob(pattern.as_bytes(), n.as_bytes()))
            .map(|(n, c)| MboxClass {
                name: n.clone(),
                entries: c.iter().map(|(&i, e)| (i, e.owner, e.flags)).collect(),
            })
            .collect()
    }

    /// `tid` exited: its entries go unless persistent (those stay, open to
    /// anyone); it waits no more.
    pub fn exited(&mut self, tid: Tid) {
        for class in self.classes.values_mut() {
            class.retain(|_, e| e.owner != tid || e.flags & PERSISTENT != 0);
            for e in class.values_mut().filter(|e| e.owner == tid) {
                e.orphan = true;
            }
        }
        self.classes.retain(|_, c| !c.is_empty());
        self.waiting.retain(|w| w.tid != tid);
    }
}

/// Does `name` match the shell-like `pattern`? (In time linear in their
/// lengths times the stars: a pattern comes from a VP and must not stall
/// the master, as a naive recursive match does on `*a*a*a...b`.)
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    // The last star seen and where in `name` its match would resume.
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_entry_is_locked_to_its_owner_and_goes_with_it() {
        let mut m = Mailbox::default();
        assert_eq!(m.put("svc", 0, 1, b"a".to_vec()).map(|r| r.0), Ok(0));
        assert_eq!(
            m.put("svc", 0, 2, b"b".to_vec()).map(|r| r.0),
            Err(MboxRefusal::Denied)
        );
        assert_eq!(
            m.put("svc", 0, 1, b"c".to_vec()).map(|r| r.0),
            Ok(0),
            "its owner updates it"
        );
        assert_eq!(m.get("svc", 0, 0, 2, 1), Ok(Some((b"c".to_vec(), 1))));
        assert_eq!(m.delete("svc", 0, 2), Err(MboxRefusal::Denied));
        m.exited(1);
        assert_eq!(m.get("svc", 0, 0, 2, 1), Err(MboxRefusal::NotFound));
    }

    #[test]
    fn persistent_overwritable_and_several_instances() {
        let mut m = Mailbox::default();
        let f = PERSISTENT | OVERWRITABLE;
        assert_eq!(m.put("p", f, 1, vec![1]).map(|r| r.0), Ok(0));
        m.exited(1);
        assert_eq!(
            m.put("p", 0, 2, vec![2]).map(|r| r.0),
            Ok(0),
            "overwritable"
        );
        let mi = MULTI_INSTANCE | PERSISTENT;
        let idx: Vec<u32> = (0..3)
            .map(|t| m.put("m", mi, t, vec![t as u8]).expect("put").0)
            .collect();
        assert_eq!(idx, [0, 1, 2]);
        assert_eq!(m.delete("m", 1, 1), Ok(()));
        assert_eq!(
            m.put("m", mi, 9, vec![9]).map(|r| r.0),
            Ok(1),
            "the first free index"
        );
        assert_eq!(
            m.put("m", mi | (5 << INDEX_SHIFT), 9, vec![9]).map(|r| r.0),
            Ok(5)
        );
        assert_eq!(
            m.get("m", 3, FIRST_AVAIL, 7, 0).map(|r| r.map(|x| x.1)),
            Ok(Some(9))
        );
        let l = m.list("m*");
        assert_eq!(l.len(), 1);
        assert_eq!(
            l[0].entries.iter().map(|e| e.0).collect::<Vec<_>>(),
            [0, 1, 2, 5]
        );
        assert!(m.list("x?").is_empty());
        assert_eq!(m.list("*").len(), 2);
    }

    #[test]
    fn a_reader_waits_for_its_entry_and_read_and_delete_takes_it() {
        let mut m = Mailbox::default();
        assert_eq!(m.get("late", 0, WAIT_FOR_INFO, 5, 42), Ok(None));
        assert_eq!(m.get("late", 0, 0, 6, 43), Err(MboxRefusal::NotFound));
        let (_, answered) = m.put("late", OVERWRITABLE, 1, b"x".to_vec()).expect("put");
        assert_eq!(answered, vec![(5, 42, b"x".to_vec(), 1)]);
        assert_eq!(
            m.get("late", 0, READ_AND_DELETE, 6, 44),
            Ok(Some((b"x".to_vec(), 1)))
        );
        assert_eq!(m.get("late", 0, 0, 6, 45), Err(MboxRefusal::NotFound));
        assert_eq!(
            m.put("big", 0, 1, vec![0; MAX_ENTRY + 1]).map(|r| r.0),
            Err(MboxRefusal::BadParam)
        );
        let long = "n".repeat(MAX_NAME + 1);
        assert_eq!(
            m.put(&long, 0, 1, vec![1]).map(|r| r.0),
            Err(MboxRefusal::BadParam)
        );
        assert!(glob(b"a*b?c", b"axxbyc") && !glob(b"a*b?c", b"axxbc"));
        assert!(glob(b"*", b"") && glob(b"", b"") && !glob(b"", b"a") && !glob(b"?", b""));
        assert!(glob(b"*x*", b"abxcd") && !glob(b"*x*", b"abcd") && glob(b"a**", b"a"));
        // A pattern built to make a naive matcher take exponential time
        // (this test would not end) is answered in one pass.
        let hostile = b"*a".repeat(40);
        let long = vec![b'a'; 4000];
        assert!(glob(&hostile, &long));
        let mut miss = hostile.clone();
        miss.push(b'b');
        assert!(!glob(&miss, &long));
    }
}
