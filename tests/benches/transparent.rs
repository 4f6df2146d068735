//! Transparent moves: a plain program that never speaks to its daemon
//! (`ballast`, holding 1, 64 and 256 MiB of memory it wrote) is moved from
//! outside when its host's owner comes back. From `mig owner reclaim` of
//! its host until the master hears it runs on the other host (the
//! timestamp of the master's log line `VP tX moved from A to B`), p50 and
//! p99 over TRIALS trials after one warm-up, and the image's bytes over
//! that time. Beside each move, in the same run, the floors: the same
//! bytes copied once over loopback TCP, raw and over a link sealed as the
//! daemons seal theirs (`mig_tests::floor`).
//!
//! Then where the time goes, from the daemons' log lines for the VP
//! (median of each step): the reclaim until the source starts saving it,
//! the save (`saved from outside in N ms`), the source's look at the image
//! before sending it, the transfer until the target has it whole and
//! checked, the rebuild (`rebuilt from outside in N ms`) and the word back
//! to the master. A VP restored less than 2 s ago is treated as one just
//! started (it runs a while before it is stopped), so trials are 2.2 s
//! apart. At the end the program checks every byte it wrote, through all
//! its moves, and says so.
//!
//! Needs release binaries: `cargo build --release --workspace --bins`, then
//! `cargo bench -p mig-tests --bench transparent -- --bench` (TRIALS=N,
//! 5 by default; SIZES=1,256 for some sizes only, in MiB;
//! MIG_BENCH_SAMPLES=1 prints every trial).

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use libmig::control::Client;
use libmig::msg::{OwnerAction, OwnerState, Request, Response, SpawnSpec};
use mig_tests::floor::{copy_ms, Copy};
use mig_tests::{bin, wait_until, Vm};

/// A VP restored this recently is taken for one just started (`host::YOUNG`).
const YOUNG: Duration = Duration::from_millis(2200);
const DAY_MS: i64 = 86_400_000;

/// The daemons' settings: no periodic job checkpoints (they would take
/// the VP's image in the middle of a trial), and the lines that say where
/// a move's time goes.
const CONFIG: &str = "[daemon]\ncheckpoint_interval_s = 0\n\
    log = \"info,server::outside=debug,server::move_out=debug,server::move_in=debug\"\n";

fn owner(c: &mut Client, action: OwnerAction, host: &str) -> Vec<(String, OwnerState)> {
    let req = Request::Owner {
        action,
        host: Some(host.into()),
    };
    match c.call(&req).expect("owner") {
        Response::Ok { .. } => Vec::new(),
        Response::Owner(list) => list.into_iter().map(|(h, r)| (h, r.state)).collect(),
        other => panic!("unexpected {other:?}"),
    }
}

/// (host, movable) of VP `tid`.
fn where_is(c: &mut Client, tid: u64) -> Option<(String, bool)> {
    match c.call(&Request::Ps).expect("ps") {
        Response::Ps(v) => v
            .into_iter()
            .find(|v| v.tid == tid)
            .map(|v| (v.host.unwrap_or_default(), v.movable)),
        other => panic!("unexpected {other:?}"),
    }
}

fn wait_line(c: &mut Client, want: &str) -> String {
    loop {
        match c.recv(None).expect("reply") {
            Response::Output { line, .. } if line.starts_with(want) => return line,
            Response::JobDone { status, .. } => panic!("the job ended ({status})"),
            Response::Error { message } => panic!("{message}"),
            _ => {}
        }
    }
}

/// Milliseconds since midnight UTC, now.
fn now_of_day() -> i64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis() % DAY_MS as u128) as i64
}

/// Milliseconds since midnight UTC of a log line (`DATE HH:MM:SS.mmm ...`).
fn stamp_of_day(line: &str) -> Option<i64> {
    let time = line.split(' ').nth(1)?;
    let (hms, ms) = time.split_once('.')?;
    let mut f = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (h, m, s) = (f.next()??, f.next()??, f.next()??);
    Some(((h * 60 + m) * 60 + s) * 1000 + ms.parse::<i64>().ok()?)
}

/// `to - from` in ms, over midnight too.
fn since(from: i64, to: i64) -> f64 {
    (to - from).rem_euclid(DAY_MS) as f64
}

/// The lines the daemons have logged since it was made.
struct Tail {
    files: Vec<(PathBuf, u64)>,
    lines: Vec<String>,
}

impl Tail {
    fn new(vm: &Vm, hosts: usize) -> Tail {
        let files = (0..hosts)
            .map(|i| {
                let p = vm.dir.path().join(format!("h{i}")).join("migd.log");
                let len = std::fs::metadata(&p).map_or(0, |m| m.len());
                (p, len)
            })
            .collect();
        Tail {
            files,
            lines: Vec::new(),
        }
    }

