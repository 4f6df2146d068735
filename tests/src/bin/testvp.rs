//! `testvp MODE`: small VP programs the integration tests start on real
//! daemons. Each prints what it saw on stdout and exits non-zero (with the
//! reason on stderr) when something is not as it must be.
//!
//! * `fifo N` — VP 0 receives N messages from every other VP (tags 1 and 2
//!   alternating, some senders switching to direct links half-way) and
//!   checks wildcards, filters, probe, try_recv, timeouts and per-sender
//!   order;
//! * `notify` — spawns a child that exits 3 and waits for its exit notice,
//!   then reports hosts leaving and joining;
//! * `exit3` — checks it has a parent and exits 3;
//! * `big` — VP 0 sends 64 MiB to VP 1, which checks every byte;
//! * `burst ROUTE` — VP 0 sends 60 large messages (128 KiB to 3 MiB, each
//!   its own pattern) as fast as it can, by the daemons or (`direct`) a
//!   direct link; VP 1 keeps every fourth one a while before checking it:
//!   a shared buffer used again too early would show;
//! * `errors` — the errors a program can meet, each a clear `Err`;
//! * `garbage` — writes junk on its socket before `init`, then finds it
//!   has been disconnected;
//! * `flood MIB` — VP 0 streams MIB MiB in 16 MiB messages to a slow VP 1;
//! * `spinner MS` — says it can be moved, then spins MS ms without ever
//!   reaching a safe point;
//! * `spin FILE` — burns CPU, migration-aware, until FILE (or FILE.K for
//!   VP K) exists, then says how many hosts it ran on;
//! * `hold MIB [check]` — holds MIB MiB of state (with `check`, a
//!   pattern it checks byte for byte after each move) until told to stop;
//! * `ballast MIB FILE` — holds MIB MiB of a pattern, reaching a safe point
//!   every few milliseconds, until FILE exists; then checks every byte and
//!   says how many lives it had (starts from an image count);
//! * `respawn FILE` — spawns a `spin FILE` child once FILE.spawn exists
//!   (after a checkpoint, in the tests), ends when FILE exists;
//! * `sequence FILE` — VP 0 streams numbered messages to VP 1 until FILE
//!   exists; VP 1 checks that none comes from a run its job went back on;
//! * `select N` — VP 1 sends N messages to VP 0 over a direct link, now and
//!   then pausing; VP 0 waits for them on its sockets itself (`fds` and
//!   poll, as a PVM program's `select` on `pvm_getfds` does) and fails if
//!   a wait ends without one while some are still to come.
//! * `relay FILE` — a token goes round the VPs (0, 1, ..., 0) until FILE
//!   exists, each VP spinning a millisecond on it and checking that it
//!   gets every number once and in order (a VP lost, or run twice, or a
//!   message lost or doubled would show), through checkpoints and
//!   restarts; VP 0 then says how many rounds went.
//! * `echo FILE [WINDOW]` — never says it can be moved (moved from
//!   outside, with what is on its way through its socket): VP 0 streams
//!   numbered messages of 16 B to 100 KiB, up to WINDOW (800, about 21
//!   MiB) ahead, to VP 1, which sends each back, until FILE exists. VP 0,
//!   which checks each echo's bytes, is the slower: the echoes fill its
//!   socket and its daemon's queue (flow control holds VP 1 back). Each
//!   checks that every number comes once, in order, with its bytes, and VP
//!   0 says how many went.
//! * `late MS FILE` — sleeps MS ms without a safe point, says `awake`,
//!   then spins with a safe point every 5 ms until FILE exists, and says
//!   how many times it started (from its own image).
//! * `barrier FILE` — both VPs join a group; VP 0 goes into its barrier
//!   at once (a call the master answers once VP 1 is there too), VP 1 once
//!   FILE exists; each then says so and waits for FILE.end.
//! * `halfway FILE` — VP 0 writes the first half of a message to VP 1 on
//!   its socket by hand (a write cut short), says so (FILE.half), waits
//!   for FILE, writes the rest and waits for VP 1's answer: moved from
//!   outside in between, the halves meet in its new daemon.

use std::collections::HashMap;
use std::time::Duration;

