//! `restore-volume`: restore a verified TAKBAK1 archive into a new, empty mounted directory.
//!
//! Data flow: clap `Args` → `takbak::tool::restore_volume` (validate archive, marker protocol,
//! write, sync, re-verify, publish) → one JSON result line on stdout → documented exit code.

mod args;

use clap::Parser;

fn main() {
    let (mode, common) = args::Args::parse().into_parts();
    std::process::exit(takbak::tool::restore_volume(mode, common));
}
