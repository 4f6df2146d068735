//! `docs/cli.md` is what `mig help-markdown` writes from the command lines'
//! own definitions: a flag added or its help changed without the file
//! made again fails here.

use std::path::Path;
use std::process::Command;

#[test]
fn the_command_line_reference_in_docs_is_up_to_date() {
    let out = Command::new(env!("CARGO_BIN_EXE_mig"))
        .arg("help-markdown")
        .output()
        .expect("run mig help-markdown");
    assert!(out.status.success());
    let made = String::from_utf8(out.stdout).expect("UTF-8");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md");
    let kept = std::fs::read_to_string(&file).unwrap_or_default();
    if made != kept {
        let first = made
            .lines()
            .zip(kept.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(made.lines().count().min(kept.lines().count()));
        panic!(
            "{} is stale (first difference at line {}: {:?}, now {:?}): run \
             `cargo run -p mig-cli -- help-markdown > docs/cli.md`",
            file.display(),
            first + 1,
            kept.lines().nth(first).unwrap_or("(end)"),
            made.lines().nth(first).unwrap_or("(end)")
        );
    }
    // Every subcommand is in it, under its own heading.
    for heading in ["### mig spawn", "#### mig owner reclaim", "## migd"] {
        assert!(made.contains(&format!("\n{heading}\n")), "{heading}");
    }
}
