//! Lists: whole lists, and pages (`limit`/`continue`) that all show one consistent snapshot.
//!
//! A continue token carries the snapshot's resourceVersion and the key to start after, like upstream's
//! (base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":"<ns>/<name>\u0000"}`). The snapshot is rebuilt
//! from the current objects by undoing the watch history newer than it, so paging costs no memory; a
//! snapshot older than the history (upstream: compacted) answers 410 `Expired` with a token that
//! continues from the same key at the current state (`rv` -1).

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Value, json};

use super::{State, to_view};
use crate::error::ApiError;
use crate::kinds::Kind;
use crate::selector::{FieldSelector, LabelSelector};

/// One page of a list (or the whole list).
#[derive(Debug)]
pub(crate) struct Page {
    /// The items (served form).
    pub(crate) items: Vec<Value>,
    /// The list's resourceVersion (the snapshot's, for every page of one list).
    pub(crate) resource_version: u64,
    /// Token for the next page.
    pub(crate) continue_token: Option<String>,
    /// Items after this page, when known (only without selectors, as upstream).
    pub(crate) remaining: Option<i64>,
}

/// What the client asked for.
#[derive(Debug, Default)]
pub(crate) struct ListOpts<'a> {
    /// `limit` (0 = everything).
    pub(crate) limit: usize,
    /// `continue`.
    pub(crate) continue_token: Option<&'a str>,
    /// `resourceVersion` with `resourceVersionMatch=Exact`.
    pub(crate) exact: Option<u64>,
}

type Key = (String, String);

const TOO_OLD: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

fn encode(rv: i64, start: &Key, namespaced: bool) -> String {
    let key = if namespaced {
        format!("{}/{}\u{0}", start.0, start.1)
    } else {
        format!("{}\u{0}", start.1)
    };
    let token = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": key});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode(token: &str, namespaced: bool) -> Result<(i64, Key), ApiError> {
    let bad = |why: &str| ApiError::bad_request(format!("invalid continue token: {why}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|e| bad(&format!("continue key is not valid: {e}")))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| bad(&format!("continue key is not valid: {e}")))?;
    if v["v"] != "meta.k8s.io/v1" {
        return Err(bad(
            "continue key is not valid: server does not recognize this encoded version",
        ));
    }
    let rv = v["rv"]
        .as_i64()
        .filter(|rv| *rv != 0)
        .ok_or_else(|| bad("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    let start = v["start"]
        .as_str()
        .and_then(|s| s.strip_suffix('\u{0}'))
        .ok_or_else(|| bad("continue key is not valid: encoded start key empty"))?;
    let key = if namespaced {
        let (ns, name) = start
            .split_once('/')
            .ok_or_else(|| bad("continue key is not valid: encoded start key malformed"))?;
        (ns.to_string(), name.to_string())
    } else {
        (String::new(), start.to_string())
    };
    Ok((rv, key))
}

impl State {
    /// The objects of `storage` as they were at `rv`, or None when the history no longer reaches back
    /// that far.
    fn objects_at(&self, storage: &str, rv: u64) -> Option<BTreeMap<Key, Value>> {
        if rv < self.compacted {
            return None;
        }
        let mut objs = self.objects.get(storage).cloned().unwrap_or_default();
        for ev in self.history.iter().rev().take_while(|e| e.rv > rv) {
            if ev.storage != storage {
                continue;
            }
            let of = |o: &Value| {
                (
                    o["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            };
            match (ev.etype, &ev.old) {
                ("ADDED", _) => {
                    objs.remove(&of(&ev.obj));
                }
                ("MODIFIED" | "DELETED", Some(old)) => {
                    objs.insert(of(old), old.clone());
                }
                _ => {}
            }
        }
        Some(objs)
    }

    /// LIST, whole or one page, with the list's resourceVersion.
    pub(crate) fn list_page(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        opts: &ListOpts<'_>,
    ) -> Result<Page, ApiError> {
        let mut snapshot_rv = self.rv;
        let mut start: Option<Key> = None;
        if let Some(token) = opts.continue_token {
            let (rv, key) = decode(token, kind.namespaced)?;
            if rv > 0 {
                snapshot_rv = rv as u64;
            }
            start = Some(key);
        } else if let Some(rv) = opts.exact {
            snapshot_rv = rv;
        }
        let snapshot;
        let objs: &BTreeMap<Key, Value> = if snapshot_rv == self.rv {
            match self.objects.get(&kind.storage) {
                Some(o) => o,
                None => {
                    snapshot = BTreeMap::new();
                    &snapshot
                }
            }
        } else {
            match self.objects_at(&kind.storage, snapshot_rv) {
                Some(o) => {
                    snapshot = o;
                    &snapshot
                }
                None if opts.continue_token.is_some() => {
                    let key = start.unwrap_or_default();
                    let mut e = ApiError::new(410, "Expired", TOO_OLD);
                    e.list_continue = Some(encode(-1, &key, kind.namespaced));
                    return Err(e);
                }
                None => {
                    return Err(ApiError::new(
                        410,
                        "Expired",
                        format!(
                            "too old resource version: {snapshot_rv} ({})",
                            self.compacted + 1
                        ),
                    ));
                }
            }
        };
        let mut matching = objs
            .iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
            .filter(|(k, _)| start.as_ref().is_none_or(|s| *k > s))
            .map(|(k, o)| (k, to_view(kind, o)))
            .filter(|(_, v)| labels.matches(v) && fields.matches(v));
        let mut items = Vec::new();
        let mut last: Option<&Key> = None;
        for (k, v) in matching.by_ref() {
            items.push(v);
            last = Some(k);
            if opts.limit > 0 && items.len() == opts.limit {
                break;
            }
        }
        let more = opts.limit > 0 && items.len() == opts.limit && {
            let rest = matching.count();
            rest > 0
        };
        let (continue_token, remaining) = match (more, last) {
            (true, Some(k)) => {
                let remaining = (labels.is_empty() && fields.is_empty()).then(|| {
                    objs.iter()
                        .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
                        .filter(|(key, _)| *key > k)
                        .count() as i64
                });
                (
                    Some(encode(snapshot_rv as i64, k, kind.namespaced)),
                    remaining,
                )
            }
            _ => (None, None),
        };
        Ok(Page {
            items,
            resource_version: snapshot_rv,
            continue_token,
            remaining,
        })
    }
}
