//! `heat`: a Jacobi heat stencil. The grid's interior rows are split into
//! blocks, one per VP (in VP order); every iteration each VP sends its edge
//! rows to its neighbours and receives their halo rows, then updates its
//! block. At the end VP 0 gathers the grid, runs the same computation
//! serially, and checks that both are bit for bit identical.
//! Run by hand (not as a VP) it only runs the serial computation. It is
//! migration-aware: any VP can be moved (`mig migrate`) at any point and
//! the answer stays bit for bit the same.
//!
//! Usage: heat [--rows N] [--cols N] [--iters N]   (defaults 256, 256, 500)
//! Prints: `heat: RxC, I iterations on K VPs, checksum …: identical to the serial run: ok`

use libmig::Tid;
use mig_examples::{in_vm, init_or_restore_or_exit, num_flag, or_die};

const UP: i32 = 1;
const DOWN: i32 = 2;
const BLOCK: i32 = 3;
const PROG: &str = "heat";

/// The grid at the start: the top edge is hot, everything else cold.
fn initial(rows: usize, cols: usize) -> Vec<Vec<f64>> {
    let mut g = vec![vec![0.0; cols]; rows];
    g[0].iter_mut().for_each(|x| *x = 100.0);
    g
}

/// One Jacobi step of rows 1..len-1 of `g` (rows 0 and len-1 are halos or
/// fixed edges), columns 1..cols-1.
fn step(g: &[Vec<f64>], next: &mut [Vec<f64>]) {
    let cols = g[0].len();
    for i in 1..g.len() - 1 {
        for j in 1..cols - 1 {
            next[i][j] = 0.25 * (g[i - 1][j] + g[i + 1][j] + g[i][j - 1] + g[i][j + 1]);
        }
    }
}

fn serial(rows: usize, cols: usize, iters: usize) -> Vec<Vec<f64>> {
    let mut g = initial(rows, cols);
    let mut next = g.clone();
    for _ in 0..iters {
        step(&g, &mut next);
        std::mem::swap(&mut g, &mut next);
    }
    g
}

fn checksum(g: &[Vec<f64>]) -> f64 {
    g.iter().flatten().sum()
}

/// Interior rows [lo, hi) of VP `k` of `n` (rows 1..rows-1 are interior).
fn block(rows: usize, k: usize, n: usize) -> (usize, usize) {
    let inner = rows - 2;
    (1 + inner * k / n, 1 + inner * (k + 1) / n)
}

/// What a VP of `heat` keeps across a move: its rows (with halos), the
/// iteration, and how far into the iteration's exchange it got.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Block {
    g: Vec<Vec<f64>>,
    iter: usize,
    sent: bool,
    got_up: bool,
    got_down: bool,
}

fn main() {
    let rows: usize = num_flag(PROG, "rows", 256);
    let cols: usize = num_flag(PROG, "cols", 256);
    let iters: usize = num_flag(PROG, "iters", 500);
    if rows < 3 || cols < 3 {
        eprintln!("{PROG}: the grid needs at least 3 rows and 3 columns");
        std::process::exit(2);
    }
    if !in_vm() {
        let g = serial(rows, cols, iters);
        println!(
            "heat: {rows}x{cols}, {iters} iterations serially, checksum {:.12e}",
            checksum(&g)
        );
        return;
    }
    let (mut vm, mut st) = init_or_restore_or_exit(PROG, Block::default);
    let tasks: Vec<Tid> = or_die(PROG, vm.tasks());
    let n = tasks.len();
    let k = tasks.iter().position(|&t| t == vm.tid()).unwrap_or(0);
    if rows - 2 < n {
        eprintln!("{PROG}: {n} VPs need at least {} rows", n + 2);
        std::process::exit(2);
    }
    let (lo, hi) = block(rows, k, n);
    let full = initial(rows, cols);
    if st.g.is_empty() {
        // Local rows lo-1..=hi: a halo (or fixed edge) on each side.
        st.g = full[lo - 1..=hi].to_vec();
    }
    let mut next = st.g.clone();
    let up = (k > 0).then(|| tasks[k - 1]);
    let down = (k + 1 < n).then(|| tasks[k + 1]);
    let last = st.g.len() - 1;
    // Each step is recorded in the state as it is done, so a VP moved in
    // the middle of an iteration neither sends an edge twice nor loses a
    // halo it already has.
    let (t0, first) = (std::time::Instant::now(), st.iter);
    while st.iter < iters {
        if !st.sent {
            if let Some(u) = up {
                or_die(PROG, vm.send(u, UP, &st.g[1]));
            }
            if let Some(d) = down {
                or_die(PROG, vm.send(d, DOWN, &st.g[last - 1]));
            }
            st.sent = true;
        }
        if let (Some(u), false) = (up, st.got_up) {
            let m = or_die(PROG, vm.recv_safe(&st, Some(u), Some(DOWN)));
            st.g[0] = or_die(PROG, m.decode());
            st.got_up = true;
        }
        if let (Some(d), false) = (down, st.got_down) {
            let m = or_die(PROG, vm.recv_safe(&st, Some(d), Some(UP)));
            st.g[last] = or_die(PROG, m.decode());
            st.got_down = true;
        }
        next[0].clone_from(&st.g[0]);
        next[last].clone_from(&st.g[last]);
        step(&st.g, &mut next);
        std::mem::swap(&mut st.g, &mut next);
        st.iter += 1;
        st.sent = false;
        st.got_up = false;
        st.got_down = false;
        or_die(PROG, vm.safe_point(&st));
    }
    let g = st.g;
    let mine: Vec<Vec<f64>> = g[1..last].to_vec();
    if k != 0 {
        or_die(PROG, vm.send(tasks[0], BLOCK, &mine));
        return;
    }
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "heat: {} iterations in {secs:.3} s: {:.0} iterations/s",
        iters - first,
        (iters - first) as f64 / secs.max(1e-9)
    );
    let mut grid = vec![full[0].clone()];
    grid.extend(mine);
    for &t in &tasks[1..] {
        let b: Vec<Vec<f64>> = or_die(PROG, or_die(PROG, vm.recv(Some(t), Some(BLOCK))).decode());
        grid.extend(b);
    }
    grid.push(full[rows - 1].clone());
    let reference = serial(rows, cols, iters);
    let same = grid.len() == reference.len()
        && grid
            .iter()
            .flatten()
            .zip(reference.iter().flatten())
            .all(|(a, b)| a.to_bits() == b.to_bits());
    println!(
        "heat: {rows}x{cols}, {iters} iterations on {n} VPs, checksum {:.12e}: {}",
        checksum(&grid),
        if same {
            "identical to the serial run: ok"
        } else {
            "DIFFERS from the serial run"
        }
    );
    if !same {
        std::process::exit(1);
    }
}
