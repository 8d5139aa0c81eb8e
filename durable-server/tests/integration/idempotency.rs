//! The `Idempotency-Key` header: a call with a key is applied once and its reply is replayed
//! to a request with the same key; the key with other arguments is a 409; a timeout of a call
//! with a key is retryable, and the retry gets the reply of the call that was applied. The
//! Rust client sends the header.

use crate::common;

use std::time::Duration;

use common::{Counter, Gated, TestServer, builder, code, gate, open_config, within};
use durable_runtime::storage::MemoryStorage;
use durable_server::client::{Client, ClientError};
use reqwest::Method;
use serde_json::{Value, json};

/// `POST path` with `body` and the idempotency key `key`.
async fn post_keyed(server: &TestServer, path: &str, body: &Value, key: &str) -> (u16, Value) {
    let request = server
        .request(Method::POST, path, None)
        .header("Idempotency-Key", key)
        .json(body);
    server.send(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_call_is_applied_once_and_replayed() {
    let server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let path = "/v1/objects/Counter/i/call/increment";
    let first = post_keyed(&server, path, &json!({"by": 5}), "op-1").await;
    let again = post_keyed(&server, path, &json!({"by": 5}), "op-1").await;
    assert_eq!(first, (200, json!({"result": 5})));
    assert_eq!(again, (200, json!({"result": 5})));
    assert_eq!(Counter::get(&server.runtime, "i").await.unwrap(), 5);
    // The specification's unversioned alias shares the keys.
    let alias = post_keyed(
        &server,
        "/objects/Counter/i/call/increment",
        &json!({"by": 5}),
        "op-1",
    )
    .await;
    assert_eq!(alias, (200, json!({"result": 5})));

    // Other arguments with the same key: refused, nothing applied.
    let (status, body) = post_keyed(&server, path, &json!({"by": 6}), "op-1").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(code(&body), "idempotency_key_reused");
    assert_eq!(body["error"]["retryable"], false);
    assert_eq!(Counter::get(&server.runtime, "i").await.unwrap(), 5);

    // A handler error is a reply too: the same 422 again.
    let checked = "/v1/objects/Counter/i/call/add_checked";
    let args = json!({"by": 100, "limit": 10});
    let first = post_keyed(&server, checked, &args, "op-2").await;
    let again = post_keyed(&server, checked, &args, "op-2").await;
    assert_eq!(first.0, 422);
    assert_eq!(first, again);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_with_a_key_is_retryable_and_the_retry_gets_the_applied_reply() {
    let mut config = open_config();
    config.call_timeout = Duration::from_millis(100);
    let server = TestServer::start(builder(MemoryStorage::new()).build(), config).await;
    let path = "/v1/objects/Gated/k/call/hold";
    let args = json!({"gate": "keyed-timeout"});
    let (status, body) = post_keyed(&server, path, &args, "hold-1").await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(code(&body), "timeout");
    assert_eq!(
        body["error"]["retryable"], true,
        "a key makes a timeout retryable"
    );
    // Without a key, the same timeout is not.
    let (status, body) = server
        .post(
            "/v1/objects/Gated/n/call/hold",
            &json!({"gate": "unkeyed-timeout"}),
        )
        .await;
    assert_eq!((status, &body["error"]["retryable"]), (504, &json!(false)));
    gate("unkeyed-timeout").release(1);

    // The first call is applied once its gate opens; the retry gets its reply.
    let held = gate("keyed-timeout");
    held.reached(1).await;
    held.release(1);
    within("the retry answered from the stored reply", async {
        loop {
            let (status, body) = post_keyed(&server, path, &args, "hold-1").await;
            if status == 200 {
                assert_eq!(body, json!({"result": 1}));
                break;
            }
            assert_eq!(code(&body), "timeout", "{body}");
        }
    })
    .await;
    assert_eq!(
        Gated::passed(&server.runtime, "k").await.unwrap(),
        1,
        "applied once"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sends_the_key() {
    let server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let client = Client::new(&server.url(""));
    let objects = client.objects();
    let args = json!({"by": 2});
    for _ in 0..2 {
        let count: i64 = objects
            .call_with_key("Counter", "c", "increment", &args, Some("k"))
            .await
            .unwrap();
        assert_eq!(count, 2);
    }
    let reused = objects
        .call_with_key::<_, i64>("Counter", "c", "increment", &json!({"by": 3}), Some("k"))
        .await
        .unwrap_err();
    assert!(
        matches!(&reused, ClientError::Api { status: 409, error } if error.code == "idempotency_key_reused"),
        "{reused:?}"
    );
    server.stop().await;
}
