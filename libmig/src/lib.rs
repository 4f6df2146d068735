//! libmig: what a mig parallel program links, and the wire format every mig
//! component speaks.
//!
//! * `frame` — the frame header and (de)coding, with size and version checks;
//! * `auth` — the cluster key and the challenge-response between daemons;
//! * `msg` — the messages, one enum per connection kind;
//! * `control` — a client of a daemon's control socket (what `mig` uses);
//! * `vp` — a VP's identity, as its daemon started it;
//! * `vm` — message passing for a program: `Vm::init`, send, receive,
//!   spawn, notify, direct links;
//! * `group` — named groups: barrier, broadcast, reduce, gather, scatter;
//! * `checkpoint` — the checkpoint image: format, atomic write, checked read;
//! * `spawn_spec` — `SpawnSpec::new` and its setters (internal: the methods
//!   are on `msg::SpawnSpec`);
//! * `payload` — message bytes, and large ones passed as memfds;
//! * `pool` — the reusable shared buffers large messages travel in;
//! * `link` — a VP's sockets (internal);
//! * `words` — counts in messages ("1 VP", "3 VPs").
//!
//! # The protocol in one exchange
//!
//! A worker daemon connects to the master over TCP. Each frame is a 12-byte
//! header (`MG`, major, minor, message length, body length) and a body: the
//! postcard-encoded message, then any raw payload bytes (see `frame`).
//! The worker sends `Handshake::Hello` with a random nonce; the master
//! answers `Challenge` with its own nonce and an HMAC-SHA256 proof over both;
//! the worker checks it and answers `Proof`; the master checks that and sends
//! `Welcome`. Only then is anything else accepted: the worker sends
//! `Register` with its `HostFacts`, the master answers `Registered`, and from
//! then on `ToMaster` messages (`Heartbeat`, `Started`, ...) flow one way and
//! `ToHost` messages (`Start`, `Kill`, ...) the other.
#![deny(missing_docs)]

pub mod auth;
pub mod checkpoint;
pub mod control;
pub mod frame;
pub mod group;
pub mod handshake;
mod link;
pub mod msg;
pub mod payload;
pub mod pool;
pub mod ring;
pub mod seal;
mod spawn_spec;
pub mod vm;
pub mod vp;
pub mod words;

pub use group::op;
pub use msg::{Notice, NotifyOn, Tid, SYSTEM};
pub use payload::Payload;
pub use vm::{Message, MigError, Route, Vm, MAX_MESSAGE, PAUSE_SIGNAL};
