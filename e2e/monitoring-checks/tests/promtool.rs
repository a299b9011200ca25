//! deploy/monitoring checked by promtool (Debian's `prometheus` package): the PrometheusRule's
//! groups are valid rules, its unit tests (deploy/monitoring/tests/*.yaml) pass and show every
//! alert firing and not firing, and every dashboard query parses. Without promtool these tests
//! say SKIPPED and pass, unless `PROMTOOL_REQUIRED=1`. The runbook and kustomization checks need
//! no promtool.

use std::collections::{BTreeMap, BTreeSet};

use monitoring_checks::{
    Scratch, alerts, dashboard, dashboard_queries, monitoring_dir, plain_rules, prometheus_rule,
    queries_as_recording_rules, run_promtool, workspace_root,
};

fn output(out: &std::process::Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn rules_pass_promtool_check() {
    let Some(promtool) = monitoring_checks::promtool() else {
        return;
    };
    let rule = prometheus_rule().unwrap();
    let dir = Scratch::new("check");
    std::fs::write(dir.path().join("rules.yaml"), plain_rules(&rule).unwrap()).unwrap();
    let out = run_promtool(&promtool, dir.path(), &["check", "rules", "rules.yaml"]);
    assert!(out.status.success(), "{}", output(&out));
    let n = alerts(&rule).len();
    assert!(n >= 10, "only {n} alerts");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("SUCCESS: {n} rules found")),
        "{}",
        output(&out)
    );
}

#[test]
fn alert_unit_tests_pass_and_cover_every_alert_both_ways() {
    let rule = prometheus_rule().unwrap();
    // Which alerts the test files show firing and not firing (read without promtool).
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    let tests_dir = monitoring_dir().join("tests");
    let mut files: Vec<_> = std::fs::read_dir(&tests_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no test files in {}",
        tests_dir.display()
    );
    for f in &files {
        let doc: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        assert_eq!(
            doc["rule_files"],
            serde_yaml::from_str::<serde_yaml::Value>("[rules.yaml]").unwrap(),
            "{}: rule_files must be [rules.yaml] (the extracted PrometheusRule)",
            f.display()
        );
        for t in doc["tests"].as_sequence().unwrap() {
            for a in t["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = a["alertname"].as_str().unwrap().to_owned();
                match a["exp_alerts"].as_sequence() {
                    Some(v) if !v.is_empty() => firing.insert(name),
                    _ => quiet.insert(name),
                };
            }
        }
    }
    for a in alerts(&rule) {
        assert!(firing.contains(&a.name), "no test shows {} firing", a.name);
        assert!(
            quiet.contains(&a.name),
            "no test shows {} not firing",
            a.name
        );
    }

    let Some(promtool) = monitoring_checks::promtool() else {
        return;
    };
    let dir = Scratch::new("test");
    std::fs::write(dir.path().join("rules.yaml"), plain_rules(&rule).unwrap()).unwrap();
    for f in &files {
        let name = f.file_name().unwrap().to_str().unwrap();
        std::fs::copy(f, dir.path().join(name)).unwrap();
        let out = run_promtool(&promtool, dir.path(), &["test", "rules", name]);
        assert!(out.status.success(), "{name}: {}", output(&out));
    }
}

