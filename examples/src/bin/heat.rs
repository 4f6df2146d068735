//! `heat`: a Jacobi heat stencil. The grid's interior rows are split into
//! blocks, one per VP (in VP order); every iteration each VP sends its edge
//! rows to its neighbours and receives their halo rows, then updates its
//! block. At the end VP 0 gathers the grid, runs the same computation
//! serially, and checks that both are bit for bit identical.
//! Run by hand (not as a VP) it only runs the serial computation.
//!
//! Usage: heat [--rows N] [--cols N] [--iters N]   (defaults 256, 256, 500)
//! Prints: `heat: RxC, I iterations on K VPs, checksum …: identical to the serial run: ok`

use libmig::Tid;
use mig_examples::{in_vm, init_or_exit, num_flag, or_die};

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
    let mut vm = init_or_exit(PROG);
    let tasks: Vec<Tid> = or_die(PROG, vm.tasks());
    let n = tasks.len();
    let k = tasks.iter().position(|&t| t == vm.tid()).unwrap_or(0);
    if rows - 2 < n {
        eprintln!("{PROG}: {n} VPs need at least {} rows", n + 2);
        std::process::exit(2);
    }
    let (lo, hi) = block(rows, k, n);
    // Local rows lo-1..=hi: a halo (or fixed edge) on each side.
    let full = initial(rows, cols);
    let mut g: Vec<Vec<f64>> = full[lo - 1..=hi].to_vec();
    let mut next = g.clone();
    let up = (k > 0).then(|| tasks[k - 1]);
    let down = (k + 1 < n).then(|| tasks[k + 1]);
    let last = g.len() - 1;
    for _ in 0..iters {
        if let Some(u) = up {
            or_die(PROG, vm.send(u, UP, &g[1]));
        }
        if let Some(d) = down {
            or_die(PROG, vm.send(d, DOWN, &g[last - 1]));
        }
        if let Some(u) = up {
            g[0] = or_die(PROG, or_die(PROG, vm.recv(Some(u), Some(DOWN))).decode());
        }
        if let Some(d) = down {
            g[last] = or_die(PROG, or_die(PROG, vm.recv(Some(d), Some(UP))).decode());
        }
        next[0].clone_from(&g[0]);
        next[last].clone_from(&g[last]);
        step(&g, &mut next);
        std::mem::swap(&mut g, &mut next);
    }
    let mine: Vec<Vec<f64>> = g[1..last].to_vec();
    if k != 0 {
        or_die(PROG, vm.send(tasks[0], BLOCK, &mine));
        return;
    }
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
