//! `mig top`: a live full-screen view of the virtual machine, refreshed
//! every second: the hosts with their owners, the allocation map with the
//! slot running now, the jobs with their VPs' states and CPU, the moves in
//! flight, and what changed recently (told apart by comparing one look with
//! the next). Plain text attributes only (bold, reverse), so it reads the
//! same over ssh in any terminal; `--once` prints one frame as text.
//!
//! What does not live here: the map's drawing (`crate::render`), the
//! requests (`super::call`).

use std::collections::{BTreeMap, VecDeque};
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libmig::msg::{HostInfo, JobInfo, MapCell, Request, Response, VpInfo};
use ratatui::backend::{Backend, TestBackend};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::{Frame, Terminal};

/// Flags of `mig top`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "Keys: q, Esc or Ctrl-C quit; any other key refreshes at once.")]
pub struct Args {
    #[command(flatten)]
    pub daemon: super::Daemon,
    /// Seconds between looks (at least 0.2).
    #[arg(long, default_value_t = 1.0, value_name = "S")]
    interval: f64,
    /// Print one frame as text and exit (no terminal needed).
    #[arg(long)]
    once: bool,
    /// With --once: the frame's width in columns.
    #[arg(long, default_value_t = 120, value_name = "COLS")]
    width: u16,
    /// With --once: the frame's height in lines.
    #[arg(long, default_value_t = 40, value_name = "LINES")]
    height: u16,
    /// With --once: print what one look saw as JSON instead ({"hosts",
    /// "jobs", "vps", "map": {"processors", "slots", "now"}}, each as
    /// in the protocol's own field names).
    #[arg(long, requires = "once")]
    json: bool,
}

/// One look at the virtual machine.
#[derive(Debug, Clone, Default)]
struct Look {
    hosts: Vec<HostInfo>,
    jobs: Vec<JobInfo>,
    vps: Vec<VpInfo>,
    processors: Vec<String>,
    slots: Vec<Vec<MapCell>>,
    now: Option<u32>,
}

impl Look {
    fn take(daemon: &Path) -> Result<Look> {
        let Response::Hosts(hosts) = super::call(daemon, &Request::Hosts)? else {
            bail!("unexpected reply to Hosts")
        };
        let Response::Jobs(jobs) = super::call(daemon, &Request::Jobs)? else {
            bail!("unexpected reply to Jobs")
        };
        let Response::Ps(vps) = super::call(daemon, &Request::Ps)? else {
            bail!("unexpected reply to Ps")
        };
        let Response::Map {
            processors,
            slots,
            now,
        } = super::call(daemon, &Request::Map)?
        else {
            bail!("unexpected reply to Map")
        };
        Ok(Look {
            hosts,
            jobs,
            vps,
            processors,
            slots,
            now,
        })
    }
}

/// What changed from one look to the next, as lines for "recent events".
fn changes(before: &Look, after: &Look) -> Vec<String> {
    let mut out = Vec::new();
    let hosts = |l: &Look| -> BTreeMap<String, (bool, String)> {
        l.hosts
            .iter()
            .map(|h| {
                let owner = h.owner.as_ref().map(|o| o.state.to_string());
                (h.facts.name.clone(), (h.alive, owner.unwrap_or_default()))
            })
            .collect()
    };
    let (hb, ha) = (hosts(before), hosts(after));
    for (name, (alive, owner)) in &ha {
        match hb.get(name) {
            None => out.push(format!("host {name} joined")),
            Some((was, _)) if *was && !alive => out.push(format!("host {name} is gone")),
            Some((was, _)) if !was && *alive => out.push(format!("host {name} is back")),
            Some((_, o)) if o != owner && !owner.is_empty() => {
                out.push(format!("host {name} is {owner}"))
            }
            _ => {}
        }
    }
    for name in hb.keys().filter(|n| !ha.contains_key(*n)) {
        out.push(format!("host {name} left the virtual machine"));
    }
    let jobs = |l: &Look| -> BTreeMap<String, String> {
        l.jobs
            .iter()
            .map(|j| (j.job.clone(), j.state.clone()))
            .collect()
    };
    let jb = jobs(before);
    for j in &after.jobs {
        match jb.get(&j.job) {
            None if j.ended_ms.is_none() => out.push(format!(
                "{} started: {} VP{} of {}",
                j.job,
                j.vps,
                if j.vps == 1 { "" } else { "s" },
                j.program
            )),
            Some(s) if *s != j.state => out.push(match j.status {
                Some(st) if j.ended_ms.is_some() => format!("{} {} (status {st})", j.job, j.state),
                _ => format!("{} {}", j.job, j.state),
            }),
            _ => {}
        }
    }
    let placed: BTreeMap<u64, Option<&str>> = before
        .vps
        .iter()
        .map(|v| (v.tid, v.host.as_deref()))
        .collect();
    for v in &after.vps {
        if let (Some(Some(from)), Some(to)) = (placed.get(&v.tid), v.host.as_deref()) {
            if *from != to {
                out.push(format!("t{:x} ({}) moved {from} -> {to}", v.tid, v.job));
            }
        }
    }
    out
}

