//! The seeded fault schedule (`/emulator/v1/chaos`) and the in-process restart, seen by a kube client.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kube_emulator::{Chaos, Config, Emulator, Mix, Running};
use serde_json::{Value, json};

/// A client that does not retry 429/503/504 itself, so every answer is seen.
fn raw_client(emu: &Running) -> kube::Client {
    let mut cfg = kube::Config::new(emu.url().parse().expect("url"));
    cfg.default_namespace = "default".into();
    cfg.default_retry = false;
    cfg.headers.push((
        http::header::AUTHORIZATION,
        http::HeaderValue::from_str(&format!("Bearer {}", emu.admin_token())).expect("token"),
    ));
    kube::Client::try_from(cfg).expect("client")
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Value,
) -> (u16, String, Option<String>) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .expect("request");
    let resp = client.send(req).await.expect("an answer");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (status, String::from_utf8_lossy(&bytes).into(), retry_after)
}

fn only(mix: Mix) -> Chaos {
    let mut c = Chaos::new(11, 1.0);
    c.mix = mix;
    c
}

const NONE: Mix = Mix {
    error: 0,
    throttle: 0,
    timeout: 0,
    expire: 0,
};

#[tokio::test]
async fn a_throttle_answers_429_with_retry_after_and_is_counted() {
    let emu = Emulator::start(Config::default()).await.unwrap();
    let client = raw_client(&emu);
    let mut c = only(Mix {
        throttle: 1,
        ..NONE
    });
    c.retry_after_seconds = 2;
    let (code, body, _) = send(&client, "PUT", "/emulator/v1/chaos", json!(c)).await;
    assert_eq!(code, 200, "{body}");
    let (code, body, retry_after) =
        send(&client, "GET", "/api/v1/namespaces/default", Value::Null).await;
    assert_eq!(code, 429, "{body}");
    assert_eq!(retry_after.as_deref(), Some("2"));
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["details"]["retryAfterSeconds"], 2);
    let (_, report, _) = send(&client, "GET", "/emulator/v1/chaos", Value::Null).await;
    let report: Value = serde_json::from_str(&report).unwrap();
    assert_eq!(report["counts"]["throttle"], 1);
    assert_eq!(
        report["counts"]["requests"], 1,
        "admin requests are not counted"
    );
    // Cleared: requests pass again, the counts stay readable.
    let (code, report, _) = send(&client, "DELETE", "/emulator/v1/chaos", Value::Null).await;
    assert_eq!(code, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&report).unwrap()["counts"]["throttle"],
        1
    );
    let (code, _, _) = send(&client, "GET", "/api/v1/namespaces/default", Value::Null).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn a_bad_schedule_is_refused_naming_the_field() {
    let emu = Emulator::start(Config::default()).await.unwrap();
    let client = raw_client(&emu);
    for (body, field) in [
        (json!({"seed": 1, "rate": 1.5}), "rate"),
        (
            json!({"seed": 1, "rate": 0.1, "watchCutRate": 2}),
            "watchCutRate",
        ),
        (
            json!({"seed": 1, "rate": 0.1, "timeoutMillis": 999999}),
            "timeoutMillis",
        ),
        (json!({"seed": 1, "rate": 0.1, "rat": 1}), "rat"),
    ] {
        let (code, text, _) = send(&client, "PUT", "/emulator/v1/chaos", body).await;
        assert_eq!(code, 400, "{text}");
        assert!(text.contains(field), "{field} named in {text}");
    }
    assert!(emu.set_chaos(Some(Chaos::new(1, -0.1))).is_err());
    let bad = Config {
        chaos: Some(Chaos::new(1, 7.0)),
        ..Config::default()
    };
    let err = Emulator::start(bad).await.err().expect("refused");
    assert!(err.to_string().contains("rate"), "{err}");
}

async fn codes(seed: u64) -> (Vec<u16>, kube_emulator::ChaosCounts) {
    let mut c = Chaos::new(seed, 0.4);
    c.timeout_millis = 1;
    let emu = Emulator::start(Config {
        chaos: Some(c),
        ..Config::default()
    })
    .await
    .unwrap();
    let client = raw_client(&emu);
    let mut out = Vec::new();
    for i in 0..40 {
        let path = if i % 2 == 0 {
            "/api/v1/namespaces/default"
        } else {
            "/api/v1/namespaces/default/configmaps"
        };
        out.push(send(&client, "GET", path, Value::Null).await.0);
    }
    (out, emu.chaos_counts())
}

