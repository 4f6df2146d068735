//! Checkpoints of a VP: restoring from an image at start, the safe point
//! where a move or a job checkpoint takes its image, and writing the image
//! (the program's state, what libmig holds, messages taken in but not read).

use std::sync::atomic::Ordering;

use serde::{de::DeserializeOwned, Serialize};

use super::{matches, LinkId, Message, MigError, Vm, ASKED};
use crate::checkpoint::{Header, LibState, Unread};
use crate::frame;
use crate::msg::{SnapStep, Tid, VpMsg};
use crate::payload::Payload;
use crate::vp::env;

impl Vm {
    /// Join the virtual machine, fresh or resumed: a VP restarted from a
    /// checkpoint (after a migration) gets the state it saved and its
    /// unread messages back; otherwise `fresh()` makes the state.
    pub fn init_or_restore<S: DeserializeOwned>(
        fresh: impl FnOnce() -> S,
    ) -> Result<(Vm, S), MigError> {
        let mut vm = Vm::init()?;
        // Its state survives a move: it may be moved.
        vm.tell(VpMsg::Movable)?;
        let Some(path) = std::env::var_os(env::RESTORE) else {
            return Ok((vm, fresh()));
        };
        let path = std::path::PathBuf::from(path);
        let mapped = crate::checkpoint::map(&path).map_err(|e| MigError::Restore(e.to_string()))?;
        let summed = std::env::var_os(env::RESTORE_SUMMED).is_some_and(|v| v == "1");
        let image = if summed {
            crate::checkpoint::ImageRef::decode_summed(&mapped)
        } else {
            crate::checkpoint::ImageRef::decode(&mapped)
        }
        .map_err(|e| MigError::Restore(e.to_string()))?;
        if image.header.tid != vm.me.tid {
            return Err(MigError::Restore(format!(
                "the image at {} is of t{:x}, not t{:x}",
                path.display(),
                image.header.tid,
                vm.me.tid
            )));
        }
        let state = postcard::from_bytes(image.state)?;
        let lib = image.lib;
        vm.mailbox = lib
            .mailbox
            .into_iter()
            .map(|u| Message {
                from: u.from,
                tag: u.tag,
                data: u.data.into(),
            })
            .collect();
        for (to, seq) in lib.seq_out {
            vm.peers.restore_sent(to, seq);
        }
        for (from, next) in lib.seq_in {
            vm.peers.restore_expected(from, next);
        }
        for u in lib.early {
            let m = Message {
                from: u.from,
                tag: u.tag,
                data: u.data.into(),
            };
            vm.peers.restore_early(u.seq, m);
        }
        // Unmapping and deleting a large image takes milliseconds the
        // program need not wait for.
        let file = path.clone();
        let release = move || {
            drop(mapped);
            let _ = std::fs::remove_file(&file);
        };
        if std::thread::Builder::new()
            .name("mig-release".into())
            .spawn(release)
            .is_err()
        {
            // No thread (the mapping went with the closure): here, then.
            let _ = std::fs::remove_file(&path);
        }
        std::env::remove_var(env::RESTORE);
        std::env::remove_var(env::RESTORE_SUMMED);
        vm.restored = true;
        // What it carries unread counts against its senders until read.
        vm.backlog = vm.mailbox.iter().map(|m| m.data.len() as u64).sum::<u64>()
            + vm.peers
                .early()
                .map(|(_, m)| m.data.len() as u64)
                .sum::<u64>();
        if vm.backlog > 0 {
            vm.tell(VpMsg::Backlog { bytes: vm.backlog })?;
        }
        Ok((vm, state))
    }

    /// Was this VP restarted from a checkpoint?
    pub fn restored(&self) -> bool {
        self.restored
    }