    /// Read what was added (whole lines only).
    fn read(&mut self) {
        for (path, at) in &mut self.files {
            let Ok(mut f) = std::fs::File::open(&*path) else {
                continue;
            };
            let mut s = String::new();
            if f.seek(SeekFrom::Start(*at)).is_err() || f.read_to_string(&mut s).is_err() {
                continue;
            }
            let whole = s.rfind('\n').map_or(0, |i| i + 1);
            *at += whole as u64;
            self.lines.extend(s[..whole].lines().map(str::to_string));
        }
    }

    /// The first line holding every one of `words`: its time of day and
    /// the line.
    fn find(&self, words: &[&str]) -> Option<(i64, &str)> {
        self.lines
            .iter()
            .find(|l| words.iter().all(|w| l.contains(w)))
            .and_then(|l| Some((stamp_of_day(l)?, l.as_str())))
    }
}

/// The number after `before` in `line`.
fn number_after(line: &str, before: &str) -> Option<f64> {
    let rest = &line[line.find(before)? + before.len()..];
    rest.split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()?
        .parse()
        .ok()
}

/// One move's figures.
#[derive(Default)]
struct Trial {
    /// Reclaim -> the master hears it runs on the other host (ms).
    total: f64,
    /// Image bytes.
    bytes: f64,
    /// The steps (ms): reclaim -> saving begins, save, look, transfer,
    /// rebuild, word to the master.
    steps: [f64; STEPS.len()],
    /// The floors for the same bytes (ms).
    raw: f64,
    sealed: f64,
}

const STEPS: [&str; 6] = [
    "reclaim -> save begins",
    "save (dump to file)",
    "source checks image",
    "transfer (sealed, summed)",
    "rebuild (restore)",
    "target -> master",
];