#[tokio::test]
async fn one_seed_gives_one_sequence_of_faults() {
    let (a, counts) = codes(5).await;
    let (b, _) = codes(5).await;
    let (other, _) = codes(6).await;
    assert_eq!(a, b, "same seed, same request sequence");
    assert_ne!(a, other, "another seed");
    let failed = a.iter().filter(|c| **c != 200).count() as u64;
    assert!(failed > 0);
    assert_eq!(counts.error + counts.throttle + counts.timeout, failed);
    assert_eq!(counts.requests, 40);
}

#[tokio::test]
async fn a_timeout_is_held_and_a_committed_write_is_stored() {
    let mut c = only(Mix { timeout: 1, ..NONE });
    c.timeout_millis = 300;
    c.timeout_commits_writes = true;
    let emu = Emulator::start(Config {
        chaos: Some(c),
        ..Config::default()
    })
    .await
    .unwrap();
    let client = raw_client(&emu);
    let started = Instant::now();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}});
    let (code, body, _) = send(&client, "POST", "/api/v1/namespaces/default/configmaps", cm).await;
    assert_eq!(code, 504, "{body}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    emu.set_chaos(None).unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    assert!(
        api.get_opt("late").await.unwrap().is_some(),
        "the write was applied"
    );
    let counts = emu.chaos_counts();
    assert_eq!((counts.timeout, counts.timeout_committed), (1, 1));
}

#[tokio::test]
async fn watches_are_expired_on_resume_and_cut_mid_stream() {
    let emu = Emulator::start(Config::default()).await.unwrap();
    let client = raw_client(&emu);
    emu.set_chaos(Some(only(Mix { expire: 1, ..NONE })))
        .unwrap();
    let (code, body, _) = send(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=1",
        Value::Null,
    )
    .await;
    assert_eq!(code, 200);
    let ev: Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(
        (ev["type"].as_str(), ev["object"]["code"].as_i64()),
        (Some("ERROR"), Some(410))
    );
    assert_eq!(emu.chaos_counts().expire, 1);

    let mut c = Chaos::new(3, 0.0);
    c.watch_cut_rate = 1.0;
    c.watch_cut_max_millis = 200;
    emu.set_chaos(Some(c)).unwrap();
    let req = http::Request::get("/api/v1/namespaces/default/configmaps?watch=true")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        http_body_util::BodyExt::collect(resp.into_body()),
    )
    .await
    .expect("the stream ends within the cut delay, not at its timeout");
    assert!(read.is_err(), "a cut is a broken stream, not a clean end");
    assert_eq!(emu.chaos_counts().watch_cut, 1);
}

#[tokio::test]
async fn a_restart_keeps_the_objects_and_watchers_recover() {
    let mut emu = Emulator::start(Config::default()).await.unwrap();
    let client = emu.client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = |name: &str| ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    // Up to the end of the initial list.
    loop {
        let ev = events.next().await.unwrap().unwrap();
        if matches!(ev, watcher::Event::InitDone) {
            break;
        }
    }
    let rv = emu.resource_version();
    emu.stop_serving().await;
    assert!(emu.is_stopped());
    let refused = tokio::time::timeout(Duration::from_secs(5), api.get("before"))
        .await
        .expect("refused at once, not hanging");
    assert!(
        matches!(
            refused,
            Err(kube::Error::Service(_) | kube::Error::HyperError(_))
        ),
        "{refused:?}"
    );
    emu.serve_again().await.unwrap();
    assert_eq!(emu.resource_version(), rv, "the counter survives");
    assert!(
        api.get_opt("before").await.unwrap().is_some(),
        "the object survives"
    );
    api.create(&PostParams::default(), &cm("after"))
        .await
        .unwrap();
    // The watcher resumes (or relists) and sees the new object.
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
                && o.metadata.name.as_deref() == Some("after")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true));
    // Another restart straight away.
    emu.restart().await.unwrap();
    assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 2);
}
