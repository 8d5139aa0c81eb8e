//! Every row of the gateway's error table, over real HTTP where a request can cause it: the
//! status, the code, `retryable`, `Retry-After`, the one body shape, and no internals in the
//! message. The mapping of every runtime error (some of which no HTTP request can cause,
//! such as a call cycle) is checked on the table itself.

use crate::common;

use std::time::Duration;

use common::{Counter, Gated, TestServer, builder, gate, open_config, within};
use durable_runtime::storage::{
    FsmRefusal, MemoryStorage, ObjectKey, ObjectWrite, Storage, StorageError,
};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{CallByNameError, Error, InvalidId, ObjectOptions};
use durable_server::{ApiError, ErrorCode};
use futures_util::FutureExt;
use reqwest::Method;
use serde_json::{Value, json};

/// The contract's table: code → (status, retryable).
fn contract(code: &str) -> (u16, bool) {
    match code {
        "handler_error" => (422, false),
        "invalid_arguments" | "invalid_id" | "invalid_request" => (400, false),
        "unknown_type" | "unknown_handler" | "unknown_alarm" | "object_not_found" | "not_found" => {
            (404, false)
        }
        "overloaded" => (429, true),
        "too_many_objects" | "shutting_down" | "unavailable" => (503, true),
        "outcome_unknown" => (503, false),
        "timeout" => (504, false),
        "conflict" => (409, true),
        "call_cycle" | "idempotency_key_reused" | "duplicate_instance" => (409, false),
        "instance_not_found" => (404, false),
        "handler_panicked" | "state_decode_failed" | "state_encode_failed" | "internal" => {
            (500, false)
        }
        "body_too_large" => (413, false),
        "unauthenticated" => (401, false),
        "forbidden" => (403, false),
        "method_not_allowed" => (405, false),
        other => panic!("`{other}` is not in the contract"),
    }
}

/// Sends `request` and checks that the answer is the error `code` (see [`check_error`]).
async fn expect_error(request: reqwest::RequestBuilder, code: &str) -> Value {
    let response = within("an error response", request.send()).await.unwrap();
    check_error(response, code).await
}

/// Checks that `response` is the error `code` as the contract says: status, body shape,
/// `retryable`, and `Retry-After` exactly on retryable 429/503.
async fn check_error(response: reqwest::Response, code: &str) -> Value {
    let (status, retryable) = contract(code);
    let actual = response.status().as_u16();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let retry_after = response.headers().get("retry-after").cloned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(actual, status, "status of `{code}`: {body}");
    assert_eq!(content_type, "application/json");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert_eq!(body["error"]["retryable"], retryable, "{body}");
    let keys: Vec<&str> = body["error"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), 4, "{body}");
    for key in ["code", "message", "retryable", "details"] {
        assert!(keys.contains(&key), "{body}");
    }
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    if retryable && status != 409 {
        assert_eq!(retry_after.expect("a Retry-After header"), "1");
    } else {
        assert!(retry_after.is_none(), "Retry-After on `{code}`");
    }
    body
}

fn post(server: &TestServer, path: &str, body: &Value) -> reqwest::RequestBuilder {
    server.request(Method::POST, path, None).json(body)
}

