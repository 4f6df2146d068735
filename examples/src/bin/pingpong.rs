//! `pingpong`: latency and bandwidth between VPs, the way the PVM harness
//! measures them (`bench/pvm`): 1,000 warm-up and 10,000 timed 8-byte round
//! trips (p50/p99, nearest rank), then one-way streams of 64 KiB, 1 MiB and
//! 16 MiB messages (128 MiB per repetition, at least 4 messages; one warm-up
//! and 5 timed repetitions, median; MB = 10^6 bytes) ended by an ack. The
//! receiver copies every message into a buffer of its own, as the PVM
//! harness's receiver does with `pvm_upkbyte`.
//!
//! Start it as a job of 3 VPs on a virtual machine where VP 0 shares a host
//! with one partner and not with the other (`mig up` with a 2-processor host
//! and a 1-processor host): VP 0 measures the daemon route to the local
//! partner (VP → migd → VP), the route through two daemons to the remote
//! one (VP → migd → TCP → migd → VP), and the direct route (VP ↔ VP socket)
//! to the local one. Routes without a partner are reported as null.
//!
//! With `--spawn N` it measures spawning instead, as the PVM harness does:
//! VP 0 spawns N VPs (of this program) into its job and waits until each
//! has sent it a message; one warm-up and 5 timed repetitions, median
//! (`spawn_<N>_report_ms`).
//!
//! Usage: pingpong [--json] [--quick] [--sizes 65536,1048576,16777216]
//!        pingpong --spawn N [--json]
//! Without --json it prints `mig_<name> VALUE UNIT` lines, like the PVM
//! harness. With --json the last line is one JSON object: `rtt_8B_<route>_{p50,p99}_us`
//! and `bw_<size>_<route>_MBps` for route in daemon, direct, remote.

use std::time::Instant;

use libmig::{Route, Tid, Vm};
use mig_examples::{flag, init_or_exit, or_die, percentile, switch};

const HELLO: i32 = 1;
const PING: i32 = 2;
const PONG: i32 = 3;
const BEGIN: i32 = 4;
const DATA: i32 = 5;
const ACK: i32 = 6;
const STOP: i32 = 7;
const PROG: &str = "pingpong";

struct Plan {
    warm: usize,
    trips: usize,
    stream_bytes: usize,
    reps: usize,
    sizes: Vec<usize>,
}

fn serve(vm: &mut Vm, master: Tid) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let m = or_die(PROG, vm.recv(Some(master), None));
        match m.tag {
            PING => or_die(PROG, vm.send_bytes(master, PONG, &m.data)),
            BEGIN => {
                let count: usize = or_die(PROG, m.decode());
                let mut bytes = 0usize;
                for _ in 0..count {
                    let d = or_die(PROG, vm.recv(Some(master), Some(DATA)));
                    // Into a buffer of our own, as PVM's pvm_upkbyte does.
                    buf.clear();
                    buf.extend_from_slice(&d.data);
                    bytes += buf.len();
                }
                or_die(PROG, vm.send(master, ACK, &bytes));
            }
            STOP => return,
            _ => {}
        }
    }
}

fn rtt(vm: &mut Vm, p: Tid, plan: &Plan) -> (f64, f64) {
    let msg = [7u8; 8];
    let mut samples = Vec::with_capacity(plan.trips);
    for i in 0..plan.warm + plan.trips {
        let t0 = Instant::now();
        or_die(PROG, vm.send_bytes(p, PING, &msg));
        let r = or_die(PROG, vm.recv(Some(p), Some(PONG)));
        let dt = t0.elapsed().as_secs_f64() * 1e6;
        assert_eq!(&*r.data, &msg[..], "the echo differs");
        if i >= plan.warm {
            samples.push(dt);
        }
    }
    samples.sort_by(f64::total_cmp);
    (percentile(&samples, 50.0), percentile(&samples, 99.0))
}

fn bw(vm: &mut Vm, p: Tid, size: usize, plan: &Plan) -> f64 {
    let buf: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let count = (plan.stream_bytes / size).max(4);
    let mut rates = Vec::new();
    for rep in 0..=plan.reps {
        or_die(PROG, vm.send(p, BEGIN, &count));
        let t0 = Instant::now();
        for _ in 0..count {
            or_die(PROG, vm.send_bytes(p, DATA, &buf));
        }
        let ack = or_die(PROG, vm.recv(Some(p), Some(ACK)));
        let secs = t0.elapsed().as_secs_f64();
        let got: usize = or_die(PROG, ack.decode());
        assert_eq!(got, count * size, "the receiver got a different amount");
        if rep > 0 {
            rates.push((count * size) as f64 / secs / 1e6);
        }
    }
    rates.sort_by(f64::total_cmp);
    percentile(&rates, 50.0)
}

