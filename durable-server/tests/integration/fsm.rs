//! The `/v1/fsm` routes over real HTTP, on the in-memory FSM store and on Postgres: insert
//! from JSON (typed against the FSM's state), signal by key and by id, read, list by FSM and
//! status a page at a time; the typed errors; the grants; a server without an engine.

use crate::common;

use std::time::Duration;

use common::{TestServer, code, open_config, principals_config, token};
use durable_runtime::fsm::store::FsmStore;
use durable_runtime::fsm::{
    Engine, InstanceId, MemoryFsmStore, Outcome, Settled, StepContext, durable_fsm,
};
use durable_runtime::{MemoryStorage, Runtime};
use reqwest::Method;
use serde_json::{Value, json};

#[durable_fsm(name = "order", result = String)]
pub struct Order {
    order_id: String,
    #[field(default = 0)]
    cents: i64,
}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::await_signal(["paid"], Self::SETTLE)
    }

    #[step]
    fn settle(&mut self, ctx: &StepContext) -> Outcome<Self> {
        if let Some(paid) = ctx.awaited().first() {
            self.cents = paid.payload::<i64>().unwrap_or(-1);
        }
        if self.order_id == "bad" {
            Outcome::stop("declined")
        } else {
            // `done` keeps the state as it was: the payload shows in the result.
            Outcome::done(format!("receipt for {}: {}", self.order_id, self.cents))
        }
    }
}

fn engine(store: impl FsmStore) -> Engine {
    Engine::builder(store)
        .register::<Order>()
        .queue("default", 4)
        .poll_interval(Duration::from_millis(20), Duration::from_millis(100))
        .build()
        .expect("an engine")
}

fn runtime() -> Runtime {
    Runtime::new(MemoryStorage::new())
}

const WAIT: Duration = Duration::from_secs(20);

async fn insert(server: &TestServer, order_id: &str, key: Option<&str>) -> i64 {
    let mut body = json!({"args": {"order_id": order_id}});
    if let Some(key) = key {
        body["correlation_key"] = json!(key);
    }
    let (status, reply) = server.post("/v1/fsm/order", &body).await;
    assert_eq!(status, 200, "{reply}");
    reply["id"].as_i64().expect("an id")
}

async fn parked(engine: &Engine, id: i64) {
    let settled = engine
        .await_settled(InstanceId::new(id), WAIT)
        .await
        .unwrap();
    assert!(matches!(settled, Settled::Awaiting(_)), "{settled:?}");
}

async fn ended(engine: &Engine, id: i64) {
    let settled = engine.await_ended(InstanceId::new(id), WAIT).await.unwrap();
    assert!(
        matches!(settled, Settled::Done { .. } | Settled::Failed { .. }),
        "{settled:?}"
    );
}

