//! Every decoder that a peer, a VP, a local user or a file feeds is given
//! hostile bytes: the corpus kept in `fuzz/corpus/` (what the coverage-
//! guided fuzzers found worth keeping, and valid samples), random bytes, and
//! valid samples damaged (bytes flipped, cut short, spliced). Each must
//! answer with an error or a value: no panic, no hang. Bounded, so the
//! suite stays fast; `cargo fuzz run TARGET` in `fuzz/` goes on for hours.
//!
//! `MIG_WRITE_CORPUS=1 cargo test -p mig-daemon --test hostile_bytes`
//! writes the valid samples into the corpus (after a format change).

#[path = "../../fuzz/targets.rs"]
mod targets;

use std::path::{Path, PathBuf};

use libmig::auth::ClusterKey;
use libmig::frame;
use libmig::handshake::Client;
use libmig::msg::{DataLink, Envelope, Handshake, PeerMsg, Request, Response, ToMaster, VpMsg};
use proptest::prelude::*;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

fn framed<T: serde::Serialize>(msgs: &[T]) -> Vec<u8> {
    msgs.iter()
        .flat_map(|m| frame::encode(m).expect("a frame"))
        .collect()
}

/// Valid inputs for each target: the starting points of its corpus.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let env = Envelope {
        from: 0x40001,
        to: 0x40002,
        tag: 7,
        seq: 1,
        incarnation: 0,
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../libmig/tests/fixtures");
    match target {
        "frames" => {
            let peer = framed(&[
                PeerMsg::from(ToMaster::Heartbeat),
                PeerMsg::from(DataLink::Deliver(env)),
                PeerMsg::from(Handshake::Hello {
                    nonce: [1; 32],
                    suite: 0,
                    noise: vec![2; 48],
                }),
            ]);
            let vp = framed(&[VpMsg::Deliver(env), VpMsg::Movable, VpMsg::Quiesced]);
            let req = framed(&[Request::Hosts, Request::Halt]);
            let resp = framed(&[Response::Error {
                message: "no such job".into(),
            }]);
            let mut out = vec![
                [&[7u8, 0][..], &peer].concat(),
                [&[64u8, 1][..], &vp].concat(),
                [&[3u8, 2][..], &req].concat(),
                [&[255u8, 3][..], &resp].concat(),
            ];
            if let Ok(old) = std::fs::read(fixtures.join(format!("frames-v{}.bin", frame::MAJOR))) {
                out.push([&[13u8, 0][..], &old].concat());
            }
            out
        }
        "handshake" => {
            let key = ClusterKey::from_bytes([7; 32]);
            let (_, hello) = Client::start(&key).expect("a client");
            vec![framed(&[
                PeerMsg::from(hello),
                PeerMsg::from(Handshake::Proof { proof: [3; 32] }),
            ])]
        }
        "sealed" => vec![
            vec![0, 5, 1, 2, 3, 4, 5],
            [&[1u8, 0, 32][..], &[9u8; 32]].concat(),
        ],
        "image" => std::fs::read_dir(&fixtures)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "ckpt"))
                    .filter_map(|e| std::fs::read(e.path()).ok())
                    .collect()
            })
            .unwrap_or_default(),
        "config" => vec![
            b"[daemon]\nprocessors = 2\nheartbeat_ms = 100\ndead_after_ms = 600\n\
                  voters = 3\nlog = \"warn,server=debug\"\nlog_max_mb = 4\n\n[owner]\n\
                  scope = \"none\"\n"
                .to_vec(),
        ],
        "swf" => {
            let swf = "; Version: 2.2\n; MaxProcs: 64\n\
                 1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 1 -1 -1 -1\n\
                 2 5 0 50 8 -1 -1 8 60 -1 1 2 1 -1 1 -1 -1 -1\n\
                 3 7 1 -1 2 -1 -1 2 10 -1 0 3 1 -1 1 -1 -1 -1\n";
            let mut out = vec![swf.as_bytes().to_vec()];
            let pyss = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pyss");
            if let Ok(d) = std::fs::read_dir(pyss) {
                let mut files: Vec<PathBuf> = d.flatten().map(|e| e.path()).collect();
                files.sort();
                out.extend(
                    files
                        .iter()
                        .take(4)
                        .filter_map(|p| std::fs::read(p).ok())
                        .map(|b| b[..b.len().min(4096)].to_vec()),
                );
            }
            out
        }
        "replay" => vec![
            br#"{"event":"new_processor","id":"h1/0","arch":"x86_64-linux","capacity":1.0}
{"event":"new_processor","id":"h2/0","arch":"x86_64-linux","capacity":2.0}
{"event":"submit","job":"j1","vps":{"x86_64-linux":3}}
{"event":"new_vp","job":"j1","arch":"x86_64-linux"}
{"event":"vp_exit","job":"j1","vp":0}
{"event":"processor_exit","id":"h1/0"}
{"event":"job_exit","job":"j1"}
"#
            .to_vec(),
        ],
        "replica" => {
            let facts = libmig::msg::HostFacts {
                name: "h0".into(),
                arch: "x86_64-linux".into(),
                processors: 2,
                capacity: 1.0,
                memory_mb: 1024,
                addr: "127.0.0.1:1".into(),
                pid: 1,
                offered: true,
            };
            let (m, _) = migd::master::Master::new(
                facts,
                std::time::Instant::now(),
                std::time::Duration::from_millis(100),
            );
            vec![m.export()]
        }
        _ => Vec::new(),
    }
}

