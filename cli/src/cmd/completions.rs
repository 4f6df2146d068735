//! `mig completions SHELL` (a completion script, from the command line's
//! own definition) and `mig man` (man pages: `mig.1` and one per
//! subcommand, `mig-spawn.1` ...). Nothing else lives here.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::CommandFactory;

/// Flags of `mig completions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// bash, zsh, fish, elvish or powershell. For bash:
    /// `mig completions bash > ~/.local/share/bash-completion/completions/mig`.
    shell: clap_complete::Shell,
}

/// Flags of `mig man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write mig.1 and mig-SUBCOMMAND.1 into this directory (for example
    /// ~/.local/share/man/man1) instead of mig.1 to standard output.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Run `mig completions`.
pub fn run(a: Args) -> Result<()> {
    let mut cmd = super::Cli::command();
    clap_complete::generate(a.shell, &mut cmd, "mig", &mut std::io::stdout());
    Ok(())
}

/// Run `mig man`.
pub fn man(a: ManArgs) -> Result<()> {
    let cmd = super::Cli::command();
    let Some(dir) = a.dir else {
        return clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout())
            .context("writing the man page");
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut pages = vec![("mig".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        let name = format!("mig-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page)
            .render(&mut out)
            .with_context(|| format!("rendering {name}.1"))?;
        std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("mig: man pages written to {}", dir.display());
    Ok(())
}
