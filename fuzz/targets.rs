//! What a peer, a VP, a local user or a file can hand mig, one function per
//! decoder: each takes arbitrary bytes and must return (an error is fine),
//! never panic, hang or allocate without bound. The coverage-guided fuzzers
//! in `fuzz_targets/` call these, and so do the bounded property tests in
//! `daemon/tests/hostile_bytes.rs`, on the corpus kept in `corpus/` and on
//! random and mutated bytes. What does not live here: the decoders.

use std::time::Instant;

use libmig::auth::ClusterKey;
use libmig::checkpoint::{Image, ImageRef};
use libmig::frame::Decoder;
use libmig::handshake::{Client, Server};
use libmig::msg::{PeerMsg, Request, Response, VpMsg};
use libmig::seal::{Opening, Suite};
use migd::config::Config;
use migd::master::Master;
use migd::sched::{replay, Scheduler};
use migd::sim::swf;

/// A decoder's harness.
pub type Target = fn(&[u8]);

/// Every target, by name (its corpus directory and fuzzer are named so).
pub const TARGETS: &[(&str, Target)] = &[
    ("frames", frames),
    ("handshake", handshake),
    ("sealed", sealed),
    ("image", image),
    ("config", config),
    ("swf", swf_log),
    ("replay", replay_lines),
    ("replica", replica),
];

/// Feed `data` to a decoder in pieces (the first byte picks their size),
/// taking frames of one message type (the second byte picks it), as a
/// daemon does on a socket; also with the small limit of a peer that has
/// not authenticated.
pub fn frames(data: &[u8]) {
    let (Some(&step), Some(&kind)) = (data.first(), data.get(1)) else {
        return;
    };
    let body = &data[2..];
    for limited in [false, true] {
        let mut d = Decoder::default();
        if limited {
            d.limit(4096);
        }
        for piece in body.chunks(usize::from(step).max(1)) {
            d.feed(piece);
            if !drain(&mut d, kind) {
                break;
            }
        }
    }
}

/// Take every whole frame; false once the stream is refused.
fn drain(d: &mut Decoder, kind: u8) -> bool {
    loop {
        let got = match kind % 4 {
            0 => d.next_frame_with::<PeerMsg>().map(|f| f.is_some()),
            1 => d.next_frame_with::<VpMsg>().map(|f| f.is_some()),
            2 => d.next_frame::<Request>().map(|f| f.is_some()),
            _ => d.next_frame::<Response>().map(|f| f.is_some()),
        };
        match got {
            Ok(true) => continue,
            Ok(false) => return true,
            Err(_) => return false,
        }
    }
}

/// A stranger's handshake messages, framed, to a server and to a client.
pub fn handshake(data: &[u8]) {
    let key = ClusterKey::from_bytes([7; 32]);
    let mut d = Decoder::default();
    d.limit(4096);
    d.feed(data);
    let mut server = Server::default();
    let Ok((mut client, _hello)) = Client::start(&key) else {
        return;
    };
    while let Ok(Some(msg)) = d.next_frame::<PeerMsg>() {
        if let Ok(msg) = msg.into_handshake() {
            let _ = server.on(&key, &msg);
            let _ = client.on(&key, &msg);
        }
    }
}

/// Bytes on an established sealed link: a real handshake, then `data`
/// where records should be.
pub fn sealed(data: &[u8]) {
    let key = ClusterKey::from_bytes([7; 32]);
    let suite = if data.first().is_some_and(|b| b & 1 == 1) {
        Suite::AesGcm
    } else {
        Suite::ChaCha
    };
    let Ok((open, first)) = Opening::dial(suite, &key) else {
        return;
    };
    let Ok((mut server, answer)) = Opening::accept(suite, &key, &first) else {
        return;
    };
    if open.finish(&answer).is_err() {
        return;
    }
    let mut src = data;
    let mut buf = [0u8; 4096];
    while let Ok(n) = server.read_into(&mut src, &mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// A checkpoint image from a file or a peer.
pub fn image(data: &[u8]) {
    let _ = Image::decode(data);
    let _ = ImageRef::decode_summed(data);
    let _ = Image::check_shape(data);
    let _ = Image::check_shape_of(data, data.len() as u64 * 3);
}

/// A config file, applied and checked.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok((daemon, owner)) = Config::parse_text(&text, "fuzz.toml") {
        let mut c = Config::new("/nonexistent".into());
        c.apply(daemon);
        if c.apply_owner(owner).is_ok() {
            let _ = c.validate();
        }
    }
}

/// A workload log, in both formats and both modes.
pub fn swf_log(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = swf::parse_swf(&text, false);
    let _ = swf::parse_swf(&text, true);
    let _ = swf::parse_pyss(&text);
}

/// `mig sched replay` lines, parsed and replayed.
pub fn replay_lines(data: &[u8]) {
    let mut s = Scheduler::default();
    if let Ok(tally) = replay::run(&mut s, data, |_, _| Ok(())) {
        let _ = replay::report(&s, &tally);
    }
}

/// A master's replicated state, as a new master imports it.
pub fn replica(data: &[u8]) {
    let _ = Master::import(data, "h0", Instant::now());
}