fn target(name: &str) -> fn(&[u8]) {
    targets::TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .expect("a target")
}

#[test]
fn the_kept_corpus_and_the_valid_samples_are_answered() {
    let write = std::env::var_os("MIG_WRITE_CORPUS").is_some();
    for (name, run) in targets::TARGETS {
        let seeds = seeds(name);
        assert!(!seeds.is_empty(), "no valid sample for {name}");
        if write {
            let dir = corpus_dir(name);
            std::fs::create_dir_all(&dir).expect("corpus dir");
            for (i, s) in seeds.iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i}")), s).expect("write");
            }
        }
        let kept = corpus(name);
        assert!(!kept.is_empty(), "the corpus of {name} is missing");
        for input in kept.iter().chain(&seeds) {
            run(input);
        }
    }
}

#[test]
fn valid_samples_decode_so_the_targets_reach_past_the_first_check() {
    // The samples are what a fuzzer grows from: they must be accepted,
    // or a fuzzer would only ever explore the first error.
    let mut d = frame::Decoder::default();
    d.feed(&seeds("frames")[0][2..]);
    let mut n = 0;
    while let Ok(Some(_)) = d.next_frame_with::<PeerMsg>() {
        n += 1;
    }
    assert_eq!(n, 3);
    let text = String::from_utf8(seeds("config")[0].clone()).unwrap();
    assert!(migd::config::Config::parse_text(&text, "x").is_ok());
    let text = String::from_utf8(seeds("swf")[0].clone()).unwrap();
    assert_eq!(
        migd::sim::swf::parse_swf(&text, false).unwrap().jobs.len(),
        2
    );
    let text = String::from_utf8(seeds("replay")[0].clone()).unwrap();
    let events = migd::sched::replay::parse(&text).unwrap();
    assert_eq!(events.len(), 7);
    let mut s = migd::sched::Scheduler::default();
    let tally = migd::sched::replay::run(&mut s, text.as_bytes(), |_, _| Ok(())).unwrap();
    assert_eq!(tally.events, 7);
    assert!(
        migd::master::Master::import(&seeds("replica")[0], "h0", std::time::Instant::now()).is_ok()
    );
    for img in seeds("image") {
        assert!(libmig::checkpoint::Image::check(&img).is_ok());
    }
}

/// A valid sample, damaged: `cuts` of (position, byte) flips, then cut
/// short at `keep`, then spliced with `extra`.
fn damaged(seed: &[u8], flips: &[(usize, u8)], keep: usize, extra: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    if !b.is_empty() {
        for &(at, x) in flips {
            let i = at % b.len();
            b[i] ^= x.max(1);
        }
    }
    b.truncate(keep.min(b.len()).max(b.len() / 2));
    b.extend_from_slice(extra);
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_are_answered(t in 0..targets::TARGETS.len(), bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        (targets::TARGETS[t].1)(&bytes);
    }

    #[test]
    fn damaged_samples_are_answered(
        t in 0..targets::TARGETS.len(),
        pick in any::<usize>(),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6),
        keep in any::<usize>(),
        extra in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let (name, run) = targets::TARGETS[t];
        let seeds = seeds(name);
        let seed = &seeds[pick % seeds.len()];
        run(&damaged(seed, &flips, keep, &extra));
        let _ = target(name);
    }
}