fn get(server: &TestServer, path: &str) -> reqwest::RequestBuilder {
    server.request(Method::GET, path, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors() {
    let server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let call = "/v1/objects/Counter/c/call/add_checked";

    // The handler's own error, as its JSON.
    assert_eq!(
        server.post(call, &json!({"by": 5, "limit": 10})).await.0,
        200
    );
    let body = expect_error(
        post(&server, call, &json!({"by": 10, "limit": 10})),
        "handler_error",
    )
    .await;
    assert_eq!(
        body["error"]["details"],
        json!({"TooBig": {"limit": 10, "wanted": 15}})
    );

    // Arguments that do not fit name the field.
    let body = expect_error(
        post(&server, call, &json!({"by": 1, "limit": 9, "limt": 2})),
        "invalid_arguments",
    )
    .await;
    assert_eq!(body["error"]["details"]["field"], "limt");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`limt`"),
        "{body}"
    );
    let body = expect_error(post(&server, call, &json!({"by": 1})), "invalid_arguments").await;
    assert_eq!(body["error"]["details"]["field"], "limit");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`limit`"),
        "{body}"
    );
    let body = expect_error(
        post(&server, call, &json!({"by": "five", "limit": 9})),
        "invalid_arguments",
    )
    .await;
    assert_eq!(body["error"]["details"]["field"], "by");
    let not_json = server.request(Method::POST, call, None).body("{by: 1");
    let body = expect_error(not_json, "invalid_arguments").await;
    assert_eq!(body["error"]["details"]["field"], Value::Null);
    // Arguments that would fit by position are refused: they are not an object.
    for arguments in [json!([1, 2]), json!(5)] {
        let body = expect_error(post(&server, call, &arguments), "invalid_arguments").await;
        assert_eq!(body["error"]["details"]["path"], ".", "{body}");
    }

    // Invalid ids.
    let long = "x".repeat(1025);
    expect_error(
        post(
            &server,
            &format!("/v1/objects/Counter/{long}/call/get"),
            &json!({}),
        ),
        "invalid_id",
    )
    .await;
    expect_error(
        post(&server, "/v1/objects/Counter/a%00b/call/get", &json!({})),
        "invalid_id",
    )
    .await;
    expect_error(
        get(&server, &format!("/v1/objects/Counter/{long}")),
        "invalid_id",
    )
    .await;
    expect_error(
        get(&server, "/v1/objects/Counter/a%00b/alarms"),
        "invalid_id",
    )
    .await;

    // Bad queries and bodies.
    for query in [
        "/v1/objects",
        "/v1/objects?type=Counter&limit=0",
        "/v1/objects?type=Counter&limit=1001",
        "/v1/objects?type=Counter&limit=many",
        "/v1/objects?type=Counter&status=sleeping",
        "/v1/objects?type=Counter&class=Other",
        "/v1/alarms/dead?limit=0",
        "/v1/alarms/dead?limit=1001",
        "/v1/alarms/dead?cursor=not-a-cursor",
        "/v1/alarms/dead?type=Counter&cursor=bm90IGEgcG9zaXRpb24",
    ] {
        expect_error(get(&server, query), "invalid_request").await;
    }
    let alarms = "/v1/objects/Counter/c/alarms";
    for body in [
        json!({"name": "reset"}),
        json!({"name": "reset", "delay": "1s", "fire_at": "2030-01-01T00:00:00Z"}),
        json!({"name": "reset", "delay": "soon"}),
        json!({"name": "reset", "fire_at": "tomorrow"}),
        json!({"name": "reset", "delay": "1s", "extra": true}),
        json!({"delay": "1s"}),
    ] {
        expect_error(post(&server, alarms, &body), "invalid_request").await;
    }
    let requeue = "/v1/alarms/dead/requeue";
    expect_error(
        post(&server, requeue, &json!({"type": "Counter"})),
        "invalid_request",
    )
    .await;

    // Unknown names.
    expect_error(
        post(&server, "/v1/objects/Nope/a/call/get", &json!({})),
        "unknown_type",
    )
    .await;
    expect_error(get(&server, "/v1/objects/Nope/a"), "unknown_type").await;
    expect_error(get(&server, "/v1/objects?type=Nope"), "unknown_type").await;
    expect_error(
        server.request(Method::DELETE, "/v1/objects/Nope/a", None),
        "unknown_type",
    )
    .await;
    expect_error(get(&server, "/v1/objects/Nope/a/alarms"), "unknown_type").await;
    expect_error(get(&server, "/v1/alarms/dead?type=Nope"), "unknown_type").await;
    expect_error(
        post(&server, "/v1/objects/Counter/a/call/nope", &json!({})),
        "unknown_handler",
    )
    .await;
    expect_error(
        post(&server, alarms, &json!({"name": "nope", "delay": "1s"})),
        "unknown_alarm",
    )
    .await;
    expect_error(
        server.request(Method::DELETE, "/v1/objects/Counter/c/alarms/nope", None),
        "unknown_alarm",
    )
    .await;
    expect_error(
        get(&server, "/v1/objects/Counter/never"),
        "object_not_found",
    )
    .await;

    // Unknown routes and methods.
    for path in [
        "/v2/types",
        "/v1/objects/Counter",
        "/v1/objects/Counter/a/b/c/d/e",
    ] {
        expect_error(get(&server, path), "not_found").await;
    }
    expect_error(
        server.request(Method::PUT, "/v1/objects/Counter/a", None),
        "method_not_allowed",
    )
    .await;
    expect_error(
        get(&server, "/v1/objects/Counter/a/call/get"),
        "method_not_allowed",
    )
    .await;
    expect_error(
        server.request(Method::POST, "/types", None),
        "method_not_allowed",
    )
    .await;

    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused() {
    let mut config = open_config();
    config.body_limit = 64;
    let server = TestServer::start(builder(MemoryStorage::new()).build(), config).await;
    let call = "/v1/objects/Counter/c/call/increment";
    assert_eq!(server.post(call, &json!({"by": 1})).await.0, 200);
    let big = json!({"by": 1, "padding": "x".repeat(100)});
    expect_error(post(&server, call, &big), "body_too_large").await;
    let alarm = json!({"name": "reset", "delay": format!("1s{}", " ".repeat(100))});
    expect_error(
        post(&server, "/v1/objects/Counter/c/alarms", &alarm),
        "body_too_large",
    )
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_failures_leak_no_internals() {
    let storage = MemoryStorage::new();
    let server = TestServer::start(builder(storage.clone()).build(), open_config()).await;

    let body = expect_error(
        post(&server, "/v1/objects/Counter/p/call/explode", &json!({})),
        "handler_panicked",
    )
    .await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("secret") && !message.contains("deadbeef"),
        "{message}"
    );
    // The object keeps serving.
    assert_eq!(
        server
            .post("/v1/objects/Counter/p/call/get", &json!({}))
            .await
            .0,
        200
    );

    expect_error(
        post(&server, "/v1/objects/Counter/n/call/poison", &json!({})),
        "state_encode_failed",
    )
    .await;
    let body = expect_error(
        post(&server, "/v1/objects/Counter/n/call/pairs", &json!({})),
        "internal",
    )
    .await;
    assert!(
        !body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("key must be a string")
    );

    // A stored state that no longer fits the struct.
    let planted = ObjectWrite {
        key: ObjectKey::new("Counter", "bad"),
        expected_version: 0,
        state: Some(br#"{"count": "not a number", "ratio": 0.0}"#.to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    storage.commit(&[planted]).await.unwrap();
    let body = expect_error(
        post(&server, "/v1/objects/Counter/bad/call/get", &json!({})),
        "state_decode_failed",
    )
    .await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("not a number") && !message.contains("count"),
        "{message}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_overloaded() {
    let runtime = builder(MemoryStorage::new())
        .register_with::<Gated>(ObjectOptions::new().with_queue_capacity(1))
        .build();
    let server = TestServer::start(runtime, open_config()).await;
    let held = gate("overloaded");
    let hold = || {
        post(
            &server,
            "/v1/objects/Gated/q/call/hold",
            &json!({"gate": "overloaded"}),
        )
        .send()
    };
    let first = tokio::spawn(hold());
    held.reached(1).await;
    // The object is busy: of two more calls, one at most fits in its queue, the other is
    // refused at once.
    let (refused, _, waiting) = within(
        "a refused call",
        futures_util::future::select_all([hold().boxed(), hold().boxed()]),
    )
    .await;
    check_error(refused.unwrap(), "overloaded").await;

    held.release(2);
    let status = within("the first call", first)
        .await
        .unwrap()
        .unwrap()
        .status();
    assert_eq!(status, 200);
    let waiting = waiting.into_iter().next().unwrap();
    let last = within("the other call", waiting).await.unwrap();
    assert!([200, 429].contains(&last.status().as_u16()));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_storage_and_unknown_outcomes() {
    let storage = FaultyStorage::new(MemoryStorage::new());
    let server = TestServer::start(builder(storage.clone()).build(), open_config()).await;
    let call = "/v1/objects/Counter/f/call/increment";

    storage.fail_loads(1);
    expect_error(post(&server, call, &json!({"by": 1})), "unavailable").await;
    assert_eq!(
        server.post(call, &json!({"by": 1})).await,
        (200, json!({"result": 1}))
    );

    storage.fail_loads(1);
    expect_error(get(&server, "/v1/objects/Counter/never"), "unavailable").await;

    storage.fail_commits_after_applying(1);
    let body = expect_error(post(&server, call, &json!({"by": 1})), "outcome_unknown").await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may or may not")
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_live_objects() {
    let runtime = builder(MemoryStorage::new()).max_live_objects(1).build();
    let server = TestServer::start(runtime, open_config()).await;
    let held = gate("too-many");
    let busy = tokio::spawn(
        post(
            &server,
            "/v1/objects/Gated/busy/call/hold",
            &json!({"gate": "too-many"}),
        )
        .send(),
    );
    held.reached(1).await;
    expect_error(
        post(
            &server,
            "/v1/objects/Counter/more/call/increment",
            &json!({"by": 1}),
        ),
        "too_many_objects",
    )
    .await;
    held.release(1);
    within("the busy call", busy).await.unwrap().unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_shutting_down() {
    let server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    server.runtime.shutdown().await;
    expect_error(
        post(
            &server,
            "/v1/objects/Counter/s/call/increment",
            &json!({"by": 1}),
        ),
        "shutting_down",
    )
    .await;
    server.stop().await;
}

/// Calls `Gated::hold` behind the gate `gate`, expecting a `timeout` whose message says the
/// outcome is unknown.
async fn expect_unknown_outcome(server: &TestServer, gate: &str) {
    let body = expect_error(
        post(
            server,
            "/v1/objects/Gated/t/call/hold",
            &json!({"gate": gate}),
        ),
        "timeout",
    )
    .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_leave_the_outcome_unknown() {
    // The type's own call timeout.
    let runtime = builder(MemoryStorage::new())
        .register_with::<Gated>(ObjectOptions::new().with_call_timeout(Duration::from_millis(100)))
        .build();
    let server = TestServer::start(runtime, open_config()).await;
    expect_unknown_outcome(&server, "type-timeout").await;
    gate("type-timeout").release(1);
    server.stop().await;

    // The gateway's call timeout.
    let mut config = open_config();
    config.call_timeout = Duration::from_millis(100);
    let server = TestServer::start(builder(MemoryStorage::new()).build(), config).await;
    expect_unknown_outcome(&server, "gateway-timeout").await;
    // The call goes on in the object, and is applied once it can finish.
    let held = gate("gateway-timeout");
    held.reached(1).await;
    held.release(1);
    within("the call applied after the timeout", async {
        while Gated::passed(&server.runtime, "t").await.unwrap() != 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_writer_is_a_conflict() {
    let storage = MemoryStorage::new();
    let server = TestServer::start(builder(storage.clone()).build(), open_config()).await;
    let call = "/v1/objects/Counter/k/call/increment";
    assert_eq!(server.post(call, &json!({"by": 1})).await.0, 200);
    // Another process on the same database writes the object.
    let other = builder(storage).build();
    assert_eq!(Counter::increment(&other, "k", 10).await.unwrap(), 11);
    expect_error(post(&server, call, &json!({"by": 1})), "conflict").await;
    // Retrying is safe: the object reloaded the newer state.
    assert_eq!(
        server.post(call, &json!({"by": 1})).await,
        (200, json!({"result": 12}))
    );
    other.shutdown().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_inside_a_handler_is_that_handlers_error() {
    // A cycle is refused inside the handler that makes the inner call; what the caller over
    // HTTP sees is that handler's own result.
    let server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let body = expect_error(
        post(&server, "/v1/objects/Gated/r/call/recurse", &json!({})),
        "handler_error",
    )
    .await;
    assert!(
        body["error"]["details"]
            .as_str()
            .unwrap()
            .contains("call cycle"),
        "{body}"
    );
    server.stop().await;
}

/// The table itself, for every runtime error, including those no HTTP request can cause.
#[tokio::test]
async fn every_runtime_error_maps_as_the_contract_says() {
    let key = || ObjectKey::new("Counter", "a");
    let cases: Vec<(Error, &str)> = vec![
        (Error::InvalidId(InvalidId::Empty), "invalid_id"),
        (
            Error::Panicked {
                key: key(),
                handler: "h",
                message: "secret".into(),
            },
            "handler_panicked",
        ),
        (
            Error::Storage {
                key: key(),
                source: StorageError::unavailable("down"),
            },
            "unavailable",
        ),
        (
            Error::Storage {
                key: key(),
                source: StorageError::rejected("constraint"),
            },
            "internal",
        ),
        (
            Error::Conflict {
                key: key(),
                found: Some(3),
            },
            "conflict",
        ),
        (
            Error::OutcomeUnknown {
                key: key(),
                source: StorageError::unavailable("lost"),
            },
            "outcome_unknown",
        ),
        (
            Error::Decode {
                key: key(),
                path: "count".into(),
                message: "secret".into(),
            },
            "state_decode_failed",
        ),
        (
            Error::Encode {
                key: key(),
                message: "secret".into(),
            },
            "state_encode_failed",
        ),
        (
            Error::AfterLoad {
                key: key(),
                message: "secret".into(),
            },
            "internal",
        ),
        (
            Error::Overloaded {
                key: key(),
                capacity: 8,
            },
            "overloaded",
        ),
        (Error::TooManyObjects { key: key() }, "too_many_objects"),
        (
            Error::Timeout {
                key: key(),
                handler: "h",
            },
            "timeout",
        ),
        (
            Error::CallCycle {
                key: key(),
                chain: vec![key()],
            },
            "call_cycle",
        ),
        (Error::ShuttingDown, "shutting_down"),
        (
            Error::FsmRefused {
                key: key(),
                refusal: FsmRefusal::Duplicate {
                    correlation_key: "ship:a".into(),
                },
            },
            "duplicate_instance",
        ),
        (
            Error::FsmRefused {
                key: key(),
                refusal: FsmRefusal::NoTarget {
                    target: "key \"ship:a\"".into(),
                    name: "go".into(),
                },
            },
            "instance_not_found",
        ),
        (
            Error::FsmRefused {
                key: key(),
                refusal: FsmRefusal::Unsupported,
            },
            "internal",
        ),
    ];
    for (error, code) in cases {
        let api = ApiError::from(CallByNameError::from(error));
        let (status, retryable) = contract(code);
        assert_eq!(api.code().as_str(), code);
        assert_eq!(api.code().status().as_u16(), status, "{code}");
        assert_eq!(api.body().error.retryable, retryable, "{code}");
        assert!(
            !api.message().contains("secret"),
            "{code}: {}",
            api.message()
        );
    }
    let mut by_name: Vec<(CallByNameError, &str)> = vec![
        (
            CallByNameError::UnknownType {
                type_name: "X".into(),
            },
            "unknown_type",
        ),
        (
            CallByNameError::UnknownHandler {
                type_name: "X".into(),
                handler: "h".into(),
            },
            "unknown_handler",
        ),
        (
            CallByNameError::UnknownAlarm {
                type_name: "X".into(),
                alarm: "a".into(),
            },
            "unknown_alarm",
        ),
        (
            CallByNameError::BadArguments {
                handler: "h",
                path: ".".into(),
                message: "m".into(),
            },
            "invalid_arguments",
        ),
        (
            CallByNameError::Handler {
                handler: "h",
                error: json!("e"),
            },
            "handler_error",
        ),
        (
            CallByNameError::Encode {
                handler: "h",
                message: "secret".into(),
            },
            "internal",
        ),
    ];
    // A cursor no listing handed out, as the runtime refuses it.
    let runtime = durable_runtime::Runtime::new(MemoryStorage::new());
    let bad_cursor = runtime
        .list_dead_alarms_by_name(None, Some("not a cursor"), 10)
        .await
        .unwrap_err();
    assert!(matches!(bad_cursor, CallByNameError::InvalidCursor(_)));
    by_name.push((bad_cursor, "invalid_request"));
    for (error, code) in by_name {
        let api = ApiError::from(error);
        assert_eq!(api.code().as_str(), code);
        assert_eq!(api.code().status().as_u16(), contract(code).0, "{code}");
        assert!(!api.message().contains("secret"), "{code}");
    }
    // Every code of the server is in the contract, with the contract's status.
    for code in [
        ErrorCode::NotFound,
        ErrorCode::ObjectNotFound,
        ErrorCode::InvalidRequest,
        ErrorCode::BodyTooLarge,
        ErrorCode::Unauthenticated,
        ErrorCode::Forbidden,
        ErrorCode::MethodNotAllowed,
    ] {
        let (status, retryable) = contract(code.as_str());
        assert_eq!(
            (code.status().as_u16(), code.retryable()),
            (status, retryable)
        );
    }
}
