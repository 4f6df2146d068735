//! `mig spawn`: start a parallel job; with `--wait`, show its output line by
//! line (as PVM's console does) and exit with the job's status.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use libmig::control::Client;
use libmig::msg::{ExitInfo, IoClass, JobClass, JobEvent, Request, Response, SpawnSpec, Stream};
use libmig::Tid;

/// Flags of `mig spawn`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Number of VPs.
    #[arg(short = 'n', long = "vps", value_name = "N", default_value_t = 1)]
    n: u32,
    /// Wait for the job: print its output and exit with its status: 0 if
    /// every VP exited 0, else the first failing VP's (its exit code, or
    /// 128 + the signal that killed it; 127: its program could not be
    /// started; 75: mig ended the job, a VP lost with its host and no
    /// checkpoint to go back to). A VP its own job killed (PVM's pvm_kill,
    /// libmig's Vm::kill) is no failure.
    #[arg(long)]
    wait: bool,
    /// Set a variable for every VP (repeatable). PATH, HOME, USER, LANG,
    /// RUST_BACKTRACE and MIG_SPIN_US pass from this shell already.
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// The VPs need no coordination (a bag of tasks): besides their own time
    /// slot they run in any slot that leaves their processor empty.
    #[arg(long)]
    independent: bool,
    /// Each VP may be started again from the beginning: one that cannot be
    /// moved (it does not keep its state through libmig), stopped on a host
    /// whose owner stays longer than that host's `vacate_after_s`, is ended
    /// and started again elsewhere (HTCondor's vacate of a vanilla job).
    #[arg(long)]
    restartable: bool,
    /// Memory each VP needs: a number of MiB, or with a unit: K, M, G or T
    /// (each also as KB, KiB, ...; all powers of 1024, as `free` and
    /// `mig hosts` count), e.g. 512M, 1.5GiB, 2T. A VP is placed only on a
    /// host whose memory holds it beside what the VPs already placed there
    /// need, in every time slot (a stopped VP keeps its memory), else it
    /// waits (`mig hosts` shows what each offers; `migd --memory-mb` sets
    /// it); a job no host can hold is refused. Where the host has a memory
    /// controller (cgroup v2's, or v1's), its processes are held to it
    /// together, and a VP that takes more is ended, saying so.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    mem: Option<u64>,
    /// How the VPs gain from where they run, for a virtual machine whose
    /// master runs `migd --placement bidding`: simple (one task), cluster
    /// (tasks that talk much: kept together on the host with the lowest
    /// bid) or group (tasks that gain from running apart: one to a host
    /// while hosts last) [default: simple for one VP, group for more].
    /// Other placements ignore it.
    #[arg(long, value_enum, value_name = "CLASS")]
    class: Option<Class>,
    /// How much I/O each VP does, for `migd --placement nres`: none (too
    /// little to count), light (a quarter of a host's disk time) or heavy
    /// (three quarters: two never share a host while hosts with room
    /// remain). Other placements ignore it. Where the host has an I/O
    /// controller, light and heavy VPs get a quarter and three quarters of
    /// the disk weight the owner's own processes have.
    #[arg(long, value_enum, value_name = "CLASS", default_value = "none")]
    io: Io,
    /// Before a long pause (the owner of a VP's host comes back), send each
    /// VP this signal (a name such as TERM or USR1, or a number) and let it
    /// run on for up to that host's `[owner] quiesce_ms` before it is
    /// stopped: for programs that know nothing of libmig (a libmig program
    /// calls `Vm::on_pause`). Slurm's gang scheduler sends SIGTSTP with a
    /// fixed 2 s; here it is opt-in and bounded. Gang slices never wait.
    #[arg(long, value_name = "SIGNAL", value_parser = parse_signal)]
    pause_signal: Option<i32>,
    /// VP 0 of a --wait job reads nothing (its input ends at once). By
    /// default --wait forwards this command's standard input to VP 0's, as
    /// srun does, except when it runs in the background of a terminal.
    /// Other VPs, and every VP of a job started without --wait, read
    /// /dev/null.
    #[arg(long)]
    no_input: bool,
    /// With --wait: print VP 0's lines as they are and the others' after
    /// `[tTID] ` (as PVM's pvm_catchout does), and say nothing else unless
    /// a VP fails: how a PVM program started from a shell looks (its
    /// libpvm3 enrols it this way).
    #[arg(long, requires = "wait")]
    bare: bool,
    /// Print JSON lines (spawned, output, skipped, vp_done, job_done) instead
    /// of text (skipped: lines not sent to this waiter, which stopped
    /// reading; `mig logs` has them).
    #[arg(long)]
    json: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// `--class`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Class {
    Simple,
    Cluster,
    Group,
}

