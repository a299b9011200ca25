//! The real `kubectl` against the emulator, and the audit log.

use std::process::{Command, Output, Stdio};

use crate::Harness;

impl Harness {
    /// Runs `kubectl --kubeconfig <ours> <args>`.
    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(self.kubeconfig_path())
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl is installed");
        if let Some(input) = stdin {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .expect("piped stdin")
                .write_all(input.as_bytes())
                .expect("write kubectl stdin");
        }
        child.wait_with_output().expect("kubectl runs")
    }

    /// Runs kubectl and returns its stdout, panicking with both outputs when it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args, None);
        assert!(
            out.status.success(),
            "kubectl {} failed:\nstdout: {}\nstderr: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply --server-side -f -` of `yaml` (one or several documents), verbatim as a user
    /// would paste it; `namespace` sets `-n`.
    pub fn apply_yaml(&self, namespace: Option<&str>, yaml: &str) -> String {
        let mut args = vec!["apply", "--server-side", "-f", "-"];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        let out = self.kubectl_output(&args, Some(yaml));
        assert!(
            out.status.success(),
            "kubectl apply failed:\nstdout: {}\nstderr: {}\n--- input ---\n{yaml}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The emulator's request audit log, parsed.
    pub fn audit(&self) -> crate::Audit {
        crate::Audit::parse(&self.audit_log())
    }
}
