//! Workspace layering, checked on every test run:
//!
//! * no crate has a cycle between sibling modules at any depth (a module that uses `crate::b` or
//!   `super::b` while `b` uses it back, directly or through others): layers only point down;
//! * no daemon or tool crate (`bins/*`) depends on another one, not even for tests: end-to-end
//!   tests run other daemons as binaries;
//! * no daemon, tool or library crate (`bins/*`, `libs/*`) uses the test platform (`e2e/*`: the
//!   harness, the emulator, the simulated operators, the benchmarks) from its library, binaries,
//!   examples or build script; only its integration tests (`tests/`) may.
//!
//! Uses of `crate::x::y` and `super::x` are read from the source text (comment lines and inline
//! test modules skipped, `{a, b::c}` groups expanded), which is what matters for layering: a
//! module cannot use what it does not name.

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

/// The module path of a source file (`[]` for the crate root, `None` for binaries under `bin/`):
/// `a.rs` and `a/mod.rs` are `[a]`, `a/b.rs` is `[a, b]`.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let last = parts.pop()?;
    match last.as_str() {
        "lib.rs" | "main.rs" if parts.is_empty() => {}
        "mod.rs" => {}
        f => parts.push(f.trim_end_matches(".rs").to_owned()),
    }
    Some(parts)
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The `a::b::c` path at the start of `rest` (segments up to the first non-path character), and
/// for a trailing `{…}` group every path inside it, each prefixed.
fn expand(prefix: &[String], rest: &str, out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            // `{a, b::c, d::{e, f}}`: every item of the group, recursively.
            let mut depth = 0;
            let mut item = 0;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        expand(&path, group[item..j].trim_start(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&path, group[item..j].trim_start(), out);
                        item = j + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name = ident(rest);
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        path.push(name);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    if path.len() > prefix.len() {
        out.push(path);
    }
}

/// The module paths `text` (the file of module `me`) names through `crate::` and `super::`,
/// absolute from the crate root. Comment lines are skipped, and so is everything from the first
/// `#[cfg(test)]` on (a test module's `super` is the file itself).
fn uses(text: &str, me: &[String]) -> Vec<Vec<String>> {
    // One line of code, so that a `{…}` group spanning lines reads as one.
    let code: String = text
        .lines()
        .map(str::trim_start)
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .filter(|l| !l.starts_with("//"))
        .collect::<Vec<_>>()
        .join(" ");
    let preceded_by_path = |i: usize| {
        code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == ':')
    };
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        if !preceded_by_path(i) {
            expand(&[], &code[i + "crate::".len()..], &mut out);
        }
    }
    let mut at = 0;
    while let Some(i) = code[at..].find("super::") {
        let i = at + i;
        let mut rest = &code[i..];
        let mut base = me.to_vec();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        if !preceded_by_path(i) {
            expand(&base, rest, &mut out);
        }
        at = code.len() - rest.len();
    }
    out
}

/// The dependency edge a use from module `from` to path `to` makes between two sibling modules:
/// `(parent, from's ancestor, to's ancestor)` at the first level where they differ, when `to`'s
/// ancestor there is a module of the crate. A use of an ancestor or of a descendant makes none.
fn sibling_edge(
    from: &[String],
    to: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<(Vec<String>, String, String)> {
    let i = from.iter().zip(to).position(|(a, b)| a != b)?;
    modules
        .contains(&to[..=i])
        .then(|| (from[..i].to_vec(), from[i].clone(), to[i].clone()))
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
        let files: Vec<(Vec<String>, PathBuf)> = files
            .into_iter()
            .filter_map(|f| Some((module_path(&src, &f)?, f)))
            .collect();
        let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
        // Edges between the child modules of one parent, per parent.
        let mut scopes: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for (from, file) in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for to in uses(&text, from) {
                if let Some((scope, a, b)) = sibling_edge(from, &to, &modules) {
                    scopes
                        .entry(scope)
                        .or_default()
                        .entry(a)
                        .or_default()
                        .insert(b);
                }
            }
        }
        for (scope, edges) in &scopes {
            for cycle in cycles(edges) {
                let prefix: String = scope.iter().map(|s| format!("{s}::")).collect();
                let cycle: Vec<String> = cycle.iter().map(|m| format!("{prefix}{m}")).collect();
                problems.push(format!(
                    "{}: {}",
                    krate.file_name().unwrap().to_string_lossy(),
                    cycle.join(" -> ")
                ));
            }
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
    let text = "use crate::a::X;\n// use crate::hidden;\nlet y = crate::b::f();\nuse crate::{c, d::{e,\n f}, g as h};\nuse super::{sib, self as parent};\nlet z = super::other::f();\n#[cfg(test)]\nuse crate::only_in_tests;\n";
    let me = ["m".to_owned(), "n".to_owned()];
    let paths: Vec<String> = uses(text, &me).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "a::X",
            "b::f",
            "c",
            "d::e",
            "d::f",
            "g",
            "m::sib",
            "m::self",
            "m::other::f"
        ]
    );
    let modules: BTreeSet<Vec<String>> = [vec!["m"], vec!["m", "n"], vec!["m", "sib"], vec!["a"]]
        .into_iter()
        .map(|m| m.into_iter().map(String::from).collect())
        .collect();
    let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        sibling_edge(&me, &v(&["m", "sib", "item"]), &modules),
        Some((v(&["m"]), "n".to_owned(), "sib".to_owned()))
    );
    assert_eq!(
        sibling_edge(&me, &v(&["a", "X"]), &modules),
        Some((v(&[]), "m".to_owned(), "a".to_owned()))
    );
    assert_eq!(sibling_edge(&me, &v(&["m"]), &modules), None, "an ancestor");
    assert_eq!(
        sibling_edge(&me, &v(&["m", "nope"]), &modules),
        None,
        "not a module"
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
