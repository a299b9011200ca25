//! Workspace layering, checked on every test run:
//!
//! * no crate has a cycle between its top-level modules (a module that uses `crate::b` while `b`
//!   uses it back, directly or through others): layers only point down;
//! * no daemon or tool crate (`bins/*`) depends on another one, not even for tests: end-to-end
//!   tests run other daemons as binaries;
//! * no daemon, tool or library crate (`bins/*`, `libs/*`) uses the test platform (`e2e/*`: the
//!   harness, the emulator, the simulated operators, the benchmarks) from its library, binaries,
//!   examples or build script; only its integration tests (`tests/`) may.
//!
//! Uses of `crate::x` are read from the source text (comment lines skipped, `crate::{a, b}` groups
//! expanded), which is what matters for layering: a module cannot use what it does not name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn crates() -> Vec<PathBuf> {
    let root = harness::workspace_root();
    let mut out = Vec::new();
    for group in ["bins", "libs", "e2e"] {
        for entry in std::fs::read_dir(root.join(group)).unwrap() {
            let dir = entry.unwrap().path();
            if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
                out.push(dir);
            }
        }
    }
    out.sort();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`None` for the crate root and binaries).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    match first {
        "lib.rs" | "main.rs" | "bin" => None,
        f => Some(f.trim_end_matches(".rs").to_owned()),
    }
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Top-level modules named through `crate::` in `text`.
fn uses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for (i, _) in line.match_indices("crate::") {
            let rest = &line[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a, b::c, d}`: the first segment of every top-level item of the group.
                let mut depth = 0;
                let mut item_start = true;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => item_start = true,
                        c if item_start && !c.is_whitespace() => {
                            item_start = false;
                            let name = ident(&group[j..]);
                            if !name.is_empty() {
                                out.insert(name);
                            }
                        }
                        _ => {}
                    }
                }
            } else {
                let name = ident(rest);
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        }
    }
    out
}

/// Every cycle of `edges` (each reported once, as the module path that closes it).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_owned());
            found.push(cycle);
            return;
        }
        if done.contains(node) {
            return;
        }
        stack.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            visit(next, edges, stack, done, found);
        }
        stack.pop();
        done.insert(node.to_owned());
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        visit(node, edges, &mut Vec::new(), &mut done, &mut found);
    }
    found
}

#[test]
fn no_crate_has_a_module_cycle() {
    let mut problems = Vec::new();
    for krate in crates() {
        let src = krate.join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeSet<String> = files.iter().filter_map(|f| top_module(&src, f)).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let Some(from) = top_module(&src, file) else {
                continue;
            };
            let text = std::fs::read_to_string(file).unwrap();
            for to in uses(&text) {
                if to != from && modules.contains(&to) {
                    edges.entry(from.clone()).or_default().insert(to);
                }
            }
        }
        for cycle in cycles(&edges) {
            problems.push(format!(
                "{}: {}",
                krate.file_name().unwrap().to_string_lossy(),
                cycle.join(" -> ")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "module cycles (a lower layer must not use a higher one):\n{}",
        problems.join("\n")
    );
}

#[test]
fn no_daemon_crate_depends_on_another() {
    let bins: BTreeSet<String> = crates()
        .iter()
        .filter(|c| c.parent().is_some_and(|p| p.ends_with("bins")))
        .map(|c| c.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut problems = Vec::new();
    for krate in crates() {
        let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
        for line in manifest.lines() {
            let Some(name) = line.split('=').next().map(str::trim) else {
                continue;
            };
            let me = krate.file_name().unwrap().to_string_lossy();
            if bins.contains(name) && name != me && line.contains("path") {
                problems.push(format!("{me} depends on {name}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "daemon crates run each other as binaries, never as libraries: {problems:?}"
    );
}

#[test]
fn only_integration_tests_use_the_test_platform() {
    let platform: BTreeSet<String> = crates()
        .iter()
        .filter(|c| c.parent().is_some_and(|p| p.ends_with("e2e")))
        .map(|c| c.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let mut problems = Vec::new();
    for krate in crates() {
        if krate.parent().is_some_and(|p| p.ends_with("e2e")) {
            continue;
        }
        let me = krate.file_name().unwrap().to_string_lossy().into_owned();
        let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).unwrap();
        for name in production_dependencies(&manifest, &platform) {
            problems.push(format!(
                "{me}: Cargo.toml depends on {name} outside [dev-dependencies]"
            ));
        }
        let mut files = Vec::new();
        for dir in ["src", "examples", "benches"] {
            if krate.join(dir).is_dir() {
                rust_files(&krate.join(dir), &mut files);
            }
        }
        if krate.join("build.rs").is_file() {
            files.push(krate.join("build.rs"));
        }
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for name in platform_uses(&text, &platform) {
                let rel = file.strip_prefix(&krate).unwrap().display().to_string();
                problems.push(format!("{me}: {rel} uses {name}"));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the test platform (e2e/*) is for integration tests only; move benchmarks to e2e/bench:\n{}",
        problems.join("\n")
    );
}

/// The crates of `platform` that `manifest` names in a section other than `[dev-dependencies]`.
fn production_dependencies(manifest: &str, platform: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        let is_dependency_table =
            section.ends_with("dependencies]") && !section.ends_with("dev-dependencies]");
        let name = line.split('=').next().unwrap_or_default().trim();
        if is_dependency_table && platform.contains(name) {
            out.push(name.to_owned());
        }
    }
    out
}

/// The crates of `platform` that `text` (Rust source) names as paths, comment lines skipped.
fn platform_uses(text: &str, platform: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for name in platform {
            let path = format!("{}::", name.replace('-', "_"));
            let named = line.match_indices(&path).any(|(i, _)| {
                !line[..i]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            });
            if named {
                out.insert(name.clone());
            }
        }
    }
    out
}

#[test]
fn the_checks_see_what_they_should() {
    let text = "use crate::a::X;\n// use crate::hidden;\nlet y = crate::b::f();\nuse crate::{c, d::{e, f}, g as h};\n";
    assert_eq!(
        uses(text),
        ["a", "b", "c", "d", "g"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(cycles(&edges), [["a", "b", "c", "a"]]);

    let platform: BTreeSet<String> = ["harness", "kube-emulator"].map(String::from).into();
    let source = "use harness::Harness;\n// harness::x in a comment\nlet e = kube_emulator::Emulator::new();\nmy_harness::y();\nsuper::harness::z();\n";
    assert_eq!(platform_uses(source, &platform), platform);
    assert!(platform_uses("my_harness::y();\nsuper::harness::z();", &platform).is_empty());
    let manifest = "[dependencies]\nharness = { path = \"../../e2e/harness\" }\n[dev-dependencies]\nkube-emulator = { path = \"x\" }\n[target.'cfg(unix)'.dependencies]\nkube-emulator = \"1\"\n";
    assert_eq!(
        production_dependencies(manifest, &platform),
        ["harness", "kube-emulator"]
    );
}
