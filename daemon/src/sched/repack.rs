//! Job re-packing (seed 001): shift whole jobs between time slots so that
//! free fragments merge and slots can be deleted, without moving any VP to
//! another processor.
//!
//! What lives here: `repack`, which takes the pieces of a map (a piece is one
//! job in one slot: its job and its rows) and returns a slot for every piece
//! using as few slots as it can find. What does not: applying the result to
//! the scheduler's map (the scheduler does) or reading matrices (the CLI).
//!
//! Seed 001 works on a linear array, where legal cuts make Property 2 hold.
//! Our processors are an unordered set and a job's rows need not be
//! contiguous, so a shift is legal when the job's rows are free in the target
//! slot and the job is not already there. Choosing slots is then colouring
//! the conflict graph of pieces (two pieces conflict when they share a row
//! or a job), with these steps, each kept only if it deletes a slot:
//!
//! 1. direct shifts: empty the emptiest slot by moving each of its pieces to
//!    the first other slot with room (few changes, cheap, run on every event);
//! 2. a DSatur colouring of all pieces (up to `GLOBAL_LIMIT` pieces);
//! 3. an exact branch-and-bound colouring on small maps (`EXACT_LIMIT`).
//!
//! The lower bound is the largest number of pieces on one row (or of one
//! job); reaching it stops the search.

use super::map::BitSet;

/// One job in one slot.
#[derive(Debug, Clone)]
pub struct Piece {
    /// The job (pieces of one job must stay in different slots).
    pub job: u32,
    /// The processors it holds.
    pub rows: BitSet,
}

/// Largest number of pieces for the global colouring step.
pub const GLOBAL_LIMIT: usize = 512;
/// Largest number of pieces for the exact step.
pub const EXACT_LIMIT: usize = 40;
const EXACT_NODE_BUDGET: u64 = 200_000;

fn conflict(a: &Piece, b: &Piece) -> bool {
    a.job == b.job || !a.rows.is_disjoint(&b.rows)
}

/// The least number of slots any packing needs.
pub fn lower_bound(pieces: &[Piece]) -> usize {
    let mut per_row: std::collections::HashMap<usize, usize> = Default::default();
    let mut per_job: std::collections::HashMap<u32, usize> = Default::default();
    for p in pieces {
        *per_job.entry(p.job).or_default() += 1;
        for r in p.rows.iter() {
            *per_row.entry(r).or_default() += 1;
        }
    }
    per_row
        .values()
        .chain(per_job.values())
        .copied()
        .max()
        .unwrap_or(0)
}

/// Renumber slots `0..k` in order of first use by the original slot order.
fn normalise(slot_of: &mut [usize], original: &[usize]) -> usize {
    let mut first: Vec<(usize, usize)> = Vec::new(); // (new slot, min original)
    for (i, &s) in slot_of.iter().enumerate() {
        match first.iter_mut().find(|(x, _)| *x == s) {
            Some(e) => e.1 = e.1.min(original[i]),
            None => first.push((s, original[i])),
        }
    }
    first.sort_by_key(|&(s, o)| (o, s));
    for s in slot_of.iter_mut() {
        *s = first.iter().position(|&(x, _)| x == *s).unwrap_or(0);
    }
    first.len()
}

