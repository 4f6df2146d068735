//! What the master's replicated state costs as the virtual machine grows:
//! its size, the time to serialize it (`Master::export`, what the server
//! does before each proposal), the time to propose it to three voters and
//! the bytes each other voter is sent; and a spawn of 1,024 VPs on 128
//! hosts (the master's time, its decisions, the directory messages they
//! make). Run with `cargo bench -p mig-daemon --bench master_state`
//! (`MIG_BENCH_VPS=20000,...` for other sizes).

use std::time::{Duration, Instant};

use libmig::msg::{HostFacts, Request, SpawnSpec, ToHost, ToMaster};
use migd::consensus::{Consensus, Said};
use migd::master::{join_directories, Master, Out, Requester};

fn facts(name: &str, processors: u32) -> HostFacts {
    HostFacts {
        name: name.into(),
        arch: "x86_64-linux".into(),
        processors,
        capacity: 1.0,
        memory_mb: 16_384,
        addr: "127.0.0.1:7000".into(),
        pid: 1,
        offered: true,
    }
}

/// A master of `hosts` hosts of `procs` processors each.
fn machine(hosts: usize, procs: u32, now: Instant) -> Master {
    let (mut m, _) = Master::new(facts("h0", procs), now, Duration::from_millis(100));
    for i in 1..hosts {
        m.register(facts(&format!("h{i}"), procs), now);
    }
    m
}

fn spec(n: u32, wait: bool) -> SpawnSpec {
    SpawnSpec {
        program: "/bin/true".into(),
        args: vec![],
        n,
        cwd: "/".into(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        wait,
        parent: None,
        independent: false,
        restartable: false,
        memory_mb: None,
        class: None,
        io: None,
        bid_hosts: Vec::new(),
    }
}

/// `n` VPs spawned and each said to run where it was started.
fn with_vps(m: &mut Master, n: u32) {
    let out = m.control(Requester::Local(7), "h0", Request::Spawn(spec(n, false)));
    for o in out {
        if let Out::ToHost(host, ToHost::Start(s)) = o {
            m.from_host(
                &host,
                ToMaster::Started {
                    tid: s.tid,
                    pid: 1000,
                },
            );
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Three voters in memory, voter 1 leading.
fn voters() -> Vec<Consensus> {
    let mut v = vec![
        Consensus::founding(1).expect("founding"),
        Consensus::joining(2).expect("joining"),
        Consensus::joining(3).expect("joining"),
    ];
    let said = v[0].change_voters(&[2, 3], &[]).expect("change");
    settle(&mut v, said);
    for _ in 0..4 {
        let said = v[0].tick();
        settle(&mut v, said);
    }
    v
}

/// Carry messages until none are left; the bytes sent to voters 2 and 3.
fn settle(v: &mut [Consensus], said: Vec<Said>) -> usize {
    let mut queue = said;
    let mut bytes = 0;
    while !queue.is_empty() {
        let mut next = Vec::new();
        for Said::Send { to, msg } in queue {
            if to != 1 {
                bytes += msg.len();
            }
            if let Some(c) = v.get_mut(to as usize - 1) {
                next.extend(c.step(&msg).expect("a raft message"));
            }
        }
        queue = next;
    }
    bytes
}

fn state(vps: u32) {
    let now = Instant::now();
    let mut m = machine(128, 8, now);
    with_vps(&mut m, vps);
    let exports: Vec<Duration> = (0..21)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(m.export());
            t.elapsed()
        })
        .collect();
    let bytes = m.export();
    let mut v = voters();
    let mut proposes = Vec::new();
    let mut sent = 0;
    for _ in 0..11 {
        let t = Instant::now();
        let (_, said) = v[0].propose(bytes.clone()).expect("propose");
        proposes.push(t.elapsed());
        sent = settle(&mut v, said);
    }
    println!(
        "{vps:>6} VPs on 128 hosts: state {:>9} bytes, export {:>7.2} ms, propose {:>6.2} ms, \
         {:>9} bytes to the other two voters a proposal",
        bytes.len(),
        median(exports).as_secs_f64() * 1e3,
        median(proposes).as_secs_f64() * 1e3,
        sent
    );
}

fn spawn_burst() {
    let now = Instant::now();
    let mut m = machine(128, 1, now);
    let t = Instant::now();
    let out = m.control(Requester::Local(7), "h0", Request::Spawn(spec(1024, true)));
    let took = t.elapsed();
    let dirs = |o: &[Out]| {
        o.iter()
            .filter(|o| matches!(o, Out::Broadcast(ToHost::Directory(_))))
            .count()
    };
    let before = dirs(&out);
    let joined = join_directories(out.clone());
    println!(
        "spawn of 1024 VPs on 128 hosts: {:.2} ms, {} decisions, {} directory broadcasts \
         ({} once joined: {} messages to hosts instead of {})",
        took.as_secs_f64() * 1e3,
        out.len(),
        before,
        dirs(&joined),
        dirs(&joined) * 127,
        before * 127
    );
}

fn main() {
    spawn_burst();
    let sizes: Vec<u32> = std::env::var("MIG_BENCH_VPS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_024, 10_000]);
    for vps in sizes {
        state(vps);
    }
}
