//! Terminal progress display on stderr: phase, bytes, files, rate and ETA.
//!
//! Shown only when stderr is a terminal (and not disabled); it reads the context's atomic counters
//! once per second and never touches stdout, whose single line is the result object.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::ctx::Ctx;

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Renders one progress line (no trailing newline).
pub fn render(ctx: &Ctx) -> String {
    let done = ctx.bytes_done.load(Ordering::Relaxed);
    let total = ctx.bytes_total.load(Ordering::Relaxed);
    let files = ctx.files_done.load(Ordering::Relaxed);
    let files_total = ctx.files_total.load(Ordering::Relaxed);
    let secs = ctx.elapsed().as_secs_f64().max(0.001);
    let rate = done as f64 / secs;
    let eta = if rate > 0.0 && total > done {
        format!("{:.0}s", (total - done) as f64 / rate)
    } else {
        "-".into()
    };
    format!(
        "\r{:<16} {:>10.1}/{:.1} MiB  {}/{} files  {:>8.1} MiB/s  ETA {:<8}",
        ctx.phase().as_str(),
        mib(done),
        mib(total),
        files,
        files_total,
        mib(rate as u64),
        eta
    )
}

/// Runs until `stop` yields or disconnects, redrawing once per second.
pub fn run(ctx: &Ctx, stop: &crossbeam_channel::Receiver<()>) {
    let mut err = std::io::stderr();
    loop {
        let _ = err.write_all(render(ctx).as_bytes());
        let _ = err.flush();
        match stop.recv_timeout(Duration::from_secs(1)) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
            _ => break,
        }
    }
    let _ = err.write_all(render(ctx).as_bytes());
    let _ = err.write_all(b"\n");
}
