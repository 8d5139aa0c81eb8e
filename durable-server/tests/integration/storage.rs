//! An object's key-value storage over real HTTP: the paged dump, one key read, written and
//! deleted, on the versioned routes and their aliases; the limits as 413 and typed 422s with
//! nothing written; values stored byte for byte.

use crate::common;

use common::{TestServer, builder, code, fields, open_config};
use durable_runtime::durable_object;
use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage};
use reqwest::Method;
use serde_json::json;

/// A bucket with small limits: 2 keys, 16-byte values, 35 bytes in all.
#[durable_object(kv_max_keys = 2, kv_max_value_bytes = 16, kv_max_bytes = 35)]
pub struct Bucket {
    n: u64,
}

#[durable_object(expose)]
impl Bucket {}

async fn put(server: &TestServer, path: &str, body: &str) -> (u16, serde_json::Value) {
    let request = server
        .request(Method::PUT, path, None)
        .header("content-type", "application/json")
        .body(body.to_owned());
    server.send(request).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_routes_read_write_list_and_delete() {
    let store = MemoryStorage::new();
    let server = TestServer::start(
        builder(store.clone()).expose::<Bucket>().build(),
        open_config(),
    )
    .await;
    for (key, value) in [("b", r#"{"n":2}"#), ("a", "[1, 2]"), ("c/d", r#""\ud800""#)] {
        let path = format!("/v1/objects/Counter/x/storage/{}", key.replace('/', "%2F"));
        let (status, body) = put(&server, &path, value).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["key"], key);
    }
    // Byte for byte, a lone surrogate escape included.
    let response = server
        .request(Method::GET, "/v1/objects/Counter/x/storage/c%2Fd", None)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), r#""\ud800""#);
    assert_eq!(
        store
            .kv_get(&ObjectKey::new("Counter", "x"), "a")
            .await
            .unwrap(),
        Some(b"[1, 2]".to_vec())
    );

    // Paged, in key order; the unversioned alias answers the same.
    let (status, page) = server.get("/v1/objects/Counter/x/storage?limit=2").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(fields(&page["entries"], "key"), ["a", "b"]);
    assert_eq!(page["entries"][1]["value"], json!({"n": 2}));
    assert_eq!(page["next_cursor"], "b");
    // The value with a lone surrogate is not a `serde_json::Value`: compared as text.
    let server = &server;
    let text = |path: &'static str| async move {
        let response = server
            .request(Method::GET, path, None)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };
    let last = r#"{"entries":[{"key":"c/d","value":"\ud800"}],"next_cursor":null}"#;
    let next = text("/objects/Counter/x/storage?limit=2&cursor=b").await;
    assert_eq!(next, (200, last.to_owned()));
    let prefixed = text("/v1/objects/Counter/x/storage?prefix=c").await;
    assert_eq!(prefixed, (200, last.to_owned()));

    let (status, body) = server.delete("/v1/objects/Counter/x/storage/a").await;
    assert_eq!((status, body), (200, json!({"deleted": true})));
    let (status, body) = server.delete("/objects/Counter/x/storage/a").await;
    assert_eq!((status, body), (200, json!({"deleted": false})));
    let (status, body) = server.get("/v1/objects/Counter/x/storage/a").await;
    assert_eq!((status, code(&body)), (404, "kv_key_not_found"));

    // Not JSON: refused before anything is staged.
    let (status, body) = put(server, "/v1/objects/Counter/x/storage/bad", "{nope").await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    let (status, body) = server.get("/v1/objects/Nope/x/storage").await;
    assert_eq!((status, code(&body)), (404, "unknown_type"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_limits_answer_413_and_typed_422s_and_write_nothing() {
    let store = MemoryStorage::new();
    let server = TestServer::start(
        builder(store.clone()).expose::<Bucket>().build(),
        open_config(),
    )
    .await;
    let bucket = ObjectKey::new("Bucket", "b");
    // A value of exactly 16 bytes passes, 17 is 413.
    let sixteen = format!("\"{}\"", "x".repeat(14));
    let (status, body) = put(&server, "/v1/objects/Bucket/b/storage/k1", &sixteen).await;
    assert_eq!(status, 200, "{body}");
    let seventeen = format!("\"{}\"", "x".repeat(15));
    let (status, body) = put(&server, "/v1/objects/Bucket/b/storage/k2", &seventeen).await;
    assert_eq!((status, code(&body)), (413, "kv_value_too_large"));
    assert_eq!(
        body["error"]["details"],
        json!({"size": 17, "max_bytes": 16})
    );

    // Bytes: 18 + 17 = 35 exactly; a third key is past the key limit.
    let fifteen = format!("\"{}\"", "x".repeat(13));
    let (status, _) = put(&server, "/v1/objects/Bucket/b/storage/k2", &fifteen).await;
    assert_eq!(status, 200);
    let (status, body) = put(&server, "/v1/objects/Bucket/b/storage/k3", "1").await;
    assert_eq!((status, code(&body)), (422, "kv_key_limit"));
    assert_eq!(body["error"]["details"], json!({"max_keys": 2, "keys": 3}));
    // One byte more in a replaced value: 18 + 18 = 36 > 35.
    let (status, body) = put(&server, "/v1/objects/Bucket/b/storage/k2", &sixteen).await;
    assert_eq!((status, code(&body)), (422, "kv_object_quota"));
    assert_eq!(
        body["error"]["details"],
        json!({"max_bytes": 35, "bytes": 36})
    );
    assert_eq!(body["error"]["retryable"], false);
    // Nothing of the refused writes is stored.
    assert_eq!(store.kv_list(&bucket, "", None, 10).await.unwrap().len(), 2);
    assert_eq!(
        store.kv_get(&bucket, "k2").await.unwrap(),
        Some(fifteen.as_bytes().to_vec())
    );
    let usage = store.kv_usage(&bucket).await.unwrap();
    assert_eq!((usage.keys, usage.bytes), (2, 35));
}