/// `--io`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Io {
    None,
    Light,
    Heavy,
}

/// Environment passed from the spawner to every VP.
const PASSED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "RUST_BACKTRACE",
    "MIG_SPIN_US",
];

/// Run it: start the job; with `--wait`, follow it to its end.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    let spec = spawn_spec(&a)?;
    let started = Instant::now();
    let mut c = Client::connect(daemon)?;
    let (job, tids) = match c.call(&Request::Spawn(spec))? {
        Response::Spawned { job, tids } => (job, tids),
        Response::Error { message } => bail!("{message}"),
        other => bail!("unexpected reply {other:?}"),
    };
    say_spawned(&a, &job, &tids);
    if !a.wait {
        return Ok(());
    }
    forward_input(daemon, &job, a.no_input || in_background());
    watch_ctrl_c(daemon, &job, a.bare);
    follow(&mut c, &a, &job, tids.len(), started)
}

/// The job asked for: the program, this directory, the environment and
/// the flags.
fn spawn_spec(a: &Args) -> Result<SpawnSpec> {
    let (program, args) = a.command.split_first().context("no program given")?;
    let cwd = std::env::current_dir().context("reading the current directory")?;
    Ok(SpawnSpec::new(program.clone(), args.to_vec())
        .n(a.n)
        .cwd(cwd.display().to_string())
        .env(environment(a)?)
        .wait(a.wait)
        .independent(a.independent)
        .restartable(a.restartable)
        .memory_mb(a.mem)
        .class(a.class.map(|c| match c {
            Class::Simple => JobClass::Simple,
            Class::Cluster => JobClass::Cluster,
            Class::Group => JobClass::Group,
        }))
        .io(match a.io {
            Io::None => None,
            Io::Light => Some(IoClass::Light),
            Io::Heavy => Some(IoClass::Heavy),
        }))
}

/// Every VP's environment: `PASSED_ENV` from this shell, then `--env`
/// and `--pause-signal`, a later value of a variable replacing the earlier.
fn environment(a: &Args) -> Result<Vec<(String, String)>> {
    let mut env: Vec<(String, String)> = PASSED_ENV
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    for kv in &a.env {
        match kv.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                env.retain(|(old, _)| old != k);
                env.push((k.to_string(), v.to_string()));
            }
            _ => bail!("--env wants KEY=VALUE, got {kv:?}"),
        }
    }
    if let Some(sig) = a.pause_signal {
        env.retain(|(k, _)| k != libmig::vp::env::PAUSE_SIGNAL);
        env.push((libmig::vp::env::PAUSE_SIGNAL.to_string(), sig.to_string()));
    }
    Ok(env)
}

/// Say the job started: a JSON line, its size on stderr (`--wait`), or
/// its name alone (for scripts: `job=$(mig spawn ...)`); nothing with
/// `--wait --bare`.
fn say_spawned(a: &Args, job: &str, tids: &[Tid]) {
    if a.json {
        let tids: Vec<String> = tids.iter().map(|t| format!("t{t:x}")).collect();
        println!(
            "{}",
            serde_json::json!({"event": "spawned", "job": job, "tids": tids})
        );
    } else if a.wait && !a.bare {
        eprintln!(
            "mig: job {job}: {}",
            libmig::words::count(tids.len() as u64, "VP", "VPs")
        );
    } else if !a.wait {
        println!("{job}");
    }
}

/// Follow a `--wait` job: show its output and its VPs' ends as they come,
/// then exit with its status (this returns only on an error).
fn follow(c: &mut Client, a: &Args, job: &str, vps: usize, started: Instant) -> Result<()> {
    // VPs the job spawns itself join the count as they are heard of.
    let (mut total, mut done) = (vps, 0);
    loop {
        match c.recv(None)?.on_a_wait() {
            JobEvent::Output {
                tid,
                vp,
                host,
                stream,
                line,
            } => {
                total = total.max(vp as usize + 1);
                show_line(a, tid, vp, &host, stream, &line);
            }
            JobEvent::Skipped { lines } => say_skipped(a, job, lines),
            JobEvent::VpDone {
                tid,
                vp,
                host,
                status,
            } => {
                done += 1;
                total = total.max(vp as usize + 1).max(done);
                say_vp_done(a, (tid, vp, &host), &status, done, total);
            }
            JobEvent::JobDone { job, status } => {
                let secs = started.elapsed().as_secs_f64();
                if a.json {
                    println!(
                        "{}",
                        serde_json::json!({"event": "job_done", "job": job, "status": status, "seconds": secs})
                    );
                } else if !a.bare {
                    eprintln!("mig: job {job} finished with status {status} in {secs:.3} s");
                }
                std::process::exit(status);
            }
            JobEvent::Error { message } => bail!("{message}"),
            // Replies to other requests: none comes on a wait.
            JobEvent::Other(_) => {}
        }
    }
}

