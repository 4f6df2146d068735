//! Reading `/proc/PID/*`: the parsers are pure (text in, values out) and
//! tested here; the few readers around them only open the files. What the
//! values mean for a dump is decided in `dump` and `fds`.

use std::collections::BTreeMap;
use std::fs;
use std::io;

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Readable.
    pub r: bool,
    /// Writable.
    pub w: bool,
    /// Executable.
    pub x: bool,
    /// Shared (`s`) rather than private (`p`).
    pub shared: bool,
    /// Offset in the file.
    pub offset: u64,
    /// Inode of the file (0 when anonymous).
    pub inode: u64,
    /// Path or `[name]`, empty when anonymous.
    pub name: String,
}

/// Parses `/proc/PID/maps`.
pub fn parse_maps(text: &str) -> Result<Vec<MapsEntry>, String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(parse_maps_line)
        .collect()
}

fn parse_maps_line(line: &str) -> Result<MapsEntry, String> {
    let bad = || format!("unreadable maps line {line:?}");
    let mut rest = line;
    let mut field = || -> Option<&str> {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        if f.is_empty() {
            None
        } else {
            Some(f)
        }
    };
    let range = field().ok_or_else(bad)?;
    let perms = field().ok_or_else(bad)?;
    let offset = field().ok_or_else(bad)?;
    let _dev = field().ok_or_else(bad)?;
    let inode = field().ok_or_else(bad)?;
    let name = rest.trim_start().to_string();
    let (s, e) = range.split_once('-').ok_or_else(bad)?;
    let p = perms.as_bytes();
    if p.len() != 4 {
        return Err(bad());
    }
    Ok(MapsEntry {
        start: u64::from_str_radix(s, 16).map_err(|_| bad())?,
        end: u64::from_str_radix(e, 16).map_err(|_| bad())?,
        r: p[0] == b'r',
        w: p[1] == b'w',
        x: p[2] == b'x',
        shared: p[3] == b's',
        offset: u64::from_str_radix(offset, 16).map_err(|_| bad())?,
        inode: inode.parse().map_err(|_| bad())?,
        name,
    })
}

/// The `VmFlags` of each mapping in `/proc/PID/smaps`, by start address.
pub fn parse_smaps_flags(text: &str) -> BTreeMap<u64, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if let Some(start) = current.take() {
                out.insert(
                    start,
                    flags.split_whitespace().map(str::to_string).collect(),
                );
            }
        } else if let Some((range, _)) = line.split_once(' ') {
            if let Some((s, _)) = range.split_once('-') {
                if let Ok(s) = u64::from_str_radix(s, 16) {
                    current = Some(s);
                }
            }
        }
    }
    out
}

/// The fields of `/proc/PID/stat` after the command name: index 0 is field
/// 3 (the state).
pub fn parse_stat(text: &str) -> Result<Vec<String>, String> {
    let close = text
        .rfind(')')
        .ok_or_else(|| "unreadable stat".to_string())?;
    Ok(text[close + 1..]
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// Field `n` (1-based, as proc(5) numbers them) of a parsed stat line.
pub fn stat_field(fields: &[String], n: usize) -> Result<u64, String> {
    fields
        .get(n.wrapping_sub(3))
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| format!("stat field {n} missing"))
}

/// The umask from `/proc/PID/status`.
pub fn parse_umask(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
}

/// The signals a process ignores or catches (`SigIgn | SigCgt` of
/// `/proc/PID/status`), bit `n - 1` for signal `n`.
pub fn parse_handled_signals(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|l| {
            l.strip_prefix("SigIgn:")
                .or_else(|| l.strip_prefix("SigCgt:"))
        })
        .filter_map(|v| u64::from_str_radix(v.trim(), 16).ok())
        .fold(0, |a, b| a | b)
}

/// What `/proc/PID/status` says of a process's place among others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ids {
    /// Its pid in its own pid namespace (the last of `NSpid`).
    pub pid: i32,
    /// Its parent's pid as the reader sees it (`PPid`).
    pub ppid: i32,
    /// Its process group in its own namespace (0: not visible there).
    pub pgid: i32,
    /// Its session in its own namespace (0: not visible there).
    pub sid: i32,
    /// The pid tracing it, 0 for none.
    pub tracer: i32,
    /// Its number of threads.
    pub threads: u32,
}

