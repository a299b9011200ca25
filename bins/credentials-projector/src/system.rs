//! The system and rotation paths, gated on leadership.
//!
//! ```text
//!  watch source Secret (fieldSelector metadata.name=<source>) ──► generation counter ──┬─► tenant controllers
//!                                                                                     │   (re-evaluate jobs)
//!  LeaderElector ─ Leading ─► round ◄── source changed ◄─────────────────────────────┘
//!                             round ◄── safety tick (--system-tick-seconds, 60 s)
//!  round: read source once ─► every system namespace (Get target, write on change)
//!                          └► list copies by the ownership label ─► re-project each (write on change)
//! ```
//!
//! Invariants: only the leader writes here; a round does one source read, one list and writes only
//! copies whose content differs; errors in one namespace never stop the round (logged at info, as
//! upstream, and counted).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use lease::LeaderElector;
use runtime::{ReadyHandle, Shutdown};
use tokio::sync::watch;

use crate::config::Config;
use crate::metrics::{self as m, Path};
use crate::project::{self, Outcome};

/// Watches the source Secret and bumps `changes` on every change after the initial list (and after
/// every re-list, which may hide changes). `ready` turns ready after the initial list.
pub async fn watch_source(
    client: Client,
    config: Arc<Config>,
    changes: watch::Sender<u64>,
    ready: ReadyHandle,
    shutdown: Shutdown,
) {
    let p = &config.projection;
    let api: Api<Secret> = Api::namespaced(client, &p.source_namespace);
    let wc = watcher::Config::default().fields(&format!("metadata.name={}", p.source_name));
    let mut events = std::pin::pin!(watcher(api, wc).default_backoff());
    let mut synced = false;
    loop {
        let event = tokio::select! {
            _ = shutdown.wait() => return,
            e = events.next() => e,
        };
        match event {
            None => return,
            Some(Ok(watcher::Event::InitDone)) => {
                ready.set_ready();
                if synced {
                    changes.send_modify(|n| *n += 1);
                }
                synced = true;
            }
            Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) => {
                tracing::info!("source credentials Secret changed");
                changes.send_modify(|n| *n += 1);
            }
            Some(Ok(_)) => {}
            Some(Err(err)) => tracing::warn!(error = %err, "source Secret watch"),
        }
    }
}

/// Runs rounds while this replica leads: one when leadership is won, one per source change, one per
/// tick. `ready` turns ready after the first round (or at once while following).
pub async fn run_leader_loop(
    client: Client,
    config: Arc<Config>,
    elector: LeaderElector,
    mut changes: watch::Receiver<u64>,
    ready: ReadyHandle,
    shutdown: Shutdown,
) {
    let mut leadership = elector.subscribe();
    loop {
        while !leadership.borrow_and_update().is_leading() {
            ready.set_ready_with("following: another replica runs the system projection");
            tokio::select! {
                _ = shutdown.wait() => return,
                r = leadership.changed() => if r.is_err() { return },
            }
        }
        tracing::info!("leading: projecting into the system namespaces and refreshing every copy");
        changes.borrow_and_update();
        round(&client, &config, "leadership").await;
        ready.set_ready();
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + config.system_tick,
            config.system_tick,
        );
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                r = leadership.changed() => {
                    if r.is_err() || !leadership.borrow_and_update().is_leading() {
                        tracing::info!("leadership lost: system projection paused");
                        break;
                    }
                }
                r = changes.changed() => {
                    if r.is_err() { return }
                    changes.borrow_and_update();
                    round(&client, &config, "source changed").await;
                }
                _ = ticker.tick() => round(&client, &config, "tick").await,
            }
        }
    }
}

/// How many copies a round refreshes concurrently.
const ROTATION_CONCURRENCY: usize = 32;

/// One round: every system namespace, then every projected copy elsewhere.
pub async fn round(client: &Client, config: &Config, trigger: &'static str) {
    let started = Instant::now();
    let p = &config.projection;
    let source_started = Instant::now();
    let source = project::read_source(client, p).await;
    let source_elapsed = source_started.elapsed();
    let (mut written, mut failed) = (0usize, 0usize);
    for ns in &config.system_namespaces {
        let t = Instant::now();
        let result = match &source {
            Ok(desired) => project::write_target(client, p, ns, desired).await,
            Err(e) => Err(e.clone()),
        };
        m::record(ns, Path::System, source_elapsed + t.elapsed(), &result);
        match &result {
            Ok(Outcome::Unchanged) => {}
            Ok(outcome) => {
                written += 1;
                tracing::info!(namespace = %ns, ?outcome, "system credentials projected");
            }
            Err(e) => {
                failed += 1;
                tracing::info!(namespace = %ns, reason = e.reason.as_str(), error = %e, "system credentials projection failed");
            }
        }
    }
    let mut copies_seen = 0usize;
    if let Ok(desired) = &source {
        match project::list_copies(client, p).await {
            Err(err) => {
                failed += 1;
                tracing::info!(error = %err, "listing projected copies failed; rotation skipped this round");
            }
            Ok(copies) => {
                let system: HashSet<&str> = config
                    .system_namespaces
                    .iter()
                    .map(String::as_str)
                    .collect();
                let copies: Vec<Secret> = copies
                    .into_iter()
                    .filter(|s| !system.contains(s.namespace().unwrap_or_default().as_str()))
                    .collect();
                copies_seen = copies.len();
                let results: Vec<_> = futures::stream::iter(copies)
                    .map(|copy| async move {
                        let t = Instant::now();
                        let ns = copy.namespace().unwrap_or_default();
                        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
                        let result =
                            project::apply_plan(&api, &ns, &p.target_name, Some(&copy), desired)
                                .await;
                        m::record(&ns, Path::Rotation, t.elapsed(), &result);
                        (ns, result)
                    })
                    .buffer_unordered(ROTATION_CONCURRENCY)
                    .collect()
                    .await;
                for (ns, result) in results {
                    match result {
                        Ok(Outcome::Unchanged) => {}
                        Ok(_) => written += 1,
                        Err(e) => {
                            failed += 1;
                            tracing::info!(namespace = %ns, reason = e.reason.as_str(), error = %e, "credentials rotation failed");
                        }
                    }
                }
            }
        }
    }
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if written > 0 || failed > 0 || trigger != "tick" {
        tracing::info!(
            trigger,
            system = config.system_namespaces.len(),
            copies = copies_seen,
            written,
            failed,
            elapsed_ms,
            "projection round done"
        );
    } else {
        tracing::debug!(
            trigger,
            copies = copies_seen,
            elapsed_ms,
            "projection round: nothing changed"
        );
    }
}

/// A stream that yields every `period` (the tenant controllers' safety re-evaluation).
pub fn ticks(period: Duration) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
}

/// A stream that yields on every source change.
pub fn changes_stream(
    rx: watch::Receiver<u64>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    tokio_stream::wrappers::WatchStream::from_changes(rx).map(|_| ())
}
