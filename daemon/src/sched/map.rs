//! The allocation map of seed 000 (Figure 1): rows are processors, columns
//! are time slots, each cell is free or held by one job.
//!
//! What lives here: the rows (processor facts, live or left), the columns
//! (cells plus a bitset of free cells for fast pattern search), and a small
//! fixed-width bitset. What does not: which VPs sit on a cell (the scheduler
//! keeps that per job) or any decision about where to put work.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Index of a row of the allocation map (stable while the processor is in
/// the pool; reused after it leaves).
pub type Row = usize;

/// Interned job key used in cells (the scheduler maps it to the job's name).
pub type JobKey = u32;

/// A processor as the scheduler sees it: one row of the allocation map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Processor {
    /// Unique name, e.g. `h1/0` (host `h1`, core 0). Shared, not copied,
    /// by the actions that name it.
    pub id: Arc<str>,
    /// The host (daemon) that owns this processor.
    pub host: Arc<str>,
    /// Architecture, e.g. `x86_64`.
    pub arch: String,
    /// Capacity relative to the slowest processor.
    pub capacity: f64,
    /// Memory its host offers (MB), if known.
    #[serde(default)]
    pub memory_mb: Option<u64>,
}

/// A set of rows, one bit each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BitSet {
    words: Vec<u64>,
}

impl BitSet {
    /// Grow to hold at least `bits` bits.
    pub fn grow(&mut self, bits: usize) {
        let need = bits.div_ceil(64);
        if self.words.len() < need {
            self.words.resize(need, 0);
        }
    }
    /// Set bit `i`.
    pub fn insert(&mut self, i: usize) {
        self.grow(i + 1);
        self.words[i / 64] |= 1 << (i % 64);
    }
    /// Clear bit `i`.
    pub fn remove(&mut self, i: usize) {
        if let Some(w) = self.words.get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }
    /// Is bit `i` set?
    pub fn contains(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    /// Is every bit of `self` also set in `other`?
    pub fn is_subset(&self, other: &BitSet) -> bool {
        let n = self.words.len().min(other.words.len());
        let (head, tail) = self.words.split_at(n);
        head.iter()
            .zip(&other.words[..n])
            .all(|(&a, &b)| a & !b == 0)
            && tail.iter().all(|&w| w == 0)
    }
    /// How many bits the two sets have in common.
    pub fn intersection_len(&self, other: &BitSet) -> usize {
        self.words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| (a & b).count_ones() as usize)
            .sum()
    }
    /// No bit in common?
    pub fn is_disjoint(&self, other: &BitSet) -> bool {
        self.words.iter().zip(&other.words).all(|(a, b)| a & b == 0)
    }
    /// `self &= !other`.
    pub fn remove_all(&mut self, other: &BitSet) {
        for (k, w) in self.words.iter_mut().enumerate() {
            *w &= !other.words.get(k).copied().unwrap_or(0);
        }
    }
    /// `self &= other`.
    pub fn intersect_with(&mut self, other: &BitSet) {
        for (k, w) in self.words.iter_mut().enumerate() {
            *w &= other.words.get(k).copied().unwrap_or(0);
        }
    }
    /// `self |= other`.
    pub fn union_with(&mut self, other: &BitSet) {
        self.grow(other.words.len() * 64);
        for (k, &w) in other.words.iter().enumerate() {
            self.words[k] |= w;
        }
    }
    /// No bit set?
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }
    /// Number of bits set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
    /// The set bits in increasing order, collected (one allocation).
    pub fn to_vec(&self) -> Vec<usize> {
        let mut v = Vec::with_capacity(self.len());
        v.extend(self.iter());
        v
    }
    /// The set bits in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(k, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(k * 64 + b)
            })
        })
    }
}

/// Bit `j` of `a[i]` to bit `i` of `a[j]`: quadrants swapped, then the
/// quadrants of each, down to single bits.
fn transpose(a: &mut [u64; 64]) {
    let mut w = 32;
    let mut mask: u64 = 0x0000_0000_FFFF_FFFF;
    while w > 0 {
        for i in (0..64).step_by(2 * w) {
            for k in i..i + w {
                let t = ((a[k] >> w) ^ a[k + w]) & mask;
                a[k] ^= t << w;
                a[k + w] ^= t;
            }
        }
        w /= 2;
        mask ^= mask << w;
    }
}

/// One time slot of the round.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Column {
    /// Stable identity (positions shift when earlier columns are removed).
    pub id: u64,
    cells: Vec<Option<JobKey>>,
    free: BitSet,
    busy: usize,
    /// Free cells per capacity class (`AllocationMap::class_id`), kept with
    /// `free`: whether a job can fit is mostly answered from these.
    #[serde(default)]
    class_free: Vec<u32>,
    /// Their sum.
    #[serde(default)]
    free_n: usize,
}