/// What the screen shows: the last look, recent events, and a problem
/// reaching the daemon, if there is one.
struct View {
    daemon: String,
    look: Look,
    events: VecDeque<String>,
    problem: Option<String>,
}

impl View {
    const EVENTS: usize = 50;

    fn new(daemon: &Path) -> View {
        View {
            daemon: daemon.display().to_string(),
            look: Look::default(),
            events: VecDeque::new(),
            problem: None,
        }
    }

    /// Take the next look (a failure is shown, the last look kept).
    fn refresh(&mut self, daemon: &Path, first: bool) {
        match Look::take(daemon) {
            Ok(look) => {
                if !first {
                    let stamp = clock(super::jobs::now_ms());
                    for e in changes(&self.look, &look) {
                        self.events.push_front(format!("{stamp}  {e}"));
                    }
                    self.events.truncate(Self::EVENTS);
                }
                self.look = look;
                self.problem = None;
            }
            Err(e) => self.problem = Some(format!("{e:#}")),
        }
    }
}

/// `14:38:12`, local time.
fn clock(ms: u64) -> String {
    let full = super::jobs::local_time(ms);
    full.split(' ').nth(1).unwrap_or(&full).to_string()
}

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// Draw the whole screen.
fn draw(f: &mut Frame, v: &View) {
    let l = &v.look;
    let running = l.jobs.iter().filter(|j| j.ended_ms.is_none()).count();
    let moving: Vec<&VpInfo> = l
        .vps
        .iter()
        .filter(|p| p.state.starts_with("moving"))
        .collect();
    let hosts_h = (l.hosts.len() as u16 + 3).min(12);
    let map_h = (l.processors.len() as u16 + 3).clamp(4, 14);
    let [head, hosts_a, map_a, jobs_a, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(hosts_h),
        Constraint::Length(map_h),
        Constraint::Min(5),
        Constraint::Length(8),
    ])
    .areas(f.area());
    let [moves_a, events_a] =
        Layout::horizontal([Constraint::Percentage(40), Constraint::Percentage(60)]).areas(bottom);

    let master = l.hosts.iter().find(|h| h.master).map_or_else(
        || "?".into(),
        |h| format!("{} at {}", h.facts.name, h.facts.addr),
    );
    let status = match &v.problem {
        Some(p) => format!("  !! {p}"),
        None => String::new(),
    };
    let alive = l.hosts.iter().filter(|h| h.alive).count();
    let title = format!(
        "mig top · master {master} · {alive} host{} · {running} job{} running · {} · q quits{status}",
        if alive == 1 { "" } else { "s" },
        if running == 1 { "" } else { "s" },
        clock(super::jobs::now_ms()),
    );
    f.render_widget(Paragraph::new(Line::styled(title, bold())), head);

    draw_hosts(f, hosts_a, l);
    draw_map(f, map_a, l);
    draw_jobs(f, jobs_a, l);

    let moves: Vec<Line> = if moving.is_empty() {
        vec![Line::from("none")]
    } else {
        moving
            .iter()
            .map(|p| {
                Line::from(format!(
                    "t{:x} {} {} ({})",
                    p.tid,
                    p.job,
                    p.host.as_deref().unwrap_or("-"),
                    p.state
                ))
            })
            .collect()
    };
    f.render_widget(
        Paragraph::new(moves).block(Block::bordered().title(" Moves in flight ")),
        moves_a,
    );
    let events: Vec<Line> = if v.events.is_empty() {
        vec![Line::from(format!("watching {}", v.daemon))]
    } else {
        v.events.iter().map(|e| Line::from(e.as_str())).collect()
    };
    f.render_widget(
        Paragraph::new(events).block(Block::bordered().title(" Recent events ")),
        events_a,
    );
}

