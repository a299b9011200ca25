//! Events: the recorder every daemon publishes with, and the bound on a note's length.

use kube::runtime::events::{Recorder, Reporter};

/// The longest note a daemon writes (the API server's limit is 1 kB).
pub const NOTE_MAX: usize = 1024;

/// The Event recorder of `component`, reporting as this replica (`--identity`).
pub fn recorder(client: &kube::Client, component: &str, lease: &crate::LeaseArgs) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: component.into(),
            instance: Some(lease.identity()),
        },
    )
}

/// `note` cut to at most [`NOTE_MAX`] bytes, on a character boundary.
pub fn note(note: &str) -> String {
    truncate(note, NOTE_MAX)
}

/// `s` cut to at most `max` bytes, on a character boundary.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn cuts_on_a_character_boundary() {
        assert_eq!(super::truncate("abc", 5), "abc");
        assert_eq!(super::truncate("aé", 2), "a");
        assert_eq!(super::note(&"x".repeat(2000)).len(), super::NOTE_MAX);
    }
}
