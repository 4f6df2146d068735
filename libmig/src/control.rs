//! A blocking client of a daemon's control socket, as `mig` uses it.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::frame::{self, FrameError};
use crate::msg::{Request, Response};

/// Why the daemon could not be asked.
#[derive(Debug, Error)]
pub enum ControlError {
    /// No daemon listens there.
    #[error("no mig daemon at {path} ({cause}); start one with `mig up`, or point --daemon / MIG_DAEMON at its control socket")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Why (said in the message, so not also a source: shown once).
        cause: std::io::Error,
    },
    /// The socket is there but not ours to use.
    #[error("permission denied at {path}: this mig daemon belongs to another user (only its own user and root may control it)")]
    Denied {
        /// The socket path.
        path: PathBuf,
    },
    /// The daemon refused the connection and said why.
    #[error("{0}")]
    Refused(String),
    /// The conversation broke (the reason is in the message, so not also a
    /// source: shown once).
    #[error("talking to the daemon: {0}")]
    Frame(FrameError),
    /// The daemon runs another version of mig, whose messages this one
    /// cannot read.
    #[error(
        "the mig daemon speaks protocol {theirs}.x and this mig {ours}.x: it was started by \
         another version of mig. Control or stop it with that version (its `mig halt`), or \
         stop its processes (`pkill -x migd` stops every migd of yours), then start again \
         with this version's `mig up`"
    )]
    OtherVersion {
        /// The daemon's protocol major version.
        theirs: u8,
        /// Ours.
        ours: u8,
    },
    /// The daemon hung up before answering.
    #[error("the daemon closed the connection before answering")]
    Closed,
    /// The daemon did not answer in time.
    #[error("the mig daemon at {path} did not answer within {secs} s (stopped, or too busy?)")]
    Timeout {
        /// Its socket.
        path: PathBuf,
        /// How long it was given.
        secs: u64,
    },
}

impl From<FrameError> for ControlError {
    fn from(e: FrameError) -> ControlError {
        match e {
            FrameError::Version { theirs } => ControlError::OtherVersion {
                theirs,
                ours: frame::MAJOR,
            },
            e => ControlError::Frame(e),
        }
    }
}

/// How long `call` waits for an answer: longer than any request takes
/// (a kill waits 10 s for the VPs to end, a checkpoint 30 s). The variable
/// `MIG_TIMEOUT_S` (seconds) sets another.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// `CALL_TIMEOUT`, or `MIG_TIMEOUT_S` when set to a positive number.
pub fn call_timeout() -> Duration {
    std::env::var("MIG_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map_or(CALL_TIMEOUT, Duration::from_secs_f64)
}

/// A connection to one daemon's control socket.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    path: PathBuf,
}

impl Client {
    /// Connect to the control socket at `path`.
    pub fn connect(path: &Path) -> Result<Client, ControlError> {
        let stream = UnixStream::connect(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::PermissionDenied {
                ControlError::Denied {
                    path: path.to_path_buf(),
                }
            } else {
                ControlError::Connect {
                    path: path.to_path_buf(),
                    cause: source,
                }
            }
        })?;
        Ok(Client {
            stream,
            path: path.to_path_buf(),
        })
    }

    /// Send one request.
    pub fn send(&mut self, req: &Request) -> Result<(), ControlError> {
        match frame::write_frame(&mut self.stream, req) {
            Ok(()) => Ok(()),
            // Closed on us: a daemon that refuses says why first.
            Err(FrameError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                let _ = self.stream.set_read_timeout(Some(Duration::from_secs(1)));
                if let Ok(Some(Response::Error { message })) =
                    frame::read_frame::<Response, _>(&mut self.stream)
                {
                    Err(ControlError::Refused(message))
                } else {
                    Err(FrameError::Io(e).into())
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The next reply (blocking; `timeout` None waits forever).
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Response, ControlError> {
        self.stream
            .set_read_timeout(timeout)
            .map_err(FrameError::from)?;
        match frame::read_frame(&mut self.stream) {
            Ok(r) => r.ok_or(ControlError::Closed),
            Err(FrameError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(ControlError::Timeout {
                    path: self.path.clone(),
                    secs: timeout.map_or(0, |t| t.as_secs()),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Send a request and wait for its (first) reply.
    pub fn call(&mut self, req: &Request) -> Result<Response, ControlError> {
        self.send(req)?;
        self.recv(Some(call_timeout()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn a_daemon_of_another_version_is_named_as_such_with_how_to_stop_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("control.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let daemon = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf);
            // An answer framed by a later version.
            let mut reply = frame::encode(&Response::Ok {
                message: "hi".into(),
            })
            .expect("encode");
            reply[2] = frame::MAJOR + 1;
            s.write_all(&reply).expect("write");
        });
        let mut c = Client::connect(&path).expect("connect");
        let e = c.call(&Request::Hosts).expect_err("refused by version");
        daemon.join().expect("daemon thread");
        let text = e.to_string();
        assert!(matches!(e, ControlError::OtherVersion { .. }), "{e:?}");
        assert!(text.contains("another version of mig"), "{text}");
        assert!(
            text.contains("mig halt") && text.contains("pkill -x migd"),
            "{text}"
        );
    }
}