use libmig::{MigError, Notice, NotifyOn, Route, Vm};

fn fail(msg: String) -> ! {
    eprintln!("testvp: {msg}");
    std::process::exit(1)
}

fn ok<T>(r: Result<T, MigError>) -> T {
    r.unwrap_or_else(|e| fail(e.to_string()))
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

fn select(vm: &mut Vm, n: u32) {
    vm.set_route(Route::Direct);
    let tasks = ok(vm.tasks());
    if vm.tid() != tasks[0] {
        for i in 0..n {
            ok(vm.send(tasks[0], 1, &i));
            if i % 10 == 9 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        return;
    }
    let mut got = 0;
    let mut direct = 0;
    while got < n {
        while ok(vm.try_recv(None, Some(1))).is_some() {
            got += 1;
            direct += u32::from(vm.direct_peers().contains(&tasks[1]));
        }
        if got == n {
            break;
        }
        let mut fds: Vec<libc::pollfd> = vm
            .fds()
            .into_iter()
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: a valid array of pollfd structs.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 5000) };
        if r == 0 {
            fail(format!(
                "a wait on the sockets ended with none of the {} messages still to come",
                n - got
            ));
        }
    }
    println!("select: {got} messages, {direct} over the direct link");
}

fn fifo(vm: &mut Vm, n: u32) {
    let tasks = ok(vm.tasks());
    let me = vm.tid();
    if me != tasks[0] {
        let k = tasks.iter().position(|&t| t == me).unwrap_or(0) as u32;
        for i in 0..n {
            if k.is_multiple_of(2) && i == n / 2 {
                vm.set_route(Route::Direct);
            }
            ok(vm.send(tasks[0], 1 + (i % 2) as i32, &(k, i)));
        }
        return;
    }
    let senders = tasks.len() - 1;
    let total = senders * n as usize;
    if ok(vm.recv_timeout(Some(0xdead), None, Duration::from_millis(50))).is_some() {
        fail("a message from nobody".into());
    }
    // A filtered receive: the first tag-2 message of the last sender.
    let last = *tasks.last().unwrap_or(&0);
    let m = ok(vm.recv(Some(last), Some(2)));
    let (_, i): (u32, u32) = ok(m.decode());
    if i != 1 {
        fail(format!(
            "first tag-2 message of the last sender is #{i}, expected #1"
        ));
    }
    let mut seen: HashMap<(u64, i32), Vec<u32>> = HashMap::new();
    seen.entry((last, 2)).or_default().push(i);
    let mut got = 1;
    while got < total {
        if got % 100 == 0 {
            let _ = ok(vm.probe(None, None));
        }
        let Some(m) = ok(vm.recv_timeout(None, None, Duration::from_secs(20))) else {
            let counts: Vec<String> = seen
                .iter()
                .map(|((f, t), v)| format!("t{f:x}/{t}: {} last {:?}", v.len(), v.last()))
                .collect();
            fail(format!("stuck after {got} messages: {}", counts.join(", ")));
        };
        let (k, i): (u32, u32) = ok(m.decode());
        if tasks.get(k as usize) != Some(&m.from) {
            fail(format!(
                "message claims sender {k} but came from t{:x}",
                m.from
            ));
        }
        seen.entry((m.from, m.tag)).or_default().push(i);
        got += 1;
    }
    for ((from, tag), v) in &seen {
        let want: Vec<u32> = (0..n).filter(|i| 1 + (i % 2) as i32 == *tag).collect();
        if *v != want {
            fail(format!(
                "t{from:x} tag {tag}: got {} messages out of order or missing",
                v.len()
            ));
        }
    }
    if ok(vm.try_recv(None, None)).is_some() {
        fail("a message too many".into());
    }
    println!("fifo ok {got} from {senders} senders");
}

