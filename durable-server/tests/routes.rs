//! Every route of the gateway over real HTTP, on the in-memory store and on SQLite: calls,
//! reads, listings, deletes, alarms, dead alarms, types, the OpenAPI document (checked by an
//! OpenAPI validator), metrics, health; the unversioned aliases; 1,000 HTTP calls interleaved
//! with 1,000 typed calls on one object; and a graceful shutdown that lets an in-flight call
//! finish.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    Counter, Gated, Other, TestServer, builder, code, gate, open_config, principals_config, within,
};
use durable_runtime::storage::{MemoryStorage, Storage};
use durable_runtime::{AlarmSettings, Error, RetryPolicy};
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};

async fn sqlite() -> (tempfile::TempDir, Arc<dyn Storage>) {
    let dir = tempfile::tempdir().unwrap();
    let store = durable_sqlx::SqliteStore::open(dir.path().join("gateway.db"))
        .await
        .expect("open SQLite");
    (dir, Arc::new(store))
}

/// Calls, reads, lists and deletes objects, on `store`.
async fn objects_round_trip(store: Arc<dyn Storage>) {
    let server = TestServer::start(builder(store).build(), open_config()).await;

    let (status, body) = server
        .post(
            "/v1/objects/Counter/user-1/call/increment",
            &json!({"by": 5}),
        )
        .await;
    assert_eq!((status, body), (200, json!({"result": 5})));
    // An empty body is a call without arguments.
    let empty = server.request(Method::POST, "/v1/objects/Counter/user-1/call/get", None);
    assert_eq!(server.send(empty).await, (200, json!({"result": 5})));
    // Ids are path segments: anything but `/` goes as it is, `/` percent-encoded.
    let (status, _) = server
        .post(
            "/v1/objects/Counter/a%2Fb%20c/call/increment",
            &json!({"by": 1}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, body) = server.get("/v1/objects/Counter/a%2Fb%20c").await;
    assert_eq!((status, body["id"].clone()), (200, json!("a/b c")));

    let (status, body) = server.get("/v1/objects/Counter/user-1").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({
            "type": "Counter",
            "id": "user-1",
            "status": "active",
            "state": {"count": 5, "ratio": 0.0},
            "version": 1,
            "alarms": [],
        })
    );

    for id in ["user-2", "user-3"] {
        let path = format!("/v1/objects/Counter/{id}/call/increment");
        assert_eq!(server.post(&path, &json!({"by": 1})).await.0, 200);
    }
    let (status, page) = server.get("/v1/objects?type=Counter&limit=2").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = page["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|object| object["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a/b c", "user-1"]);
    assert_eq!(page["objects"][0]["status"], "active");
    assert_eq!(page["objects"][0]["type"], "Counter");
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let next = format!("/v1/objects?class=Counter&limit=2&cursor={cursor}");
    let (status, page) = server.get(&next).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = page["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|object| object["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["user-2", "user-3"]);

    // Filters by status: all are active here; none is only stored or hibernated.
    let (_, active) = server.get("/v1/objects?type=Counter&status=active").await;
    assert_eq!(active["objects"].as_array().unwrap().len(), 4);
    assert_eq!(active["next_cursor"], Value::Null);
    let (_, stored) = server.get("/v1/objects?type=Counter&status=stored").await;
    assert_eq!(stored, json!({"objects": [], "next_cursor": null}));

    // Another runtime on the same storage sees them stored, not live.
    let other = TestServer::start(
        builder(server.runtime.storage().clone()).build(),
        open_config(),
    )
    .await;
    let (_, stored) = other
        .get("/v1/objects?type=Counter&status=stored&limit=1")
        .await;
    assert_eq!(stored["objects"][0]["status"], "stored");
    assert_eq!(stored["objects"].as_array().unwrap().len(), 1);
    let (_, body) = other.get("/v1/objects/Counter/user-1").await;
    assert_eq!(
        (body["status"].clone(), body["version"].clone()),
        (json!("stored"), json!(1))
    );
    other.stop().await;

    let (status, body) = server.delete("/v1/objects/Counter/user-1").await;
    assert_eq!((status, body), (200, json!({"deleted": true})));
    let (status, body) = server.get("/v1/objects/Counter/user-1").await;
    assert_eq!((status, code(&body)), (404, "object_not_found"));
    let (status, body) = server.delete("/v1/objects/Counter/user-1").await;
    assert_eq!((status, body), (200, json!({"deleted": false})));

    // A live object that only read runs on its default state and has stored nothing.
    assert_eq!(
        server
            .post("/v1/objects/Counter/reader/call/get", &json!({}))
            .await
            .0,
        200
    );
    let (_, body) = server.get("/v1/objects/Counter/reader").await;
    assert_eq!(
        (body["state"].clone(), body["version"].clone()),
        (Value::Null, Value::Null)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_in_memory() {
    objects_round_trip(Arc::new(MemoryStorage::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_on_sqlite() {
    let (_dir, store) = sqlite().await;
    objects_round_trip(store).await;
}

/// Sets, lists and cancels an object's alarms, on `store`.
async fn alarms_round_trip(store: Arc<dyn Storage>) {
    let server = TestServer::start(builder(store).build(), open_config()).await;
    let before = server.runtime.now();
    let (status, body) = server
        .post(
            "/v1/objects/Counter/c/alarms",
            &json!({"name": "reset", "delay": "1h"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["name"], "reset");
    let fire_at = durable_server::model::parse_time(body["fire_at"].as_str().unwrap()).unwrap();
    let delay = fire_at.duration_since(before).unwrap();
    assert!(
        (Duration::from_secs(3599)..=Duration::from_secs(3601)).contains(&delay),
        "{delay:?}"
    );

    let (status, body) = server.get("/v1/objects/Counter/c/alarms").await;
    assert_eq!(status, 200);
    assert_eq!(body["alarms"].as_array().unwrap().len(), 1);
    assert_eq!(body["alarms"][0]["name"], "reset");
    assert_eq!(body["alarms"][0]["attempts"], 0);
    assert_eq!(body["alarms"][0]["dead"], false);

    // Setting it again replaces it, at the time given.
    let at = "2030-01-02T03:04:05.678Z";
    let (status, body) = server
        .post(
            "/v1/objects/Counter/c/alarms",
            &json!({"name": "reset", "fire_at": at}),
        )
        .await;
    assert_eq!(
        (status, body),
        (200, json!({"name": "reset", "fire_at": at}))
    );
    let (_, body) = server.get("/v1/objects/Counter/c").await;
    assert_eq!(body["alarms"][0]["fire_at"], at);
    assert_eq!(body["alarms"].as_array().unwrap().len(), 1);

    let (status, body) = server.delete("/v1/objects/Counter/c/alarms/reset").await;
    assert_eq!((status, body), (200, json!({"cancelled": true})));
    let (status, body) = server.delete("/v1/objects/Counter/c/alarms/reset").await;
    assert_eq!((status, body), (200, json!({"cancelled": false})));
    let (_, body) = server.get("/v1/objects/Counter/c/alarms").await;
    assert_eq!(body, json!({"alarms": []}));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarms_round_trip_in_memory() {
    alarms_round_trip(Arc::new(MemoryStorage::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarms_round_trip_on_sqlite() {
    let (_dir, store) = sqlite().await;
    alarms_round_trip(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_alarm_is_requeued() {
    let settings = AlarmSettings::default()
        .with_poll_interval(Duration::from_millis(10))
        .with_retry(RetryPolicy::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
            1,
        ));
    let runtime = builder(MemoryStorage::new())
        .alarm_settings(settings)
        .build();
    let server = TestServer::start(runtime, open_config()).await;
    let (status, _) = server
        .post(
            "/v1/objects/Other/o/alarms",
            &json!({"name": "doomed", "delay": "0s"}),
        )
        .await;
    assert_eq!(status, 200);
    within("the alarm dying", async {
        loop {
            let (_, body) = server.get("/v1/objects/Other/o/alarms").await;
            if body["alarms"][0]["dead"] == true {
                assert_eq!(body["alarms"][0]["attempts"], 1);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    let requeue = json!({"type": "Other", "id": "o", "name": "doomed"});
    let (status, body) = server.post("/v1/alarms/dead/requeue", &requeue).await;
    assert_eq!((status, body), (200, json!({"requeued": true})));
    // No dead alarm of that name on another object.
    let elsewhere = json!({"type": "Other", "id": "p", "name": "doomed"});
    let (status, body) = server.post("/v1/alarms/dead/requeue", &elsewhere).await;
    assert_eq!((status, body), (200, json!({"requeued": false})));
    let undeclared = json!({"type": "Other", "id": "o", "name": "nope"});
    let (status, body) = server.post("/v1/alarms/dead/requeue", &undeclared).await;
    assert_eq!((status, code(&body)), (404, "unknown_alarm"));

    // Listing dead alarms needs the runtime's listing, which this server does not have.
    let (status, body) = server.get("/v1/alarms/dead?type=Other").await;
    assert_eq!((status, code(&body)), (501, "not_implemented"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_health_metrics_and_aliases() {
    let server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let (status, types) = server.get("/v1/types").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = types["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|exposed| exposed["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Counter", "Gated", "Other"]);
    let counter = &types["types"][0];
    assert_eq!(
        counter["handlers"][0],
        json!({"name": "increment", "access": "write", "arguments": ["by"]})
    );
    assert_eq!(
        counter["handlers"][1],
        json!({"name": "get", "access": "read", "arguments": []})
    );
    assert_eq!(counter["alarms"], json!(["reset"]));
    assert_eq!(
        counter["options"],
        json!({"hibernate_after": "5m", "shutdown_after": null, "call_timeout": "30s", "queue_capacity": 1024})
    );
    assert_eq!(
        server.get("/v1/objects/definitions").await,
        (200, types.clone())
    );
    assert_eq!(server.get("/types").await, (200, types));

    assert_eq!(server.get("/healthz").await, (200, json!({"status": "ok"})));
    assert_eq!(
        server.get("/readyz").await,
        (200, json!({"status": "ready"}))
    );

    // The unversioned aliases of the seed.
    let (status, body) = server
        .post("/objects/Counter/alias/call/increment", &json!({"by": 2}))
        .await;
    assert_eq!((status, body), (200, json!({"result": 2})));
    assert_eq!(
        server.get("/objects/Counter/alias").await.1["state"]["count"],
        2
    );
    assert_eq!(
        server.get("/objects?class=Counter").await.1["objects"][0]["id"],
        "alias"
    );
    assert_eq!(server.get("/objects/Counter/alias/alarms").await.0, 200);

    let metrics = within(
        "metrics",
        server.request(Method::GET, "/metrics", None).send(),
    )
    .await
    .unwrap();
    assert_eq!(metrics.status(), 200);
    let content_type = metrics.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert!(
        metrics
            .text()
            .await
            .unwrap()
            .contains("durable_http_requests_total")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_valid_and_describes_every_exposed_handler() {
    let config = principals_config(r#"public = ["openapi"]"#);
    let server = TestServer::start(builder(MemoryStorage::new()).build(), config).await;
    let (status, document) = server.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(
        server.get("/v1/openapi.json").await,
        (200, document.clone())
    );
    assert_eq!(document["openapi"], "3.1.0");

    let options = openapi_spec_validator_rs::Options {
        errors: openapi_spec_validator_rs::ErrorMode::All,
        ..Default::default()
    };
    let outcome = openapi_spec_validator_rs::validate(&document, &options);
    assert!(outcome.is_valid(), "{outcome:#?}");
    // The validator does refuse a broken document.
    let mut broken = document.clone();
    broken["paths"]["/v1/objects"]["get"]["responses"] = json!({"200": {"content": {}}});
    let outcome = openapi_spec_validator_rs::validate(&broken, &options);
    assert!(
        !outcome.is_valid(),
        "a response without a description passed"
    );

    let paths = document["paths"].as_object().unwrap();
    for fixed in [
        "/v1/objects/{type}/{id}/call/{handler}",
        "/v1/objects/{type}/{id}",
        "/v1/objects",
        "/v1/objects/{type}/{id}/alarms",
        "/v1/objects/{type}/{id}/alarms/{name}",
        "/v1/alarms/dead",
        "/v1/alarms/dead/requeue",
        "/v1/types",
        "/v1/openapi.json",
        "/metrics",
        "/healthz",
        "/readyz",
    ] {
        assert!(paths.contains_key(fixed), "{fixed} is not documented");
    }
    for exposed in server.runtime.exposed_types() {
        for handler in exposed.handlers {
            let path = format!("/v1/objects/{}/{{id}}/call/{}", exposed.name, handler.name);
            let operation = &paths[&path]["post"];
            assert_eq!(
                operation["operationId"],
                format!("call_{}_{}", exposed.name, handler.name)
            );
            let arguments = &operation["requestBody"]["content"]["application/json"]["schema"];
            let mut names: Vec<&str> = arguments["properties"]
                .as_object()
                .map(|properties| properties.keys().map(String::as_str).collect())
                .unwrap_or_default();
            names.sort_unstable();
            let mut expected = handler.arguments.to_vec();
            expected.sort_unstable();
            assert_eq!(names, expected, "{path}");
            assert_eq!(arguments["additionalProperties"], false);
            for status in [
                "200", "400", "401", "403", "404", "422", "429", "500", "503", "504",
            ] {
                assert!(
                    operation["responses"][status].is_object(),
                    "{path}: no {status}"
                );
            }
        }
    }
    // Health and readiness need no token; everything else does unless made public.
    assert_eq!(paths["/healthz"]["get"]["security"], json!([]));
    assert_eq!(paths["/v1/openapi.json"]["get"]["security"], json!([]));
    assert_eq!(paths["/metrics"]["get"]["security"], Value::Null);
    assert_eq!(document["security"], json!([{"bearer": []}]));
    assert_eq!(
        document["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    // Without authorization, nothing asks for a token; the document stays valid.
    let open = durable_server::openapi_document(&server.runtime, &open_config());
    let open = serde_json::to_value(&open).unwrap();
    assert_eq!(open["security"], Value::Null);
    assert_eq!(open["paths"]["/v1/objects"]["get"]["security"], json!([]));
    let outcome = openapi_spec_validator_rs::validate(&open, &options);
    assert!(outcome.is_valid(), "{outcome:#?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_typed_calls_interleaved_on_one_object_all_count() {
    let (_dir, store) = sqlite().await;
    let server = TestServer::start(builder(store).build(), open_config()).await;
    let server = &server;
    const EACH: usize = 1000;
    const IN_FLIGHT: usize = 32;
    let http = futures_util::stream::iter(0..EACH)
        .map(|_| async move {
            let (status, body) = server
                .post(
                    "/v1/objects/Counter/shared/call/increment",
                    &json!({"by": 1}),
                )
                .await;
            assert_eq!(status, 200, "{body}");
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>();
    let typed = futures_util::stream::iter(0..EACH)
        .map(|_| async move {
            Counter::increment(&server.runtime, "shared", 1)
                .await
                .expect("a typed call");
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>();
    within("2,000 calls", futures_util::future::join(http, typed)).await;

    let expected = i64::try_from(2 * EACH).unwrap();
    assert_eq!(
        Counter::get(&server.runtime, "shared").await.unwrap(),
        expected
    );
    let (_, body) = server.get("/v1/objects/Counter/shared").await;
    assert_eq!(body["state"]["count"], expected);
    // Group commit: several calls may share a version.
    let version = body["version"].as_i64().unwrap();
    assert!((1..=expected).contains(&version), "{version}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_lets_the_call_in_flight_finish() {
    let mut server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let runtime = server.runtime.clone();
    let held = gate("shutdown-in-flight");
    let call = server
        .request(Method::POST, "/v1/objects/Gated/g/call/hold", None)
        .json(&json!({"gate": "shutdown-in-flight"}))
        .send();
    let call = tokio::spawn(call);
    held.reached(1).await;

    server.begin_stop();
    // The server stops accepting connections...
    within("the listener closing", async {
        loop {
            let fresh = reqwest::Client::new();
            if fresh.get(server.url("/healthz")).send().await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // ...but the call in flight finishes, and is answered.
    held.release(1);
    let response = within("the call in flight", call).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"result": 1})
    );
    server.stopped().await.expect("a clean stop");

    // The runtime was shut down after the call was committed.
    assert!(matches!(
        Gated::passed(&runtime, "g").await,
        Err(Error::ShuttingDown)
    ));
    let stored = runtime.read_state_json("Gated", "g").await.unwrap();
    assert_eq!(stored, Some(json!({"passed": 1})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_type_calls_reach_their_own_objects() {
    let server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    assert_eq!(
        server
            .post("/v1/objects/Other/x/call/ping", &json!({}))
            .await
            .1,
        json!({"result": 1})
    );
    assert_eq!(Other::ping(&server.runtime, "x").await.unwrap(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_period_bounds_the_wait_for_requests_in_flight() {
    let mut config = open_config();
    config.shutdown_grace = Duration::from_millis(100);
    let mut server = TestServer::start(builder(MemoryStorage::new()).build(), config).await;
    let runtime = server.runtime.clone();
    let held = gate("grace-bound");
    let call = server
        .request(Method::POST, "/v1/objects/Gated/late/call/hold", None)
        .json(&json!({"gate": "grace-bound"}))
        .send();
    let call = tokio::spawn(call);
    held.reached(1).await;

    server.begin_stop();
    // The call is still held, yet past the grace the server moves on and shuts the runtime
    // down: new calls are refused.
    within("the runtime shutting down", async {
        while !matches!(
            Counter::get(&runtime, "probe").await,
            Err(Error::ShuttingDown)
        ) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The runtime still finishes the call it had taken, and commits it.
    held.release(1);
    server.stopped().await.expect("a clean stop");
    let response = within("the held call", call).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let stored = runtime.read_state_json("Gated", "late").await.unwrap();
    assert_eq!(stored, Some(json!({"passed": 1})));
}
