//! The kube emulator binary, built as part of this crate so that the harness's own process-mode tests
//! always have one (`CARGO_BIN_EXE_harness-kube-emulator`); identical to `kube-emulator`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    kube_emulator::cli::main_from_env().await
}
