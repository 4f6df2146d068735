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
    #[error("no mig daemon at {path} ({source}); start one with `mig up`, or point --daemon / MIG_DAEMON at its control socket")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The conversation broke.
    #[error("talking to the daemon: {0}")]
    Frame(#[from] FrameError),
    /// The daemon hung up before answering.
    #[error("the daemon closed the connection before answering")]
    Closed,
}

/// A connection to one daemon's control socket.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
}

impl Client {
    /// Connect to the control socket at `path`.
    pub fn connect(path: &Path) -> Result<Client, ControlError> {
        let stream = UnixStream::connect(path).map_err(|source| ControlError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Client { stream })
    }

    /// Send one request.
    pub fn send(&mut self, req: &Request) -> Result<(), ControlError> {
        frame::write_frame(&mut self.stream, req)?;
        Ok(())
    }

    /// The next reply (blocking; `timeout` None waits forever).
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Response, ControlError> {
        self.stream
            .set_read_timeout(timeout)
            .map_err(FrameError::from)?;
        frame::read_frame(&mut self.stream)?.ok_or(ControlError::Closed)
    }

    /// Send a request and wait for its (first) reply.
    pub fn call(&mut self, req: &Request) -> Result<Response, ControlError> {
        self.send(req)?;
        self.recv(None)
    }
}
