//! `mig help-markdown` (hidden): the command-line reference of `mig` and
//! `migd` as Markdown, each command's `--help` text under its own heading,
//! made from the command lines' own definitions (clap) so that it never
//! drifts from them. `docs/cli.md` is its output; a test fails when that
//! file is stale.

use clap::CommandFactory;

/// Flags of `mig help-markdown` (none).
#[derive(Debug, clap::Args)]
pub struct Args {}

/// The reference, as `docs/cli.md` holds it.
pub fn markdown() -> String {
    let mut mig = steady(super::Cli::command());
    mig.build();
    let mut migd = steady(migd::flags::Flags::command());
    migd.build();
    let mut out = String::from(
        "# Command-line reference\n\n\
         Every command's `--help`, as `mig` and `migd` print it. This file is made from \
         their definitions: after changing a flag or its help, run \
         `cargo run -p mig-cli -- help-markdown > docs/cli.md` (a test fails while it is \
         stale).\n\n",
    );
    let mut all = Vec::new();
    walk(&mig, 0, &mut all);
    walk(&migd, 0, &mut all);
    for (depth, name, _) in &all {
        out.push_str(&format!(
            "{}- [{name}](#{})\n",
            "  ".repeat(*depth),
            anchor(name)
        ));
    }
    for (depth, name, help) in &all {
        out.push_str(&format!(
            "\n{} {name}\n\n```text\n{}\n```\n",
            "#".repeat(depth + 2),
            help.trim_end()
        ));
    }
    out
}

/// Each command under `cmd` (itself first): its depth, its full name and
/// its long help. Hidden commands and clap's own `help` are left out.
fn walk(cmd: &clap::Command, depth: usize, out: &mut Vec<(usize, String, String)>) {
    let name = cmd
        .get_bin_name()
        .map_or_else(|| cmd.get_name().to_string(), str::to_string);
    let help = cmd.clone().render_long_help().to_string();
    out.push((depth, name, help));
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        walk(sub, depth + 1, out);
    }
}

/// `cmd` with the values of its flags' environment variables not shown
/// (`[env: MIG_CONFIG=...]` would say what the machine that wrote the
/// file had set).
fn steady(cmd: clap::Command) -> clap::Command {
    let cmd = cmd.mut_args(|a| a.hide_env_values(true));
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    subs.into_iter()
        .fold(cmd, |cmd, name| cmd.mut_subcommand(name, steady))
}

/// A heading's anchor as GitHub makes it: lower case, spaces to dashes.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Run it: print the reference.
pub fn run(_: Args) -> anyhow::Result<()> {
    print!("{}", markdown());
    Ok(())
}