fn notify(vm: &mut Vm) {
    let child = ok(vm.spawn(&std::env::args().next().unwrap_or_default(), &["exit3"], 1))[0];
    if !ok(vm.tasks()).contains(&child) {
        fail("the spawned VP is not in the job".into());
    }
    ok(vm.notify(NotifyOn::VpExit(child), 77));
    let m = ok(vm.recv(Some(libmig::SYSTEM), Some(77)));
    match m.notice() {
        Some(Notice::VpExited { tid, status }) if tid == child && status.code == Some(3) => {
            println!("child exited 3");
        }
        other => fail(format!("unexpected notice {other:?}")),
    }
    ok(vm.notify(NotifyOn::HostLeave, 78));
    ok(vm.notify(NotifyOn::HostJoin, 79));
    println!("ready on {}", vm.identity().host);
    for _ in 0..2 {
        let m = ok(vm.recv(Some(libmig::SYSTEM), None));
        match m.notice() {
            Some(Notice::HostLeft { host }) => println!("host left {host}"),
            Some(Notice::HostJoined { host }) => println!("host joined {host}"),
            other => fail(format!("unexpected notice {other:?}")),
        }
    }
}

fn big(vm: &mut Vm) {
    let tasks = ok(vm.tasks());
    let size = libmig::MAX_MESSAGE;
    if vm.tid() == tasks[0] {
        let data: Vec<u8> = (0..size).map(pattern).collect();
        ok(vm.send_bytes(tasks[1], 1, &data));
        let m = ok(vm.recv(Some(tasks[1]), Some(2)));
        let verdict: String = ok(m.decode());
        println!("big: {verdict}");
    } else {
        let m = ok(vm.recv(Some(tasks[0]), Some(1)));
        let good = m.data.len() == size && m.data.iter().enumerate().all(|(i, &b)| b == pattern(i));
        let verdict = if good {
            format!("{} bytes intact", m.data.len())
        } else {
            format!("{} bytes, CORRUPTED", m.data.len())
        };
        ok(vm.send(tasks[0], 2, &verdict));
    }
}

fn burst(vm: &mut Vm, direct: bool) {
    const COUNT: usize = 60;
    let size = |k: usize| [128 << 10, 1 << 20, 3 << 20, (1 << 20) + 7][k % 4];
    let byte = |k: usize, i: usize| (i as u8).wrapping_mul(7) ^ (k as u8).wrapping_mul(29);
    let tasks = ok(vm.tasks());
    if vm.tid() == tasks[0] {
        if direct {
            vm.set_route(Route::Direct);
        }
        for k in 0..COUNT {
            let data: Vec<u8> = (0..size(k)).map(|i| byte(k, i)).collect();
            ok(vm.send_bytes(tasks[1], 1, &data));
        }
        let m = ok(vm.recv(Some(tasks[1]), Some(2)));
        let verdict: String = ok(m.decode());
        println!("burst: {verdict}");
    } else {
        let mut kept = Vec::new();
        let mut bad = 0;
        let mut check = |k: usize, data: &[u8]| {
            if data.len() != size(k) || data.iter().enumerate().any(|(i, &b)| b != byte(k, i)) {
                bad += 1;
            }
        };
        for k in 0..COUNT {
            let m = ok(vm.recv(Some(tasks[0]), Some(1)));
            if k % 4 == 0 {
                kept.push((k, m));
            } else {
                check(k, &m.data);
            }
            if kept.len() == 3 {
                for (k, m) in kept.drain(..) {
                    check(k, &m.data);
                }
            }
        }
        for (k, m) in kept.drain(..) {
            check(k, &m.data);
        }
        ok(vm.send(tasks[0], 2, &format!("{COUNT} messages, {bad} corrupted")));
    }
}

