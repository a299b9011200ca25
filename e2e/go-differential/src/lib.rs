//! Differential tests against the Go originals. Four parts of this project reimplement what
//! upstream gets from Go's own libraries; each is run over generated cases side by side with a
//! small Go program (`e2e/go-reference`) that answers with those libraries, and the answers are
//! compared byte for byte:
//!
//! ```text
//!  seed ──► generator (cases in increasing size) ──┬──► Go reference (one process per subject) ──┐
//!                                                  └──► this project's Rust code ────────────────┴─► verdict per case
//! ```
//!
//! | subject    | Go                                        | Rust                                                        |
//! |------------|-------------------------------------------|-------------------------------------------------------------|
//! | `template` | `text/template` + slim-sprig `FuncMap()`  | `drivers::template::render_string`                          |
//! | `cron`     | robfig/cron v3 `ParseStandard` + `Next`   | `schedule::Schedule::parse` + `next_after`                  |
//! | `duration` | `time.ParseDuration`, `Duration.String`   | `drivers::mariadb::{parse,format}_go_duration`, `drivers::status::go_duration`, `@every` |
//! | `hash`     | `json.Marshal` of the typed definitions   | `appdef::canonical::canonical_json`                          |
//!
//! A verdict is *same*, a *deviation* (a difference this project makes on purpose, named and
//! documented with its reason in `docs/`), or a *difference* (a bug). Differences are reported
//! smallest case first.

pub mod cron;
pub mod duration;
pub mod hash;
pub mod reference;
pub mod rng;
pub mod template;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value as Json;

pub use reference::Reference;

/// The subjects, by the name of the reference's mode.
pub const SUBJECTS: [&str; 5] = ["template", "template-full", "cron", "duration", "hash"];

/// How one case compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Both sides gave the same answer.
    Same,
    /// A documented, deliberate difference (its name).
    Deviation(&'static str),
    /// A difference: what Go said and what the Rust side said.
    Differ {
        /// Go's answer.
        go: String,
        /// This project's answer.
        rust: String,
    },
}

/// A case on which the two sides disagree.
#[derive(Clone, Debug)]
pub struct Difference {
    /// The generator's size of the case (smaller is simpler).
    pub size: usize,
    /// The case as sent to the reference.
    pub case: String,
    /// Go's answer.
    pub go: String,
    /// This project's answer.
    pub rust: String,
}

/// The result of one subject's run.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The subject.
    pub subject: String,
    /// Cases run through both sides.
    pub cases: usize,
    /// Deliberate differences, by name.
    pub deviations: BTreeMap<&'static str, usize>,
    /// Real differences, smallest first.
    pub differences: Vec<Difference>,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} cases, {} same, {} documented deviations, {} differences",
            self.subject,
            self.cases,
            self.cases - self.differences.len() - self.deviations.values().sum::<usize>(),
            self.deviations.values().sum::<usize>(),
            self.differences.len()
        )?;
        for (name, n) in &self.deviations {
            writeln!(f, "  deviation {name}: {n}")?;
        }
        // More with GO_DIFFERENTIAL_SHOW=<n> (a triage aid; the default keeps failures short).
        let show = std::env::var("GO_DIFFERENTIAL_SHOW")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(5);
        for d in self.differences.iter().take(show) {
            writeln!(
                f,
                "  DIFFERENCE (size {}):\n    case: {}\n    go:   {}\n    rust: {}",
                d.size, d.case, d.go, d.rust
            )?;
        }
        if self.differences.len() > show {
            writeln!(f, "  … and {} more", self.differences.len() - show)?;
        }
        Ok(())
    }
}

/// A generated case: its size and the JSON line the reference reads.
#[derive(Clone, Debug)]
pub struct Case {
    /// The generator's size (the budget it was built with; smaller is simpler).
    pub size: usize,
    /// The case.
    pub input: Json,
}

/// Compares one case: the case as sent to the reference, and Go's answer.
type Check = fn(&Json, &Json) -> Verdict;

/// How long one case may take on the Rust side before it counts as a hang.
const CASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `cases` cases of `subject` generated from `seed` through both sides.
pub fn run(
    reference: &Reference,
    subject: &str,
    seed: u64,
    cases: usize,
) -> Result<Outcome, String> {
    let mut rng = rng::Rng::new(seed);
    let (generated, check): (Vec<Case>, Check) = match subject {
        "template" => (template::generate(&mut rng, cases), template::check),
        "template-full" => (template::generate_full(&mut rng, cases), template::check),
        "cron" => (cron::generate(&mut rng, cases), cron::check),
        "duration" => (duration::generate(&mut rng, cases), duration::check),
        "hash" => (hash::generate(&mut rng, cases), hash::check),
        other => return Err(format!("unknown subject {other:?} (one of {SUBJECTS:?})")),
    };
    let lines: Vec<String> = generated.iter().map(|c| c.input.to_string()).collect();
    let mode = subject.strip_suffix("-full").unwrap_or(subject);
    let answers = reference.answer(mode, &lines)?;
    let generated = Arc::new(generated);
    let answers = Arc::new(answers);
    // The Rust side runs on a worker so that a case that never returns is reported, not waited
    // for; a panic is reported as that case's answer.
    let at = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (generated, answers, at) = (generated.clone(), answers.clone(), at.clone());
        std::thread::spawn(move || {
            for (i, (case, go)) in generated.iter().zip(answers.iter()).enumerate() {
                at.store(i, Ordering::SeqCst);
                let verdict =
                    std::panic::catch_unwind(|| check(&case.input, go)).unwrap_or_else(|p| {
                        let msg = p
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_default();
                        Verdict::Differ {
                            go: go.to_string(),
                            rust: format!("panicked: {msg}"),
                        }
                    });
                if tx.send(verdict).is_err() {
                    return;
                }
            }
        });
    }
    let mut outcome = Outcome {
        subject: subject.to_owned(),
        cases: generated.len(),
        ..Default::default()
    };
    for i in 0..generated.len() {
        let verdict = match rx.recv_timeout(CASE_TIMEOUT) {
            Ok(v) => v,
            Err(_) => {
                let stuck = at.load(Ordering::SeqCst);
                outcome.differences.push(Difference {
                    size: generated[stuck].size,
                    case: generated[stuck].input.to_string(),
                    go: answers[stuck].to_string(),
                    rust: format!("did not return within {CASE_TIMEOUT:?}"),
                });
                outcome.cases = i;
                break;
            }
        };
        match verdict {
            Verdict::Same => {}
            Verdict::Deviation(name) => *outcome.deviations.entry(name).or_default() += 1,
            Verdict::Differ { go, rust } => outcome.differences.push(Difference {
                size: generated[i].size,
                case: lines[i].clone(),
                go,
                rust,
            }),
        }
    }
    outcome.differences.sort_by_key(|d| (d.size, d.case.len()));
    Ok(outcome)
}

/// The size budget of case `i` of `n`: cases grow from 1 to `max` over the run, so the first
/// failures are the simplest ones.
pub(crate) fn size_of(i: usize, n: usize, max: usize) -> usize {
    1 + i * max / n.max(1)
}

/// An error answer of the reference: `(class, message)`.
pub(crate) fn go_error(go: &Json) -> Option<(&str, &str)> {
    Some((
        go.get("err")?.as_str()?,
        go.get("msg")?.as_str().unwrap_or_default(),
    ))
}
