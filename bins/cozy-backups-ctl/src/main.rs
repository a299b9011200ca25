//! `cozy-backups-ctl` / `kubectl-cozy_backups` entry point: parse the arguments (named after how
//! the binary was invoked), run the subcommand streaming to stdout/stderr, exit with its code.

use clap::FromArgMatches as _;
use std::io::Write as _;

#[tokio::main]
async fn main() {
    let argv0 = std::env::args().next().unwrap_or_default();
    let parsed = cozy_backups_ctl::command_for(&argv0)
        .try_get_matches()
        .and_then(|m| cozy_backups_ctl::Args::from_arg_matches(&m));
    let args = match parsed {
        Ok(args) => args,
        Err(e) => {
            // Help and version go to stdout with 0; a usage error is an error like any other (1),
            // as kubectl's are.
            let _ = e.print();
            std::process::exit(if e.use_stderr() {
                cozy_backups_ctl::exit::ERROR
            } else {
                cozy_backups_ctl::exit::OK
            });
        }
    };
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let code = match cozy_backups_ctl::run(args, &mut out, &mut err).await {
        Ok(()) => cozy_backups_ctl::exit::OK,
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            cozy_backups_ctl::exit_code(&e)
        }
    };
    let _ = out.flush();
    std::process::exit(code);
}