/// Step 1: delete slots by shifting every piece of one slot elsewhere.
fn direct_shifts(pieces: &[Piece], slot_of: &mut [usize], slots: usize) -> usize {
    let mut occ: Vec<BitSet> = vec![BitSet::default(); slots];
    let mut jobs: Vec<Vec<u32>> = vec![Vec::new(); slots];
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); slots];
    for (i, p) in pieces.iter().enumerate() {
        occ[slot_of[i]].union_with(&p.rows);
        jobs[slot_of[i]].push(p.job);
        members[slot_of[i]].push(i);
    }
    let mut live: Vec<usize> = (0..slots).filter(|&s| !members[s].is_empty()).collect();
    loop {
        let mut order = live.clone();
        order.sort_by_key(|&s| (members[s].len(), occ[s].len(), s));
        let mut deleted = None;
        'slot: for &s in &order {
            // Necessary: every row of s is free in at least one other slot.
            let mut common: Option<BitSet> = None;
            for &t in live.iter().filter(|&&t| t != s) {
                match &mut common {
                    None => common = Some(occ[t].clone()),
                    Some(c) => c.intersect_with(&occ[t]),
                }
            }
            match &common {
                None => continue,
                Some(c) if !c.is_disjoint(&occ[s]) => continue,
                Some(_) => {}
            }
            let mut moves: Vec<(usize, usize)> = Vec::new();
            let mut trial_occ: Vec<(usize, BitSet)> = Vec::new();
            let mut trial_jobs: Vec<(usize, u32)> = Vec::new();
            for &i in &members[s] {
                let p = &pieces[i];
                let target = live.iter().copied().filter(|&t| t != s).find(|&t| {
                    let extra_rows = trial_occ
                        .iter()
                        .filter(|(x, _)| *x == t)
                        .all(|(_, b)| b.is_disjoint(&p.rows));
                    let extra_job = trial_jobs.iter().any(|&(x, j)| x == t && j == p.job);
                    occ[t].is_disjoint(&p.rows)
                        && extra_rows
                        && !jobs[t].contains(&p.job)
                        && !extra_job
                });
                match target {
                    Some(t) => {
                        moves.push((i, t));
                        trial_occ.push((t, p.rows.clone()));
                        trial_jobs.push((t, p.job));
                    }
                    None => continue 'slot,
                }
            }
            for (i, t) in moves {
                slot_of[i] = t;
                occ[t].union_with(&pieces[i].rows);
                jobs[t].push(pieces[i].job);
                members[t].push(i);
            }
            members[s].clear();
            jobs[s].clear();
            occ[s] = BitSet::default();
            deleted = Some(s);
            break;
        }
        match deleted {
            Some(s) => live.retain(|&x| x != s),
            None => return live.len(),
        }
    }
}

/// Step 2: DSatur greedy colouring.
fn dsatur(pieces: &[Piece], adj: &[Vec<usize>]) -> Vec<usize> {
    let n = pieces.len();
    let mut color = vec![usize::MAX; n];
    // The colours each piece's coloured neighbours have (colours are below
    // `n`), and how many: kept as pieces are coloured, not counted again.
    let words = n.div_ceil(64).max(1);
    let mut seen = vec![0u64; n * words];
    let mut saturation = vec![0usize; n];
    for _ in 0..n {
        let pick = (0..n)
            .filter(|&i| color[i] == usize::MAX)
            .max_by_key(|&i| (saturation[i], adj[i].len(), std::cmp::Reverse(i)));
        let Some(i) = pick else { break };
        // The least colour no neighbour has.
        let mine = &seen[i * words..(i + 1) * words];
        let c = mine
            .iter()
            .position(|&w| w != u64::MAX)
            .map_or(n, |k| k * 64 + (!mine[k]).trailing_zeros() as usize);
        color[i] = c;
        for &j in &adj[i] {
            let (w, bit) = (j * words + c / 64, 1u64 << (c % 64));
            if seen[w] & bit == 0 {
                seen[w] |= bit;
                saturation[j] += 1;
            }
        }
    }
    color
}

