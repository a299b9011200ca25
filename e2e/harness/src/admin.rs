//! Reading a daemon's admin endpoints (`/ready`, `/metrics`) and Prometheus text.

use std::collections::BTreeMap;

/// The admin server of one running daemon.
#[derive(Clone, Debug)]
pub struct Admin {
    addr: String,
}

impl Admin {
    /// The admin server at `IP:PORT`.
    pub fn new(addr: impl Into<String>) -> Self {
        Self { addr: addr.into() }
    }

    /// `IP:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `GET path` → (status, body); status 0 when nothing answers.
    pub fn get(&self, path: &str) -> (u16, String) {
        crate::http::get(&self.addr, path).unwrap_or((0, String::new()))
    }

    /// Whether `/ready` answers 200.
    pub fn is_ready(&self) -> bool {
        self.get("/ready").0 == 200
    }

    /// The `/ready` body (one line per check).
    pub fn ready_report(&self) -> String {
        self.get("/ready").1
    }

    /// The parsed `/metrics`.
    pub fn metrics(&self) -> Metrics {
        Metrics::parse(&self.get("/metrics").1)
    }
}

/// Samples of a Prometheus text exposition: `name{labels}` → value.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    text: String,
    samples: Vec<Sample>,
}

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

impl Metrics {
    /// Parses the text format (comments skipped; label values unescaped).
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(parse_line)
            .collect();
        Self {
            text: text.to_owned(),
            samples,
        }
    }

    /// The raw text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Every sample.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The value of `name` with exactly these labels (others may not be present), if exposed.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    /// The value of `name` with these labels, 0 when not exposed (counters start at 0).
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    /// The sum of every sample of `name` whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            // From +0.0: `f64`'s `Sum` starts at -0.0, which prints as "-0" when nothing matched.
            .fold(0.0, |sum, v| sum + v)
    }

    /// True when some sample of `name` is exposed.
    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value.trim() {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
        None => (series, BTreeMap::new()),
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

fn parse_labels(mut s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    while !s.is_empty() {
        let (key, rest) = s.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break i,
                c => value.push(c),
            }
        };
        out.insert(key.trim().to_owned(), value);
        s = rest[end + 1..].trim_start_matches(',');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_samples_with_labels() {
        let m = Metrics::parse(
            "# HELP x help\n# TYPE x counter\nx 3\n\
             y{controller=\"a\",kind=\"api\"} 2\ny{controller=\"b\",kind=\"x\\\"y\"} 5\n\
             h_bucket{le=\"+Inf\"} 7\n",
        );
        assert_eq!(m.value("x", &[]), 3.0);
        assert_eq!(m.value("y", &[("controller", "a"), ("kind", "api")]), 2.0);
        assert_eq!(
            m.get("y", &[("controller", "a")]),
            None,
            "labels match exactly"
        );
        assert_eq!(m.sum("y", &[]), 7.0);
        assert_eq!(m.value("y", &[("controller", "b"), ("kind", "x\"y")]), 5.0);
        assert_eq!(m.value("h_bucket", &[("le", "+Inf")]), 7.0);
        assert_eq!(m.value("absent", &[]), 0.0);
    }
}