/// One line a VP wrote: on this command's stream of the same name, after
/// `[tTID HOST] ` (with `--bare`: `[tTID] `, none for VP 0), or as JSON.
fn show_line(a: &Args, tid: Tid, vp: u32, host: &str, stream: Stream, line: &str) {
    if a.json {
        let s = if stream == Stream::Stdout {
            "stdout"
        } else {
            "stderr"
        };
        println!(
            "{}",
            serde_json::json!({"event": "output", "tid": format!("t{tid:x}"), "vp": vp, "host": host, "stream": s, "line": line})
        );
        return;
    }
    let prefix = match (a.bare, vp) {
        (true, 0) => String::new(),
        (true, _) => format!("[t{tid:x}] "),
        (false, _) => format!("[t{tid:x} {host}] "),
    };
    if stream == Stream::Stdout {
        let _ = writeln!(std::io::stdout().lock(), "{prefix}{line}");
    } else {
        eprintln!("{prefix}{line}");
    }
}

/// Lines this waiter read too slowly to be sent: how many, and where they
/// are.
fn say_skipped(a: &Args, job: &str, lines: u64) {
    if a.json {
        println!(
            "{}",
            serde_json::json!({"event": "skipped", "lines": lines})
        );
    } else {
        eprintln!(
            "mig: {} of output not shown here (read too slowly); `mig logs {job}` has them (of a job's output it keeps the first 16 MiB)",
            libmig::words::count(lines, "line", "lines")
        );
    }
}

/// A VP ended: a failure always (but VP 0's with `--bare`, whose status
/// is the command's), else progress every 8 VPs and at the last.
fn say_vp_done(
    a: &Args,
    (tid, vp, host): (Tid, u32, &str),
    status: &ExitInfo,
    done: usize,
    total: usize,
) {
    if a.json {
        println!(
            "{}",
            serde_json::json!({"event": "vp_done", "tid": format!("t{tid:x}"), "vp": vp, "host": host, "status": status.status(), "how": status.to_string()})
        );
    } else if status.status() != 0 && !(a.bare && vp == 0) {
        eprintln!("mig: VP {vp} (t{tid:x} on {host}): {status} [{done}/{total} done]");
    } else if !a.bare && (done == total || done.is_multiple_of(8)) {
        eprintln!("mig: {done}/{total} VPs done");
    }
}

/// Ctrl-C while waiting, as srun takes it: the first says the job goes on
/// and how to follow or stop it; a second within `SECOND_CTRL_C` kills it
/// (the wait then ends with the job), else this command leaves the job
/// running and exits (130). With `--bare` (a PVM program started from a
/// shell) the first kills it, as it would the program.
fn watch_ctrl_c(daemon: &Path, job: &str, bare: bool) {
    use signal_hook::consts::SIGINT;
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT]) else {
        return; // Ctrl-C then simply ends this command, the job going on.
    };
    let (daemon, job) = (daemon.to_path_buf(), job.to_string());
    let target = job.clone();
    let kill = move || {
        eprintln!("mig: killing job {target}");
        let req = Request::Kill {
            target: target.clone(),
        };
        if let Err(e) = Client::connect(&daemon).and_then(|mut c| c.call(&req)) {
            eprintln!("mig: could not kill job {target}: {e}");
            std::process::exit(130);
        }
    };
    std::thread::spawn(move || {
        if signals.forever().next().is_none() {
            return;
        }
        if bare {
            return kill();
        }
        eprintln!(
            "mig: job {job} goes on; follow it with `mig logs -f {job}`, wait for it with \
             `mig wait {job}`, stop it with `mig kill {job}`. Ctrl-C again within {} s kills it.",
            SECOND_CTRL_C.as_secs()
        );
        let since = Instant::now();
        while since.elapsed() < SECOND_CTRL_C {
            if signals.pending().next().is_some() {
                return kill();
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::process::exit(130);
    });
}

/// How soon a second Ctrl-C must follow the first to kill the job.
const SECOND_CTRL_C: std::time::Duration = std::time::Duration::from_secs(3);

/// Forward this command's standard input to VP 0 of `job` (or only its
/// end, with `none`), in a thread of its own on a connection of its own: a
/// piece at a time, each answered before the next (the flow control), sent
/// again while the VP cannot take it (not yet placed, moving).
fn forward_input(daemon: &Path, job: &str, none: bool) {
    let (daemon, job) = (daemon.to_path_buf(), job.to_string());
    std::thread::spawn(move || {
        if let Err(e) = pump_input(&daemon, &job, none) {
            eprintln!("mig: input no longer forwarded to job {job}: {e:#}");
        }
    });
}

fn pump_input(daemon: &Path, job: &str, none: bool) -> Result<()> {
    use std::io::Read;
    let mut c = Client::connect(daemon)?;
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; libmig::msg::INPUT_CHUNK];
    loop {
        let n = if none {
            0
        } else {
            match stdin.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("reading standard input"),
            }
        };
        let eof = n == 0;
        let req = Request::Input {
            job: job.to_string(),
            data: buf[..n].to_vec(),
            eof,
        };
        let mut pause = std::time::Duration::from_millis(20);
        loop {
            match c.call(&req)? {
                Response::Ok { .. } => break,
                Response::Error { message } if message.ends_with(libmig::msg::INPUT_LATER) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                // VP 0 has ended, or the whole job has and is gone (this
                // job began a moment ago): nobody reads any more.
                Response::Error { message }
                    if message.ends_with("has ended") || message == format!("no job {job}") =>
                {
                    return Ok(())
                }
                Response::Error { message } => bail!("{message}"),
                other => bail!("unexpected reply {other:?}"),
            }
        }
        if eof {
            return Ok(());
        }
    }
}

