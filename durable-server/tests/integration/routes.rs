//! Every route of the gateway over real HTTP, on the in-memory store and on SQLite: calls,
//! reads, listings, deletes, alarms, dead alarms, types, the OpenAPI document (checked by an
//! OpenAPI validator), metrics, health; the unversioned aliases; 1,000 HTTP calls interleaved
//! with 1,000 typed calls on one object; and a graceful shutdown that answers every request
//! while it drains and lets an in-flight call finish.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use common::{
    Counter, Gate, Gated, Other, Sleepy, TestServer, builder, code, dead_after_one_attempt, fields,
    gate, open_config, principals_config, within,
};
use durable_runtime::Error;
use durable_runtime::storage::{AlarmChange, MemoryStorage, ObjectKey, ObjectWrite, Storage};
use futures_util::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

async fn sqlite() -> (tempfile::TempDir, Arc<dyn Storage>) {
    let dir = tempfile::tempdir().unwrap();
    let store = durable_sqlx::SqliteStore::open(dir.path().join("gateway.db"))
        .await
        .expect("open SQLite");
    (dir, Arc::new(store))
}

/// Two tests of `$scenario`: `$in_memory` on a memory store and `$on_sqlite` on a SQLite
/// database.
macro_rules! on_each_store {
    ($scenario:ident: $in_memory:ident, $on_sqlite:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $in_memory() {
            $scenario(Arc::new(MemoryStorage::new())).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $on_sqlite() {
            let (_dir, store) = sqlite().await;
            $scenario(store).await;
        }
    };
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
    let ids = fields(&page["objects"], "id");
    assert_eq!(ids, ["a/b c", "user-1"]);
    assert_eq!(page["objects"][0]["status"], "active");
    assert_eq!(page["objects"][0]["type"], "Counter");
    let cursor = page["next_cursor"].as_str().expect("a next page");
    let next = format!("/v1/objects?class=Counter&limit=2&cursor={cursor}");
    let (status, page) = server.get(&next).await;
    assert_eq!(status, 200);
    let ids = fields(&page["objects"], "id");
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
        (body["status"].clone(), body["version"].clone()),
        (json!("active"), Value::Null)
    );
    assert_eq!(body["state"], json!({"count": 0, "ratio": 0.0}));
    server.stop().await;
}

on_each_store!(objects_round_trip: objects_round_trip_in_memory, objects_round_trip_on_sqlite);

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

on_each_store!(alarms_round_trip: alarms_round_trip_in_memory, alarms_round_trip_on_sqlite);

/// The last error of the dead alarm `Other::doomed`.
const DOOMED_ERROR: &str = "the doomed alarm failed";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_alarm_is_requeued() {
    let settings = dead_after_one_attempt();
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
                // Why it died, in the object's alarms too.
                assert_eq!(body["alarms"][0]["last_error"], DOOMED_ERROR, "{body}");
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // Listed among the dead alarms.
    let (status, body) = server.get("/v1/alarms/dead?type=Other").await;
    assert_eq!(status, 200);
    let fire_at = body["alarms"][0]["fire_at"].clone();
    assert!(
        fire_at.as_str().is_some_and(|at| at.ends_with('Z')),
        "{body}"
    );
    assert_eq!(
        body,
        json!({"alarms": [
            {"type": "Other", "id": "o", "name": "doomed", "fire_at": fire_at, "attempts": 1,
             "last_error": DOOMED_ERROR},
        ], "next_cursor": null})
    );

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
    server.stop().await;
}

/// Leaves the alarm `name` of `(object_type, id)` dead in `storage` after `attempts`, as a
/// runtime whose every attempt failed would; the object is stored with `state` if it is not
/// already.
async fn dead_in_storage(
    storage: &dyn Storage,
    (object_type, id, name): (&str, &str, &str),
    state: Value,
    attempts: u32,
) {
    let key = ObjectKey::new(object_type, id);
    let version = storage
        .load(&key)
        .await
        .unwrap()
        .object()
        .map_or(0, |stored| stored.version);
    let due = UNIX_EPOCH + Duration::from_secs(1_000);
    let write = ObjectWrite {
        key: key.clone(),
        expected_version: version,
        state: (version == 0).then(|| serde_json::to_vec(&state).unwrap()),
        alarms: vec![AlarmChange::Set {
            name: name.to_owned(),
            due_at: due,
            payload: None,
        }],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    storage.commit(&[write]).await.unwrap();
    let lease = due + Duration::from_secs(60);
    let claimed = storage
        .claim_due_alarms(due, due, lease, 100)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "only this alarm is due");
    let failed = storage.fail_alarm(&key, name, due, attempts, "boom", None);
    assert!(failed.await.unwrap());
}

