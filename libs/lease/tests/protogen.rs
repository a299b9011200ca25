//! The generated gRPC code in `src/gen/` is checked in; this test regenerates it from
//! `proto/lease/v1/lease.proto` (protox, so no protoc is needed) into a temporary directory and
//! fails when the checked-in copy differs. `hack/protogen.sh` rewrites the checked-in copy.

use std::path::{Path, PathBuf};

const GENERATED: &str = "cozy.lease.v1.rs";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generate(out_dir: &Path) -> String {
    let proto_root = manifest_dir().join("../../proto");
    let fds =
        protox::compile(["lease/v1/lease.proto"], [&proto_root]).expect("compile lease.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .out_dir(out_dir)
        .compile_fds(fds)
        .expect("generate Rust code");
    std::fs::read_to_string(out_dir.join(GENERATED)).expect("read generated code")
}

#[test]
fn generated_code_is_up_to_date() {
    let tmp = std::env::temp_dir().join(format!("lease-protogen-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let fresh = generate(&tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    let checked_in_path = manifest_dir().join("src/gen").join(GENERATED);
    if std::env::var_os("LEASE_PROTOGEN_WRITE").is_some() {
        std::fs::write(&checked_in_path, &fresh).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&checked_in_path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "{} is stale or missing: run hack/protogen.sh to regenerate it from proto/lease/v1/lease.proto",
        checked_in_path.display()
    );
}