impl Column {
    /// The job holding `row` in this slot.
    pub fn cell(&self, row: Row) -> Option<JobKey> {
        self.cells.get(row).copied().flatten()
    }
    /// Live rows that are free in this slot.
    pub fn free(&self) -> &BitSet {
        &self.free
    }
    /// How many of its cells are free (the free set's size, from the
    /// per-class counts).
    pub fn free_count(&self) -> usize {
        self.free_n
    }
    /// Its free cells in capacity class `class`.
    pub fn free_in_class(&self, class: u32) -> u32 {
        self.class_free.get(class as usize).copied().unwrap_or(0)
    }
    fn count(&mut self, class: u32, up: bool) {
        if class == u32::MAX {
            return;
        }
        let i = class as usize;
        if i >= self.class_free.len() {
            self.class_free.resize(i + 1, 0);
        }
        if up {
            self.class_free[i] += 1;
            self.free_n += 1;
        } else if self.class_free[i] > 0 {
            self.class_free[i] -= 1;
            self.free_n -= 1;
        }
    }
    /// Does no cell hold a job?
    pub fn is_empty(&self) -> bool {
        self.busy == 0
    }
    /// How many of its cells hold a job (`jobs().count()`, kept as cells
    /// change).
    pub fn busy(&self) -> usize {
        self.busy
    }
    /// The jobs present in this slot (with repeats, in row order).
    pub fn jobs(&self) -> impl Iterator<Item = (Row, JobKey)> + '_ {
        self.cells
            .iter()
            .enumerate()
            .filter_map(|(r, c)| c.map(|j| (r, j)))
    }
}

/// Rows × columns. Every column has one cell per row (left rows stay as
/// empty, non-free cells until a new processor reuses them).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AllocationMap {
    rows: Vec<Option<Processor>>,
    row_of: HashMap<String, Row>,
    live: BitSet,
    per_arch: HashMap<String, usize>,
    arch_names: Vec<Arc<str>>,
    row_arch: Vec<u32>,
    /// Capacity per row (1.0 where no processor is), dense for the hot loops.
    row_cap: Vec<f64>,
    arch_live: Vec<BitSet>,
    /// Per architecture id: live rows per capacity (keyed by its bits; for
    /// positive floats the bits order like the values).
    arch_caps: Vec<BTreeMap<u64, BitSet>>,
    /// Per architecture id: a capacity class's id (by capacity bits), kept
    /// once given; `row_class` the class of each live row.
    #[serde(default)]
    class_ids: Vec<BTreeMap<u64, u32>>,
    #[serde(default)]
    classes: u32,
    #[serde(default)]
    row_class: Vec<u32>,
    columns: Vec<Column>,
    next_column: u64,
}

