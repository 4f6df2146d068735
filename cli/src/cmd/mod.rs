//! The subcommands of `mig` and their dispatch.

pub mod sched;

use clap::{Parser, Subcommand};

/// mig: a virtual machine for networks of workstations that harvests idle
/// cycles and gets out of the owner's way.
#[derive(Debug, Parser)]
#[command(name = "mig", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the scheduler's algorithms on given input and explain the result.
    #[command(subcommand)]
    Sched(sched::SchedCmd),
}

/// Run one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Sched(c) => sched::run(c),
    }
}