fn draw_hosts(f: &mut Frame, area: Rect, l: &Look) {
    let rows = l.hosts.iter().map(|h| {
        let state = super::hosts::state(h);
        let owner = h
            .owner
            .as_ref()
            .map_or_else(|| "-".to_string(), super::owner::summary);
        Row::new(vec![
            h.facts.name.clone(),
            state.to_string(),
            h.facts.processors.to_string(),
            format!("{:.2}", h.facts.capacity),
            h.vps.to_string(),
            h.waiting.len().to_string(),
            owner,
        ])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(5),
            Constraint::Length(8),
            Constraint::Length(4),
            Constraint::Length(7),
            Constraint::Fill(1),
        ],
    )
    .header(
        Row::new([
            "HOST", "STATE", "PROCS", "CAPACITY", "VPS", "WAITING", "OWNER",
        ])
        .style(bold()),
    )
    .block(Block::bordered().title(" Hosts "));
    f.render_widget(table, area);
}

fn draw_map(f: &mut Frame, area: Rect, l: &Look) {
    let text = crate::render::map_reply(&l.processors, &l.slots, l.now, &l.hosts);
    let title = match l.now {
        Some(n) => format!(" Allocation map: slot T{} runs now ", n + 1),
        None => " Allocation map ".to_string(),
    };
    let lines: Vec<Line> = text
        .lines()
        .map(|line| {
            if line.starts_with("slot") {
                Line::styled(line.to_string(), bold())
            } else {
                Line::from(line.to_string())
            }
        })
        .collect();
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        area,
    );
}