fn size_name(s: usize) -> String {
    if s.is_multiple_of(1 << 20) {
        format!("{}MiB", s >> 20)
    } else if s.is_multiple_of(1024) {
        format!("{}KiB", s >> 10)
    } else {
        format!("{s}B")
    }
}

/// Spawn `n` children that each say hello; the median time until all have.
fn spawn_bench(vm: &mut Vm, n: u32, json: bool) {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| PROG.to_string());
    let mut times = Vec::new();
    for rep in 0..6 {
        let t0 = Instant::now();
        let kids = or_die(PROG, vm.spawn(&exe, &["--child-hello"], n));
        for _ in 0..kids.len() {
            or_die(PROG, vm.recv(None, Some(HELLO)));
        }
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        if rep > 0 {
            times.push(ms);
        }
    }
    times.sort_by(f64::total_cmp);
    let med = percentile(&times, 50.0);
    if json {
        println!("{{\"spawn_{n}_report_ms\": {med:.3}}}");
    } else {
        println!("mig_spawn_{n}_report_ms {med:.2} ms");
    }
}

fn main() {
    let json = switch("json");
    let quick = switch("quick");
    let sizes: Vec<usize> = flag("sizes")
        .map(|v| {
            v.split(',')
                .map(|s| {
                    s.trim().parse().unwrap_or_else(|_| {
                        eprintln!("{PROG}: --sizes wants byte counts like 65536,1048576");
                        std::process::exit(2)
                    })
                })
                .collect()
        })
        .unwrap_or_else(|| vec![64 << 10, 1 << 20, 16 << 20]);
    let plan = if quick {
        Plan {
            warm: 50,
            trips: 500,
            stream_bytes: 16 << 20,
            reps: 1,
            sizes,
        }
    } else {
        Plan {
            warm: 1000,
            trips: 10_000,
            stream_bytes: 128 << 20,
            reps: 5,
            sizes,
        }
    };
    let mut vm = init_or_exit(PROG);
    if switch("child-hello") {
        if let Some(p) = vm.parent() {
            or_die(PROG, vm.send(p, HELLO, &()));
        }
        return;
    }
    if let Some(n) = flag("spawn") {
        let n: u32 = n.parse().unwrap_or_else(|_| {
            eprintln!("{PROG}: --spawn wants a number of VPs");
            std::process::exit(2)
        });
        return spawn_bench(&mut vm, n, json);
    }
    let tasks = or_die(PROG, vm.tasks());
    let master = tasks[0];
    let host = vm.identity().host.clone();
    if vm.tid() != master {
        or_die(PROG, vm.send(master, HELLO, &host));
        return serve(&mut vm, master);
    }
    let mut local = None;
    let mut remote = None;
    for _ in 1..tasks.len() {
        let m = or_die(PROG, vm.recv(None, Some(HELLO)));
        let h: String = or_die(PROG, m.decode());
        if h == host {
            local = local.or(Some(m.from));
        } else {
            remote = remote.or(Some(m.from));
        }
    }
    let mut out = serde_json::Map::new();
    let mut run = |vm: &mut Vm, route: &str, p: Option<Tid>| {
        let (r50, r99, bws) = match p {
            Some(p) => {
                let (a, b) = rtt(vm, p, &plan);
                let bws: Vec<Option<f64>> = plan
                    .sizes
                    .iter()
                    .map(|&s| Some(bw(vm, p, s, &plan)))
                    .collect();
                (Some(a), Some(b), bws)
            }
            None => (None, None, vec![None; plan.sizes.len()]),
        };
        if !json && p.is_none() {
            println!("# {route}: no partner for this route");
        }
        let mut put = |name: String, v: Option<f64>, unit: &str| {
            if let (false, Some(v)) = (json, v) {
                // (Round trips of a microsecond or less need the second
                // decimal: MPICH's are a quarter of one.)
                if unit == "us" {
                    println!("mig_{name} {v:.2} {unit}");
                } else {
                    println!("mig_{name} {v:.1} {unit}");
                }
            }
            out.insert(name, v.into());
        };
        put(format!("rtt_8B_{route}_p50_us"), r50, "us");
        put(format!("rtt_8B_{route}_p99_us"), r99, "us");
        for (&s, r) in plan.sizes.iter().zip(bws) {
            put(format!("bw_{}_{route}_MBps", size_name(s)), r, "MB/s");
        }
    };
    run(&mut vm, "daemon", local);
    run(&mut vm, "remote", remote);
    vm.set_route(Route::Direct);
    run(&mut vm, "direct", local);
    let direct_ok = local.is_some_and(|l| vm.direct_peers().contains(&l));
    out.insert("direct_link".into(), direct_ok.into());
    for p in tasks[1..].iter() {
        or_die(PROG, vm.send(*p, STOP, &()));
    }
    if json {
        println!("{}", serde_json::Value::Object(out));
    }
}