fn ids(page: &Value) -> Vec<i64> {
    page["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .map(|instance| instance["id"].as_i64().unwrap())
        .collect()
}

/// Everything a client does with FSM instances, on `store`.
async fn round_trip(store: impl FsmStore) {
    let engine = engine(store);
    let server = TestServer::start(runtime(), open_config().with_fsm(engine.clone())).await;

    // Insert, typed against the state: defaults fill the fields left out.
    let id = insert(&server, "42", Some("order:42")).await;
    parked(&engine, id).await;
    let (status, instance) = server.get(&format!("/v1/fsm/{id}")).await;
    assert_eq!(status, 200, "{instance}");
    assert_eq!(instance["fsm"], "order");
    assert_eq!(instance["status"], "awaiting_signal");
    assert_eq!(instance["step"], "settle");
    assert_eq!(instance["state"], json!({"order_id": "42", "cents": 0}));
    assert_eq!(instance["awaits"], json!(["paid"]));
    assert_eq!(instance["correlation_key"], "order:42");
    assert_eq!(instance["result"], Value::Null);
    assert_eq!(instance["inbox"], json!([]));

    // The typed refusals of an insert.
    let (status, body) = server
        .post(
            "/v1/fsm/order",
            &json!({"args": {"order_id": "43"}, "correlation_key": "order:42"}),
        )
        .await;
    assert_eq!((status, code(&body)), (409, "duplicate_instance"));
    let (status, body) = server
        .post("/v1/fsm/order", &json!({"args": {"order_id": 7}}))
        .await;
    assert_eq!((status, code(&body)), (400, "invalid_arguments"));
    assert!(
        body["error"]["message"].as_str().unwrap().contains("order"),
        "{body}"
    );
    let (status, body) = server.post("/v1/fsm/refund", &json!({"args": {}})).await;
    assert_eq!((status, code(&body)), (404, "unknown_fsm"));
    assert!(
        body["error"]["message"].as_str().unwrap().contains("order"),
        "the registered FSMs are named: {body}"
    );

    // Signal by key: it wakes the instance, which ends with the payload in its state.
    let (status, sent) = server
        .post(
            "/v1/fsm/signal",
            &json!({"correlation_key": "order:42", "name": "paid", "payload": 1250, "dedup_key": "evt-1"}),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(
        (sent["target"].as_i64(), sent["woke"].clone()),
        (Some(id), json!(true))
    );
    ended(&engine, id).await;
    let (_, instance) = server.get(&format!("/fsm/{id}")).await;
    assert_eq!(instance["status"], "done");
    assert_eq!(instance["result"], "receipt for 42: 1250");

    // The typed refusals of a signal.
    let (status, body) = server
        .post("/v1/fsm/signal", &json!({"id": id, "name": "paid"}))
        .await;
    assert_eq!((status, code(&body)), (404, "instance_not_found"), "ended");
    let (status, body) = server
        .post(
            "/v1/fsm/signal",
            &json!({"correlation_key": "order:42", "name": "paid"}),
        )
        .await;
    assert_eq!(
        (status, code(&body)),
        (404, "instance_not_found"),
        "key freed"
    );
    let (status, body) = server
        .post(
            "/v1/fsm/signal",
            &json!({"id": id, "correlation_key": "order:42", "name": "paid"}),
        )
        .await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    let (status, body) = server.get("/v1/fsm/99999999").await;
    assert_eq!((status, code(&body)), (404, "instance_not_found"));
    let (status, body) = server.get("/v1/fsm/not-a-number").await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));

    // A failed one, and one signalled by id that waits with its signal in the inbox.
    let bad = insert(&server, "bad", None).await;
    let waiting = insert(&server, "w", None).await;
    let more = insert(&server, "more", None).await;
    parked(&engine, bad).await;
    parked(&engine, waiting).await;
    parked(&engine, more).await;
    let (status, _) = server
        .post(
            "/v1/fsm/signal",
            &json!({"id": bad, "name": "paid", "payload": 1}),
        )
        .await;
    assert_eq!(status, 200);
    ended(&engine, bad).await;
    let (status, sent) = server
        .post("/v1/fsm/signal", &json!({"id": waiting, "name": "other"}))
        .await;
    assert_eq!((status, sent["woke"].clone()), (200, json!(false)));
    let (_, instance) = server.get(&format!("/v1/fsm/{waiting}")).await;
    assert_eq!(instance["inbox"][0]["name"], "other");
    let (_, instance) = server.get(&format!("/v1/fsm/{bad}")).await;
    assert_eq!(instance["status"], "failed");
    assert_eq!(instance["error"], "declined");

    // Listings by status and name, a page at a time.
    let (status, page) = server.get("/v1/fsm?status=done").await;
    assert_eq!((status, ids(&page)), (200, vec![id]));
    let (_, page) = server.get("/v1/fsm?name=order&status=failed").await;
    assert_eq!(ids(&page), vec![bad]);
    assert_eq!(page["instances"][0]["error"], "declined");
    assert!(
        page["instances"][0].get("inbox").is_none(),
        "no inbox in listings"
    );
    let (_, page) = server.get("/v1/fsm?status=awaiting_signal").await;
    assert_eq!(ids(&page), vec![waiting, more]);
    let (_, first) = server.get("/v1/fsm?name=order&limit=2").await;
    assert_eq!(ids(&first), vec![id, bad]);
    assert_eq!(first["next_after"], json!(bad));
    let (_, second) = server
        .get(&format!("/v1/fsm?name=order&limit=2&after={bad}"))
        .await;
    assert_eq!(ids(&second), vec![waiting, more]);
    let (_, last) = server
        .get(&format!("/v1/fsm?name=order&limit=2&after={more}"))
        .await;
    assert_eq!(
        (ids(&last), last["next_after"].clone()),
        (vec![], Value::Null)
    );
    let (_, none) = server.get("/v1/fsm?name=refund").await;
    assert!(ids(&none).is_empty());
    let (status, body) = server.get("/v1/fsm?status=sleeping").await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("awaiting_signal")
    );
    let (status, body) = server.get("/v1/fsm?limit=0").await;
    assert_eq!((status, code(&body)), (400, "invalid_request"));

    server.stop().await;
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsm_routes_in_memory() {
    round_trip(MemoryFsmStore::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsm_routes_on_postgres() {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "DATABASE_URL must be set when CI is set"
        );
        eprintln!("skipped: DATABASE_URL not set");
        return;
    };
    let schema = format!("gateway_fsm_{}", std::process::id());
    let store = durable_sqlx::PostgresStore::builder(&url)
        .schema(schema.as_str())
        .connect()
        .await
        .expect("connect to Postgres");
    round_trip(store.fsm()).await;
    let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
    durable_sqlx::sqlx::query(durable_sqlx::sqlx::AssertSqlSafe(drop))
        .execute(&durable_sqlx::sqlx::PgPool::connect(&url).await.unwrap())
        .await
        .unwrap();
}

