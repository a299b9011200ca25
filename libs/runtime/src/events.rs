//! Events: the recorder every daemon publishes with, and the bound on a note's length.
//!
//! A publish that meets a passing API failure (a 5xx, a 429, a connection that dropped) is tried
//! again a few times within about a second, so that a throttled or restarting API server does not
//! silently cost an Event. The wait stays short because the caller is usually a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};

/// The longest note a daemon writes (the API server's limit is 1 kB).
pub const NOTE_MAX: usize = 1024;

/// The longest object name whose Events kube's recorder can name: it names an Event
/// `<object>.<16 hex digits>`, and an Event's name is a DNS subdomain of at most 253 characters.
pub const NAME_MAX_FOR_RECORDER: usize = 253 - 17;

/// The Event recorder of `component`, reporting as this replica (`--identity`).
pub fn recorder(client: &kube::Client, component: &str, lease: &crate::LeaseArgs) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: component.into(),
            instance: Some(lease.identity()),
        },
    )
}

/// kube's Event recorder (series of repeated Events), plus Events about objects whose names are
/// too long for it: an object named at the 253-character limit would get an Event name the API
/// server refuses, so its Events are created under a shortened generated name instead (each one
/// a single Event, without series).
#[derive(Clone)]
pub struct Recorder {
    inner: kube::runtime::events::Recorder,
    client: kube::Client,
    reporter: Reporter,
}

impl Recorder {
    /// A recorder reporting as `reporter`.
    pub fn new(client: &kube::Client, reporter: Reporter) -> Self {
        Recorder {
            inner: kube::runtime::events::Recorder::new(client.clone(), reporter.clone()),
            client: client.clone(),
            reporter,
        }
    }

    /// Publishes `ev` about `reference` (see the type's documentation).
    pub async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let name = reference.name.as_deref().unwrap_or_default();
        if name.len() <= NAME_MAX_FOR_RECORDER {
            return retrying(|| self.inner.publish(ev, reference)).await;
        }
        self.publish_single(ev, reference).await
    }

    /// Publishes `ev` about `reference` as an Event of its own, never folded into a series. kube's
    /// recorder keeps the first note of a series and only counts the later ones, so a caller
    /// whose notes differ and must each be read (a configuration refused for a new reason)
    /// publishes them this way; the caller keeps their number down (once per distinct note).
    pub async fn publish_single(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let name = reference.name.as_deref().unwrap_or_default();
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        // A generated name's prefix may end in '-' only (the API server appends the suffix).
        let mut prefix = truncate(name, 200).trim_end_matches(['.', '-']).to_owned();
        prefix.push('-');
        let event = K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            regarding: Some(reference.clone()),
            related: ev.secondary.clone(),
            note: ev.note.as_deref().map(note),
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                generate_name: Some(prefix),
                ..Default::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..Default::default()
        };
        let api = Api::<K8sEvent>::namespaced(self.client.clone(), &namespace);
        retrying(|| async { api.create(&PostParams::default(), &event).await.map(|_| ()) }).await
    }
}

/// Pauses before the second, third and fourth attempt of a publish.
const RETRY_PAUSES: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(100),
    std::time::Duration::from_millis(300),
    std::time::Duration::from_millis(600),
];

/// Runs `attempt` until it succeeds, fails for good, or has been retried [`RETRY_PAUSES`] times.
async fn retrying<F, Fut>(mut attempt: F) -> Result<(), kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let mut pauses = RETRY_PAUSES.iter();
    loop {
        match attempt().await {
            Err(e) if is_passing(&e) => match pauses.next() {
                Some(pause) => tokio::time::sleep(*pause).await,
                None => return Err(e),
            },
            done => return done,
        }
    }
}

/// Whether a failed publish may succeed when tried again: the API server was unreachable,
/// failing or throttling. A refusal (4xx) will not change. (kube's client already retries 429,
/// 503 and 504 on its own, honouring `Retry-After`; what reaches here outlasted that, or is a 500
/// or a dropped connection, which it does not retry.)
fn is_passing(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
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