fn errors(vm: &mut Vm) {
    match vm.send(0xfffff, 1, &1u8) {
        Err(MigError::NoSuchVp { to: 0xfffff, .. }) => println!("unknown: refused"),
        other => fail(format!("send to an unknown Tid: {other:?}")),
    }
    // A job of its own, so that its exit status is not this job's.
    let child = ok(vm.spawn_job(&std::env::args().next().unwrap_or_default(), &["exit3"], 1))[0];
    ok(vm.notify(NotifyOn::VpExit(child), 5));
    ok(vm.recv(Some(libmig::SYSTEM), Some(5)));
    match vm.send(child, 1, &1u8) {
        Err(e @ MigError::NoSuchVp { .. }) => println!("exited: refused: {e}"),
        other => fail(format!("send to an exited VP: {other:?}")),
    }
    let huge = vec![0u8; libmig::MAX_MESSAGE + 1];
    match vm.send_bytes(vm.tid(), 1, &huge) {
        Err(MigError::TooLarge { .. }) => println!("too large: refused"),
        other => fail(format!("an oversized message: {other:?}")),
    }
    match vm.kill(0xfffff) {
        Err(MigError::Refused(_)) => println!("kill unknown: refused"),
        other => fail(format!("kill of an unknown VP: {other:?}")),
    }
    // A message to itself arrives; a timeout with nothing is None.
    ok(vm.send(vm.tid(), 9, &"self"));
    let m = ok(vm.recv(None, Some(9)));
    if ok(m.decode::<String>()) != "self" {
        fail("a message to itself changed".into());
    }
    if ok(vm.recv_timeout(None, None, Duration::from_millis(20))).is_some() {
        fail("a message from nowhere".into());
    }
    println!("errors ok");
}

fn garbage() {
    let fd: i32 = std::env::var(libmig::vp::env::FD)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| fail("no MIG_FD".into()));
    let junk = b"GET / HTTP/1.1\r\n\r\nnot a frame at all";
    // SAFETY: writing a buffer we own to a descriptor we were given.
    unsafe { libc::write(fd, junk.as_ptr().cast(), junk.len()) };
    let mut vm = ok(Vm::init());
    match vm.recv(None, None) {
        Err(MigError::DaemonGone(why)) => println!("disconnected: {why}"),
        other => fail(format!("still connected after garbage: {other:?}")),
    }
}

fn flood(vm: &mut Vm, mib: usize) {
    let tasks = ok(vm.tasks());
    let chunk = 16 << 20;
    let count = (mib << 20) / chunk;
    if vm.tid() == tasks[0] {
        let data = vec![7u8; chunk];
        for _ in 0..count {
            ok(vm.send_bytes(tasks[1], 1, &data));
        }
        let m = ok(vm.recv(Some(tasks[1]), Some(2)));
        let n: usize = ok(m.decode());
        println!("flood: {n} bytes received");
    } else {
        let mut n = 0;
        for _ in 0..count {
            std::thread::sleep(Duration::from_millis(10));
            n += ok(vm.recv(Some(tasks[0]), Some(1))).data.len();
        }
        ok(vm.send(tasks[0], 2, &n));
    }
}