/// Without an engine every FSM route answers `404 fsm_not_enabled`.
#[tokio::test]
async fn fsm_routes_without_an_engine() {
    let server = TestServer::start(runtime(), open_config()).await;
    for (method, path) in [
        (Method::GET, "/v1/fsm"),
        (Method::GET, "/v1/fsm/1"),
        (Method::POST, "/v1/fsm/order"),
        (Method::POST, "/v1/fsm/signal"),
    ] {
        let request = server
            .request(method.clone(), path, None)
            .json(&json!({"args": {}, "id": 1, "name": "x"}));
        let (status, body) = server.send(request).await;
        assert_eq!(
            (status, code(&body)),
            (404, "fsm_not_enabled"),
            "{method} {path}"
        );
    }
    server.stop().await;
}

/// `fsm_read` and `fsm_write` grants name FSMs; a listing of every FSM needs `"*"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsm_routes_follow_the_grants() {
    let engine = engine(MemoryFsmStore::new());
    let config = principals_config(&format!(
        r#"
        [[principals]]
        name = "order-reader"
        tokens_sha256 = ["{}"]
          [[principals.grants]]
          types = ["order"]
          ops = ["fsm_read"]
        "#,
        durable_server::auth::hash_token(&token("order-reader"))
    ))
    .with_fsm(engine.clone());
    let server = TestServer::start(runtime(), config).await;
    let as_ = |who: &str, method: Method, path: &str, body: Option<Value>| {
        let request = server.request(method, path, Some(&token(who)));
        match body {
            Some(body) => request.json(&body),
            None => request,
        }
    };
    let insert = json!({"args": {"order_id": "1"}, "correlation_key": "k"});
    let (status, body) = server
        .send(as_(
            "order-reader",
            Method::POST,
            "/v1/fsm/order",
            Some(insert.clone()),
        ))
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = server
        .send(as_("admin", Method::POST, "/v1/fsm/order", Some(insert)))
        .await;
    assert_eq!(status, 200, "{body}");
    let id = body["id"].as_i64().unwrap();
    let (status, _) = server
        .send(as_(
            "order-reader",
            Method::GET,
            &format!("/v1/fsm/{id}"),
            None,
        ))
        .await;
    assert_eq!(status, 200);
    let (status, page) = server
        .send(as_("order-reader", Method::GET, "/v1/fsm?name=order", None))
        .await;
    assert_eq!((status, ids(&page)), (200, vec![id]));
    let (status, body) = server
        .send(as_("order-reader", Method::GET, "/v1/fsm", None))
        .await;
    assert_eq!(
        (status, code(&body)),
        (403, "forbidden"),
        "every FSM needs \"*\""
    );
    let signal = json!({"correlation_key": "k", "name": "paid"});
    let (status, body) = server
        .send(as_(
            "order-reader",
            Method::POST,
            "/v1/fsm/signal",
            Some(signal.clone()),
        ))
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, body) = server
        .send(as_(
            "other-only",
            Method::GET,
            &format!("/v1/fsm/{id}"),
            None,
        ))
        .await;
    assert_eq!((status, code(&body)), (403, "forbidden"));
    let (status, _) = server
        .send(as_("admin", Method::POST, "/v1/fsm/signal", Some(signal)))
        .await;
    assert_eq!(status, 200);
    server.stop().await;
    engine.shutdown().await;
}
