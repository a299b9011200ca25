//! A longer differential run than the test's: `cargo run -p go-differential -- --cases 1000000
//! [--seed N] [--subject template|cron|duration|hash]...`. Without `--seed` the seed is random
//! (printed, so that a failure can be replayed). Exits non-zero on any difference.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut cases = 100_000usize;
    let mut seed = None;
    let mut subjects = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--cases" => cases = value().parse().unwrap_or(cases),
            "--seed" => seed = value().parse().ok(),
            "--subject" => subjects.push(value()),
            "-h" | "--help" => {
                println!(
                    "go-differential [--cases N] [--seed N] [--subject template|cron|duration|hash]..."
                );
                return ExitCode::SUCCESS;
            }
            other => {
                println!("unknown argument {other:?} (see --help)");
                return ExitCode::from(2);
            }
        }
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    if subjects.is_empty() {
        subjects = go_differential::SUBJECTS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
    }
    let reference = match go_differential::Reference::build() {
        Ok(r) => r,
        Err(e) => {
            println!("{e}");
            return ExitCode::FAILURE;
        }
    };
    println!("seed {seed}, {cases} cases per subject");
    let mut failed = false;
    for subject in &subjects {
        // Large runs go in chunks so that memory stays bounded; each chunk has its own seed.
        let chunk = 100_000usize;
        let mut total = go_differential::Outcome {
            subject: subject.clone(),
            ..Default::default()
        };
        let mut done = 0;
        while done < cases {
            let n = chunk.min(cases - done);
            let chunk_seed = seed.wrapping_add(done as u64);
            match go_differential::run(&reference, subject, chunk_seed, n) {
                Ok(o) => {
                    total.cases += o.cases;
                    for (k, v) in o.deviations {
                        *total.deviations.entry(k).or_default() += v;
                    }
                    total.differences.extend(o.differences);
                }
                Err(e) => {
                    println!("{subject}: {e}");
                    return ExitCode::FAILURE;
                }
            }
            done += n;
        }
        total.differences.sort_by_key(|d| (d.size, d.case.len()));
        failed |= !total.differences.is_empty();
        print!("{total}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