/// Reads [`Ids`] from `/proc/PID/status` (kernels since 4.1 give the `NS*`
/// lines).
pub fn parse_ids(status: &str) -> Option<Ids> {
    let last = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().last())
            .and_then(|v| v.parse::<i64>().ok())
    };
    Some(Ids {
        pid: last("NSpid:")? as i32,
        ppid: last("PPid:")? as i32,
        pgid: last("NSpgid:")? as i32,
        sid: last("NSsid:")? as i32,
        tracer: last("TracerPid:")? as i32,
        threads: last("Threads:")? as u32,
    })
}

/// The children of every thread of `pid`.
pub fn children(pid: i32) -> io::Result<Vec<i32>> {
    let mut out = Vec::new();
    for t in fs::read_dir(format!("/proc/{pid}/task"))? {
        let t = t?.file_name();
        let text = match fs::read_to_string(format!(
            "/proc/{pid}/task/{}/children",
            t.to_string_lossy()
        )) {
            Ok(text) => text,
            // The thread ended meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        out.extend(
            text.split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok()),
        );
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `pos` and `flags` from `/proc/PID/fdinfo/N`.
pub fn parse_fdinfo(text: &str) -> Option<(u64, i32)> {
    let mut pos = None;
    let mut flags = None;
    for l in text.lines() {
        if let Some(v) = l.strip_prefix("pos:") {
            pos = v.trim().parse().ok();
        } else if let Some(v) = l.strip_prefix("flags:") {
            flags = i32::from_str_radix(v.trim(), 8).ok();
        }
    }
    Some((pos?, flags?))
}

/// A socket found in `/proc/PID/net/*`, said in words.
pub fn describe_socket(net: &NetTables, inode: u64) -> String {
    for (kind, table) in [
        ("TCP", &net.tcp),
        ("TCP", &net.tcp6),
        ("UDP", &net.udp),
        ("UDP", &net.udp6),
    ] {
        if let Some(d) = find_inet(table, inode) {
            return format!("a {kind} socket {d}");
        }
    }
    if let Some(path) = find_unix(&net.unix, inode) {
        return if path.is_empty() {
            "a unix socket".into()
        } else {
            format!("a unix socket ({path})")
        };
    }
    format!("a socket (inode {inode})")
}

/// The socket tables of a process's network namespace.
#[derive(Debug, Default, Clone)]
pub struct NetTables {
    /// `net/tcp`.
    pub tcp: String,
    /// `net/tcp6`.
    pub tcp6: String,
    /// `net/udp`.
    pub udp: String,
    /// `net/udp6`.
    pub udp6: String,
    /// `net/unix`.
    pub unix: String,
}

impl NetTables {
    /// Reads the tables of `pid` (a missing one reads as empty).
    pub fn read(pid: i32) -> NetTables {
        let r = |n: &str| fs::read_to_string(format!("/proc/{pid}/net/{n}")).unwrap_or_default();
        NetTables {
            tcp: r("tcp"),
            tcp6: r("tcp6"),
            udp: r("udp"),
            udp6: r("udp6"),
            unix: r("unix"),
        }
    }
}

fn find_inet(table: &str, inode: u64) -> Option<String> {
    for l in table.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() > 9 && f[9].parse::<u64>().ok() == Some(inode) {
            let local = inet_addr(f[1])?;
            let remote = inet_addr(f[2])?;
            let listening = f[3] == "0A";
            return Some(if listening {
                format!("listening on {local}")
            } else {
                format!("{local} -> {remote}")
            });
        }
    }
    None
}

/// `0100007F:1F90` (IPv4) or 32 hex digits (IPv6), then a hex port.
fn inet_addr(s: &str) -> Option<String> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let words: Option<Vec<u32>> = (0..a.len() / 8)
        .map(|i| u32::from_str_radix(&a[i * 8..i * 8 + 8], 16).ok())
        .collect();
    let bytes: Vec<u8> = words?.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => Some(format!(
            "{}.{}.{}.{}:{port}",
            bytes[0], bytes[1], bytes[2], bytes[3]
        )),
        16 => {
            let b: [u8; 16] = bytes.try_into().ok()?;
            Some(format!("[{}]:{port}", std::net::Ipv6Addr::from(b)))
        }
        _ => None,
    }
}

