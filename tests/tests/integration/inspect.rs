//! Reading a database directly, without the Rust types, on every storage backend: a
//! `StoreInspector` lists the types, ids, states and alarms runtimes committed, and its direct
//! alarm writes beside a live runtime lose nothing (the runtime's next write of that object
//! conflicts and reloads).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use durable_runtime::inspect::{InspectError, StoreInspector};
use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
use durable_runtime::{AlarmSettings, Context, Error, Runtime, durable_object};
use durable_tests::{backend_tests, eventually};
use serde_json::json;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_add(&mut self, ctx: &Context, by: i64) -> i64 {
        self.count += by;
        ctx.schedule_alarm(Counter::FLUSH, Duration::from_secs(3600));
        self.count
    }

    #[alarm]
    fn flush(&mut self) {}
}

#[durable_object(name = "shop.Cart")]
pub struct Cart {
    items: Vec<String>,
}

#[durable_object]
impl Cart {
    #[handler]
    fn handle_put(&mut self, item: String) -> usize {
        self.items.push(item);
        self.items.len()
    }

    #[alarm]
    fn remind(&mut self) {}
}

async fn reads_what_runtimes_committed(store: Arc<dyn Storage>) {
    let rt = Runtime::new(Arc::clone(&store));
    for id in ["c", "a", "b"] {
        Counter::add(&rt, id, 2).await.unwrap();
    }
    Counter::add(&rt, "a", 3).await.unwrap();
    Cart::put(&rt, "u/1", "book".to_owned()).await.unwrap();
    Cart::put(&rt, "gone", "pen".to_owned()).await.unwrap();
    rt.delete::<Cart>("gone").await.unwrap();

    let inspector = StoreInspector::new(Arc::clone(&store));
    assert_eq!(
        inspector.list_types().await.unwrap(),
        ["Counter", "shop.Cart"]
    );
    let page = inspector.list_ids("Counter", None, 2).await.unwrap();
    assert_eq!(page.ids, ["a", "b"]);
    let rest = inspector
        .list_ids("Counter", page.next.as_deref(), 2)
        .await
        .unwrap();
    assert_eq!((rest.ids, rest.next), (vec!["c".to_owned()], None));
    assert_eq!(
        inspector.list_ids("shop.Cart", None, 0).await.unwrap().ids,
        ["u/1"]
    );

    let a = inspector.read_state("Counter", "a").await.unwrap().unwrap();
    assert_eq!((a.state, a.version), (json!({"count": 5}), 2));
    let cart = inspector
        .read_state("shop.Cart", "u/1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cart.state, json!({"items": ["book"]}));
    assert_eq!(
        inspector.read_state("shop.Cart", "gone").await.unwrap(),
        None
    );
    let alarms = inspector.list_alarms("Counter", "a").await.unwrap();
    let names: Vec<_> = alarms.iter().map(|alarm| alarm.name.as_str()).collect();
    assert_eq!(names, ["flush"]);
    let dead = inspector.list_dead_alarms(None, None, 10).await.unwrap();
    assert!(dead.alarms.is_empty() && dead.next_cursor.is_none());

    // What a runtime did not write: refused with a typed error, not a panic.
    let key = ObjectKey::new("Foreign", "x");
    let write = ObjectWrite {
        key: key.clone(),
        expected_version: 0,
        state: Some(b"not json".to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    store.commit(&[write]).await.unwrap();
    let err = inspector.read_state("Foreign", "x").await.unwrap_err();
    assert!(
        matches!(&err, InspectError::NotJson { key: k, .. } if *k == key),
        "{err}"
    );
    let err = inspector.list_alarms("Counter", "").await.unwrap_err();
    assert!(matches!(err, InspectError::InvalidId(_)), "{err}");
    let err = inspector
        .list_dead_alarms(None, Some("!"), 10)
        .await
        .unwrap_err();
    assert!(matches!(err, InspectError::InvalidCursor(_)), "{err}");
    rt.shutdown().await;
}

async fn direct_alarm_writes_lose_nothing_beside_a_runtime(store: Arc<dyn Storage>) {
    // A runtime learns of alarms written by others when it polls storage.
    let polling = AlarmSettings::default().with_poll_interval(Duration::from_millis(50));
    let rt = Runtime::builder(Arc::clone(&store))
        .alarm_settings(polling)
        .build();
    assert_eq!(Counter::add(&rt, "a", 1).await.unwrap(), 1);
    let inspector = StoreInspector::new(Arc::clone(&store));

    // Cancelled behind the live object's back: its next write conflicts (retryable, nothing
    // written) and the one after runs on the reloaded state.
    assert!(
        inspector
            .cancel_alarm("Counter", "a", "flush")
            .await
            .unwrap()
    );
    assert!(
        !inspector
            .cancel_alarm("Counter", "a", "flush")
            .await
            .unwrap()
    );
    assert!(
        inspector
            .list_alarms("Counter", "a")
            .await
            .unwrap()
            .is_empty()
    );
    let err = Counter::add(&rt, "a", 1).await.unwrap_err();
    assert!(
        matches!(err, Error::Conflict { .. }) && err.is_retryable(),
        "{err}"
    );
    assert_eq!(Counter::add(&rt, "a", 1).await.unwrap(), 2);
    let stored = inspector.read_state("Counter", "a").await.unwrap().unwrap();
    assert_eq!((stored.state, stored.version), (json!({"count": 2}), 3));
    assert!(
        !inspector
            .cancel_alarm("Counter", "none", "flush")
            .await
            .unwrap()
    );

    // A dead alarm re-queued directly fires in the runtime serving the database. It is due
    // in half an hour (before the counter's `flush`, due in an hour) and leased past that, so
    // that the runtime's scheduler, polling the same store, cannot claim it before it is
    // failed here.
    let key = ObjectKey::new("shop.Cart", "c1");
    let in_half_an_hour =
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_secs(1_800);
    let due = UNIX_EPOCH + Duration::from_secs(in_half_an_hour.as_secs());
    let write = ObjectWrite {
        key: key.clone(),
        expected_version: 0,
        state: Some(br#"{"items":[]}"#.to_vec()),
        alarms: vec![AlarmChange::Set {
            name: "remind".to_owned(),
            due_at: due,
            payload: None,
        }],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    store.commit(&[write]).await.unwrap();
    let lease = due + Duration::from_secs(60);
    let claimed = store.claim_due_alarms(due, due, lease, 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(
        store
            .fail_alarm(&key, "remind", due, 10, "boom", None)
            .await
            .unwrap()
    );
    let dead = inspector
        .list_dead_alarms(Some("shop.Cart"), None, 10)
        .await
        .unwrap();
    assert_eq!(dead.alarms.len(), 1);
    assert!(
        !inspector
            .requeue_dead_alarm("shop.Cart", "c1", "other")
            .await
            .unwrap()
    );
    assert!(
        inspector
            .requeue_dead_alarm("shop.Cart", "c1", "remind")
            .await
            .unwrap()
    );
    assert!(
        !inspector
            .requeue_dead_alarm("shop.Cart", "c1", "remind")
            .await
            .unwrap()
    );
    // The runtime's scheduler (started by a call) finds it at its next poll and fires it.
    Cart::put(&rt, "c2", "cup".to_owned()).await.unwrap();
    eventually(|| async {
        inspector
            .list_alarms("shop.Cart", "c1")
            .await
            .unwrap()
            .is_empty()
    })
    .await;
    assert!(
        inspector
            .list_dead_alarms(None, None, 10)
            .await
            .unwrap()
            .alarms
            .is_empty()
    );
    rt.shutdown().await;
}

backend_tests!(
    reads_what_runtimes_committed,
    direct_alarm_writes_lose_nothing_beside_a_runtime,
);
