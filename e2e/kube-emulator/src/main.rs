//! `kube-emulator`: serve the Kubernetes API emulator in the foreground (see the library docs).

#[tokio::main]
async fn main() -> std::process::ExitCode {
    kube_emulator::cli::main_from_env().await
}