/// Hold `mib` MiB of state (as one byte string) and wait in a safe receive
/// until told to stop; say "restored N" after each move (for the migration
/// benchmark).
fn hold(mib: usize, check: bool) {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Ballast(#[serde(with = "serde_bytes")] Vec<u8>);
    let fresh = || match check {
        true => Ballast((0..mib << 20).map(pattern).collect()),
        false => Ballast(vec![7u8; mib << 20]),
    };
    let (mut vm, state) = ok(Vm::init_or_restore(fresh));
    if vm.restored() {
        if let Some(i) = (0..state.0.len()).find(|&i| check && state.0[i] != pattern(i)) {
            fail(format!("restored state differs at byte {i}"));
        }
        let intact = if check { " intact" } else { "" };
        println!("restored {}{intact}", state.0.len());
    } else {
        println!("ready");
    }
    loop {
        if ok(vm.recv_safe(&state, None, None)).tag == 9 {
            return;
        }
    }
}

/// Hold `mib` MiB of a pattern, reaching a safe point every few
/// milliseconds, until `stop` exists; then check every byte and say so.
fn ballast(mib: usize, stop: &str) {
    #[derive(serde::Serialize, serde::Deserialize)]
    struct Ballast {
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        lives: u32,
    }
    let fresh = || Ballast {
        bytes: (0..mib << 20).map(pattern).collect(),
        lives: 0,
    };
    let (mut vm, mut b) = ok(Vm::init_or_restore(fresh));
    b.lives += 1;
    println!("ballast ready, life {}", b.lives);
    while !std::path::Path::new(stop).exists() {
        std::thread::sleep(Duration::from_millis(5));
        ok(vm.safe_point(&b));
    }
    if let Some(i) = (0..b.bytes.len()).find(|&i| b.bytes[i] != pattern(i)) {
        fail(format!("ballast differs at byte {i}"));
    }
    println!("ballast intact: {} bytes, {} lives", b.bytes.len(), b.lives);
}

/// Burn CPU (migration-aware: a safe point every few milliseconds) until
/// `stop` exists; then say how much work was done and on how many hosts.
/// Compute for 5 ms (from `seed`, so the work is not optimised away).
fn busy_5ms(seed: u64) {
    let t = std::time::Instant::now();
    let mut x = seed;
    while t.elapsed() < Duration::from_millis(5) {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn spin(stop: &str) {
    #[derive(Default, serde::Serialize, serde::Deserialize)]
    struct Work {
        rounds: u64,
        hosts: u32,
    }
    let (mut vm, mut w) = ok(Vm::init_or_restore(Work::default));
    w.hosts += 1;
    println!("spinning");
    // FILE ends every VP of the job; FILE.K ends VP K alone.
    let mine = format!("{stop}.{}", std::env::var("MIG_VP").unwrap_or_default());
    while !std::path::Path::new(stop).exists() && !std::path::Path::new(&mine).exists() {
        busy_5ms(w.rounds);
        w.rounds += 1;
        ok(vm.safe_point(&w));
    }
    println!("spin done: {} rounds on {} hosts", w.rounds, w.hosts);
}

/// Sleep MS ms first, reaching no safe point (once: not again when it is
/// restored from its own image), say `awake`, then spin as `spin` does,
/// with a safe point every 5 ms, until FILE exists.
fn late(ms: u64, stop: &str) {
    #[derive(Default, serde::Serialize, serde::Deserialize)]
    struct Work {
        rounds: u64,
        starts: u32,
        awake: bool,
    }
    let (mut vm, mut w) = ok(Vm::init_or_restore(Work::default));
    w.starts += 1;
    if !w.awake {
        std::thread::sleep(Duration::from_millis(ms));
        w.awake = true;
        println!("awake");
    }
    while !std::path::Path::new(stop).exists() {
        busy_5ms(w.rounds);
        w.rounds += 1;
        ok(vm.safe_point(&w));
    }
    println!("late done: started {} times", w.starts);
}

/// Once `FILE.spawn` exists, spawn one `spin FILE` child (remembered in
/// the state, so a VP rolled back to before it spawns it again); end once
/// FILE exists.
fn respawn(stop: &str) {
    #[derive(Default, serde::Serialize, serde::Deserialize)]
    struct State {
        lives: u32,
        child: Option<u64>,
    }
    let (mut vm, mut s) = ok(Vm::init_or_restore(State::default));
    s.lives += 1;
    println!("up, life {}, child {:?}", s.lives, s.child);
    let go = format!("{stop}.spawn");
    while !std::path::Path::new(stop).exists() {
        if s.child.is_none() && std::path::Path::new(&go).exists() {
            let me = bin_path();
            let t = ok(vm.spawn(&me, &["spin", stop], 1))[0];
            println!("spawned t{t:x} in life {}", s.lives);
            s.child = Some(t);
        }
        std::thread::sleep(Duration::from_millis(2));
        ok(vm.safe_point(&s));
    }
    println!("respawn done");
}

/// This program's path (to spawn more of it).
fn bin_path() -> String {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| fail(format!("own path: {e}")))
}

/// VP 0 sends VP 1 messages numbered from 0, each with the life (starts
/// and restarts) it was sent in, until FILE exists; then it tells VP 1 at
/// which number each life began. VP 1 checks the numbers are consecutive
/// and that no message of a life came after the number its next life began
/// at: such a message was sent after the checkpoint the job went back to,
/// by a run that does not go on. Last line (VP 1): JSON
/// `{"received","out_of_order","stale","lives"}`.
fn sequence(stop: &str) {
    #[derive(Default, serde::Serialize, serde::Deserialize)]
    struct State {
        lives: u32,
        /// Sender: the next number; receiver: the number expected next.
        next: u64,
        /// Sender: the number each life began at.
        born: Vec<u64>,
        /// Receiver: per life, the highest number received from it.
        top: std::collections::BTreeMap<u32, u64>,
        received: u64,
        out_of_order: u64,
    }
    let (mut vm, mut s) = ok(Vm::init_or_restore(State::default));
    s.lives += 1;
    let tasks = ok(vm.tasks());
    println!("up, life {}", s.lives);
    if vm.tid() == tasks[0] {
        s.born.push(s.next);
        while !std::path::Path::new(stop).exists() {
            ok(vm.send(tasks[1], 1, &(s.lives, s.next)));
            s.next += 1;
            ok(vm.safe_point(&s));
        }
        ok(vm.send(tasks[1], 2, &s.born));
        return;
    }
    loop {
        let m = ok(vm.recv_safe(&s, None, None));
        if m.tag == 2 {
            let born: Vec<u64> = ok(m.decode());
            // Life L's messages all come before life L+1's first number.
            let stale = s
                .top
                .iter()
                .filter(|&(&life, &top)| born.get(life as usize).is_some_and(|&b| top >= b))
                .count();
            println!(
                "{}",
                serde_json::json!({
                    "received": s.received,
                    "out_of_order": s.out_of_order,
                    "stale": stale,
                    "lives": s.lives,
                })
            );
            return;
        }
        let (life, n): (u32, u64) = ok(m.decode());
        if n != s.next {
            s.out_of_order += 1;
        }
        s.next = n + 1;
        s.received += 1;
        let top = s.top.entry(life).or_default();
        *top = (*top).max(n);
    }
}

fn relay(stop: &str) {
    #[derive(Default, serde::Serialize, serde::Deserialize)]
    struct State {
        /// The token this VP expects next.
        expect: u64,
        /// VP 0: the first token is sent.
        started: bool,
        lives: u32,
    }
    let (mut vm, mut s) = ok(Vm::init_or_restore(State::default));
    s.lives += 1;
    let tasks = ok(vm.tasks());
    let me = tasks
        .iter()
        .position(|&t| t == vm.tid())
        .unwrap_or_else(|| fail("not among the job's VPs".into()));
    let next = tasks[(me + 1) % tasks.len()];
    let spin = || {
        let t = std::time::Instant::now();
        let mut x = 1u64;
        while t.elapsed() < Duration::from_millis(1) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    };
    if me == 0 && !s.started {
        s.started = true;
        ok(vm.send(next, 1, &0u64));
    }
    loop {
        let m = ok(vm.recv_safe(&s, None, None));
        if m.tag == 2 {
            let rounds: u64 = ok(m.decode());
            if me == 0 {
                println!(
                    "relay: {rounds} rounds of {} VPs, every token once and in order: ok",
                    tasks.len()
                );
            } else {
                ok(vm.send(next, 2, &rounds));
            }
            return;
        }
        let n: u64 = ok(m.decode());
        if n != s.expect {
            fail(format!(
                "VP {me} (life {}): token {n} where {} was due",
                s.lives, s.expect
            ));
        }
        s.expect = n + 1;
        spin();
        if me != 0 {
            ok(vm.send(next, 1, &n));
        } else if std::path::Path::new(stop).exists() {
            ok(vm.send(next, 2, &s.expect));
        } else {
            std::thread::sleep(Duration::from_millis(20));
            ok(vm.send(next, 1, &s.expect));
        }
    }
}

/// The payload of message `n` of `echo`: its number, then a pattern of
/// its own, 16 B to 100 KiB long (to 200 KiB when `big`: those travel as
/// shared memory between processes of a host).
fn echo_body(n: u64, big: bool) -> Vec<u8> {
    const SIZES: [usize; 5] = [16, 1000, 30_000, 100_000, 4000];
    let mut len = SIZES[(n % SIZES.len() as u64) as usize];
    if big && len == 100_000 {
        len = 200_000;
    }
    let mut b = n.to_le_bytes().to_vec();
    b.extend((8..len).map(|i| pattern(i + n as usize)));
    b
}

/// `echo STOP WINDOW [direct] [big]`: VP 0 streams numbered messages to
/// VP 1 (`window` ahead) until the file STOP exists, VP 1 sends each back,
/// both check every one; `direct`, over a direct link when they share a
/// host; `big`, some of 200 KiB.
fn echo(vm: &mut Vm, stop: &str, window: u64, direct: bool, big: bool) {
    const DATA: i32 = 1;
    const END: i32 = 2;
    if direct {
        vm.set_route(Route::Direct);
    }
    let echo_body = |n| echo_body(n, big);
    let tasks = ok(vm.tasks());
    let check = |m: &libmig::Message, want: u64, what: &str| {
        if m.data[..] != echo_body(want)[..] {
            let got = m.data.get(..8).map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_le_bytes(a)
            });
            fail(format!(
                "{what} {want} expected, got {got:?} ({} bytes)",
                m.data.len()
            ));
        }
    };
    if vm.tid() == tasks[0] {
        let (mut sent, mut back) = (0u64, 0u64);
        loop {
            let stopping = std::path::Path::new(stop).exists();
            while !stopping && sent < back + window {
                ok(vm.send_bytes(tasks[1], DATA, &echo_body(sent)));
                sent += 1;
            }
            if stopping && back == sent {
                break;
            }
            let m = ok(vm.recv(Some(tasks[1]), Some(DATA)));
            check(&m, back, "echo");
            back += 1;
        }
        ok(vm.send(tasks[1], END, &sent));
        let m = ok(vm.recv(Some(tasks[1]), Some(END)));
        let got: u64 = ok(m.decode());
        println!(
            "{}",
            serde_json::json!({"sent": sent, "echoed": back, "received": got})
        );
        return;
    }
    let mut next = 0u64;
    loop {
        let m = ok(vm.recv(Some(tasks[0]), None));
        if m.tag == END {
            let sent: u64 = ok(m.decode());
            if sent != next {
                fail(format!("{sent} sent, {next} received"));
            }
            ok(vm.send(tasks[0], END, &next));
            return;
        }
        check(&m, next, "message");
        ok(vm.send_bytes(tasks[0], DATA, &m.data));
        next += 1;
    }
}

