//! `groups`: every VP of the job joins a group and the group's collectives
//! are checked against what they must give: a barrier, a broadcast from
//! instance 0, reductions (sum and max built in, and a user operation on
//! vectors), gather and scatter. Instance 0 prints the verdict.
//!
//! Usage: mig spawn -n N --wait groups
//! Prints (instance 0): `groups: N members: barrier bcast reduce gather scatter: ok`

use libmig::op;
use mig_examples::{init_or_exit, or_die};

const PROG: &str = "groups";
const G: &str = "workers";

fn main() {
    let mut vm = init_or_exit(PROG);
    let n = or_die(PROG, vm.tasks()).len() as u32;
    let me = or_die(PROG, vm.join_group(G));
    // Everyone has joined once all n reach the barrier.
    or_die(PROG, vm.barrier(G, n));
    let size = or_die(PROG, vm.group_size(G)) as u32;
    let mut wrong = Vec::new();
    if size != n {
        wrong.push(format!("size {size}, expected {n}"));
    }
    // Broadcast from instance 0.
    let word = if me == 0 {
        let w = "gang".to_string();
        or_die(PROG, vm.bcast(G, 1, &w));
        w
    } else {
        let root = or_die(PROG, vm.members(G))[0].1;
        or_die(
            PROG,
            or_die(PROG, vm.recv(Some(root), Some(1))).decode::<String>(),
        )
    };
    if word != "gang" {
        wrong.push(format!("bcast gave {word:?}"));
    }
    let x = u64::from(me) + 1;
    let sum = or_die(PROG, vm.reduce(G, 2, 0, x * x, op::sum));
    let max = or_die(PROG, vm.reduce(G, 3, 0, x, op::max));
    let vec = or_die(
        PROG,
        vm.reduce(G, 4, 0, vec![x, 1, 2 * x], op::elementwise(op::sum)),
    );
    let all = or_die(PROG, vm.gather(G, 5, 0, me));
    let parts = (me == 0).then(|| (0..n).map(|i| i * 10).collect::<Vec<u32>>());
    let part = or_die(PROG, vm.scatter(G, 6, 0, parts));
    if part != me * 10 {
        wrong.push(format!("instance {me} got part {part}"));
    }
    or_die(PROG, vm.barrier(G, 0));
    if me == 0 {
        let m = u64::from(n);
        let want_sum = m * (m + 1) * (2 * m + 1) / 6;
        if sum != Some(want_sum) {
            wrong.push(format!("sum {sum:?}, expected {want_sum}"));
        }
        if max != Some(m) {
            wrong.push(format!("max {max:?}, expected {m}"));
        }
        if vec != Some(vec![m * (m + 1) / 2, m, m * (m + 1)]) {
            wrong.push(format!("vector sum {vec:?}"));
        }
        if all != Some((0..n).collect()) {
            wrong.push(format!("gather {all:?}"));
        }
    }
    or_die(PROG, vm.leave_group(G));
    if wrong.is_empty() {
        if me == 0 {
            println!("groups: {n} members: barrier bcast reduce gather scatter: ok");
        }
    } else {
        println!("groups: instance {me}: WRONG: {}", wrong.join("; "));
        std::process::exit(1);
    }
}