/// `(type, id, name)` of each alarm of a page of dead alarms.
fn dead_listed(page: &Value) -> Vec<(String, String, String)> {
    page["alarms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|alarm| {
            let text = |field: &str| alarm[field].as_str().unwrap().to_owned();
            (text("type"), text("id"), text("name"))
        })
        .collect()
}

/// Every item the listing at `first` (whose page size is `limit`) holds, as `items` reads
/// them from each page, following the cursors; each page but the last is full.
async fn all_pages<T>(
    server: &TestServer,
    first: &str,
    limit: usize,
    items: impl Fn(&Value) -> Vec<T>,
) -> Vec<T> {
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = first.to_owned();
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, page) = server.get(&path).await;
        assert_eq!(status, 200, "{path}: {page}");
        let page_items = items(&page);
        let next = page["next_cursor"].as_str().map(str::to_owned);
        if next.is_some() {
            assert_eq!(
                page_items.len(),
                limit,
                "{path}: a short page before the last"
            );
        }
        listed.extend(page_items);
        match next {
            Some(next) => cursor = Some(next),
            None => return listed,
        }
    }
}

/// Every dead alarm `query` lists, following the cursors a page of `limit` at a time; each
/// page but the last is full.
async fn all_dead(server: &TestServer, query: &str, limit: usize) -> Vec<(String, String, String)> {
    let first = format!("/v1/alarms/dead?limit={limit}{query}");
    all_pages(server, &first, limit, dead_listed).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_alarms_are_listed_by_type_a_page_at_a_time() {
    let storage = MemoryStorage::new();
    let counter = json!({"count": 0, "ratio": 0.0});
    let other = json!({"pings": 0});
    for (alarm, state) in [
        (("Other", "p", "doomed"), &other),
        (("Counter", "b", "reset"), &counter),
        (("Other", "o", "wake"), &other),
        (("Counter", "a", "reset"), &counter),
        (("Other", "o", "doomed"), &other),
        // A type this server does not expose: not listed.
        (("Hidden", "h", "tick"), &json!({})),
    ] {
        dead_in_storage(&storage, alarm, state.clone(), 5).await;
    }
    // A pending alarm is not dead.
    let pending = ObjectWrite {
        key: ObjectKey::new("Counter", "c"),
        expected_version: 0,
        state: Some(serde_json::to_vec(&counter).unwrap()),
        alarms: vec![AlarmChange::Set {
            name: "reset".into(),
            due_at: UNIX_EPOCH + Duration::from_secs(4_000_000_000),
            payload: None,
        }],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    storage.commit(&[pending]).await.unwrap();
    let runtime = builder(storage).manual_alarms().build();
    let server = TestServer::start(runtime, open_config()).await;

    let owned = |alarms: &[(&str, &str, &str)]| -> Vec<(String, String, String)> {
        alarms
            .iter()
            .map(|&(t, i, n)| (t.to_owned(), i.to_owned(), n.to_owned()))
            .collect()
    };
    let every = owned(&[
        ("Counter", "a", "reset"),
        ("Counter", "b", "reset"),
        ("Other", "o", "doomed"),
        ("Other", "o", "wake"),
        ("Other", "p", "doomed"),
    ]);
    // By type, id, then name, whatever the page size; the pages cross types.
    let (status, page) = server.get("/v1/alarms/dead").await;
    assert_eq!((status, page["next_cursor"].clone()), (200, Value::Null));
    assert_eq!(dead_listed(&page), every);
    assert_eq!(page["alarms"][0]["attempts"], 5);
    assert_eq!(page["alarms"][0]["fire_at"], "1970-01-01T00:16:40.000Z");
    for limit in [1, 2, 3] {
        assert_eq!(all_dead(&server, "", limit).await, every, "limit {limit}");
    }
    // One type's, paged too.
    let others = every[2..].to_vec();
    assert_eq!(all_dead(&server, "&type=Other", 100).await, others);
    assert_eq!(all_dead(&server, "&type=Other", 2).await, others);
    assert_eq!(all_dead(&server, "&type=Counter", 1).await, every[..2]);
    assert!(all_dead(&server, "&type=Gated", 1).await.is_empty());
    // The unversioned alias.
    let (status, page) = server.get("/alarms/dead?type=Counter&limit=1").await;
    assert_eq!(status, 200);
    assert_eq!(dead_listed(&page), every[..1]);

    // Re-queued, it is no longer dead, on the object and in the listing.
    let requeue = json!({"type": "Other", "id": "o", "name": "doomed"});
    let (status, body) = server.post("/v1/alarms/dead/requeue", &requeue).await;
    assert_eq!((status, body), (200, json!({"requeued": true})));
    let (status, body) = server.post("/v1/alarms/dead/requeue", &requeue).await;
    assert_eq!((status, body), (200, json!({"requeued": false})));
    let (_, alarms) = server.get("/v1/objects/Other/o/alarms").await;
    let doomed = alarms["alarms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|alarm| alarm["name"] == "doomed")
        .expect("the alarm is kept")
        .clone();
    assert_eq!(
        (&doomed["dead"], &doomed["attempts"]),
        (&json!(false), &json!(0))
    );
    let mut rest = every.clone();
    rest.remove(2);
    assert_eq!(all_dead(&server, "", 2).await, rest);
    // A pending alarm is not re-queued.
    let pending = json!({"type": "Counter", "id": "c", "name": "reset"});
    let (status, body) = server.post("/v1/alarms/dead/requeue", &pending).await;
    assert_eq!((status, body), (200, json!({"requeued": false})));
    server.stop().await;
}

/// The ids and statuses of a page of objects.
fn objects_listed(page: &Value) -> Vec<(String, String)> {
    page["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|object| {
            let text = |field: &str| object[field].as_str().unwrap().to_owned();
            (text("id"), text("status"))
        })
        .collect()
}

/// Every object `query` lists, following the cursors a page of `limit` at a time; each page
/// but the last is full.
async fn all_objects(server: &TestServer, query: &str, limit: usize) -> Vec<(String, String)> {
    let first = format!("/v1/objects?limit={limit}&{query}");
    all_pages(server, &first, limit, objects_listed).await
}

fn statuses(objects: &[(&str, &str)]) -> Vec<(String, String)> {
    objects
        .iter()
        .map(|&(id, status)| (id.to_owned(), status.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_listed_by_status_a_full_page_at_a_time() {
    let storage = MemoryStorage::new();
    let runtime = builder(storage.clone()).expose::<Sleepy>().build();
    let server = TestServer::start(runtime, open_config()).await;
    for id in ["c3", "c1", "c2", "c4"] {
        let path = format!("/v1/objects/Counter/{id}/call/increment");
        assert_eq!(server.post(&path, &json!({"by": 1})).await.0, 200);
    }
    for id in ["s2", "s1", "s3"] {
        let path = format!("/v1/objects/Sleepy/{id}/call/nap");
        assert_eq!(server.post(&path, &json!({})).await.0, 200);
    }
    // The sleepy ones hibernate soon after their call; the counters stay active.
    within("the objects hibernating", async {
        loop {
            let (_, page) = server
                .get("/v1/objects?type=Sleepy&status=hibernated")
                .await;
            if page["objects"].as_array().unwrap().len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let sleepy = statuses(&[
        ("s1", "hibernated"),
        ("s2", "hibernated"),
        ("s3", "hibernated"),
    ]);
    for limit in [1, 2, 3] {
        let listed = all_objects(&server, "type=Sleepy&status=hibernated", limit).await;
        assert_eq!(listed, sleepy, "limit {limit}");
    }
    assert!(
        all_objects(&server, "type=Sleepy&status=active", 2)
            .await
            .is_empty()
    );
    assert_eq!(all_objects(&server, "class=Sleepy", 2).await, sleepy);
    let (_, page) = server
        .get("/v1/objects?type=Sleepy&status=hibernated&limit=2")
        .await;
    assert_eq!(page["objects"][0]["type"], "Sleepy");
    assert_eq!(page["next_cursor"], "s2");

    let counters = statuses(&[
        ("c1", "active"),
        ("c2", "active"),
        ("c3", "active"),
        ("c4", "active"),
    ]);
    for limit in [1, 3, 4, 100] {
        let listed = all_objects(&server, "type=Counter&status=active", limit).await;
        assert_eq!(listed, counters, "limit {limit}");
    }
    assert!(
        all_objects(&server, "type=Counter&status=hibernated", 2)
            .await
            .is_empty()
    );
    // Only stored: none here, every object being live.
    assert!(
        all_objects(&server, "type=Counter&status=stored", 2)
            .await
            .is_empty()
    );
    assert_eq!(all_objects(&server, "type=Counter", 3).await, counters);

    // Another runtime on the same storage has none live: all are only stored there, until a
    // call makes one live; the stored-only pages are full all the same.
    let other = TestServer::start(builder(storage).build(), open_config()).await;
    assert!(
        all_objects(&other, "type=Counter&status=active", 2)
            .await
            .is_empty()
    );
    let stored = statuses(&[
        ("c1", "stored"),
        ("c2", "stored"),
        ("c3", "stored"),
        ("c4", "stored"),
    ]);
    assert_eq!(
        all_objects(&other, "type=Counter&status=stored", 3).await,
        stored
    );
    for id in ["c1", "c3"] {
        let path = format!("/v1/objects/Counter/{id}/call/get");
        assert_eq!(other.post(&path, &json!({})).await.0, 200);
    }
    for limit in [1, 2, 3] {
        let listed = all_objects(&other, "type=Counter&status=stored", limit).await;
        assert_eq!(
            listed,
            statuses(&[("c2", "stored"), ("c4", "stored")]),
            "{limit}"
        );
    }
    let (_, page) = other
        .get("/v1/objects?type=Counter&status=stored&limit=1")
        .await;
    assert_eq!(objects_listed(&page), statuses(&[("c2", "stored")]));
    assert_eq!(page["next_cursor"], "c2");
    let mixed = statuses(&[
        ("c1", "active"),
        ("c2", "stored"),
        ("c3", "active"),
        ("c4", "stored"),
    ]);
    assert_eq!(all_objects(&other, "type=Counter", 3).await, mixed);
    assert_eq!(
        all_objects(&other, "type=Counter&status=active", 1).await,
        statuses(&[("c1", "active"), ("c3", "active")])
    );
    other.stop().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_health_metrics_and_aliases() {
    let server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let (status, types) = server.get("/v1/types").await;
    assert_eq!(status, 200);
    let names = fields(&types["types"], "name");
    assert_eq!(names, ["Counter", "Gated", "Other"]);
    let counter = &types["types"][0];
    assert_eq!(
        counter["handlers"][0],
        json!({"name": "increment", "access": "write", "arguments": ["by"],
            "argument_types": ["i64"], "output": "i64", "error": null, "doc": null})
    );
    assert_eq!(
        counter["handlers"][1],
        json!({"name": "get", "access": "read", "arguments": [], "argument_types": [],
            "output": "i64", "error": null, "doc": null})
    );
    assert_eq!(counter["alarms"], json!(["reset"]));
    // The state's fields, described by the runtime.
    assert_eq!(
        counter["fields"],
        json!([
            {"name": "count", "type": "i64", "default": 0},
            {"name": "ratio", "type": "f64", "default": 0.0},
        ])
    );
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

    // The unversioned aliases of the specification.
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
        "/v1/objects/{type}/{id}/stop",
        "/v1/objects/{type}/{id}/reload",
        "/v1/objects/{type}/{id}/state",
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
                "200", "400", "401", "403", "404", "429", "500", "503", "504",
            ] {
                assert!(
                    operation["responses"][status].is_object(),
                    "{path}: no {status}"
                );
            }
            // `422` is the handler's own error: only a handler that can fail answers it.
            let schemas = (handler.schemas)().expect("the gateway enables the schemas");
            assert_eq!(
                operation["responses"]["422"].is_object(),
                schemas.error.is_some(),
                "{path}"
            );
            let result = &operation["responses"]["200"]["content"]["application/json"]["schema"];
            assert_eq!(result["required"], json!(["result"]), "{path}");
        }
    }

    // The handlers' JSON schemas: the arguments, the output as `result`, the error as the
    // `details` of `handler_error`.
    let schema = |path: &str, at: &[&str]| {
        let operation = &paths[&format!("/v1/objects/Counter/{{id}}/call/{path}")]["post"];
        at.iter()
            .fold(operation.clone(), |value, key| value[*key].clone())
    };
    let body = ["requestBody", "content", "application/json", "schema"];
    let increment = schema("increment", &body);
    assert_eq!(increment["type"], "object");
    assert_eq!(increment["required"], json!(["by"]));
    assert_eq!(increment["properties"]["by"]["type"], "integer");
    assert_eq!(increment.get("$schema"), None);
    let ok = ["responses", "200", "content", "application/json", "schema"];
    assert_eq!(
        schema("increment", &ok)["properties"]["result"]["type"],
        "integer"
    );
    let failed = ["responses", "422", "content", "application/json", "schema"];
    let error = schema("add_checked", &failed)["properties"]["error"].clone();
    assert_eq!(error["properties"]["code"]["const"], "handler_error");
    let details = error["properties"]["details"].to_string();
    assert!(
        details.contains("TooBig") && details.contains("wanted"),
        "{details}"
    );
    assert!(schema("get", &["responses", "422"]).is_null());
    // A named type moves to the components, under a name of its handler's, and the
    // references follow it.
    let components = &document["components"]["schemas"];
    let span = schema("span", &body);
    assert_eq!(
        span["properties"]["around"]["$ref"],
        "#/components/schemas/Counter_span_arguments_Span"
    );
    assert_eq!(span.get("$defs"), None);
    assert_eq!(
        components["Counter_span_arguments_Span"]["required"],
        json!(["low", "high"])
    );
    let output = schema("span", &ok)["properties"]["result"].to_string();
    assert!(
        output.contains("#/components/schemas/Counter_span_output_Span"),
        "{output}"
    );
    assert!(components["Counter_span_output_Span"].is_object());
    assert!(!document.to_string().contains("#/$defs/"));
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

/// A call of `Gated::hold` on `id`, held at the gate `name` by the time this returns: the gate
/// and the task that answers the call.
async fn held_call(
    server: &TestServer,
    id: &str,
    name: &str,
) -> (Arc<Gate>, JoinHandle<reqwest::Result<reqwest::Response>>) {
    let held = gate(name);
    let call = server
        .request(
            Method::POST,
            &format!("/v1/objects/Gated/{id}/call/hold"),
            None,
        )
        .json(&json!({"gate": name}))
        .send();
    let call = tokio::spawn(call);
    held.reached(1).await;
    (held, call)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_lets_the_call_in_flight_finish() {
    let mut server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let runtime = server.runtime.clone();
    let (held, call) = held_call(&server, "g", "shutdown-in-flight").await;

    server.begin_stop();
    // The server drains: new calls are refused, retryably and with nothing applied, on
    // connections it still accepts...
    let fresh = || reqwest::Client::builder().build().unwrap();
    within("the drain beginning", async {
        loop {
            let readyz = fresh().get(server.url("/readyz")).send().await;
            let readyz = readyz.expect("the listener stays open while draining");
            if readyz.status() == 503 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let refused = fresh()
        .post(server.url("/v1/objects/Counter/c/call/increment"))
        .json(&json!({"by": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["connection"], "close");
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(code(&body), "shutting_down");
    assert_eq!(body["error"]["retryable"], true);
    // ...probes are still answered...
    let healthz = fresh().get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), 200);
    // ...and the call in flight finishes, and is answered.
    held.release(1);
    let response = within("the call in flight", call).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["connection"], "close");
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"result": 1})
    );
    server.stopped().await.expect("a clean stop");
    // Then the listener is closed.
    let closed = fresh()
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap_err();
    assert!(closed.is_connect(), "{closed}");

    // The runtime was shut down after the call was committed; the refused calls applied
    // nothing.
    assert!(matches!(
        Gated::passed(&runtime, "g").await,
        Err(Error::ShuttingDown)
    ));
    let stored = runtime.read_state_json("Gated", "g").await.unwrap();
    assert_eq!(stored, Some(json!({"passed": 1})));
    assert_eq!(runtime.read_state_json("Counter", "c").await.unwrap(), None);
}

/// One HTTP/1.1 exchange on an open connection: the status, the headers (names in lower
/// case) and the body (the gateway's answers carry a `Content-Length`).
async fn exchange(
    stream: &mut tokio::net::TcpStream,
    request: &str,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let head_end = loop {
        if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0; 4096];
        let read = within("an answer", stream.read(&mut chunk)).await.unwrap();
        assert!(read > 0, "the connection closed without an answer");
        received.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8(received[..head_end].to_vec()).unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map_or(0, |(_, value)| value.parse().unwrap());
    let mut body = received[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0; 4096];
        let read = within("a body", stream.read(&mut chunk)).await.unwrap();
        assert!(read > 0, "the connection closed inside a body");
        body.extend_from_slice(&chunk[..read]);
    }
    (status, headers, body)
}

/// A connection kept alive from before the shutdown, reused while the server drains: its
/// request gets a definite answer, `503 shutting_down` with `Connection: close` (never a
/// connection closed under the request, which would leave the client not knowing whether
/// it ran), then the server closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_gets_an_answer_while_the_server_drains() {
    use tokio::io::AsyncReadExt;
    let mut server = TestServer::start(builder(MemoryStorage::new()).build(), open_config()).await;
    let runtime = server.runtime.clone();
    let address = server.url("").trim_start_matches("http://").to_owned();
    let increment = format!(
        "POST /v1/objects/Counter/k/call/increment HTTP/1.1\r\nHost: {address}\r\n\
         Content-Type: application/json\r\nContent-Length: 8\r\n\r\n{{\"by\":1}}"
    );
    let mut kept = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (status, headers, body) = exchange(&mut kept, &increment).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(!headers.iter().any(|(name, _)| name == "connection"));
    // A call in flight keeps the server draining while the kept connection is reused.
    let (held, call) = held_call(&server, "k", "drain-kept-alive").await;

    server.begin_stop();
    within("the drain beginning", async {
        while server.get("/readyz").await.0 != 503 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let (status, headers, body) = exchange(&mut kept, &increment).await;
    assert_eq!(status, 503);
    assert!(headers.contains(&("connection".to_owned(), "close".to_owned())));
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(code(&body), "shutting_down");
    let mut rest = [0; 64];
    let read = within("the server closing the connection", kept.read(&mut rest))
        .await
        .unwrap();
    assert_eq!(read, 0, "the server closes the connection after its answer");

    held.release(1);
    assert_eq!(
        within("the held call", call)
            .await
            .unwrap()
            .unwrap()
            .status(),
        200
    );
    server.stopped().await.expect("a clean stop");
    // Only the increment acknowledged before the drain was applied.
    let stored = runtime
        .read_state_json("Counter", "k")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored["count"], 1);
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
    let (held, call) = held_call(&server, "late", "grace-bound").await;

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

/// An operator stops an object, reloads it after a change made in the database by hand, and
/// replaces its state with a version check; each is an admin operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_stopped_reloaded_and_replaced() {
    let storage = MemoryStorage::new();
    let server = TestServer::start(builder(storage.clone()).build(), principals_config("")).await;
    let admin = common::token("admin");
    let as_admin = |method: Method, path: &str| server.request(method, path, Some(&admin));
    let call =
        as_admin(Method::POST, "/v1/objects/Counter/a/call/increment").json(&json!({"by": 2}));
    assert_eq!(server.send(call).await, (200, json!({"result": 2})));

    // Stopped: it leaves memory; a second stop finds nothing live.
    let stop = || as_admin(Method::POST, "/v1/objects/Counter/a/stop");
    assert_eq!(server.send(stop()).await, (200, json!({"stopped": true})));
    assert_eq!(server.runtime.live_objects::<Counter>(), 0);
    assert_eq!(server.send(stop()).await, (200, json!({"stopped": false})));

    // Live again, then changed by hand: a reload makes the next call read storage.
    let call =
        as_admin(Method::POST, "/v1/objects/Counter/a/call/increment").json(&json!({"by": 1}));
    assert_eq!(server.send(call).await, (200, json!({"result": 3})));
    let by_hand = ObjectWrite {
        key: ObjectKey::new("Counter", "a"),
        expected_version: 2,
        state: Some(br#"{"count":40}"#.to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    storage.commit(&[by_hand]).await.unwrap();
    let reload = as_admin(Method::POST, "/v1/objects/Counter/a/reload");
    assert_eq!(server.send(reload).await, (200, json!({"reloaded": true})));
    let get = as_admin(Method::POST, "/v1/objects/Counter/a/call/get");
    assert_eq!(server.send(get).await, (200, json!({"result": 40})));

    // Replaced at the stored version; refused at another.
    let replace = |expected: u64| {
        as_admin(Method::PUT, "/v1/objects/Counter/a/state")
            .json(&json!({"state": {"count": 7}, "expected_version": expected}))
    };
    assert_eq!(server.send(replace(3)).await, (200, json!({"version": 4})));
    let (status, refused) = server.send(replace(3)).await;
    assert_eq!((status, code(&refused)), (409, "conflict"));
    let get = as_admin(Method::POST, "/v1/objects/Counter/a/call/get");
    assert_eq!(server.send(get).await, (200, json!({"result": 7})));
    let bad = as_admin(Method::PUT, "/v1/objects/Counter/a/state").json(&json!({"state": {}}));
    assert_eq!(server.send(bad).await.0, 400);

    // Not for a caller without the admin operation.
    let other = common::token("counter-get");
    let stop = server.request(Method::POST, "/v1/objects/Counter/a/stop", Some(&other));
    assert_eq!(server.send(stop).await.0, 403);
}