impl AllocationMap {
    /// The processor at `row`, if it is in the pool.
    pub fn processor(&self, row: Row) -> Option<&Processor> {
        self.rows.get(row).and_then(Option::as_ref)
    }
    /// The row of a processor id.
    pub fn row_of(&self, id: &str) -> Option<Row> {
        self.row_of.get(id).copied()
    }
    /// Rows currently in the pool.
    pub fn live(&self) -> &BitSet {
        &self.live
    }
    /// The id of architecture `name` (assigned on first use).
    pub fn intern(&mut self, name: &str) -> u32 {
        match self.arch_names.iter().position(|n| &**n == name) {
            Some(i) => i as u32,
            None => {
                self.arch_names.push(name.into());
                self.arch_live.push(BitSet::default());
                self.arch_caps.push(BTreeMap::new());
                self.class_ids.push(BTreeMap::new());
                (self.arch_names.len() - 1) as u32
            }
        }
    }
    /// The name of architecture id `id`.
    pub fn arch_name(&self, id: u32) -> &str {
        self.arch_names.get(id as usize).map_or("?", |n| &**n)
    }
    /// The name of architecture id `id`, shared.
    pub fn arch_shared(&self, id: u32) -> Arc<str> {
        self.arch_names
            .get(id as usize)
            .cloned()
            .unwrap_or_else(|| "?".into())
    }
    /// The architecture id of a live row.
    pub fn row_arch(&self, row: Row) -> Option<u32> {
        if self.live.contains(row) {
            self.row_arch.get(row).copied()
        } else {
            None
        }
    }
    /// The capacity of the processor at `row` (1.0 if there is none).
    pub fn row_capacity_of(&self, row: Row) -> f64 {
        self.row_cap.get(row).copied().unwrap_or(1.0)
    }
    /// Live rows of architecture id `id`.
    pub fn arch_rows(&self, id: u32) -> Option<&BitSet> {
        self.arch_live.get(id as usize)
    }
    /// Live processors of architecture id `id` as `(capacity, how many)`,
    /// slowest first.
    pub fn arch_capacities(&self, id: u32) -> Vec<(f64, u32)> {
        self.capacity_classes(id)
            .map(|(a, rows)| (a, rows.len() as u32))
            .collect()
    }
    /// Live rows of architecture id `id` by capacity, slowest first.
    pub fn capacity_classes(&self, id: u32) -> impl Iterator<Item = (f64, &BitSet)> {
        self.arch_caps
            .get(id as usize)
            .into_iter()
            .flat_map(|c| c.iter().map(|(&b, rows)| (f64::from_bits(b), rows)))
    }
    /// Live capacity classes of architecture id `id`, slowest first: the
    /// capacity and the class id (see `Column::free_in_class`).
    pub fn class_ids(&self, id: u32) -> impl Iterator<Item = (f64, u32)> + '_ {
        let ids = self.class_ids.get(id as usize);
        self.arch_caps
            .get(id as usize)
            .into_iter()
            .flat_map(|c| c.keys())
            .filter_map(move |b| Some((f64::from_bits(*b), *ids?.get(b)?)))
    }
    /// The capacity class of a live row.
    pub fn row_class(&self, row: Row) -> Option<u32> {
        self.row_class.get(row).copied().filter(|&c| c != u32::MAX)
    }
    /// How many capacity classes have been given ids.
    pub fn class_count(&self) -> usize {
        self.classes as usize
    }
    /// The free cells of each capacity class in `column`, counted from its
    /// rows (what `Column::free_in_class` must say).
    pub fn recount(&self, column: &Column) -> Vec<u32> {
        let mut n = vec![0u32; self.classes as usize];
        for r in column.free.iter() {
            if let Some(&c) = self.row_class.get(r) {
                if let Some(x) = n.get_mut(c as usize) {
                    *x += 1;
                }
            }
        }
        n
    }
    /// Is any processor of architecture `arch` in the pool?
    pub fn has_arch(&self, arch: &str) -> bool {
        self.per_arch.contains_key(arch)
    }
    /// Number of row positions (live or not): every row index is below this.
    pub fn row_capacity(&self) -> usize {
        self.rows.len()
    }
    /// Live processors in row order.
    pub fn processors(&self) -> impl Iterator<Item = (Row, &Processor)> {
        self.rows
            .iter()
            .enumerate()
            .filter_map(|(r, p)| p.as_ref().map(|p| (r, p)))
    }
    /// The columns in round order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }
    /// Position of a column id in the round. Columns are only ever appended
    /// with a fresh, larger id or removed, so the round is sorted by id.
    pub fn position(&self, id: u64) -> Option<usize> {
        self.columns.binary_search_by_key(&id, |c| c.id).ok()
    }
    /// The column with id `id`.
    pub fn column(&self, id: u64) -> Option<&Column> {
        self.position(id).map(|i| &self.columns[i])
    }

    /// Add a processor; returns its row. The caller checks the id is new.
    pub fn add_row(&mut self, p: Processor) -> Row {
        let row = match self.rows.iter().position(Option::is_none) {
            Some(r) => r,
            None => {
                self.rows.push(None);
                self.rows.len() - 1
            }
        };
        self.row_of.insert(p.id.to_string(), row);
        *self.per_arch.entry(p.arch.clone()).or_default() += 1;
        let a = self.intern(&p.arch);
        self.row_arch.resize(self.rows.len(), u32::MAX);
        self.row_arch[row] = a;
        self.row_cap.resize(self.rows.len(), 1.0);
        self.row_cap[row] = p.capacity;
        self.arch_live[a as usize].insert(row);
        self.arch_caps[a as usize]
            .entry(p.capacity.to_bits())
            .or_default()
            .insert(row);
        let next = self.classes;
        let class = *self.class_ids[a as usize]
            .entry(p.capacity.to_bits())
            .or_insert(next);
        if class == next {
            self.classes += 1;
        }
        self.row_class.resize(self.rows.len(), u32::MAX);
        self.row_class[row] = class;
        self.rows[row] = Some(p);
        self.live.insert(row);
        let width = self.rows.len();
        for c in &mut self.columns {
            c.cells.resize(width, None);
            if c.cells[row].take().is_some() {
                c.busy -= 1;
            }
            if !c.free.contains(row) {
                c.count(class, true);
            }
            c.free.insert(row);
        }
        row
    }

    /// Take a processor out of the pool; its cells become empty and not free.
    pub fn remove_row(&mut self, row: Row) -> Option<Processor> {
        let p = self.rows.get_mut(row)?.take()?;
        self.row_of.remove(&*p.id);
        if let Some(c) = self.row_cap.get_mut(row) {
            *c = 1.0;
        }
        if let Some(&a) = self.row_arch.get(row) {
            if let Some(set) = self.arch_live.get_mut(a as usize) {
                set.remove(row);
            }
            if let Some(caps) = self.arch_caps.get_mut(a as usize) {
                let key = p.capacity.to_bits();
                if let Some(rows) = caps.get_mut(&key) {
                    rows.remove(row);
                    if rows.is_empty() {
                        caps.remove(&key);
                    }
                }
            }
        }
        if let Some(n) = self.per_arch.get_mut(&p.arch) {
            *n -= 1;
            if *n == 0 {
                self.per_arch.remove(&p.arch);
            }
        }
        self.live.remove(row);
        let class = self.row_class.get(row).copied().unwrap_or(u32::MAX);
        if let Some(c) = self.row_class.get_mut(row) {
            *c = u32::MAX;
        }
        for c in &mut self.columns {
            if c.cells[row].take().is_some() {
                c.busy -= 1;
            }
            if c.free.contains(row) {
                c.count(class, false);
            }
            c.free.remove(row);
        }
        Some(p)
    }

    /// Append an empty column; returns its id.
    pub fn push_column(&mut self) -> u64 {
        let id = self.next_column;
        self.next_column += 1;
        let mut c = Column {
            id,
            cells: vec![None; self.rows.len()],
            free: self.live.clone(),
            busy: 0,
            class_free: Vec::new(),
            free_n: 0,
        };
        c.class_free = self.recount(&c);
        c.free_n = c.class_free.iter().map(|&n| n as usize).sum();
        self.columns.push(c);
        id
    }

    /// Remove the column `id` (which must be empty).
    pub fn remove_column(&mut self, id: u64) {
        if let Some(i) = self.position(id) {
            self.columns.remove(i);
        }
    }

    /// Put `job` in `(row, column)` or free the cell with `None`.
    pub fn set(&mut self, column: u64, row: Row, job: Option<JobKey>) {
        let live = self.live.contains(row);
        if let Some(c) = self.position(column).map(|i| &mut self.columns[i]) {
            match (c.cells[row].is_some(), job.is_some()) {
                (false, true) => c.busy += 1,
                (true, false) => c.busy -= 1,
                _ => {}
            }
            c.cells[row] = job;
            let free = job.is_none() && live;
            if free != c.free.contains(row) {
                c.count(self.row_class.get(row).copied().unwrap_or(u32::MAX), free);
            }
            if free {
                c.free.insert(row);
            } else {
                c.free.remove(row);
            }
        }
    }

    /// `set` for each of `rows` in one column.
    pub fn set_rows(&mut self, column: u64, rows: &[Row], job: Option<JobKey>) {
        let Some(i) = self.position(column) else {
            return;
        };
        let c = &mut self.columns[i];
        for &row in rows {
            let cell = &mut c.cells[row];
            match (cell.is_some(), job.is_some()) {
                (false, true) => c.busy += 1,
                (true, false) => c.busy -= 1,
                _ => {}
            }
            *cell = job;
            let free = job.is_none() && self.live.contains(row);
            // The free set and its counts change only where the cell's
            // freedom does.
            if free != c.free.contains(row) {
                c.count(self.row_class.get(row).copied().unwrap_or(u32::MAX), free);
                if free {
                    c.free.insert(row);
                } else {
                    c.free.remove(row);
                }
            }
        }
    }

    /// `set_rows` for the rows of a set, a word of them at a time: the free
    /// set changes by word, the cells and counts by row.
    pub fn set_row_set(&mut self, column: u64, rows: &BitSet, job: Option<JobKey>) {
        let Some(i) = self.position(column) else {
            return;
        };
        let c = &mut self.columns[i];
        for (k, &w) in rows.words.iter().enumerate() {
            if w == 0 {
                continue;
            }
            let mut b = w;
            while b != 0 {
                let cell = &mut c.cells[k * 64 + b.trailing_zeros() as usize];
                match (cell.is_some(), job.is_some()) {
                    (false, true) => c.busy += 1,
                    (true, false) => c.busy -= 1,
                    _ => {}
                }
                *cell = job;
                b &= b - 1;
            }
            let was = c.free.words.get(k).copied().unwrap_or(0);
            let now = match job {
                Some(_) => 0,
                None => w & self.live.words.get(k).copied().unwrap_or(0),
            };
            let mut flip = (was & w) ^ now;
            if flip == 0 {
                continue;
            }
            let up = now != 0;
            while flip != 0 {
                let r = k * 64 + flip.trailing_zeros() as usize;
                c.count(self.row_class.get(r).copied().unwrap_or(u32::MAX), up);
                flip &= flip - 1;
            }
            if up {
                c.free.grow((k + 1) * 64);
            }
            c.free.words[k] = (was & !w) | now;
        }
    }

    /// Per row, the slots (bit = position in the round) where it is free;
    /// `None` beyond 64 slots. A 64 x 64 bit transpose of the free sets
    /// per 64 rows.
    pub fn free_slots_by_row(&self) -> Option<Vec<u64>> {
        if self.columns.len() > 64 {
            return None;
        }
        let width = self.rows.len();
        let mut out = vec![0u64; width];
        for k in 0..width.div_ceil(64) {
            let mut a = [0u64; 64];
            for (pos, c) in self.columns.iter().enumerate() {
                a[pos] = c.free.words.get(k).copied().unwrap_or(0);
            }
            transpose(&mut a);
            for (o, &w) in out[k * 64..].iter_mut().zip(&a) {
                *o = w;
            }
        }
        Some(out)
    }

    /// Rows free in every one of `columns` (all live rows when empty).
    pub fn free_in_all(&self, columns: &[u64]) -> BitSet {
        let mut out = self.live.clone();
        for &id in columns {
            if let Some(c) = self.column(id) {
                out.intersect_with(&c.free);
            }
        }
        out
    }

    /// Is any cell free anywhere?
    pub fn has_free_cells(&self) -> bool {
        self.columns.iter().any(|c| c.free_n > 0)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A map of `n` processors (capacities 1, 2 or 4), those of `gone`
    /// removed, in 3 slots whose cells `held` gives jobs.
    fn map(n: usize, gone: &[usize], held: &[(usize, usize, u32)]) -> AllocationMap {
        let mut m = AllocationMap::default();
        for i in 0..n {
            m.add_row(Processor {
                id: format!("p{i}").into(),
                host: format!("h{}", i / 4).into(),
                arch: "x86_64".into(),
                capacity: [1.0, 2.0, 4.0][i % 3],
                memory_mb: None,
            });
        }
        let ids: Vec<u64> = (0..3).map(|_| m.push_column()).collect();
        for &(c, r, k) in held {
            m.set(ids[c % 3], r % n, Some(k));
        }
        for &r in gone {
            m.remove_row(r % n);
        }
        m
    }

    proptest! {
        /// Each row's free slots are those whose free set holds it.
        #[test]
        fn free_slots_by_row_are_the_free_sets_turned(
            n in 1usize..200,
            gone in proptest::collection::vec(0usize..200, 0..20),
            held in proptest::collection::vec((0usize..3, 0usize..200, 0u32..4), 0..300),
        ) {
            let m = map(n, &gone, &held);
            let by_row = m.free_slots_by_row().expect("3 slots");
            prop_assert_eq!(by_row.len(), m.row_capacity());
            for (r, &mask) in by_row.iter().enumerate() {
                for (pos, c) in m.columns().iter().enumerate() {
                    prop_assert_eq!(mask >> pos & 1 == 1, c.free().contains(r));
                }
                prop_assert_eq!(mask >> m.columns().len(), 0);
            }
        }

        /// Setting a set of rows a word at a time leaves every cell, free
        /// set and count as setting them one by one does.
        #[test]
        fn set_row_set_is_set_rows(
            n in 1usize..200,
            gone in proptest::collection::vec(0usize..200, 0..20),
            held in proptest::collection::vec((0usize..3, 0usize..200, 0u32..4), 0..300),
            rows in proptest::collection::vec(0usize..200, 0..80),
            column in 0usize..3,
            job in proptest::option::of(0u32..4),
        ) {
            let mut a = map(n, &gone, &held);
            let mut b = a.clone();
            let mut set = BitSet::default();
            for r in rows {
                set.insert(r % n);
            }
            let id = a.columns()[column].id;
            a.set_rows(id, &set.to_vec(), job);
            b.set_row_set(id, &set, job);
            for (x, y) in a.columns().iter().zip(b.columns()) {
                prop_assert_eq!(&x.cells, &y.cells);
                prop_assert_eq!(x.free.to_vec(), y.free.to_vec());
                prop_assert_eq!(x.busy, y.busy);
                prop_assert_eq!(&x.class_free, &y.class_free);
                prop_assert_eq!(x.free_n, y.free_n);
            }
        }
    }
}