/// Step 3: exact colouring with at most `k - 1` colours, if one exists
/// within the node budget.
fn exact_better(adj: &[Vec<usize>], k: usize) -> Option<Vec<usize>> {
    fn go(
        i: usize,
        order: &[usize],
        adj: &[Vec<usize>],
        limit: usize,
        color: &mut [usize],
        used: usize,
        nodes: &mut u64,
    ) -> bool {
        if i == order.len() {
            return true;
        }
        *nodes += 1;
        if *nodes > EXACT_NODE_BUDGET {
            return false;
        }
        let v = order[i];
        for c in 0..(used + 1).min(limit) {
            if adj[v].iter().all(|&j| color[j] != c) {
                color[v] = c;
                if go(i + 1, order, adj, limit, color, used.max(c + 1), nodes) {
                    return true;
                }
                color[v] = usize::MAX;
            }
        }
        false
    }
    let n = adj.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(adj[i].len()));
    let mut best = None;
    let mut limit = k.saturating_sub(1);
    while limit > 0 {
        let mut color = vec![usize::MAX; n];
        let mut nodes = 0;
        if go(0, &order, adj, limit, &mut color, 0, &mut nodes) {
            best = Some(color);
            limit -= 1;
        } else {
            break;
        }
    }
    best
}

/// Re-pack: given each piece's current slot (`slot_of`, values below
/// `slots`), return a new slot for every piece (numbered from 0, ordered by
/// the earliest original slot they hold) and the number of slots used.
/// Pieces that do not conflict may share a slot; the result never uses more
/// slots than it was given.
pub fn repack(
    pieces: &[Piece],
    slot_of: &[usize],
    slots: usize,
    thorough: bool,
) -> (Vec<usize>, usize) {
    let mut best = slot_of.to_vec();
    let mut count = direct_shifts(pieces, &mut best, slots);
    if thorough && pieces.len() <= GLOBAL_LIMIT && count > lower_bound(pieces) {
        let bound = lower_bound(pieces);
        let adj: Vec<Vec<usize>> = (0..pieces.len())
            .map(|i| {
                (0..pieces.len())
                    .filter(|&j| j != i && conflict(&pieces[i], &pieces[j]))
                    .collect()
            })
            .collect();
        let colored = dsatur(pieces, &adj);
        let used = colored.iter().copied().max().map_or(0, |m| m + 1);
        if used < count {
            best = colored;
            count = used;
        }
        if count > bound && pieces.len() <= EXACT_LIMIT {
            if let Some(c) = exact_better(&adj, count) {
                count = c.iter().copied().max().map_or(0, |m| m + 1);
                best = c;
            }
        }
    }
    let k = normalise(&mut best, slot_of);
    debug_assert!(k == count || pieces.is_empty());
    (best, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// DSatur the long way: each step counts every uncoloured piece's
    /// distinct neighbour colours again, and tries colours from 0 up.
    fn dsatur_by_counting(n: usize, adj: &[Vec<usize>]) -> Vec<usize> {
        let mut color = vec![usize::MAX; n];
        for _ in 0..n {
            let pick = (0..n).filter(|&i| color[i] == usize::MAX).max_by_key(|&i| {
                let mut seen: Vec<usize> = adj[i]
                    .iter()
                    .map(|&j| color[j])
                    .filter(|&c| c != usize::MAX)
                    .collect();
                seen.sort_unstable();
                seen.dedup();
                (seen.len(), adj[i].len(), std::cmp::Reverse(i))
            });
            let Some(i) = pick else { break };
            let mut c = 0;
            while adj[i].iter().any(|&j| color[j] == c) {
                c += 1;
            }
            color[i] = c;
        }
        color
    }

    proptest! {
        /// The colouring kept step by step is the one counted again at
        /// every step, piece for piece (up to 130 pieces: several words of
        /// colours).
        #[test]
        fn dsatur_colours_as_counting_again_does(
            pieces in proptest::collection::vec((0u32..20, proptest::collection::vec(0usize..40, 1..5)), 0..130)
        ) {
            let pieces: Vec<Piece> = pieces
                .into_iter()
                .map(|(job, rows)| piece(job, &rows))
                .collect();
            let adj: Vec<Vec<usize>> = (0..pieces.len())
                .map(|i| {
                    (0..pieces.len())
                        .filter(|&j| j != i && conflict(&pieces[i], &pieces[j]))
                        .collect()
                })
                .collect();
            prop_assert_eq!(dsatur(&pieces, &adj), dsatur_by_counting(pieces.len(), &adj));
        }
    }

    fn piece(job: u32, rows: &[usize]) -> Piece {
        let mut s = BitSet::default();
        for &r in rows {
            s.insert(r);
        }
        Piece { job, rows: s }
    }

    fn valid(pieces: &[Piece], slot_of: &[usize]) -> bool {
        (0..pieces.len()).all(|i| {
            (0..pieces.len())
                .all(|j| i == j || slot_of[i] != slot_of[j] || !conflict(&pieces[i], &pieces[j]))
        })
    }

    #[test]
    fn seed_001_figure_2_deletes_a_slot() {
        // Eight processors, three slots; after J' and J'' leave slot 2 the
        // jobs can be shifted so that slot 3 empties (no processor changes).
        // S1: J1 on 0-1, J2 on 2-3, free 4-7
        // S2: J3 on 4-5, free 0-3 and 6-7 (J', J'' gone)
        // S3: J5 on 0-1, J6 on 2-3, J7 on 6-7, free 4-5
        let pieces = vec![
            piece(1, &[0, 1]),
            piece(2, &[2, 3]),
            piece(3, &[4, 5]),
            piece(5, &[0, 1]),
            piece(6, &[2, 3]),
            piece(7, &[6, 7]),
        ];
        let slot_of = vec![0, 0, 1, 2, 2, 2];
        let (out, k) = repack(&pieces, &slot_of, 3, false);
        assert_eq!(k, 2);
        assert!(valid(&pieces, &out));
    }

    #[test]
    fn blocked_jobs_keep_their_slots() {
        // The example: job 3 (rows 5-7) and job 4 (rows 4-5) share row 5.
        let pieces = vec![
            piece(1, &[0, 1]),
            piece(2, &[2, 3]),
            piece(3, &[5, 6, 7]),
            piece(4, &[4, 5]),
        ];
        let (out, k) = repack(&pieces, &[0, 0, 0, 1], 2, true);
        assert_eq!(k, 2);
        assert!(valid(&pieces, &out));
    }

    #[test]
    fn a_cycle_of_conflicts_packs_into_two_slots() {
        // A 4-cycle of conflicts spread over 3 slots packs into 2 (its bound).
        let pieces = vec![
            piece(1, &[0, 1]),
            piece(2, &[1, 2]),
            piece(3, &[2, 3]),
            piece(4, &[3, 0]),
        ];
        let (out, k) = repack(&pieces, &[0, 1, 2, 1], 3, true);
        assert!(valid(&pieces, &out));
        assert_eq!(k, 2);
    }

    proptest! {
        #[test]
        fn repack_is_valid_and_never_worse(
            raw in prop::collection::vec((0u32..6, prop::collection::vec(0usize..6, 1..4), 0usize..4), 1..10)
        ) {
            // Build a valid starting layout: put each piece into its requested
            // slot if it fits, else into a fresh slot.
            let mut pieces = Vec::new();
            let mut slot_of: Vec<usize> = Vec::new();
            let mut slots = 4;
            for (job, rows, s) in raw {
                let p = piece(job, &rows);
                let fits = |s: usize, pieces: &Vec<Piece>, slot_of: &Vec<usize>| {
                    (0..pieces.len()).all(|j| slot_of[j] != s || !conflict(&p, &pieces[j]))
                };
                let slot = if fits(s, &pieces, &slot_of) { s } else { slots += 1; slots - 1 };
                pieces.push(p);
                slot_of.push(slot);
            }
            let mut used: Vec<usize> = slot_of.clone(); used.sort(); used.dedup();
            let (out, k) = repack(&pieces, &slot_of, slots, true);
            let (quick, kq) = repack(&pieces, &slot_of, slots, false);
            prop_assert!(valid(&pieces, &quick));
            prop_assert!(k <= kq);
            prop_assert!(valid(&pieces, &out));
            prop_assert!(k <= used.len());
            prop_assert!(k >= lower_bound(&pieces));
            prop_assert!(out.iter().all(|&s| s < k));
        }
    }
}