    /// A safe point: cheap unless the daemon has asked this VP to move, in
    /// which case it writes `state` and its unread messages to its image
    /// and ends; the VP goes on elsewhere from `init_or_restore`.
    pub fn safe_point<S: Serialize>(&mut self, state: &S) -> Result<(), MigError> {
        // (Asked to move: its daemon may have withdrawn the request since,
        // and a VP moved from outside meanwhile is nudged by no one.)
        if ASKED.swap(false, Ordering::Relaxed) || self.move_image_to.is_some() {
            self.pump(LinkId::Daemon, false)?;
        }
        while self.snap.as_ref().is_some_and(|s| !s.paused) {
            self.join_snapshot(state)?;
        }
        if self.move_image_to.is_some() {
            self.write_image_and_end(state)?;
        }
        Ok(())
    }

    /// Take part in a job checkpoint: stop here, say what was sent, take
    /// in what the peers sent, write the image, wait until every VP has.
    /// The program's code does not run meanwhile, so it sends nothing.
    pub(super) fn join_snapshot<S: Serialize>(&mut self, state: &S) -> Result<(), MigError> {
        let Some(id) = self.snap.as_ref().map(|s| s.id) else {
            return Ok(());
        };
        let sent = self.peers.sent();
        self.tell(VpMsg::Snap(SnapStep::Paused { id, sent }))?;
        if let Some(s) = &mut self.snap {
            s.paused = true;
        }
        loop {
            // Resumed or given up, and perhaps already asked for the next
            // one (both read at once): that one starts at the next safe point.
            let Some(snap) = self.snap.as_ref().filter(|s| s.id == id) else {
                return Ok(());
            };
            if !snap.taken {
                let all_in = snap
                    .expect
                    .as_ref()
                    .is_some_and(|e| e.iter().all(|&(p, n)| self.peers.delivered(p, n)));
                if all_in {
                    let path = snap.path.clone();
                    let written = self.write_image(state, &path, false);
                    if let Some(s) = &mut self.snap {
                        s.taken = true;
                    }
                    // A full disk fails the checkpoint, not the VP: it
                    // waits, like the others, to be told to go on.
                    let step = match written {
                        Ok(()) => SnapStep::Taken { id, path },
                        Err(e) => SnapStep::Failed {
                            id,
                            reason: e.to_string(),
                            no_space: e.no_space(),
                        },
                    };
                    self.tell(VpMsg::Snap(step))?;
                    continue;
                }
            }
            self.wait_io(None, None)?;
        }
    }

    /// Say something to the daemon.
    pub(super) fn tell(&mut self, msg: VpMsg) -> Result<(), MigError> {
        let head = frame::encode_head(&msg, 0)?;
        self.write(LinkId::Daemon, &[&head], None)
    }

    /// `recv` that is also a safe point: while it waits, a request to move
    /// is carried out with `state` (so a VP blocked in a receive never holds
    /// a migration up).
    pub fn recv_safe<S: Serialize>(
        &mut self,
        state: &S,
        from: Option<Tid>,
        tag: Option<i32>,
    ) -> Result<Message, MigError> {
        loop {
            while self.snap.as_ref().is_some_and(|s| !s.paused) {
                self.join_snapshot(state)?;
            }
            if self.move_image_to.is_some() {
                self.write_image_and_end(state)?;
            }
            if let Some(m) = self.take(&|m: &Message| matches(m, from, tag))? {
                return Ok(m);
            }
            self.wait_io(None, None)?;
        }
    }

