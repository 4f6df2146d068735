//! `stream`: a producer sends numbered messages to a consumer, which checks
//! that each arrives once and in order; the consumer is migration-aware
//! (its state is a serde value, it waits in `recv_safe`), so it can be moved
//! between hosts while the stream runs (`mig migrate`).
//!
//! Usage: mig spawn -n 2 --wait -- stream [--count N] [--until FILE] [--pause-every K] [--direct] [--json]
//! VP 0 produces N messages, or until FILE exists (pausing 1 ms after every
//! K); VP 1 consumes and
//! prints, as its last line with --json,
//! `{"received":N,"lost":0,"duplicated":0,"out_of_order":0,"restored":R,"direct":D}`
//! (D: messages received while the two had a direct link; `--direct` asks
//! for one whenever they share a host).

use serde::{Deserialize, Serialize};

use mig_examples::{init_or_restore_or_exit, num_flag, or_die, switch};

const DATA: i32 = 1;
const END: i32 = 2;
const PROG: &str = "stream";

/// What the consumer keeps across moves.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    next: u64,
    received: u64,
    lost: u64,
    duplicated: u64,
    out_of_order: u64,
    restored: u64,
    #[serde(default)]
    direct: u64,
}

fn main() {
    let count: u64 = num_flag(PROG, "count", 10_000);
    let every: u64 = num_flag(PROG, "pause-every", 100);
    let json = switch("json");
    let until = mig_examples::flag("until").map(std::path::PathBuf::from);
    let (mut vm, mut t) = init_or_restore_or_exit(PROG, Tally::default);
    if switch("direct") {
        vm.set_route(libmig::vm::Route::Direct);
    }
    let tasks = or_die(PROG, vm.tasks());
    if tasks.len() != 2 {
        eprintln!("{PROG}: run it as a job of 2 VPs (mig spawn -n 2)");
        std::process::exit(2);
    }
    if vm.tid() == tasks[0] {
        let mut sent = 0;
        while sent < count || until.is_some() {
            or_die(PROG, vm.send(tasks[1], DATA, &sent));
            sent += 1;
            if every > 0 && sent % every == 0 {
                if until.as_ref().is_some_and(|f| f.exists()) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        or_die(PROG, vm.send(tasks[1], END, &sent));
        return;
    }
    if vm.restored() {
        t.restored += 1;
    }
    let total = loop {
        let m = or_die(PROG, vm.recv_safe(&t, Some(tasks[0]), None));
        if m.tag == END {
            break or_die(PROG, m.decode::<u64>());
        }
        let i: u64 = or_die(PROG, m.decode());
        if vm.direct_peers().contains(&tasks[0]) {
            t.direct += 1;
        }
        if i == t.next {
            t.next += 1;
            t.received += 1;
        } else if i < t.next {
            t.duplicated += 1;
        } else {
            t.out_of_order += 1;
            t.lost += i - t.next;
            t.received += 1;
            t.next = i + 1;
        }
    };
    t.lost += total.saturating_sub(t.next);
    if json {
        println!(
            "{{\"received\":{},\"lost\":{},\"duplicated\":{},\"out_of_order\":{},\"restored\":{},\"direct\":{}}}",
            t.received, t.lost, t.duplicated, t.out_of_order, t.restored, t.direct
        );
    } else {
        println!(
            "stream: received {} of {total}, lost {}, duplicated {}, out of order {}, restored {} times",
            t.received, t.lost, t.duplicated, t.out_of_order, t.restored
        );
    }
    if t.received != total || t.lost + t.duplicated + t.out_of_order > 0 {
        std::process::exit(1);
    }
}
