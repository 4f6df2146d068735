//! The Expansion algorithm (seed 000, section 4.3): where in the existing
//! allocation map a job could run without adding a time slot.
//!
//! What lives here: the `Expansion` trait (the paper makes this component
//! replaceable), the paper's regular-pattern search (`RegularPattern`, the
//! default) and an exhaustive search over every set of columns for small
//! maps (`Exhaustive`), selectable by name with `by_name`. What does not:
//! deciding whether the pattern beats a new slot (the scheduler compares the
//! MTAT turnarounds) or compressing the job onto it (`compress`).
//!
//! # Cost
//!
//! The paper's search is `Θ(Φ τ²)`: for every column it tests `E_i ⊆ E_j`
//! against every other column. Free cells are kept as bitsets, so each test is
//! `Φ / 64` word operations and the search costs `Θ(τ² Φ / 64 + τ Φ)`.

use super::map::{AllocationMap, BitSet, Row};
use super::mtat::mtat_pools;

/// A regular pattern: every `(row, column)` in `rows × columns` is free.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    /// The processors of the pattern.
    pub rows: Vec<Row>,
    /// The time slots (column ids) it spans.
    pub columns: Vec<u64>,
}

/// What a job asks of the map: VPs per architecture (ids as the map interns
/// them, each at most once, counts above zero) and the live rows of those
/// architectures.
#[derive(Debug, Clone, Default)]
pub struct Demand {
    /// `(architecture id, VPs)`.
    pub counts: Vec<(u32, u32)>,
    /// Live rows whose architecture is in `counts`.
    pub rows: BitSet,
}

impl Demand {
    /// The demand of `counts` on `map`: architectures the map has no live
    /// processor of are left out.
    pub fn new(map: &AllocationMap, counts: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut d = Demand::default();
        for (a, n) in counts {
            let Some(rows) = map.arch_rows(a).filter(|r| !r.is_empty()) else {
                continue;
            };
            if n == 0 {
                continue;
            }
            match d.counts.iter_mut().find(|(x, _)| *x == a) {
                Some(e) => e.1 += n,
                None => {
                    d.counts.push((a, n));
                    d.rows.union_with(rows);
                }
            }
        }
        d
    }
}

/// A search for usable free space. Implementations only offer rows of the
/// architectures in `demand`.
pub trait Expansion: Send {
    /// The name used on the command line and in configs.
    fn name(&self) -> &'static str;
    /// The best pattern by this search's own criterion, if any cell is free.
    fn find(&self, map: &AllocationMap, demand: &Demand) -> Option<Pattern>;
}

/// The names `by_name` accepts.
pub const NAMES: &[&str] = &["regular", "exhaustive"];

/// The expansion search called `name`.
pub fn by_name(name: &str) -> Option<Box<dyn Expansion>> {
    match name {
        "regular" => Some(Box::new(RegularPattern)),
        "exhaustive" => Some(Box::new(Exhaustive::default())),
        _ => None,
    }
}

fn capacity(map: &AllocationMap, rows: &BitSet) -> f64 {
    rows.iter().map(|r| map.row_capacity_of(r)).sum()
}

/// The paper's search: for each column `i` with free entries `E_i`, the
/// pattern `E_i × {j : E_i ⊆ E_j}`, sized `(Σ_{k∈E_i} a_k) · width_i`; the
/// largest wins (the earliest column on a tie).
#[derive(Debug, Clone, Copy, Default)]
pub struct RegularPattern;

impl Expansion for RegularPattern {
    fn name(&self) -> &'static str {
        "regular"
    }

    fn find(&self, map: &AllocationMap, demand: &Demand) -> Option<Pattern> {
        let wanted = &demand.rows;
        let mut best: Option<(f64, usize)> = None;
        let usable = || map.columns().iter();
        let mut free_sets = Vec::with_capacity(map.columns().len());
        for c in map.columns() {
            let mut e = c.free().clone();
            e.intersect_with(wanted);
            free_sets.push(e);
        }
        for (i, e_i) in free_sets.iter().enumerate() {
            if e_i.is_empty() {
                continue;
            }
            let width = usable().filter(|c| e_i.is_subset(c.free())).count();
            let size = capacity(map, e_i) * width as f64;
            if best.is_none_or(|(s, _)| size > s) {
                best = Some((size, i));
            }
        }
        let (_, i) = best?;
        let e_i = &free_sets[i];
        Some(Pattern {
            rows: e_i.to_vec(),
            columns: usable()
                .filter(|c| e_i.is_subset(c.free()))
                .map(|c| c.id)
                .collect(),
        })
    }
}

/// Every non-empty set of columns with the rows free in all of them; the one
/// giving the smallest turnaround per slot (`T / width`) wins, then the one
/// with fewer columns, then fewer rows. Exact among regular patterns, and
/// exponential in the number of columns: above `max_columns` it falls back to
/// the regular-pattern search.
#[derive(Debug, Clone, Copy)]
pub struct Exhaustive {
    /// Largest map (in columns) searched exhaustively.
    pub max_columns: usize,
}

impl Default for Exhaustive {
    fn default() -> Self {
        Exhaustive { max_columns: 12 }
    }
}