/// Is this command a background job of its terminal (reading it would
/// stop us with SIGTTIN)?
fn in_background() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read the descriptor and
    // the process's own state.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) != libc::getpgrp() }
}

/// A signal by name (`TERM`, `SIGTERM`, `usr1`) or number, one a pause
/// notice may be.
fn parse_signal(s: &str) -> Result<i32, String> {
    let sig = match s.parse::<i32>() {
        Ok(n) => n,
        Err(_) => {
            let name = s.to_ascii_uppercase();
            let name = name.strip_prefix("SIG").unwrap_or(&name).to_string();
            format!("SIG{name}")
                .parse::<nix::sys::signal::Signal>()
                .map_err(|_| format!("{s:?} is not a signal name (TERM, USR1, ...) or number"))?
                as i32
        }
    };
    if !libmig::msg::pause_signal_ok(sig) {
        return Err(format!(
            "signal {s} cannot be a pause notice (not KILL, STOP or CONT; 1 to 64)"
        ));
    }
    Ok(sig)
}

/// `--mem`: `4096`, `512M`, `4G`, `1.5GiB`, `2T` as MiB (every unit a
/// power of 1024: K, M, G, T, each also as KB or KiB, any case).
fn parse_memory(s: &str) -> Result<u64, String> {
    const EXPECTED: &str = "expected MiB, or a size with a unit K, M, G or T (KB, KiB, ... too), \
                            such as 512M, 4G, 1.5GiB";
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = (t[..split].trim(), t[split..].to_ascii_lowercase());
    let base = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .unwrap_or(&unit);
    let mult = match (base, unit.as_str()) {
        (_, "") => 1.0,
        ("k", _) => 1.0 / 1024.0,
        ("m", _) => 1.0,
        ("g", _) => 1024.0,
        ("t", _) => 1024.0 * 1024.0,
        _ => return Err(format!("{s:?}: {EXPECTED}")),
    };
    let v: f64 = num.parse().map_err(|_| format!("{s:?}: {EXPECTED}"))?;
    let mb = (v * mult).ceil();
    if !(mb.is_finite() && (1.0..=1e9).contains(&mb)) {
        return Err(format!("{s:?}: expected between 1 MiB and 1 PiB"));
    }
    Ok(mb as u64)
}

#[cfg(test)]
mod memory_tests {
    use super::parse_memory;

    #[test]
    fn memory_sizes_read_as_mb() {
        assert_eq!(parse_memory("4096"), Ok(4096));
        assert_eq!(parse_memory("512M"), Ok(512));
        assert_eq!(parse_memory("4G"), Ok(4096));
        assert_eq!(parse_memory("1.5g"), Ok(1536));
        assert_eq!(parse_memory("2T"), Ok(2 << 20));
        assert_eq!(parse_memory("4GB"), Ok(4096));
        assert_eq!(parse_memory("4 GiB"), Ok(4096));
        assert_eq!(parse_memory("512MiB"), Ok(512));
        assert_eq!(parse_memory("1tb"), Ok(1 << 20));
        assert_eq!(parse_memory("2048K"), Ok(2));
        assert_eq!(parse_memory("100KiB"), Ok(1));
        for bad in [
            "", "G", "-1", "0", "lots", "1e12G", "4B", "4Gx", "4PB", "4 G B",
        ] {
            assert!(parse_memory(bad).is_err(), "{bad:?}");
        }
    }
}