fn barrier(vm: &mut Vm, file: &str) {
    let tasks = ok(vm.tasks());
    ok(vm.join_group("g"));
    let wait_for = |f: &str| {
        while !std::path::Path::new(f).exists() {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    if vm.tid() != tasks[0] {
        wait_for(file);
    }
    println!("at the barrier");
    ok(vm.barrier("g", 2));
    println!("through the barrier");
    wait_for(&format!("{file}.end"));
}

fn halfway(vm: &mut Vm, stop: &str) {
    let tasks = ok(vm.tasks());
    if vm.tid() != tasks[0] {
        let m = ok(vm.recv(Some(tasks[0]), Some(1)));
        println!("got: {}", String::from_utf8_lossy(&m.data));
        ok(vm.send(tasks[0], 2, "thanks"));
        return;
    }
    // Its socket to its daemon.
    let fd = vm.fds()[0];
    let env = libmig::msg::Envelope {
        from: vm.tid(),
        to: tasks[1],
        tag: 1,
        seq: 1,
        incarnation: vm.identity().incarnation,
    };
    let body = b"a message cut in two by a move";
    let msg = libmig::msg::VpMsg::Send {
        env,
        confirm: false,
    };
    let frame = libmig::frame::encode_with(&msg, body).unwrap_or_else(|e| fail(e.to_string()));
    let write = |bytes: &[u8]| {
        // SAFETY: writing a buffer we own to the descriptor we were given.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n != bytes.len() as isize {
            fail(format!("wrote {n} of {} bytes", bytes.len()));
        }
    };
    let half = frame.len() / 2;
    write(&frame[..half]);
    std::fs::write(format!("{stop}.half"), "").unwrap_or_else(|e| fail(e.to_string()));
    while !std::path::Path::new(stop).exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    write(&frame[half..]);
    let m = ok(vm.recv(Some(tasks[1]), Some(2)));
    let answer: String = ok(m.decode());
    println!("answered: {answer}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("");
    let num = |d: u32| args.get(2).and_then(|v| v.parse().ok()).unwrap_or(d);
    if mode == "garbage" {
        return garbage();
    }
    if mode == "hold" {
        return hold(num(0) as usize, args.get(3).is_some_and(|a| a == "check"));
    }
    if mode == "spin" {
        return spin(args.get(2).map_or("", String::as_str));
    }
    if mode == "late" {
        return late(u64::from(num(3000)), args.get(3).map_or("", String::as_str));
    }
    if mode == "ballast" {
        return ballast(num(1) as usize, args.get(3).map_or("", String::as_str));
    }
    if mode == "respawn" {
        return respawn(args.get(2).map_or("", String::as_str));
    }
    if mode == "relay" {
        return relay(args.get(2).map_or("", String::as_str));
    }
    if mode == "sequence" {
        return sequence(args.get(2).map_or("", String::as_str));
    }
    if mode == "floodto" {
        // Send MIB messages of 1 MiB to Tid (hex), saying each.
        let to = args
            .get(2)
            .and_then(|t| u64::from_str_radix(t.trim_start_matches('t'), 16).ok())
            .unwrap_or_else(|| fail("floodto wants a Tid".into()));
        let n: usize = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(100);
        let mut vm = ok(Vm::init());
        let mib = vec![1u8; 1 << 20];
        for i in 0..n {
            ok(vm.send_bytes(to, 1, &mib));
            println!("sent {}", i + 1);
        }
        return;
    }
    if mode == "spinner" {
        // Can be moved, but never reaches a safe point: spins on a
        // processor for N ms, then ends.
        let (_vm, ()) = ok(Vm::init_or_restore(|| ()));
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(u64::from(num(2000))) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        println!("spinner done");
        return;
    }
    if mode == "pause" {
        // Asks for a pause notice (libmig's on_pause) and spins; on the
        // notice it writes FILE, then says it is ready (`ready`) or spins
        // on regardless (`ignore`).
        let file = args.get(2).cloned().unwrap_or_default();
        let ready = args.get(3).is_some_and(|a| a == "ready");
        let mut vm = ok(Vm::init());
        ok(vm.on_pause());
        println!("listening");
        let mut x = 0u64;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
            if x.is_multiple_of(4096) && vm.pause_coming() {
                if !std::path::Path::new(&file).exists() {
                    std::fs::write(&file, "notice\n").unwrap_or_else(|e| fail(e.to_string()));
                }
                if ready {
                    ok(vm.ready_to_pause());
                }
            }
        }
    }
    if mode == "stubborn" {
        // Can be moved, but never reaches a safe point: computes (sleeps)
        // for N ms, then ends.
        let (_vm, ()) = ok(Vm::init_or_restore(|| ()));
        std::thread::sleep(Duration::from_millis(u64::from(num(2000))));
        println!("stubborn done");
        return;
    }
    let mut vm = ok(Vm::init());
    match mode {
        "killkid" => {
            // Spawn a child that spins until FILE exists (never), let it
            // run a moment, kill it (libmig's `Vm::kill`, PVM's
            // `pvm_kill`), and end well.
            let stop = args.get(2).cloned().unwrap_or_default();
            let me = std::env::args().next().unwrap_or_default();
            let child = ok(vm.spawn(&me, &["spin", &stop], 1))[0];
            std::thread::sleep(Duration::from_millis(300));
            ok(vm.kill(child));
            println!("killed t{child:x}");
        }
        "fifo" => fifo(&mut vm, num(200)),
        "select" => select(&mut vm, num(500)),
        "notify" => notify(&mut vm),
        "exit3" => {
            if vm.parent().is_none() {
                fail("no parent".into());
            }
            std::process::exit(3)
        }
        "big" => big(&mut vm),
        "burst" => burst(&mut vm, args.get(2).is_some_and(|a| a == "direct")),
        "errors" => errors(&mut vm),
        "flood" => flood(&mut vm, num(1024) as usize),
        "echo" => echo(
            &mut vm,
            args.get(2).map_or("", String::as_str),
            args.get(3).and_then(|w| w.parse().ok()).unwrap_or(800),
            args.iter().any(|a| a == "direct"),
            args.iter().any(|a| a == "big"),
        ),
        "halfway" => halfway(&mut vm, args.get(2).map_or("", String::as_str)),
        "barrier" => barrier(&mut vm, args.get(2).map_or("", String::as_str)),
        other => fail(format!("unknown mode {other:?}")),
    }
}