fn draw_jobs(f: &mut Frame, area: Rect, l: &Look) {
    let now = super::jobs::now_ms();
    let mut jobs: Vec<&JobInfo> = l.jobs.iter().collect();
    // Running first, then the most recently ended.
    jobs.sort_by_key(|j| {
        (
            j.ended_ms.is_some(),
            std::cmp::Reverse(j.ended_ms.unwrap_or(0)),
        )
    });
    let rows = jobs.into_iter().map(|j| {
        let mine: Vec<&VpInfo> = l.vps.iter().filter(|v| v.job == j.job).collect();
        let mut states: BTreeMap<&str, usize> = BTreeMap::new();
        for v in &mine {
            let word = v.state.split([' ', '(']).next().unwrap_or("");
            *states.entry(word).or_default() += 1;
        }
        let vps = if mine.is_empty() {
            j.vps.to_string()
        } else {
            states
                .iter()
                .map(|(s, n)| format!("{n} {s}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let cpu = j.cpu_ms + mine.iter().filter_map(|v| v.cpu_ms).sum::<u64>();
        let elapsed = j.ended_ms.unwrap_or(now).saturating_sub(j.submitted_ms);
        let status = j.status.map_or_else(String::new, |s| format!(" ({s})"));
        let row = Row::new(vec![
            j.job.clone(),
            format!("{}{status}", j.state),
            vps,
            j.hosts.join(","),
            super::jobs::span(elapsed),
            super::jobs::span(cpu),
            std::iter::once(j.program.as_str())
                .chain(j.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
        ]);
        if j.ended_ms.is_none() {
            row.style(bold())
        } else {
            row
        }
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(6),
            Constraint::Length(14),
            Constraint::Length(22),
            Constraint::Length(16),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Fill(1),
        ],
    )
    .header(
        Row::new(["JOB", "STATE", "VPS", "HOSTS", "ELAPSED", "CPU", "COMMAND"])
            .style(Style::new().add_modifier(Modifier::REVERSED)),
    )
    .block(Block::bordered().title(" Jobs (running in bold) "));
    f.render_widget(table, area);
}

/// The frame `terminal` holds, as lines of text without trailing blanks.
fn frame_text(backend: &TestBackend) -> String {
    let buf = backend.buffer();
    let width = buf.area.width as usize;
    let mut out = String::new();
    for row in buf.content.chunks(width.max(1)) {
        let line: String = row.iter().map(|c| c.symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Run it.
pub fn run(daemon: &Path, a: Args) -> Result<()> {
    if !(a.interval.is_finite() && a.interval >= 0.2) {
        bail!("--interval must be at least 0.2 s");
    }
    let mut view = View::new(daemon);
    if a.once {
        if a.width < 40 || a.height < 20 {
            bail!("--once needs at least 40 columns and 20 lines");
        }
        view.refresh(daemon, true);
        if let Some(p) = &view.problem {
            bail!("{p}");
        }
        if a.json {
            let l = &view.look;
            println!(
                "{}",
                serde_json::json!({"hosts": l.hosts, "jobs": l.jobs, "vps": l.vps,
                    "map": {"processors": l.processors, "slots": l.slots, "now": l.now}})
            );
            return Ok(());
        }
        let mut term = Terminal::new(TestBackend::new(a.width, a.height))?;
        term.draw(|f| draw(f, &view))?;
        print!("{}", frame_text(term.backend()));
        return Ok(());
    }
    if !std::io::stdout().is_terminal() {
        bail!("mig top needs a terminal; `mig top --once` prints one frame as text");
    }
    view.refresh(daemon, true);
    if let Some(p) = &view.problem {
        bail!("{p}");
    }
    let mut term = ratatui::try_init().context("setting up the terminal")?;
    let result = live(
        &mut term,
        daemon,
        &mut view,
        Duration::from_secs_f64(a.interval),
    );
    ratatui::restore();
    result
}

fn live<B: Backend>(
    term: &mut Terminal<B>,
    daemon: &Path,
    view: &mut View,
    interval: Duration,
) -> Result<()> {
    loop {
        term.draw(|f| draw(f, view))?;
        let next = Instant::now() + interval;
        while let Some(left) = next.checked_duration_since(Instant::now()) {
            if !event::poll(left)? {
                break;
            }
            if let Event::Key(k) = event::read()? {
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers == KeyModifiers::CONTROL;
                if ctrl_c || matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                    return Ok(());
                }
                break;
            }
        }
        view.refresh(daemon, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use libmig::msg::HostFacts;

    fn host(name: &str, alive: bool) -> HostInfo {
        HostInfo {
            facts: HostFacts {
                name: name.into(),
                arch: "x86_64-linux".into(),
                processors: 1,
                capacity: 1.0,
                memory_mb: 1024,
                addr: "127.0.0.1:1".into(),
                pid: 1,
                offered: true,
            },
            alive,
            master: name == "h0",
            voter: false,
            vps: 0,
            owner: None,
            waiting: Vec::new(),
            free_memory_mb: None,
            reserved_memory_mb: 0,
            io_busy: None,
            state_free_mb: None,
            state_full: false,
        }
    }

    fn job(id: &str, state: &str, ended: Option<u64>) -> JobInfo {
        JobInfo {
            job: id.into(),
            program: "pi".into(),
            args: vec![],
            uid: None,
            vps: 2,
            hosts: vec!["h0".into()],
            state: state.into(),
            submitted_ms: 1,
            ended_ms: ended,
            status: ended.map(|_| 0),
            cpu_ms: 0,
        }
    }

    fn vp(tid: u64, host: &str) -> VpInfo {
        VpInfo {
            tid,
            job: "j1".into(),
            vp: 0,
            host: Some(host.into()),
            pid: Some(9),
            state: "running".into(),
            movable: true,
            command: "pi".into(),
            started_ms: Some(1),
            cpu_ms: Some(5),
            move_failed: None,
        }
    }

    #[test]
    fn changes_between_two_looks_are_told_as_events() {
        let before = Look {
            hosts: vec![host("h0", true), host("h1", true), host("h2", true)],
            jobs: vec![job("j1", "running", None)],
            vps: vec![vp(0x40001, "h1")],
            ..Look::default()
        };
        let after = Look {
            hosts: vec![host("h0", true), host("h1", false), host("h3", true)],
            jobs: vec![job("j1", "exited", Some(5)), job("j2", "running", None)],
            vps: vec![vp(0x40001, "h0")],
            ..Look::default()
        };
        let got = changes(&before, &after);
        for want in [
            "host h1 is gone",
            "host h3 joined",
            "host h2 left the virtual machine",
            "j1 exited (status 0)",
            "j2 started: 2 VPs of pi",
            "t40001 (j1) moved h1 -> h0",
        ] {
            assert!(got.iter().any(|e| e == want), "{want:?} not in {got:?}");
        }
        assert!(changes(&after, &after).is_empty());
    }

    #[test]
    fn a_frame_shows_every_section() {
        let mut view = View::new(Path::new("/x/control.sock"));
        view.look = Look {
            hosts: vec![host("h0", true)],
            jobs: vec![job("j1", "running", None)],
            vps: vec![vp(0x40001, "h0")],
            processors: vec!["h0/0".into()],
            slots: vec![vec![MapCell {
                processor: "h0/0".into(),
                job: "j1".into(),
                vps: vec![0],
                independent: false,
            }]],
            now: Some(0),
        };
        let mut term = Terminal::new(TestBackend::new(100, 30)).expect("terminal");
        term.draw(|f| draw(f, &view)).expect("draw");
        let text = frame_text(term.backend());
        for want in [
            "mig top · master h0 at 127.0.0.1:1",
            "Hosts",
            "Allocation map: slot T1 runs now",
            "T1*",
            "1 running",
            "Moves in flight",
            "watching /x/control.sock",
        ] {
            assert!(text.contains(want), "{want:?} not in\n{text}");
        }
        assert_eq!(text.lines().count(), 30);
    }
}