/// Reclaim `from` (where VP `tid` runs), wait until the master says it
/// moved, read the steps from the logs, release `from` again.
fn trial(vm: &Vm, c: &mut Client, tid: u64, from: &str) -> (Trial, String) {
    let t = format!("VP t{tid:x} ");
    let mut tail = Tail::new(vm, 2);
    let t0 = now_of_day();
    owner(c, OwnerAction::Reclaim, from);
    let moved = format!("moved from {from} to ");
    let start = Instant::now();
    let (end, to) = loop {
        tail.read();
        if let Some((at, line)) = tail.find(&[&t, &moved]) {
            let to = line[line.find(&moved).unwrap_or(0) + moved.len()..]
                .trim()
                .to_string();
            break (at, to);
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "VP t{tid:x} did not leave {from}:\n{}",
            vm.all_logs()
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    // The target's lines may come a moment after the master's.
    std::thread::sleep(Duration::from_millis(20));
    tail.read();
    let stamp = |words: &[&str]| tail.find(words).map(|(at, _)| at);
    let line = |words: &[&str]| tail.find(words).map(|(_, l)| l.to_string());
    let saving = stamp(&[&format!("saving VP t{tid:x} from outside for")]);
    let saved = line(&[&t, "saved from outside in"]);
    let checked = stamp(&[&t, "wrote its image (", " for "]);
    let arrived = stamp(&[&format!("restoring VP t{tid:x} from its image")]);
    let rebuilt = line(&[&t, "rebuilt from outside in"]);
    let mut r = Trial {
        total: since(t0, end),
        ..Trial::default()
    };
    if let (Some(s0), Some(saved), Some(s2), Some(a), Some(rebuilt)) =
        (saving, saved, checked, arrived, rebuilt)
    {
        let s1 = stamp_of_day(&saved).unwrap_or(s0);
        let t1 = stamp_of_day(&rebuilt).unwrap_or(a);
        r.bytes = number_after(&saved, "ms: ").unwrap_or(0.0);
        r.steps = [
            since(t0, s0),
            number_after(&saved, "saved from outside in ").unwrap_or(since(s0, s1)),
            since(s1, s2),
            since(s2, a),
            number_after(&rebuilt, "rebuilt from outside in ").unwrap_or(since(a, t1)),
            since(t1, end),
        ];
    } else {
        eprintln!(
            "VP t{tid:x}: the steps of its move are not all in the logs (is the log filter on?)"
        );
    }
    owner(c, OwnerAction::Release, from);
    assert!(
        wait_until(Duration::from_secs(30), || {
            owner(c, OwnerAction::Status, from)
                .iter()
                .any(|(h, s)| h == from && *s == OwnerState::Offered)
        }),
        "{from} not offered again after its release"
    );
    (r, to)
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn one_size(vm: &Vm, mib: usize, trials: usize) {
    let stop = vm.dir.path().join(format!("stop-{mib}"));
    let mut job = Client::connect(&vm.sock()).expect("connect");
    let args = vec![
        "--mib".into(),
        mib.to_string(),
        "--until".into(),
        stop.display().to_string(),
    ];
    let spec = SpawnSpec::new(bin("ballast").display().to_string(), args).wait(true);
    let Response::Spawned { tids, .. } = job.call(&Request::Spawn(spec)).expect("spawn") else {
        panic!("no job")
    };
    let tid = tids[0];
    wait_line(&mut job, &format!("ballast: {mib} MiB touched"));
    let mut c = Client::connect(&vm.sock()).expect("connect");
    assert!(
        wait_until(Duration::from_secs(30), || where_is(&mut c, tid)
            .is_some_and(|(_, m)| m)),
        "VP t{tid:x} never said movable:\n{}",
        vm.all_logs()
    );
    let mut at = where_is(&mut c, tid).expect("listed").0;
    let load_before = loadavg();
    let mut done = Vec::new();
    let samples = std::env::var_os("MIG_BENCH_SAMPLES").is_some();
    for rep in 0..=trials {
        std::thread::sleep(YOUNG);
        let (mut r, to) = trial(vm, &mut c, tid, &at);
        // The floors carry the same bytes, right after the move.
        let bytes = if r.bytes > 0.0 {
            r.bytes as usize
        } else {
            mib << 20
        };
        r.raw = copy_ms(bytes, Copy::Raw);
        r.sealed = copy_ms(bytes, Copy::Sealed);
        if samples {
            eprintln!(
                "{mib} MiB {at} -> {to}{}: {:.0} ms ({:.1} MiB image), steps {:?} ms; raw {:.1} ms, sealed {:.1} ms",
                if rep == 0 { " (warm-up)" } else { "" },
                r.total,
                r.bytes / (1 << 20) as f64,
                r.steps,
                r.raw,
                r.sealed
            );
        }
        if rep > 0 {
            done.push(r);
        }
        at = to;
    }
    std::fs::write(&stop, "").expect("stop file");
    let said = wait_line(&mut job, &format!("ballast: {mib} MiB checked"));
    let col = |f: fn(&Trial) -> f64| done.iter().map(f).collect::<Vec<f64>>();
    let total = col(|r| r.total);
    let (p50, p99) = (pct(&total, 0.5), pct(&total, 0.99));
    let bytes = pct(&col(|r| r.bytes), 0.5);
    let (raw, sealed) = (pct(&col(|r| r.raw), 0.5), pct(&col(|r| r.sealed), 0.5));
    let mbps = |ms: f64| bytes / ms / 1e3;
    let target = match mib {
        1 => format!(
            "  (target p50 < 20 ms: {})",
            if p50 < 20.0 { "met" } else { "missed" }
        ),
        256 => format!(
            "  (target >= 0.9x sealed: {})",
            if sealed / p50 >= 0.9 { "met" } else { "missed" }
        ),
        _ => String::new(),
    };
    println!(
        "{mib:>4} MiB VP, image {:.1} MiB: owner back -> running on the other host p50 {p50:.1} ms  p99 {p99:.1} ms  (n={}); {:.0} MB/s = {:.2}x sealed link ({sealed:.1} ms, {:.0} MB/s), {:.2}x raw TCP ({raw:.1} ms, {:.0} MB/s){target}",
        bytes / (1 << 20) as f64,
        done.len(),
        mbps(p50),
        sealed / p50,
        mbps(sealed),
        raw / p50,
        mbps(raw),
    );
    let steps: Vec<String> = STEPS
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let v: Vec<f64> = done.iter().map(|r| r.steps[i]).collect();
            format!("{name} {:.0}", pct(&v, 0.5))
        })
        .collect();
    println!(
        "     where the time goes (ms, medians): {}",
        steps.join(", ")
    );
    println!(
        "     load average before {load_before}, after {}; the program says: {said}",
        loadavg()
    );
    assert!(said.ends_with(": ok"), "{said}");
    let _ = job.recv(Some(Duration::from_secs(10)));
}

fn main() {
    if !mig_tests::bench_requested() {
        return; // `cargo test` runs benches without --bench: nothing to do.
    }
    let trials: usize = mig_tests::env_num("TRIALS", 5).max(1);
    let sizes: Vec<usize> = std::env::var("SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 64, 256]);
    let vm = Vm::start_config(2, CONFIG);
    println!(
        "transparent moves: a VP of `ballast` (never speaks to its daemon) on 2 hosts, `mig owner reclaim` of its host, {trials} trials after 1 warm-up; load average {}",
        loadavg()
    );
    for mib in sizes.into_iter().filter(|&m| m > 0) {
        one_size(&vm, mib, trials);
    }
}