fn find_unix(table: &str, inode: u64) -> Option<String> {
    for l in table.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() > 6 && f[6].parse::<u64>().ok() == Some(inode) {
            return Some(f.get(7).map(|s| s.to_string()).unwrap_or_default());
        }
    }
    None
}

/// `/proc/cpuinfo`'s flags of the first processor (read once: reading
/// cpuinfo samples every processor's clock, which takes milliseconds).
pub fn cpu_flags() -> io::Result<Vec<String>> {
    static FLAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    if let Some(f) = FLAGS.get() {
        return Ok(f.clone());
    }
    let flags = read_cpu_flags()?;
    Ok(FLAGS.get_or_init(|| flags).clone())
}

fn read_cpu_flags() -> io::Result<Vec<String>> {
    let text = fs::read_to_string("/proc/cpuinfo")?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("flags"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, f)| f.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let t = "55d0c0a00000-55d0c0a02000 r--p 00000000 fd:01 1234   /usr/bin/my prog\n\
                 7ffd1000-7ffd3000 rw-p 00000000 00:00 0                          [stack]\n\
                 7f0000000000-7f0000001000 rw-s 00001000 00:05 77 /dev/zero (deleted)\n\
                 7f0000002000-7f0000003000 ---p 00000000 00:00 0\n";
        let m = parse_maps(t).expect("parse");
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].name, "/usr/bin/my prog");
        assert_eq!(m[0].inode, 1234);
        assert!(m[0].r && !m[0].w && !m[0].shared);
        assert_eq!(m[1].name, "[stack]");
        assert!(m[2].shared);
        assert_eq!(m[2].offset, 0x1000);
        assert_eq!(m[3].name, "");
        assert!(!m[3].r);
        assert!(parse_maps("zzz").is_err());
    }

    #[test]
    fn stat_fields() {
        let f = parse_stat("12 (a) b) c) T 1 2 3").expect("stat");
        assert_eq!(f[0], "T");
        assert_eq!(stat_field(&f, 4).expect("ppid"), 1);
        assert!(stat_field(&f, 60).is_err());
    }

    #[test]
    fn fdinfo_and_status() {
        assert_eq!(
            parse_fdinfo("pos:\t10\nflags:\t02100002\nmnt_id:\t1\n"),
            Some((10, 0o2100002))
        );
        assert_eq!(parse_umask("Name:\tx\nUmask:\t0027\n"), Some(0o27));
        assert_eq!(
            parse_handled_signals(
                "SigBlk:\t0000000000000001\nSigIgn:\t0000000000001000\nSigCgt:\t0000000180000200\n"
            ),
            0x1_8000_1200
        );
    }

    #[test]
    fn ids_from_status() {
        let t =
            "Name:\tsh\nState:\tT (stopped)\nTgid:\t900\nPid:\t900\nPPid:\t899\nTracerPid:\t0\n\
                 NStgid:\t900\t3\nNSpid:\t900\t3\nNSpgid:\t898\t0\nNSsid:\t1\t0\nThreads:\t1\n";
        assert_eq!(
            parse_ids(t),
            Some(Ids {
                pid: 3,
                ppid: 899,
                pgid: 0,
                sid: 0,
                tracer: 0,
                threads: 1
            })
        );
        assert_eq!(parse_ids("Name:\tx\n"), None);
    }

    #[test]
    fn sockets_in_words() {
        let net = NetTables {
            tcp: "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                  0: 0100007F:9C40 0100007F:0050 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1\n"
                .into(),
            ..Default::default()
        };
        assert_eq!(
            describe_socket(&net, 4242),
            "a TCP socket 127.0.0.1:40000 -> 127.0.0.1:80"
        );
        assert_eq!(describe_socket(&net, 1), "a socket (inode 1)");
    }

    #[test]
    fn smaps_flags() {
        let t = "00400000-00401000 r-xp 00000000 08:01 1 /bin/x\nSize: 4 kB\nVmFlags: rd ex mr mw me dw\n\
                 7ffd1000-7ffd3000 rw-p 00000000 00:00 0 [stack]\nVmFlags: rd wr mr mw me gd ac\n";
        let f = parse_smaps_flags(t);
        assert_eq!(f[&0x400000], vec!["rd", "ex", "mr", "mw", "me", "dw"]);
        assert!(f[&0x7ffd1000].contains(&"gd".to_string()));
    }
}
