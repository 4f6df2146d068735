//! `limits`: what this machine allows, measured beside the figures that
//! sit at a limit (`bench/messages-vs-pvm.sh` runs it in every trial).
//!
//! `limits sealed` is the anchor of the remote route: messages of 16 MiB
//! over one loopback TCP connection, sealed by the sender and opened by the
//! receiver with `libmig::seal` (the suite daemons pick on this CPU, records
//! cut the way a daemon cuts them: up to 256 KiB sealed at a time), a thread
//! at each end and nothing else: no daemons, no frames, no copies into or
//! out of a VP. The method is the PVM harness's `tcp_baseline`: 128 MiB a
//! repetition, the receiver answers one byte at its end, one warm-up and 5
//! timed repetitions, median (MB = 10^6 bytes). Prints
//! `sealed_tcp_bw_16MiB_MBps VALUE MB/s`, and the same without sealing
//! (`plain_tcp_bw_16MiB_MBps`), measured alternately in this run.
//!
//! `limits exec PROGRAM` is the anchor of the spawn figure: 32 fork+execs
//! of PROGRAM (a VP's program: outside a virtual machine it finds no
//! daemon and ends at once), until every one has ended; one warm-up and 9
//! timed repetitions, median. Prints `exec_spawn_32_exit_ms VALUE ms`: the
//! processes' own start and end (the kernel's exec and exit, the dynamic
//! loader, the runtime), which a spawn of that program through `mig`
//! cannot go under.
//!
//! Usage: limits sealed [--sizes 65536,16777216]
//!        limits exec PROGRAM [--count 32]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use libmig::auth::ClusterKey;
use libmig::seal::{Opening, Sealer, Suite};

const VOLUME: usize = 128 << 20;
const REPS: usize = 5;
/// Bytes a daemon seals at a time (`conn::SEAL_BATCH`).
const BATCH: usize = 256 * 1024;

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("limits: {what}: {e}");
    std::process::exit(1)
}

/// A connected pair over loopback, sealed both ways if `sealed`.
fn pair(sealed: bool) -> (TcpStream, TcpStream, Option<(Sealer, Sealer)>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| fail("bind", e));
    let addr = l.local_addr().unwrap_or_else(|e| fail("address", e));
    let a = TcpStream::connect(addr).unwrap_or_else(|e| fail("connect", e));
    let (b, _) = l.accept().unwrap_or_else(|e| fail("accept", e));
    let seal = sealed.then(|| {
        let key = ClusterKey::from_bytes([5; 32]);
        let (open, first) =
            Opening::dial(Suite::best(), &key).unwrap_or_else(|e| fail("handshake", e));
        let (server, answer) =
            Opening::accept(Suite::best(), &key, &first).unwrap_or_else(|e| fail("handshake", e));
        let client = open
            .finish(&answer)
            .unwrap_or_else(|e| fail("handshake", e));
        (client, server)
    });
    (a, b, seal)
}

/// MB/s of `count` messages of `size` bytes, warm-up and median of `REPS`.
fn stream(size: usize, sealed: bool) -> f64 {
    let count = (VOLUME / size).max(4);
    let (mut tx, mut rx, seal) = pair(sealed);
    let (mut s_tx, mut s_rx) = match seal {
        Some((a, b)) => (Some(a), Some(b)),
        None => (None, None),
    };
    let sink = std::thread::spawn(move || {
        let mut buf = vec![0u8; size];
        for _ in 0..=REPS {
            for _ in 0..count {
                let mut got = 0;
                while got < size {
                    let n = match s_rx.as_mut() {
                        Some(s) => s.read_into(&mut rx, &mut buf[got..]),
                        None => rx.read(&mut buf[got..]),
                    }
                    .unwrap_or_else(|e| fail("read", e));
                    if n == 0 {
                        fail("read", "the sender closed early");
                    }
                    got += n;
                }
            }
            rx.write_all(b"A").unwrap_or_else(|e| fail("ack", e));
        }
    });
    let data = vec![7u8; size];
    let mut out = Vec::with_capacity(BATCH + BATCH / 8);
    let mut rates = Vec::new();
    for rep in 0..=REPS {
        let t = Instant::now();
        for _ in 0..count {
            match s_tx.as_mut() {
                Some(s) => {
                    for piece in data.chunks(BATCH) {
                        out.clear();
                        s.seal(piece, &mut out).unwrap_or_else(|e| fail("seal", e));
                        tx.write_all(&out).unwrap_or_else(|e| fail("write", e));
                    }
                }
                None => tx.write_all(&data).unwrap_or_else(|e| fail("write", e)),
            }
        }
        let mut ack = [0u8; 1];
        tx.read_exact(&mut ack).unwrap_or_else(|e| fail("ack", e));
        if rep > 0 {
            rates.push((count * size) as f64 / t.elapsed().as_secs_f64() / 1e6);
        }
    }
    let _ = sink.join();
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

fn label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{}MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{}KiB", s >> 10),
        s => format!("{s}B"),
    }
}

/// Milliseconds until `count` fork+execs of `program` have all ended.
fn exec_floor(program: &str, count: usize) -> f64 {
    use std::process::{Command, Stdio};
    let t = Instant::now();
    let kids: Vec<_> = (0..count)
        .map(|_| {
            Command::new(program)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| fail(program, e))
        })
        .collect();
    for mut k in kids {
        let _ = k.wait();
    }
    t.elapsed().as_secs_f64() * 1e3
}

fn value_of<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    Some(
        args.get(i + 1)
            .map_or_else(|| fail(flag, "wants a value"), |v| v.as_str()),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("sealed") => {
            let sizes: Vec<usize> = match value_of(&args, "--sizes") {
                Some(v) => Some(v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
                    .filter(|v: &Vec<usize>| !v.is_empty() && v.iter().all(|&s| s > 0))
                    .unwrap_or_else(|| {
                        fail("--sizes", "wants sizes in bytes, such as 65536,16777216")
                    }),
                None => vec![16 << 20],
            };
            for size in sizes {
                let plain = stream(size, false);
                let sealed = stream(size, true);
                let l = label(size);
                println!("plain_tcp_bw_{l}_MBps {plain:.1} MB/s");
                println!("sealed_tcp_bw_{l}_MBps {sealed:.1} MB/s");
            }
        }
        Some("exec") => {
            let Some(program) = args.get(1).filter(|p| !p.starts_with('-')) else {
                fail("usage", "limits exec PROGRAM [--count 32]")
            };
            let count: usize = value_of(&args, "--count").map_or(32, |v| {
                v.parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| fail("--count", "wants a number of processes"))
            });
            exec_floor(program, count);
            let mut t: Vec<f64> = (0..9).map(|_| exec_floor(program, count)).collect();
            t.sort_by(f64::total_cmp);
            println!("exec_spawn_{count}_exit_ms {:.2} ms", t[t.len() / 2]);
        }
        _ => fail(
            "usage",
            "limits sealed [--sizes 65536,16777216] | limits exec PROGRAM [--count 32]",
        ),
    }
}