    /// Write this VP's checkpoint image of `state` to `path` (not durably:
    /// it carries the VP to its next host or is copied on by its daemon):
    /// who it is and how to start it, `state`, unread messages and the
    /// sequence numbers. The state is encoded straight into the file; with
    /// `tell`, the daemon hears how far the write has come every few
    /// megabytes (`VpMsg::Written`) and sends the image on meanwhile.
    pub(super) fn write_image<S: Serialize>(
        &mut self,
        state: &S,
        path: &str,
        tell: bool,
    ) -> Result<(), crate::checkpoint::CheckpointError> {
        let mut args = std::env::args();
        let program = args.next().unwrap_or_default();
        let unread = |from: Tid, tag: i32, seq: u64, data: &Payload| Unread {
            from,
            tag,
            seq,
            data: data.to_vec(),
        };
        let header = Header {
            tid: self.me.tid,
            job: self.me.job.clone(),
            vp: self.me.vp,
            program,
            args: args.collect(),
            cwd: std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            env: Vec::new(),
        };
        let lib = LibState {
            mailbox: self
                .mailbox
                .iter()
                .map(|m| unread(m.from, m.tag, 0, &m.data))
                .collect(),
            early: self
                .peers
                .early()
                .map(|(seq, m)| unread(m.from, m.tag, seq, &m.data))
                .collect(),
            seq_out: self.peers.sent(),
            seq_in: self.peers.expected(),
        };
        let daemon = &mut self.daemon;
        let mut written = |file: &std::path::Path, upto: u64| {
            let msg = VpMsg::Written {
                path: file.display().to_string(),
                upto,
            };
            let Ok(head) = frame::encode_head(&msg, 0) else {
                return;
            };
            // A progress report only: if the daemon is gone, the end of the
            // checkpoint says so.
            let mut done = 0;
            while let Ok(false) = daemon.write_parts(&[&head], None, &mut done) {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        };
        let progress: Option<crate::checkpoint::OnProgress<'_>> =
            if tell { Some(&mut written) } else { None };
        crate::checkpoint::write_state(
            std::path::Path::new(path),
            &header,
            state,
            &lib,
            false,
            progress,
        )
    }

    /// Write the image this VP moves with and end the process; if the image cannot
    /// be written, say why to the daemon and go on.
    pub(super) fn write_image_and_end<S: Serialize>(&mut self, state: &S) -> Result<(), MigError> {
        let Some(path) = self.move_image_to.clone() else {
            return Ok(());
        };
        // Its file first, then a last look at what its daemon said: one
        // that missed this safe point's deadline withdrew the request
        // (`StayPut`) as it saved this VP from outside, and it looks for
        // this file, once the VP is stopped, to know whether the VP had
        // begun its own image (then it asks again, and the image goes).
        let tmp = crate::checkpoint::temp_path(std::path::Path::new(&path), std::process::id());
        let begun = crate::checkpoint::private_file(&tmp).is_ok();
        self.pump(LinkId::Daemon, false)?;
        if self.move_image_to.is_none() {
            if begun {
                let _ = std::fs::remove_file(&tmp);
            }
            return Ok(());
        }
        let path = self.move_image_to.clone().unwrap_or(path);
        // Direct links: stop peers writing (they fall back to the daemons,
        // which hold messages for a moving VP), then take in what is queued.
        let peers = self.peers.linked().to_vec();
        for &t in &peers {
            if let Some(l) = self.peers.link(t) {
                let _ = l.sock.shutdown(std::net::Shutdown::Read);
                // A frame put in its ring after this fails to go in, and
                // goes by the daemons instead.
                if let Some(rx) = &l.rx {
                    rx.close();
                }
            }
            self.pump(LinkId::Direct(t), false)?;
            // A ring offered on the socket and only now taken is closed
            // too, and what went into it meanwhile taken in.
            if let Some(rx) = self.peers.link(t).and_then(|l| l.rx.as_ref()) {
                rx.close();
                self.pump(LinkId::Direct(t), false)?;
            }
        }
        self.peers.close_all_direct();
        self.pump(LinkId::Daemon, false)?;
        // The daemon sends the image on as it is written.
        if let Err(e) = self.write_image(state, &path, true) {
            // (Its partial file is gone.) The move is off: this VP goes on
            // here, its messages through the daemon until links are asked
            // for again.
            self.move_image_to = None;
            return self.tell(VpMsg::ImageNotWritten {
                reason: e.to_string(),
                no_space: e.no_space(),
            });
        }
        let head = frame::encode_head(&VpMsg::ImageWritten { path }, 0)?;
        self.write(LinkId::Daemon, &[&head], None)?;
        // The process ends here without unwinding: what it printed goes out.
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        std::process::exit(0)
    }
}
