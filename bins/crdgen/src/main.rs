//! `crdgen`: writes the CRD YAML of every kind we own into a directory (default `deploy/crds`),
//! with the `Kustomization` that lists the CRDs an installation applies.
//!
//! Run through `hack/crdgen.sh`. The test `libs/api/tests/crds_in_sync.rs` fails when the checked-in
//! files differ from what this writes.

use anyhow::Context as _;
use clap::Parser;
use std::path::PathBuf;

/// Write the generated CustomResourceDefinitions to disk.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Directory to write `<plural>.<group>.yaml` files into; stale generated files are removed.
    #[arg(long, env = "CRDGEN_OUT", default_value = "deploy/crds")]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let files = api::crds::files();
    // Remove generated files that no longer correspond to a kind, so renames do not leave orphans.
    for entry in std::fs::read_dir(&args.out)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if name.ends_with(".yaml") && !files.iter().any(|(f, _)| *f == name) {
            std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
        }
    }
    for (name, yaml) in &files {
        let path = args.out.join(name);
        std::fs::write(&path, yaml).with_context(|| format!("write {}", path.display()))?;
    }
    println!(
        "wrote {} CRDs and {} to {}",
        api::crds::all().len(),
        api::crds::KUSTOMIZATION_FILE,
        args.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_well_formed() {
        Args::command().debug_assert();
    }
}
