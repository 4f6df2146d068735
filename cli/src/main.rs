//! `mig`: the command line of the mig virtual machine.
//!
//! One module per subcommand under `cmd/`, dispatched by one `match`.
//! Exit codes: 0 success, 1 the operation failed (the message says why),
//! 2 bad usage (clap's own code).

mod cmd;
mod plot;
mod render;
mod table;

use clap::Parser;

fn main() {
    // Output into a closed pipe (`mig jobs | head`) ends mig quietly, as
    // it does any Unix tool, instead of a panic on the failed write.
    // SAFETY: restoring a signal's default disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = cmd::Cli::parse();
    if let Err(e) = cmd::run(cli) {
        eprintln!("mig: {e:#}");
        std::process::exit(1);
    }
}
