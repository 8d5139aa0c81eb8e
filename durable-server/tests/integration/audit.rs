//! The audit trail over real HTTP: one structured event per mutating request (with the
//! principal, route template, type, id, name and outcome, refusals included) and per
//! lifecycle event, as JSON lines on the `durable::audit` target; and no token anywhere in
//! the logs, at any level.

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{TestServer, builder, dead_after_one_attempt, principals_config, token, within};
use durable_runtime::ObjectOptions;
use durable_runtime::storage::MemoryStorage;
use reqwest::Method;
use serde_json::{Value, json};

/// A `tracing` writer that keeps everything written, shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }

    /// The audit events so far, one JSON line each, as their fields.
    fn audit(&self) -> Vec<Value> {
        self.text()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("one JSON object per line"))
            .filter(|line| line["target"] == durable_server::audit::TARGET)
            .map(|line| line["fields"].clone())
            .collect()
    }

    /// The audit events of `id`.
    fn audit_of(&self, id: &str) -> Vec<Value> {
        self.audit()
            .into_iter()
            .filter(|event| event["id"] == id)
            .collect()
    }

    async fn wait_for(&self, event: &str, id: &str) {
        within(event, async {
            while !self.audit_of(id).iter().any(|line| line["event"] == event) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
}

/// Everything logged by this test process, at every level, as JSON lines: the subscriber is
/// the process's default, so it sees every thread (a thread-local subscriber would miss
/// events whose callsites another thread registered first).
fn captured() -> &'static Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        captured
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mutation_and_lifecycle_event_is_audited_and_no_token_is_logged() {
    let captured = captured();

    let settings = dead_after_one_attempt();
    let runtime = builder(MemoryStorage::new())
        .register_with::<common::Counter>(
            ObjectOptions::new().with_hibernate_after(Duration::from_millis(50)),
        )
        .alarm_settings(settings)
        .build();
    let server = TestServer::start(runtime, principals_config("")).await;
    let admin = token("admin");
    let as_admin = |method, path: &str, body: Option<Value>| {
        let request = server.request(method, path, Some(&admin));
        match body {
            Some(body) => request.json(&body),
            None => request,
        }
    };

    let (status, _) = server
        .send(as_admin(
            Method::POST,
            "/v1/objects/Counter/au/call/increment",
            Some(json!({"by": 1})),
        ))
        .await;
    assert_eq!(status, 200);
    // A read is not a mutation.
    server
        .send(as_admin(
            Method::POST,
            "/v1/objects/Counter/au/call/get",
            None,
        ))
        .await;
    let refused = server
        .request(
            Method::POST,
            "/v1/objects/Counter/au/call/increment",
            Some(&token("nobody")),
        )
        .json(&json!({"by": 1}));
    assert_eq!(server.send(refused).await.0, 403);
    let failing = json!({"by": 10, "limit": 0});
    server
        .send(as_admin(
            Method::POST,
            "/v1/objects/Counter/au/call/add_checked",
            Some(failing),
        ))
        .await;
    server
        .send(as_admin(
            Method::POST,
            "/objects/Counter/au/alarms",
            Some(json!({"name": "reset", "delay": "1h"})),
        ))
        .await;
    server
        .send(as_admin(
            Method::DELETE,
            "/v1/objects/Counter/au/alarms/reset",
            None,
        ))
        .await;
    server
        .send(as_admin(
            Method::POST,
            "/v1/alarms/dead/requeue",
            Some(json!({"type": "Counter", "id": "au", "name": "reset"})),
        ))
        .await;
    server
        .send(as_admin(Method::DELETE, "/v1/objects/Counter/au", None))
        .await;

    let requests: Vec<Value> = captured
        .audit_of("au")
        .into_iter()
        .filter(|event| event["event"] == "request")
        .collect();
    let summary: Vec<(&str, &str, &str, &str)> = requests
        .iter()
        .map(|event| {
            (
                event["action"].as_str().unwrap(),
                event["principal"].as_str().unwrap(),
                event["outcome"].as_str().unwrap(),
                event["route"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                "call",
                "admin",
                "ok",
                "/v1/objects/{type}/{id}/call/{handler}"
            ),
            (
                "call",
                "nobody",
                "forbidden",
                "/v1/objects/{type}/{id}/call/{handler}"
            ),
            (
                "call",
                "admin",
                "handler_error",
                "/v1/objects/{type}/{id}/call/{handler}"
            ),
            ("alarm_set", "admin", "ok", "/objects/{type}/{id}/alarms"),
            (
                "alarm_cancel",
                "admin",
                "ok",
                "/v1/objects/{type}/{id}/alarms/{name}"
            ),
            ("alarm_requeue", "admin", "ok", "/v1/alarms/dead/requeue"),
            ("delete", "admin", "ok", "/v1/objects/{type}/{id}"),
        ]
    );
    let first = &requests[0];
    assert_eq!(
        (first["type"].clone(), first["name"].clone()),
        (json!("Counter"), json!("increment"))
    );
    assert_eq!(first["status"], 200);
    assert_eq!(requests[1]["status"], 403);
    assert_eq!(requests[3]["name"], "reset");

    // Lifecycle events: created, hibernated, woken, deleted, a failed alarm. They reach the
    // audit log from a task of their own, shortly after the replies.
    captured.wait_for("object_deleted", "au").await;
    let lifecycle: Vec<String> = captured
        .audit_of("au")
        .iter()
        .filter(|event| event["event"] != "request")
        .map(|event| event["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        lifecycle.first().map(String::as_str),
        Some("object_created")
    );
    assert!(
        lifecycle.iter().any(|event| event == "object_deleted"),
        "{lifecycle:?}"
    );

    server
        .send(as_admin(
            Method::POST,
            "/v1/objects/Counter/sleepy/call/increment",
            Some(json!({"by": 1})),
        ))
        .await;
    captured.wait_for("object_hibernated", "sleepy").await;
    server
        .send(as_admin(
            Method::POST,
            "/v1/objects/Counter/sleepy/call/get",
            None,
        ))
        .await;
    captured.wait_for("object_woken", "sleepy").await;

    server
        .send(as_admin(
            Method::POST,
            "/v1/objects/Other/doom/alarms",
            Some(json!({"name": "doomed", "delay": "0s"})),
        ))
        .await;
    captured.wait_for("alarm_failed", "doom").await;
    let failed = captured
        .audit_of("doom")
        .into_iter()
        .find(|event| event["event"] == "alarm_failed")
        .unwrap();
    assert_eq!(
        (failed["alarm"].clone(), failed["dead"].clone()),
        (json!("doomed"), json!(true))
    );
    assert_eq!(failed["type"], "Other");

    server.stop().await;
    let everything = captured.text();
    assert!(everything.contains("durable::audit"));
    // Requests themselves are logged (their spans name the path), their tokens never.
    assert!(everything.contains("/v1/objects/Counter/au/call/increment"));
    for secret in [token("admin"), token("nobody")] {
        assert!(!everything.contains(&secret), "a token was logged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_hung_up_is_still_audited() {
    let captured = captured();
    let server =
        TestServer::start(builder(MemoryStorage::new()).build(), principals_config("")).await;
    let held = common::gate("hung-up");
    let call = server
        .request(
            Method::POST,
            "/v1/objects/Gated/hung-up/call/hold",
            Some(&token("admin")),
        )
        .json(&json!({"gate": "hung-up"}))
        .send();
    let call = tokio::spawn(call);
    held.reached(1).await;
    // The client gives up while the call waits in its handler: its connection closes.
    call.abort();
    assert!(call.await.is_err(), "the client was cut off");
    held.release(1);

    captured.wait_for("request", "hung-up").await;
    let events = captured.audit_of("hung-up");
    let request = events
        .iter()
        .find(|event| event["event"] == "request")
        .expect("the call's audit event");
    assert_eq!(request["action"], "call");
    assert_eq!(request["outcome"], "ok", "{request}");
    assert_eq!(request["principal"], "admin");
}
