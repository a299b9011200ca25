//! `backup-volume`: archive a quiesced mounted directory into a TAKBAK1 file, verify or list one.
//!
//! Data flow: clap `Args` → `takbak::tool::backup_volume` (scan, stream, publish or verify/list) →
//! one JSON result line on stdout → documented exit code. All logic lives in the `takbak` library.

mod args;

use clap::Parser;

fn main() {
    let (mode, common) = args::Args::parse().into_parts();
    std::process::exit(takbak::tool::backup_volume(mode, common));
}
