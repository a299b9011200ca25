//! Secret hygiene checks: a credential value must never appear in logs, Events, status, metrics
//! or error messages, in any of the forms it could take there.

/// The forms a secret value can appear in: verbatim, standard base64 (Secret `data`), and JSON
/// string escaping (a value inside a JSON log field or object dump).
pub fn forms(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    let mut forms = vec![
        secret.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(secret),
    ];
    let escaped = serde_json::to_string(secret).unwrap_or_default();
    let escaped = escaped.trim_matches('"').to_owned();
    if escaped != secret {
        forms.push(escaped);
    }
    forms
}

/// Names every `(place, form)` where a form of one of `secrets` occurs in the labelled texts.
pub fn find_leaks(texts: &[(&str, &str)], secrets: &[&str]) -> Vec<String> {
    let mut leaks = Vec::new();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        for form in forms(secret) {
            for (place, text) in texts {
                if text.contains(&form) {
                    leaks.push(format!(
                        "{place} contains a secret value (as {form:?}'s form)"
                    ));
                }
            }
        }
    }
    leaks
}

/// Panics naming each place where a form of one of `secrets` occurs (without printing the
/// secret itself).
pub fn assert_no_leaks(texts: &[(&str, &str)], secrets: &[&str]) {
    let leaks: Vec<String> = find_leaks(texts, secrets)
        .into_iter()
        .map(|l| l.split(" (as").next().unwrap_or_default().to_owned())
        .collect();
    assert!(leaks.is_empty(), "secret values leaked: {leaks:?}");
}

impl crate::Harness {
    /// Panics naming each place where a form (see [`forms`]) of one of `secrets` occurs: the log
    /// and `/metrics` of every daemon that is a project component, every Event in the emulator, the `status` of every object of
    /// the project's kinds (`*.backups.cozystack.io`), the emulator's audit log, and `seen`, the
    /// error messages the test itself got (labelled). Run it at the end of a daemon's main e2e
    /// with the values of the credentials the test created.
    pub fn assert_no_secret_leaks(&self, secrets: &[&str], seen: &[(&str, &str)]) {
        let mut texts: Vec<(String, String)> = Vec::new();
        // The project's daemons only: a simulated operator stands in for software that is not ours.
        for d in self
            .daemons()
            .iter()
            .filter(|d| d.spec.component().is_some())
        {
            texts.push((format!("{} log", d.spec.name), d.log()));
            if !d.admin_addr.is_empty()
                && let Ok((200, metrics)) = crate::http::get(&d.admin_addr, "/metrics")
            {
                texts.push((format!("{} /metrics", d.spec.name), metrics));
            }
        }
        let snapshot = self.snapshot();
        for o in snapshot["objects"].as_array().into_iter().flatten() {
            let api_version = o["apiVersion"].as_str().unwrap_or_default();
            let at = || {
                format!(
                    "{} {}/{}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["namespace"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                )
            };
            if o["kind"] == "Event" {
                texts.push((format!("Event {}", at()), o.to_string()));
            } else if api_version.contains("backups.cozystack.io/") && !o["status"].is_null() {
                texts.push((format!("status of {}", at()), o["status"].to_string()));
            }
        }
        texts.push(("the emulator's audit log".into(), self.audit_log()));
        for (place, text) in seen {
            texts.push(((*place).to_owned(), (*text).to_owned()));
        }
        let labelled: Vec<(&str, &str)> = texts
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        assert_no_leaks(&labelled, secrets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_verbatim_base64_and_escaped_forms() {
        let secret = "s3cr\"et";
        let texts = [
            ("log", "key=s3cr\"et"),
            ("events", "czNjciJldA=="),
            ("status", r#"{"m":"s3cr\"et"}"#),
            ("metrics", "nothing"),
        ];
        let leaks = find_leaks(&texts, &[secret]);
        assert_eq!(leaks.len(), 3, "{leaks:?}");
        assert!(find_leaks(&[("x", "clean")], &[secret, ""]).is_empty());
    }
}
