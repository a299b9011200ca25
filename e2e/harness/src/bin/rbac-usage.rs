//! The unused-rule report: for each component's `deploy/<component>/rbac.yaml`, the grants (rule ×
//! verb × resource × resourceName) that no request its daemon made in the recorded tests needed.
//!
//! `rbac-usage [--strict] [--dir DIR] [--backend real|emulator] [--needed-elsewhere DIR]
//! [COMPONENT…]` reads `target/rbac-usage/<component>/*.jsonl` (written by every harness that ran
//! the component as its ServiceAccount, on the emulator or on kube-apiserver; `--backend` keeps the
//! records of one). With `--strict` it exits 1 when a grant is unused or redundant without a
//! `# rbac: kept because …` comment above its rule, or when a component has no records at all.
//! `hack/test.sh` runs it after nextest and the real-API suites, over the records of both.
//!
//! `--needed-elsewhere DIR` is for a partial set of records (the real-API suites alone): a grant
//! these records do not need is reported with the first test of DIR's records that needed it, and
//! counts as open only when no test there needed it either.

use std::path::PathBuf;
use std::process::ExitCode;

use harness::usage::{self, Verdict};

fn main() -> ExitCode {
    let mut strict = false;
    let mut dir = usage::usage_dir();
    let mut components = Vec::new();
    let mut backend = None;
    let mut elsewhere: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--strict" => strict = true,
            "--dir" => match args.next() {
                Some(d) => dir = PathBuf::from(d),
                None => {
                    println!("--dir needs a folder");
                    return ExitCode::from(2);
                }
            },
            "--backend" => match args.next().as_deref() {
                Some("real") => backend = Some(harness::ApiBackend::Real),
                Some("emulator") => backend = Some(harness::ApiBackend::Emulator),
                _ => {
                    println!("--backend needs `real` or `emulator`");
                    return ExitCode::from(2);
                }
            },
            "--needed-elsewhere" => match args.next() {
                Some(d) => elsewhere = Some(PathBuf::from(d)),
                None => {
                    println!("--needed-elsewhere needs a folder");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!(
                    "usage: rbac-usage [--strict] [--dir DIR] [--backend real|emulator] \
                     [--needed-elsewhere DIR] [COMPONENT...]"
                );
                return ExitCode::SUCCESS;
            }
            c => components.push(c.to_owned()),
        }
    }
    let deploy = harness::workspace_root().join("deploy");
    if components.is_empty() {
        let mut found: Vec<String> = std::fs::read_dir(&deploy)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("rbac.yaml").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        found.sort();
        components = found;
    }
    let mut failures = 0;
    for component in &components {
        let path = deploy.join(component).join("rbac.yaml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            println!("{component}: cannot read {}", path.display());
            failures += 1;
            continue;
        };
        let (sa_ns, sa_name) = harness::identity::service_account(component);
        let grants = usage::grants(&text, &sa_ns, &sa_name);
        let (requests, files) = usage::recorded_on(&dir, component, backend);
        println!(
            "== {component}: {} grants in {}, {} requests from {files} test records{} in {}",
            grants.len(),
            path.display(),
            requests.len(),
            match backend {
                None => "",
                Some(harness::ApiBackend::Real) => " made on kube-apiserver",
                Some(harness::ApiBackend::Emulator) => " made on the emulator",
            },
            dir.join(component).display()
        );
        if files == 0 {
            println!("   no records: run the component's tests first");
            failures += usize::from(strict);
            continue;
        }
        let other = elsewhere
            .as_ref()
            .map(|d| usage::recorded_files(d, component))
            .unwrap_or_default();
        let needed_by = usage::needed_by(&grants, &other);
        let mut open = 0;
        for ((grant, verdict), by) in usage::assess(&grants, &requests).into_iter().zip(needed_by) {
            let what = match verdict {
                Verdict::Needed => continue,
                Verdict::Redundant => "redundant (other grants allow all it allowed)",
                Verdict::Unused => "unused",
            };
            match (&grant.kept, by) {
                (Some(why), _) => println!("   kept   {}: {why}", grant.describe()),
                (None, Some(test)) => {
                    println!(
                        "   {what} here, needed elsewhere by {test}: {}",
                        grant.describe()
                    )
                }
                (None, None) => {
                    open += 1;
                    println!("   {what}: {}", grant.describe());
                }
            }
        }
        if open == 0 {
            println!("   NONE unused");
        }
        failures += open;
    }
    if strict && failures > 0 {
        println!("rbac-usage: {failures} grant(s) to remove or to mark `# rbac: kept because …`");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
