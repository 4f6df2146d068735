//! Old bytes stay readable: frames and a checkpoint image written by an
//! earlier version, kept in `tests/fixtures/`, are decoded by this one to
//! the same values, or refused with a clear version error once the format
//! has moved on (a bump of `frame::MAJOR` or `checkpoint::VERSION`). A
//! message type changed without a bump fails here.
//!
//! After a bump, write the new version's fixtures beside the old ones with
//! `MIG_WRITE_FIXTURES=1 cargo test -p libmig --test old_bytes` and keep
//! both.

use std::path::{Path, PathBuf};

use libmig::checkpoint::{CheckpointError, Header, Image, LibState, Unread, VERSION};
use libmig::frame::{self, FrameError, MAJOR};
use libmig::msg::{
    Bid, Bidding, DataLink, Envelope, Handshake, HostFacts, HostUsage, ImageId, IoClass, JobClass,
    JobFileCopy, LoopTurns, OwnerReport, OwnerState, PeerMsg, Quorum, Rate, Request, SliceReport,
    SnapOrder, SnapReport, SourceReport, SpawnSpec, StartVp, Switch, ToHost, ToMaster, VpMsg,
    VpRet, Work,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn env() -> Envelope {
    Envelope {
        from: 0x40001,
        to: 0x40002,
        tag: 7,
        seq: 3,
        incarnation: 1,
    }
}

/// `vec![..]` of messages of any conversation, as `PeerMsg`s.
macro_rules! peer_msgs {
    ($($m:expr),* $(,)?) => { vec![$(PeerMsg::from($m)),*] };
}

/// The messages every version of the fixture holds, of every conversation.
fn peer_msgs() -> Vec<PeerMsg> {
    peer_msgs![
        Handshake::Hello {
            nonce: [9; 32],
            suite: 1,
            noise: vec![1, 2, 3],
        },
        Handshake::Register {
            facts: HostFacts {
                name: "h1".into(),
                arch: "x86_64-linux".into(),
                processors: 4,
                capacity: 1.5,
                memory_mb: 2048,
                addr: "127.0.0.1:7070".into(),
                pid: 4242,
                offered: true,
            },
        },
        DataLink::Deliver(env()),
        Bidding::Ask {
            id: 3,
            origin: "h1".into(),
            hops: 1,
            work: Work {
                vps: 4,
                class: JobClass::Group,
                memory_mb: Some(512),
                io: 0.25,
            },
        },
        Bidding::Bid {
            id: 3,
            bid: Bid {
                processors: 2,
                capacity: 1.5,
                vps: 3,
                free_memory_mb: None,
                free_io: 0.75,
                etc: 2.5,
            },
            forwarded: vec!["h4".into()],
        },
        Rate::Ask {
            id: 5,
            asker: "h2".into(),
            amount: 1,
            ttl: 4,
            load: 0.5,
        },
        Rate::Answer {
            id: 5,
            sent: 1,
            load: 3.0,
        },
        ToMaster::GiveAway {
            tid: 0x40003,
            to: "h2".into(),
        },
        ToMaster::Control {
            id: 7,
            req: Request::Hosts,
            uid: 1000,
        },
        ToHost::Start(StartVp {
            tid: 0x40003,
            job: "j1".into(),
            vp: 2,
            nvps: 4,
            program: "./heat".into(),
            args: vec!["64".into()],
            cwd: "/home/u".into(),
            env: vec![("A".into(), "b".into())],
            parent: Some(0x40001),
            incarnation: 0,
            stdin: true,
            memory_mb: Some(512),
            io: Some(IoClass::Heavy),
            independent: false,
        }),
        ToHost::Snap {
            tid: 0x40001,
            step: SnapOrder::Now {
                id: 5,
                expect: vec![(0x40002, 9)],
            },
        },
        ToMaster::Owner(OwnerReport {
            state: OwnerState::Reclaimed,
            for_s: 2.5,
            decided_by: "load 0.93 cores".into(),
            idle_s: Some(0.1),
            load: Some(0.93),
            sources: vec![SourceReport {
                name: "load".into(),
                active: true,
                sees: "0.93 cores".into(),
                last_activity_s: Some(0.1),
            }],
            vp_cpu_ms: Some(12),
            vacate_after_s: Some(60.0),
        }),
        ToMaster::Movable { tid: 0x40002 },
        ToMaster::LeaseAsk { n: 17 },
        ToHost::LeaseGrant { n: 17, ms: 2500 },
        ToHost::Fenced {
            why: "declared dead".into(),
        },
        PeerMsg::Part { last: true },
        ToMaster::Heartbeat,
        ToMaster::Output {
            tid: 0x40002,
            stream: libmig::msg::Stream::Stderr,
            line: "line 7".into(),
            n: 7,
        },
        ToHost::Heartbeat { lines: 7 },
        ToHost::Snap {
            tid: 0x40002,
            step: SnapOrder::Begin { id: 6 },
        },
        ToMaster::Snap {
            tid: 0x40002,
            step: SnapReport::Taken { id: 6 },
        },
        Handshake::Hi { name: "h2".into() },
        ToMaster::ImageKept {
            image: image_id(),
            size: 25_165_848,
            crc: 0xdead_beef,
        },
        ToMaster::ImageFailed {
            image: image_id(),
            host: "h2".into(),
            reason: "No space left on device (os error 28)".into(),
        },
        ToHost::CopyImage {
            image: image_id(),
            to: "h3".into(),
            start: None,
        },
        DataLink::ImagePart {
            image: image_id(),
            at: 4 << 20,
            total: 25_165_848,
            last: false,
        },
        DataLink::ImageAck {
            image: image_id(),
            upto: 8 << 20,
        },
        ToHost::CheckImage { image: image_id() },
        ToMaster::ImageChecked {
            image: image_id(),
            result: Err("damaged".into()),
        },
        ToHost::PruneImages {
            job: "j1".into(),
            keep: vec![4, 5],
        },
        DataLink::RestoreOff { tid: 0x40002 },
        ToMaster::ReturnBack {
            tid: 0x40002,
            id: 12,
            ret: VpRet::Instance(3),
        },
        ToMaster::Waits {
            tid: 0x40002,
            calls: vec![12, 13],
        },
        Quorum::Consensus {
            from: 2,
            msg: vec![8, 3, 16, 1],
        },
        Quorum::Voter { id: 3 },
        ToHost::Voters(vec![(1, "h0".into()), (3, "h2".into())]),
        Quorum::NewMaster {
            term: 4,
            name: "h2".into(),
            addr: "127.0.0.1:7001".into(),
        },
        Handshake::Redirect {
            addr: "127.0.0.1:7001".into(),
        },
        ToHost::Input {
            tid: 0x40001,
            data: b"10\n4\n".to_vec(),
            eof: true,
        },
        ToHost::Hold {
            tids: vec![0x40001, 0x40002],
            hold: true,
        },
        ToMaster::Usage(HostUsage {
            vps: vec![(0x40001, 1250)],
            free_memory_mb: Some(1500),
            io_busy: Some(0.25),
            state_free_mb: Some(6),
            state_full: true,
            turns: LoopTurns {
                longest_us: 640_000,
                turns: 12_345,
                window_s: 10,
                window_longest_us: 2_500,
                window_p99_us: 900,
                window_turns: 4_000,
            },
        }),
        ToHost::Recall { tid: 0x40001 },
        ToMaster::Missing {
            tid: 0x40002,
            reason: "No space left on device".into(),
        },
        ToMaster::Snap {
            tid: 0x40002,
            step: SnapReport::Failed {
                id: 5,
                reason: "No space left on device".into(),
            },
        },
        ToMaster::Slicing(SliceReport {
            generation: 6,
            switches: vec![Switch {
                ideal_ns: 1_700_000_000_000_000_000,
                late_ns: 120_000,
                took_ns: 30_000,
                slot: 1,
                generation: 6,
            }],
            installed: vec![(6, 1_699_999_999_000_000_000, 1_699_999_999_000_100_000)],
        }),
        Quorum::JobFile(vec![
            JobFileCopy::Output {
                job: "j1".into(),
                line: "[t40001 h0] line 1".into(),
            },
            JobFileCopy::Forget { job: "j1".into() },
        ]),
    ]
}

fn image_id() -> ImageId {
    ImageId {
        job: "j1".into(),
        gen: 3,
        tid: 0x40001,
    }
}

fn vp_msgs() -> Vec<VpMsg> {
    vec![
        VpMsg::Send {
            env: env(),
            confirm: true,
        },
        VpMsg::WriteImage {
            path: "/state/t40001.ckpt".into(),
        },
        VpMsg::Movable,
        VpMsg::ImageNotWritten {
            reason: "No space left on device (os error 28)".into(),
            no_space: true,
        },
        VpMsg::PauseNotice { signal: 10 },
        VpMsg::Quiesced,
        VpMsg::Ring { bytes: 1 << 19 },
        VpMsg::Wake,
    ]
}

fn requests() -> Vec<Request> {
    vec![
        Request::Ps,
        Request::Spawn(SpawnSpec {
            program: "pi".into(),
            args: vec!["1000".into()],
            n: 8,
            cwd: "/".into(),
            env: vec![],
            wait: true,
            parent: None,
            independent: false,
            restartable: false,
            memory_mb: Some(4096),
            class: Some(JobClass::Cluster),
            io: Some(IoClass::Heavy),
            bid_hosts: Vec::new(),
        }),
        Request::Input {
            job: "j1".into(),
            data: b"yes\n".to_vec(),
            eof: false,
        },
        Request::Suspend { job: "j1".into() },
        Request::Timeline,
        Request::Delete { host: "h7".into() },
    ]
}

fn image() -> Image {
    Image {
        header: Header {
            tid: 0x40001,
            job: "j1".into(),
            vp: 0,
            program: "./stream".into(),
            args: vec!["--n".into(), "20".into()],
            cwd: "/tmp".into(),
            env: vec![("K".into(), "V".into())],
        },
        state: (0..=255u8).collect(),
        lib: LibState {
            mailbox: vec![Unread {
                from: 0x40002,
                tag: 1,
                seq: 4,
                data: b"unread".to_vec(),
            }],
            early: vec![],
            seq_out: vec![(0x40002, 10)],
            seq_in: vec![(0x40002, 5)],
        },
    }
}

/// Every frame of the fixture, in order: PeerMsg, then VpMsg, then Request
/// (the Deliver frame carries a payload).
fn frames() -> Vec<u8> {
    let mut out = Vec::new();
    for m in peer_msgs() {
        let payload: &[u8] = if matches!(m, PeerMsg::Data(DataLink::Deliver(_))) {
            b"payload bytes"
        } else {
            &[]
        };
        out.extend(frame::encode_with(&m, payload).expect("encode"));
    }
    for m in vp_msgs() {
        out.extend(frame::encode(&m).expect("encode"));
    }
    for m in requests() {
        out.extend(frame::encode(&m).expect("encode"));
    }
    out
}

fn write_fixtures() {
    std::fs::write(fixtures().join(format!("frames-v{MAJOR}.bin")), frames()).expect("write");
    std::fs::write(
        fixtures().join(format!("image-v{VERSION}.ckpt")),
        image().encode().expect("encode"),
    )
    .expect("write");
}

/// The fixture files named `PREFIX-vN.EXT`, with N.
fn versions(prefix: &str) -> Vec<(u32, Vec<u8>)> {
    let mut out: Vec<(u32, Vec<u8>)> = std::fs::read_dir(fixtures())
        .expect("fixtures")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let v = name.strip_prefix(prefix)?.split('.').next()?.parse().ok()?;
            Some((v, std::fs::read(e.path()).ok()?))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn frames_written_by_earlier_versions_decode_the_same_or_are_refused_by_version() {
    if std::env::var_os("MIG_WRITE_FIXTURES").is_some() {
        write_fixtures();
    }
    let files = versions("frames-v");
    assert!(
        files.iter().any(|(v, _)| *v == u32::from(MAJOR)),
        "no fixture for protocol {MAJOR}: write it (see the module doc)"
    );
    for (v, bytes) in files {
        let mut r = &bytes[..];
        if v != u32::from(MAJOR) {
            let e = frame::read_frame::<PeerMsg, _>(&mut r).expect_err("refused");
            assert!(
                matches!(e, FrameError::Version { theirs } if u32::from(theirs) == v),
                "{e}"
            );
            continue;
        }
        for want in peer_msgs() {
            let (got, payload) = frame::read_frame_with::<PeerMsg, _>(&mut r)
                .expect("decodes")
                .expect("a frame");
            assert_eq!(
                got, want,
                "protocol {v}: a message type changed without a bump of frame::MAJOR"
            );
            if matches!(want, PeerMsg::Data(DataLink::Deliver(_))) {
                assert_eq!(payload, b"payload bytes");
            }
        }
        for want in vp_msgs() {
            let got = frame::read_frame::<VpMsg, _>(&mut r).expect("decodes");
            assert_eq!(got, Some(want));
        }
        for want in requests() {
            let got = frame::read_frame::<Request, _>(&mut r).expect("decodes");
            assert_eq!(got, Some(want));
        }
        assert!(r.is_empty(), "trailing bytes");
    }
}

#[test]
fn images_written_by_earlier_versions_decode_the_same_or_are_refused_by_version() {
    let files = versions("image-v");
    assert!(
        files.iter().any(|(v, _)| *v == VERSION),
        "no fixture for image format {VERSION}: write it (see the module doc)"
    );
    for (v, bytes) in files {
        match Image::decode(&bytes) {
            Ok(img) => {
                assert_eq!(v, VERSION);
                assert_eq!(
                    img,
                    image(),
                    "image format {v} changed without a bump of VERSION"
                );
            }
            Err(CheckpointError::Version { theirs }) => assert_eq!(theirs, v),
            Err(e) => panic!("image-v{v}: {e}"),
        }
    }
}

#[test]
fn bytes_of_a_later_version_are_refused_by_version_not_misread() {
    let mut frames = frames();
    frames[2] = MAJOR + 1;
    let e = frame::read_frame::<PeerMsg, _>(&mut &frames[..]).expect_err("refused");
    assert!(e.to_string().contains("is not compatible"), "{e}");
    let mut img = image().encode().expect("encode");
    img[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
    let e = Image::decode(&img).expect_err("refused");
    assert!(
        matches!(e, CheckpointError::Version { theirs } if theirs == VERSION + 1),
        "{e}"
    );
    assert!(e.to_string().contains("not supported"), "{e}");
}
