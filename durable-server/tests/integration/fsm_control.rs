//! The FSM scheduling controls over real HTTP: cancel an instance (by id; typed errors for
//! an unknown id, an ended instance, a bad id), pause, resume and list queues; the grants;
//! a server without an engine.

use crate::common;

use std::time::Duration;

use common::{TestServer, code, open_config, principals_config, token};
use durable_runtime::fsm::{Engine, InstanceId, MemoryFsmStore, Outcome, Settled, durable_fsm};
use durable_runtime::{MemoryStorage, Runtime};
use reqwest::Method;
use serde_json::{Value, json};

/// Parks until told to end.
#[durable_fsm(name = "job", queue = "jobs")]
pub struct Job {}

#[durable_fsm]
impl Job {
    #[step(initial)]
    fn wait(&mut self) -> Outcome<Self> {
        Outcome::await_signal(["go"], Self::END)
    }

    #[step]
    fn end(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

const WAIT: Duration = Duration::from_secs(20);

fn engine() -> Engine {
    Engine::builder(MemoryFsmStore::new())
        .register::<Job>()
        .queue("jobs", 2)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50))
        .build()
        .expect("an engine")
}

fn runtime() -> Runtime {
    Runtime::new(MemoryStorage::new())
}

async fn insert(server: &TestServer) -> i64 {
    let (status, reply) = server.post("/v1/fsm/job", &json!({"args": {}})).await;
    assert_eq!(status, 200, "{reply}");
    reply["id"].as_i64().unwrap()
}

/// Cancel: the instance ends failed, "cancelled"; again is `409 instance_ended`; unknown ids
/// are `404`, bad ids `400`. Pause holds a queue back until resume; the paused queues list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_queue_controls() {
    let engine = engine();
    let server = TestServer::start(runtime(), open_config().with_fsm(engine.clone())).await;
    let id = insert(&server).await;
    let settled = engine
        .await_settled(InstanceId::new(id), WAIT)
        .await
        .unwrap();
    assert!(matches!(settled, Settled::Awaiting(_)), "{settled:?}");

    let (status, reply) = server
        .post(&format!("/v1/fsm/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply, json!({"id": id, "instances": 1}));
    let (_, instance) = server.get(&format!("/v1/fsm/{id}")).await;
    assert_eq!(
        (instance["status"].clone(), instance["error"].clone()),
        (json!("failed"), json!("cancelled"))
    );
    let (status, body) = server
        .post(&format!("/v1/fsm/{id}/cancel"), &json!({}))
        .await;
    assert_eq!((status, code(&body)), (409, "instance_ended"));
    let (status, body) = server.post("/v1/fsm/999999/cancel", &json!({})).await;
    assert_eq!((status, code(&body)), (404, "instance_not_found"));
    let (status, body) = server.post("/v1/fsm/nine/cancel", &json!({})).await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));

    let (status, reply) = server.post("/v1/fsm/queues/jobs/pause", &json!({})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply,
        json!({"queue": "jobs", "paused": true, "changed": true})
    );
    let (_, reply) = server.post("/v1/fsm/queues/jobs/pause", &json!({})).await;
    assert_eq!(reply["changed"], json!(false));
    let (status, paused) = server.get("/v1/fsm/queues/paused").await;
    assert_eq!(status, 200);
    assert_eq!(paused["queues"][0]["queue"], "jobs");
    assert!(paused["queues"][0]["paused_at"].is_string());
    let held = insert(&server).await;
    let settled = engine
        .await_settled(InstanceId::new(held), Duration::from_millis(300))
        .await
        .unwrap();
    assert!(matches!(settled, Settled::Busy(_)), "paused: {settled:?}");
    let (status, reply) = server.post("/v1/fsm/queues/jobs/resume", &json!({})).await;
    assert_eq!((status, reply["paused"].clone()), (200, json!(false)));
    let settled = engine
        .await_settled(InstanceId::new(held), WAIT)
        .await
        .unwrap();
    assert!(
        matches!(settled, Settled::Awaiting(_)),
        "resumed: {settled:?}"
    );
    let (_, paused) = server.get("/v1/fsm/queues/paused").await;
    assert_eq!(paused, json!({"queues": []}));

    server.stop().await;
    engine.shutdown().await;
}

/// Cancel needs `fsm_write` on the instance's FSM; pause and resume need it on `"*"`, the
/// paused list `fsm_read` on `"*"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controls_follow_the_grants() {
    let engine = engine();
    let config = principals_config(&format!(
        r#"
        [[principals]]
        name = "job-writer"
        tokens_sha256 = ["{}"]
          [[principals.grants]]
          types = ["job"]
          ops = ["fsm_read", "fsm_write"]
        "#,
        durable_server::auth::hash_token(&token("job-writer"))
    ))
    .with_fsm(engine.clone());
    let server = TestServer::start(runtime(), config).await;
    let send = |who: &str, method: Method, path: &str| {
        server.send(server.request(method, path, Some(&token(who))))
    };
    let (status, body) = server
        .send(
            server
                .request(Method::POST, "/v1/fsm/job", Some(&token("admin")))
                .json(&json!({"args": {}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let id = body["id"].as_i64().unwrap();
    let cancel = format!("/v1/fsm/{id}/cancel");
    let (status, body) = send("other-only", Method::POST, &cancel).await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    for path in ["/v1/fsm/queues/jobs/pause", "/v1/fsm/queues/jobs/resume"] {
        let (status, body) = send("job-writer", Method::POST, path).await;
        assert_eq!((status, code(&body)), (403, "forbidden"), "{path}");
    }
    let (status, body) = send("job-writer", Method::GET, "/v1/fsm/queues/paused").await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = send("admin", Method::POST, "/v1/fsm/queues/jobs/pause").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = send("job-writer", Method::POST, &cancel).await;
    assert_eq!(status, 200, "{body}");
    server.stop().await;
    engine.shutdown().await;
}

/// Without an engine the control routes answer `404 fsm_not_enabled`.
#[tokio::test]
async fn controls_without_an_engine() {
    let server = TestServer::start(runtime(), open_config()).await;
    for (method, path) in [
        (Method::POST, "/v1/fsm/1/cancel"),
        (Method::POST, "/v1/fsm/queues/q/pause"),
        (Method::POST, "/v1/fsm/queues/q/resume"),
        (Method::GET, "/v1/fsm/queues/paused"),
    ] {
        let (status, body): (u16, Value) = server
            .send(server.request(method.clone(), path, None))
            .await;
        assert_eq!(
            (status, code(&body)),
            (404, "fsm_not_enabled"),
            "{method} {path}"
        );
    }
    server.stop().await;
}