#[test]
fn every_dashboard_query_parses() {
    let queries = dashboard_queries(&dashboard().unwrap());
    assert!(queries.len() >= 20, "only {} queries", queries.len());
    let Some(promtool) = monitoring_checks::promtool() else {
        return;
    };
    let dir = Scratch::new("dashboard");
    std::fs::write(
        dir.path().join("queries.yaml"),
        queries_as_recording_rules(&queries),
    )
    .unwrap();
    let out = run_promtool(&promtool, dir.path(), &["check", "rules", "queries.yaml"]);
    assert!(out.status.success(), "{}", output(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{}",
        output(&out)
    );
}

/// The promtool route really rejects a broken query (so the check above means something).
#[test]
fn a_broken_dashboard_query_is_rejected() {
    let Some(promtool) = monitoring_checks::promtool() else {
        return;
    };
    let dir = Scratch::new("broken");
    let queries = vec![monitoring_checks::Query {
        panel: "broken".into(),
        ref_id: "A".into(),
        expr: "sum by (kind (rate(x_total[$__rate_interval]))".into(),
    }];
    std::fs::write(
        dir.path().join("queries.yaml"),
        queries_as_recording_rules(&queries),
    )
    .unwrap();
    let out = run_promtool(&promtool, dir.path(), &["check", "rules", "queries.yaml"]);
    assert!(!out.status.success(), "{}", output(&out));
}

#[test]
fn every_alert_links_its_runbook_and_every_runbook_has_an_alert() {
    let rule = prometheus_rule().unwrap();
    let runbooks = workspace_root().join("docs/runbooks");
    let mut names = BTreeSet::new();
    for a in alerts(&rule) {
        let url = a
            .runbook_url
            .unwrap_or_else(|| panic!("{}: no annotations.runbook_url", a.name));
        let path = format!("docs/runbooks/{}.md", a.name);
        assert!(url.ends_with(&path), "{}: runbook_url {url}", a.name);
        let text = std::fs::read_to_string(workspace_root().join(&path))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        for heading in ["## Meaning", "## Check", "## Fix"] {
            assert!(text.contains(heading), "{path} lacks {heading:?}");
        }
        assert!(text.starts_with(&format!("# {}", a.name)), "{path} title");
        names.insert(a.name);
    }
    for e in std::fs::read_dir(&runbooks).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_str().unwrap().to_owned();
        assert!(names.contains(&stem), "{} has no alert", p.display());
    }
    // The README's alert table lists every alert.
    let readme = std::fs::read_to_string(workspace_root().join("README.md")).unwrap();
    for n in &names {
        assert!(readme.contains(&format!("`{n}`")), "README lacks {n}");
    }
}

#[test]
fn kustomization_lists_existing_files_and_the_podmonitor_selects_the_daemons() {
    let dir = monitoring_dir();
    let k: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())
            .unwrap();
    let mut files: Vec<String> = k["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    for g in k["configMapGenerator"].as_sequence().into_iter().flatten() {
        files.extend(
            g["files"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned()),
        );
    }
    for f in ["podmonitor.yaml", "prometheusrule.yaml", "dashboard.json"] {
        assert!(files.iter().any(|x| x == f), "kustomization lacks {f}");
    }
    for f in &files {
        assert!(dir.join(f).is_file(), "{f} listed but missing");
    }
    let pm: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("podmonitor.yaml")).unwrap())
            .unwrap();
    assert_eq!(pm["kind"].as_str(), Some("PodMonitor"));
    assert_eq!(
        pm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/part-of"].as_str(),
        Some("cozy-backups")
    );
    let ep = &pm["spec"]["podMetricsEndpoints"][0];
    assert_eq!(ep["port"].as_str(), Some("admin"));
    assert_eq!(ep["path"].as_str(), Some("/metrics"));
    // Every daemon's pod template carries the selected label and an `admin` port.
    let mut seen = BTreeMap::new();
    for d in std::fs::read_dir(workspace_root().join("deploy")).unwrap() {
        let p = d.unwrap().path().join("deployment.yaml");
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        let dep: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let tpl = &dep["spec"]["template"];
        assert_eq!(
            tpl["metadata"]["labels"]["app.kubernetes.io/part-of"].as_str(),
            Some("cozy-backups"),
            "{}",
            p.display()
        );
        let ports = &tpl["spec"]["containers"][0]["ports"];
        assert!(
            ports
                .as_sequence()
                .unwrap()
                .iter()
                .any(|port| port["name"].as_str() == Some("admin")),
            "{} has no admin port",
            p.display()
        );
        seen.insert(p, ());
    }
    assert_eq!(seen.len(), 7, "{seen:?}");
}