impl Expansion for Exhaustive {
    fn name(&self) -> &'static str {
        "exhaustive"
    }

    fn find(&self, map: &AllocationMap, demand: &Demand) -> Option<Pattern> {
        let cols: Vec<&super::map::Column> = map.columns().iter().collect();
        if cols.len() > self.max_columns {
            return RegularPattern.find(map, demand);
        }
        let wanted = &demand.rows;
        let counts: Vec<u32> = demand.counts.iter().map(|&(_, n)| n).collect();
        let mut best: Option<(f64, usize, usize, Pattern)> = None;
        for mask in 1u32..(1u32 << cols.len()) {
            let mut rows = wanted.clone();
            for (k, c) in cols.iter().enumerate() {
                if mask >> k & 1 == 1 {
                    rows.intersect_with(c.free());
                }
            }
            if rows.is_empty() {
                continue;
            }
            let rows: Vec<Row> = rows.to_vec();
            let mut pool_of = Vec::with_capacity(rows.len());
            let mut caps = Vec::with_capacity(rows.len());
            for &r in &rows {
                let Some(p) = map.processor(r) else { continue };
                let arch = map.row_arch(r);
                pool_of.push(
                    demand
                        .counts
                        .iter()
                        .position(|&(a, _)| Some(a) == arch)
                        .unwrap_or(usize::MAX),
                );
                caps.push(p.capacity);
            }
            let t = mtat_pools(&counts, &pool_of, &caps, &[]).t_min;
            if !t.is_finite() {
                continue;
            }
            let width = mask.count_ones() as usize;
            let per_slot = t / width as f64;
            let better = match &best {
                None => true,
                Some((bt, bw, br, _)) => {
                    per_slot < bt * (1.0 - 1e-12)
                        || (per_slot <= bt * (1.0 + 1e-12)
                            && (width < *bw || (width == *bw && rows.len() < *br)))
                }
            };
            if better {
                let columns = cols
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| mask >> k & 1 == 1)
                    .map(|(_, c)| c.id)
                    .collect();
                let n = rows.len();
                best = Some((per_slot, width, n, Pattern { rows, columns }));
            }
        }
        best.map(|(_, _, _, p)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::super::map::Processor;
    use super::*;

    fn proc(i: usize) -> Processor {
        Processor {
            id: format!("p{i}").into(),
            host: format!("p{i}").into(),
            arch: "x86_64".into(),
            capacity: 1.0,
            memory_mb: None,
        }
    }

    /// Figure 5 of the paper: nine processors, nine slots, the S-labelled cells
    /// free. Rows p1..p9 are 0..8, columns t1..t9 are 0..8.
    fn figure5() -> AllocationMap {
        let free: &[(usize, usize)] = &[
            (1, 0),
            (4, 0),
            (5, 0), // S0 S1 S2 in t1
            (1, 1),
            (4, 1),
            (5, 1), // S3 S4 S5 in t2
            (1, 3),
            (2, 3),
            (5, 3), // S6 S7 S8 in t4
            (4, 4),
            (5, 4), // S9 S10 in t5
            (1, 5), // S11 in t6
            (1, 6),
            (4, 6), // S12 S13 in t7
            (1, 7),
            (4, 7),
            (5, 7),
            (6, 7),
            (7, 7),
            (8, 7), // S14..S19 in t8
        ];
        let mut m = AllocationMap::default();
        for i in 0..9 {
            m.add_row(proc(i));
        }
        for col in 0..9u64 {
            let id = m.push_column();
            for row in 0..9 {
                if !free.contains(&(row, col as usize)) {
                    m.set(id, row, Some(99));
                }
            }
        }
        m
    }

    #[test]
    fn regular_pattern_finds_the_largest_column_pattern_of_figure_5() {
        let mut m = figure5();
        let x86 = m.intern("x86_64");
        let demand = Demand::new(&m, [(x86, 4)]);
        let p = RegularPattern.find(&m, &demand).unwrap();
        // Column t1's free set {p2, p5, p6} is contained in t1, t2 and t8:
        // size 3 * 3 = 9, the largest (t8's six rows fit only in t8: 6 * 1).
        assert_eq!(p.rows, vec![1, 4, 5]);
        assert_eq!(p.columns, vec![0, 1, 7]);
    }

    #[test]
    fn exhaustive_search_minimises_turnaround_per_slot() {
        let mut m = figure5();
        let x86 = m.intern("x86_64");
        // 6 VPs: the regular pattern gives 2 per row over 3 slots (T/w = 2/3);
        // {p2, p5, p6, p7, p8, p9} in t8 alone gives 1 per row (T/w = 1);
        // {p2, p5} in t1, t2, t7, t8 gives 3 per row over 4 slots (3/4).
        let demand = Demand::new(&m, [(x86, 6)]);
        let p = Exhaustive::default().find(&m, &demand).unwrap();
        assert_eq!(p.rows, vec![1, 4, 5]);
        assert_eq!(p.columns.len(), 3);
    }

    #[test]
    fn only_rows_of_needed_architectures_are_offered() {
        let mut m = AllocationMap::default();
        m.add_row(proc(0));
        m.add_row(Processor {
            arch: "aarch64".into(),
            ..proc(1)
        });
        m.push_column();
        let arm = m.intern("aarch64");
        let demand = Demand::new(&m, [(arm, 1)]);
        let p = RegularPattern.find(&m, &demand).unwrap();
        assert_eq!(p.rows, vec![1]);
        assert!(
            by_name("regular").is_some()
                && by_name("exhaustive").is_some()
                && by_name("x").is_none()
        );
    }
}
