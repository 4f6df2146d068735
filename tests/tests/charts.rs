//! `mig sim --plot` on the shipped excerpt of a real log: three SVG charts
//! that a real renderer (librsvg's `rsvg-convert`, from Debian's
//! `librsvg2-bin`, installed by the test when missing and root) turns into
//! PNG images, as a person would open them.

use std::path::Path;
use std::process::Command;

use mig_tests::{command, tool};

#[test]
fn the_simulators_charts_render_as_images() {
    tool("rsvg-convert", "librsvg2-bin");
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/traces/KTH-SP2-1996-2.1-cln-first2000.swf.gz"
    );
    let out = command("mig")
        .args(["sim", "--trace", trace, "--limit", "500", "--plot"])
        .arg(dir.path())
        .output()
        .expect("mig sim");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for chart in ["response_cdf", "utilisation", "slots"] {
        let svg = dir.path().join(format!("{chart}.svg"));
        let png = dir.path().join(format!("{chart}.png"));
        let ok = Command::new("rsvg-convert")
            .arg(&svg)
            .arg("-o")
            .arg(&png)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "rsvg-convert {chart}.svg");
        let bytes = std::fs::read(&png).expect("png");
        assert!(bytes.starts_with(b"\x89PNG"), "{chart}.png is not a PNG");
        assert!(bytes.len() > 10_000, "{chart}.png is nearly empty");
        assert!(Path::new(&svg).is_file());
    }
}
