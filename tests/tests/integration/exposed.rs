//! Handlers callable by name, on every storage backend: a call by name has the semantics of
//! the typed call (same result, state committed before the reply, the read path), the
//! handler's own error comes back as JSON, arguments that do not fit are refused naming the
//! field, only exposed types and handlers are reachable, objects of an exposed type are
//! inspected and deleted by its name, its live objects are listed by status and seen whole,
//! and the dead alarms of exposed types are listed across objects and re-queued.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
use durable_runtime::{
    Access, AlarmSettings, CallByNameError, Context, DeadAlarmPage, Error, LiveStatus,
    ObjectStatus, RetryPolicy, Runtime, durable_object,
};
use durable_tests::{backend_tests, eventually};
use serde::Serialize;
use serde_json::json;

#[durable_object(queue_capacity = 16)]
pub struct Account {
    balance: u64,
    owner: String,
}

/// The handler's own error, sent to callers by name as JSON.
#[derive(Debug, Serialize, PartialEq)]
pub enum AccountError {
    Insufficient { balance: u64, wanted: u64 },
}

#[durable_object(expose)]
impl Account {
    #[handler]
    fn handle_deposit(&mut self, amount: u64, note: Option<String>) -> u64 {
        self.balance += amount;
        if let Some(note) = note {
            self.owner = note;
        }
        self.balance
    }

    #[handler]
    fn handle_withdraw(&mut self, amount: u64) -> Result<u64, AccountError> {
        if amount > self.balance {
            return Err(AccountError::Insufficient {
                balance: self.balance,
                wanted: amount,
            });
        }
        self.balance -= amount;
        Ok(self.balance)
    }

    #[handler]
    async fn handle_balance(&self) -> u64 {
        self.balance
    }

    #[handler]
    fn handle_reset(&mut self) {
        self.balance = 0;
    }

    /// Callable from Rust only; its error need not be `Serialize`.
    #[handler(internal)]
    fn handle_close(&mut self) -> Result<(), std::io::Error> {
        self.balance = 0;
        Ok(())
    }

    #[alarm]
    fn audit(&mut self) {}
}

/// Registered, but not exposed.
#[durable_object]
pub struct Hidden {
    n: u32,
}

#[durable_object]
impl Hidden {
    #[handler]
    fn handle_bump(&mut self) -> u32 {
        self.n += 1;
        self.n
    }
}

/// Hibernates soon after its last call.
#[durable_object(hibernate_after = "2s")]
pub struct Note {
    text: String,
}

#[durable_object(expose)]
impl Note {
    #[handler]
    fn handle_write(&mut self, text: String) {
        self.text = text;
    }

    #[handler]
    fn handle_read(&self) -> String {
        self.text.clone()
    }

    #[alarm]
    fn remind(&mut self) {}
}

/// Its alarm fails until it is fixed.
#[durable_object]
pub struct Mailer {
    #[field(default = true)]
    broken: bool,
    sent: u32,
}

#[durable_object(expose)]
impl Mailer {
    #[handler]
    fn handle_queue(&mut self, ctx: &Context) {
        ctx.schedule_alarm(Mailer::SEND, Duration::ZERO);
    }

    #[handler]
    fn handle_fix(&mut self) {
        self.broken = false;
    }

    #[handler]
    fn handle_sent(&self) -> u32 {
        self.sent
    }

    #[alarm]
    fn send(&mut self) -> Result<(), String> {
        if self.broken {
            return Err("SMTP refused".to_owned());
        }
        self.sent += 1;
        Ok(())
    }
}

fn runtime(store: &Arc<dyn Storage>) -> Runtime {
    Runtime::builder(Arc::clone(store))
        .expose::<Account>()
        .register::<Hidden>()
        .build()
}

async fn stored_balance(store: &Arc<dyn Storage>, id: &str) -> serde_json::Value {
    let loaded = store
        .load(&ObjectKey::new("Account", id))
        .await
        .expect("load");
    let stored = loaded.object().expect("the object is stored");
    serde_json::from_slice::<serde_json::Value>(&stored.state).expect("JSON state")["balance"]
        .clone()
}

async fn same_result_as_typed_call_and_committed_before_reply(store: Arc<dyn Storage>) {
    let rt = runtime(&store);
    let reply = rt
        .call_by_name(
            "Account",
            "a",
            "deposit",
            json!({"amount": 5, "note": "ann"}),
        )
        .await
        .unwrap();
    assert_eq!(reply, json!(5));
    // Committed before the reply: storage already holds it.
    assert_eq!(stored_balance(&store, "a").await, json!(5));
    // Typed and by-name calls reach the same object, one after the other.
    assert_eq!(Account::deposit(&rt, "a", 2, None).await.unwrap(), 7);
    let reply = rt
        .call_by_name("Account", "a", "deposit", json!({"amount": 1}))
        .await
        .unwrap();
    assert_eq!(reply, json!(8), "an `Option` argument may be left out");
    // The read path (an async `&self` handler) and a unit output.
    let text = rt.call_by_name_json("Account", "a", "deposit", br#"{"amount": 2}"#);
    assert_eq!(text.await.unwrap(), json!(10));
    let read = rt.call_by_name("Account", "a", "balance", json!({})).await;
    assert_eq!(read.unwrap(), json!(10));
    let unit = rt.call_by_name("Account", "a", "reset", serde_json::Value::Null);
    assert_eq!(unit.await.unwrap(), json!(null));
    assert_eq!(Account::balance(&rt, "a").await.unwrap(), 0);
    assert_eq!(
        rt.read_state_json("Account", "a").await.unwrap(),
        Some(json!({"balance": 0, "owner": "ann"}))
    );
    rt.shutdown().await;
}

async fn handler_error_comes_back_as_json_and_rolls_back(store: Arc<dyn Storage>) {
    let rt = runtime(&store);
    Account::deposit(&rt, "b", 3, None).await.unwrap();
    let err = rt
        .call_by_name("Account", "b", "withdraw", json!({"amount": 10}))
        .await
        .unwrap_err();
    match err {
        CallByNameError::Handler { handler, error } => {
            assert_eq!(handler, "withdraw");
            assert_eq!(error, json!({"Insufficient": {"balance": 3, "wanted": 10}}));
        }
        other => panic!("expected the handler's error, got {other:?}"),
    }
    let ok = rt.call_by_name("Account", "b", "withdraw", json!({"amount": 1}));
    assert_eq!(ok.await.unwrap(), json!(2));
    assert_eq!(stored_balance(&store, "b").await, json!(2));
    rt.shutdown().await;
}

async fn bad_arguments_name_the_field(store: Arc<dyn Storage>) {
    let rt = runtime(&store);
    let bad = |args| rt.call_by_name("Account", "c", "deposit", args);
    let message = |err: CallByNameError| match err {
        CallByNameError::BadArguments {
            handler,
            path,
            message,
        } => {
            assert_eq!(handler, "deposit");
            (path, message)
        }
        other => panic!("expected bad arguments, got {other:?}"),
    };
    let (_, unknown) = message(bad(json!({"amount": 1, "amonut": 2})).await.unwrap_err());
    assert!(unknown.contains("unknown field `amonut`"), "{unknown}");
    let (_, missing) = message(bad(json!({"note": "x"})).await.unwrap_err());
    assert!(missing.contains("missing field `amount`"), "{missing}");
    let (path, wrong) = message(bad(json!({"amount": "five"})).await.unwrap_err());
    assert_eq!(path, "amount");
    assert!(wrong.contains("invalid type"), "{wrong}");
    let (_, not_object) = message(bad(json!([1])).await.unwrap_err());
    assert!(!not_object.is_empty());
    let text = rt.call_by_name_json("Account", "c", "deposit", b"{\"amount\": ");
    let (path, not_json) = message(text.await.unwrap_err());
    assert_eq!(path, ".");
    assert!(not_json.contains("EOF"), "{not_json}");
    // Nothing was created by the refused calls.
    assert_eq!(rt.read_state_json("Account", "c").await.unwrap(), None);
    rt.shutdown().await;
}

async fn arguments_that_are_not_an_object_are_refused(store: Arc<dyn Storage>) {
    let rt = runtime(&store);
    // Each would fit the handler's arguments by position: `[amount, note]`.
    for args in [
        json!([5, null]),
        json!([5, "note"]),
        json!(5),
        json!("5"),
        json!(true),
    ] {
        let err = rt
            .call_by_name("Account", "d", "deposit", args.clone())
            .await
            .unwrap_err();
        match err {
            CallByNameError::BadArguments {
                handler,
                path,
                message,
            } => {
                assert_eq!((handler, path.as_str()), ("deposit", "."), "{args}");
                assert!(
                    message.contains("must be a JSON object"),
                    "{args}: {message}"
                );
            }
            other => panic!("{args}: expected bad arguments, got {other:?}"),
        }
    }
    let text = rt.call_by_name_json("Account", "d", "deposit", b"[5, null]");
    assert!(matches!(
        text.await,
        Err(CallByNameError::BadArguments { .. })
    ));
    // A handler without arguments takes `{}` or `null`, not an empty array.
    let empty = rt.call_by_name("Account", "d", "reset", json!([]));
    assert!(matches!(
        empty.await,
        Err(CallByNameError::BadArguments { .. })
    ));
    // Nothing was created by the refused calls.
    assert_eq!(rt.read_state_json("Account", "d").await.unwrap(), None);
    let reset = rt.call_by_name("Account", "d", "reset", serde_json::Value::Null);
    assert_eq!(reset.await.unwrap(), serde_json::Value::Null);
    let deposit = rt.call_by_name("Account", "d", "deposit", json!({"amount": 5}));
    assert_eq!(deposit.await.unwrap(), json!(5));
    rt.shutdown().await;
}

async fn only_exposed_types_and_handlers_are_reachable(store: Arc<dyn Storage>) {
    let rt = runtime(&store);
    Hidden::bump(&rt, "h").await.unwrap();
    let err = rt.call_by_name("Hidden", "h", "bump", json!({})).await;
    assert!(
        matches!(&err, Err(CallByNameError::UnknownType { type_name }) if type_name == "Hidden"),
        "{err:?}"
    );
    assert!(matches!(
        rt.read_state_json("Hidden", "h").await,
        Err(CallByNameError::UnknownType { .. })
    ));
    let err = rt.call_by_name("Account", "a", "audit", json!({})).await;
    assert!(
        matches!(&err, Err(CallByNameError::UnknownHandler { handler, .. }) if handler == "audit"),
        "{err:?}"
    );
    let err = rt.call_by_name("Account", "a", "close", json!({})).await;
    assert!(
        matches!(&err, Err(CallByNameError::UnknownHandler { handler, .. }) if handler == "close"),
        "an internal handler is not callable by name: {err:?}"
    );
    Account::close(&rt, "a").await.unwrap();
    let err = rt.call_by_name("Account", "", "balance", json!({})).await;
    assert!(
        matches!(err, Err(CallByNameError::Runtime(Error::InvalidId(_)))),
        "{err:?}"
    );

    let types = rt.exposed_types();
    assert_eq!(types.len(), 1, "only `Account` is exposed");
    let account = &types[0];
    assert_eq!(account.name, "Account");
    assert_eq!(account.alarms, &["audit"]);
    assert_eq!(account.options.queue_capacity, Some(16));
    let table: Vec<_> = account
        .handlers
        .iter()
        .map(|h| (h.name, h.access, h.arguments.to_vec()))
        .collect();
    assert_eq!(
        table,
        vec![
            ("deposit", Access::Write, vec!["amount", "note"]),
            ("withdraw", Access::Write, vec!["amount"]),
            ("balance", Access::Read, vec![]),
            ("reset", Access::Write, vec![]),
        ]
    );
    rt.shutdown().await;
}

async fn objects_are_inspected_and_deleted_by_type_name(store: Arc<dyn Storage>) {
    let rt = runtime(&store);
    assert_eq!(
        rt.status_by_name("Account", "d1").await.unwrap(),
        ObjectStatus::Absent
    );
    for id in ["d2", "d1", "d3"] {
        let args = json!({"amount": 1});
        rt.call_by_name("Account", id, "deposit", args)
            .await
            .unwrap();
    }
    assert_eq!(
        rt.status_by_name("Account", "d1").await.unwrap(),
        ObjectStatus::Active
    );
    let page = rt.list_ids_by_name("Account", None, 2).await.unwrap();
    assert_eq!(page.ids, ["d1", "d2"]);
    let rest = rt.list_ids_by_name("Account", page.next.as_deref(), 2);
    assert_eq!(rest.await.unwrap().ids, ["d3"]);

    let in_an_hour = Duration::from_secs(3600);
    let scheduled = rt.schedule_alarm_by_name("Account", "d2", "audit", in_an_hour);
    scheduled.await.unwrap();
    let alarms = rt.list_alarms::<Account>("d2").await.unwrap();
    let names: Vec<_> = alarms.iter().map(|alarm| alarm.name.as_str()).collect();
    assert_eq!(names, ["audit"]);
    rt.cancel_alarm_by_name("Account", "d2", "audit")
        .await
        .unwrap();
    assert!(
        rt.list_alarms_by_name("Account", "d2")
            .await
            .unwrap()
            .is_empty()
    );
    let unknown = rt.schedule_alarm_by_name("Account", "d2", "deposit", in_an_hour);
    assert!(
        matches!(&unknown.await, Err(CallByNameError::UnknownAlarm { alarm, .. }) if alarm == "deposit")
    );

    rt.schedule_alarm("d1", Account::AUDIT, in_an_hour)
        .await
        .unwrap();
    let alarms = rt.list_alarms_by_name("Account", "d1").await.unwrap();
    let names: Vec<_> = alarms.iter().map(|alarm| alarm.name.as_str()).collect();
    assert_eq!(names, ["audit"]);

    assert!(rt.delete_by_name("Account", "d1").await.unwrap());
    assert_eq!(rt.read_state_json("Account", "d1").await.unwrap(), None);
    assert!(
        rt.list_alarms_by_name("Account", "d1")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        rt.list_ids_by_name("Account", None, 10).await.unwrap().ids,
        ["d2", "d3"]
    );
    // Typed and by-name deletion agree: the next call starts from the default state.
    assert_eq!(Account::balance(&rt, "d1").await.unwrap(), 0);

    Hidden::bump(&rt, "h").await.unwrap();
    for err in [
        rt.status_by_name("Hidden", "h").await.map(drop),
        rt.delete_by_name("Hidden", "h").await.map(drop),
        rt.list_ids_by_name("Hidden", None, 10).await.map(drop),
        rt.list_alarms_by_name("Hidden", "h").await.map(drop),
    ] {
        assert!(
            matches!(err, Err(CallByNameError::UnknownType { .. })),
            "{err:?}"
        );
    }
    assert_eq!(Hidden::bump(&rt, "h").await.unwrap(), 2, "not deleted");
    rt.shutdown().await;
}

async fn calls_by_name_and_typed_calls_interleave_one_at_a_time(store: Arc<dyn Storage>) {
    // Rounds of concurrent calls, fewer than the queue's 16 places at a time.
    const ROUNDS: u64 = 10;
    const EACH: u64 = 4;
    let rt = runtime(&store);
    let mut replies = Vec::new();
    for _ in 0..ROUNDS {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..EACH {
            let by_name = rt.clone();
            calls.spawn(async move {
                let args = json!({"amount": 1});
                let reply = by_name.call_by_name("Account", "shared", "deposit", args);
                reply.await.unwrap().as_u64().unwrap()
            });
            let typed = rt.clone();
            calls.spawn(async move { Account::deposit(&typed, "shared", 1, None).await.unwrap() });
        }
        replies.extend(calls.join_all().await);
    }
    replies.sort_unstable();
    // One call at a time: every reply saw a distinct balance, the last one all of them.
    let total = ROUNDS * EACH * 2;
    assert_eq!(replies, (1..=total).collect::<Vec<_>>());
    assert_eq!(stored_balance(&store, "shared").await, json!(total));
    rt.shutdown().await;
}

async fn live_objects_are_listed_by_status_and_seen_whole(store: Arc<dyn Storage>) {
    let rt = Runtime::builder(Arc::clone(&store))
        .expose::<Note>()
        .register::<Hidden>()
        .build();
    let live = |status| rt.list_live_by_name("Note", status, None, 100).unwrap().ids;
    for id in ["n3", "n1", "n2"] {
        rt.call_by_name("Note", id, "write", json!({"text": id}))
            .await
            .unwrap();
    }
    let page = rt
        .list_live_by_name("Note", LiveStatus::Active, None, 2)
        .unwrap();
    assert_eq!(
        (page.ids, page.next.as_deref()),
        (vec!["n1".to_owned(), "n2".to_owned()], Some("n2"))
    );
    let rest = rt.list_live_by_name("Note", LiveStatus::Active, Some("n2"), 2);
    assert_eq!(rest.unwrap().ids, ["n3"]);
    let in_an_hour = Duration::from_secs(3600);
    rt.schedule_alarm_by_name("Note", "n1", "remind", in_an_hour)
        .await
        .unwrap();

    // Past `hibernate_after`, every one hibernates; a call wakes one.
    eventually(|| async { live(LiveStatus::Hibernated) == ["n1", "n2", "n3"] }).await;
    assert!(live(LiveStatus::Active).is_empty());
    assert_eq!(
        rt.call_by_name("Note", "n2", "read", json!({}))
            .await
            .unwrap(),
        json!("n2")
    );
    assert_eq!(live(LiveStatus::Active), ["n2"]);
    assert_eq!(live(LiveStatus::Hibernated), ["n1", "n3"]);

    // Whole views: status, committed state, version, alarms; of a hibernated one without
    // waking it.
    let n2 = rt.inspect_by_name("Note", "n2").await.unwrap().unwrap();
    assert_eq!(
        (n2.status, n2.state, n2.version, n2.alarms.len()),
        (ObjectStatus::Active, json!({"text": "n2"}), Some(1), 0)
    );
    let n1 = rt.inspect_by_name("Note", "n1").await.unwrap().unwrap();
    assert_eq!((n1.status, n1.version), (ObjectStatus::Hibernated, Some(2)));
    assert_eq!(n1.state, json!({"text": "n1"}));
    let alarms: Vec<_> = n1.alarms.iter().map(|alarm| alarm.name.as_str()).collect();
    assert_eq!(alarms, ["remind"]);
    assert_eq!(
        live(LiveStatus::Hibernated),
        ["n1", "n3"],
        "inspected, not woken"
    );
    // Another runtime on the same database sees it stored.
    let other = Runtime::builder(Arc::clone(&store))
        .expose::<Note>()
        .build();
    let seen = other.inspect_by_name("Note", "n1").await.unwrap().unwrap();
    assert_eq!((seen.status, seen.version), (ObjectStatus::Stored, Some(2)));
    assert!(
        other
            .list_live_by_name("Note", LiveStatus::Hibernated, None, 10)
            .unwrap()
            .ids
            .is_empty()
    );
    other.shutdown().await;

    // Live without ever being stored: its default state, no version.
    assert_eq!(
        rt.call_by_name("Note", "n9", "read", json!({}))
            .await
            .unwrap(),
        json!("")
    );
    let n9 = rt.inspect_by_name("Note", "n9").await.unwrap().unwrap();
    assert_eq!(
        (n9.status, n9.state, n9.version),
        (ObjectStatus::Active, json!({"text": ""}), None)
    );
    // Neither live nor stored: nothing. Deleted: nothing either, and no longer listed.
    assert_eq!(rt.inspect_by_name("Note", "n0").await.unwrap(), None);
    assert!(rt.delete_by_name("Note", "n2").await.unwrap());
    assert_eq!(rt.inspect_by_name("Note", "n2").await.unwrap(), None);
    assert_eq!(live(LiveStatus::Active), ["n9"]);

    for err in [
        rt.list_live_by_name("Hidden", LiveStatus::Active, None, 10)
            .map(drop),
        rt.inspect_by_name("Hidden", "h").await.map(drop),
    ] {
        assert!(
            matches!(err, Err(CallByNameError::UnknownType { .. })),
            "{err:?}"
        );
    }
    let invalid = rt.inspect_by_name("Note", "").await;
    assert!(
        matches!(invalid, Err(CallByNameError::Runtime(Error::InvalidId(_)))),
        "{invalid:?}"
    );
    rt.shutdown().await;
}

/// Leaves the alarm `name` of `(object_type, id)` dead in storage, as a runtime whose every
/// attempt failed would.
async fn dead_in_storage(store: &Arc<dyn Storage>, object_type: &str, id: &str, name: &str) {
    let key = ObjectKey::new(object_type, id);
    let due = std::time::UNIX_EPOCH + Duration::from_secs(1_000);
    let write = ObjectWrite {
        key: key.clone(),
        expected_version: 0,
        state: Some(b"{}".to_vec()),
        alarms: vec![AlarmChange::Set {
            name: name.to_owned(),
            due_at: due,
            payload: None,
        }],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    store.commit(&[write]).await.unwrap();
    let lease = due + Duration::from_secs(60);
    let claimed = store.claim_due_alarms(due, due, lease, 100).await.unwrap();
    assert_eq!(claimed.len(), 1, "only this alarm is due");
    assert!(
        store
            .fail_alarm(&key, name, due, 10, "boom", None)
            .await
            .unwrap()
    );
}

/// `(type, id, name)` of each alarm of a page.
fn listed(page: &DeadAlarmPage) -> Vec<(String, String, String)> {
    page.alarms
        .iter()
        .map(|alarm| {
            let key = alarm.key.clone();
            (key.object_type, key.object_id, alarm.name.clone())
        })
        .collect()
}

async fn dead_alarms_are_listed_across_objects_and_requeued(store: Arc<dyn Storage>) {
    // Dead before the runtime starts: of an exposed type, and of one that is not.
    dead_in_storage(&store, "Account", "a1", "audit").await;
    dead_in_storage(&store, "Hidden", "h1", "tick").await;
    // One attempt in all: a failing alarm dies at once.
    let settings = AlarmSettings::default().with_retry(RetryPolicy::new(
        Duration::from_millis(10),
        Duration::from_millis(10),
        1,
    ));
    let rt = Runtime::builder(Arc::clone(&store))
        .alarm_settings(settings)
        .expose::<Account>()
        .expose::<Mailer>()
        .register::<Hidden>()
        .build();
    for id in ["m2", "m1"] {
        rt.call_by_name("Mailer", id, "queue", json!({}))
            .await
            .unwrap();
    }
    let dead_mailers = || async {
        let page = rt
            .list_dead_alarms_by_name(Some("Mailer"), None, 10)
            .await
            .unwrap();
        page.alarms.len() == 2
    };
    eventually(dead_mailers).await;

    // Every exposed type, by type, id, name, one at a time; the hidden type's is left out.
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = rt
            .list_dead_alarms_by_name(None, cursor.as_deref(), 1)
            .await
            .unwrap();
        assert!(page.alarms.len() <= 1);
        all.extend(listed(&page));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let key = |ty: &str, id: &str, name: &str| (ty.to_owned(), id.to_owned(), name.to_owned());
    assert_eq!(
        all,
        [
            key("Account", "a1", "audit"),
            key("Mailer", "m1", "send"),
            key("Mailer", "m2", "send"),
        ]
    );
    let page = rt.list_dead_alarms_by_name(None, None, 10).await.unwrap();
    let m1 = &page.alarms[1];
    assert_eq!(
        (m1.attempts, m1.last_error.as_deref(), m1.dead),
        (1, Some("SMTP refused"), true)
    );
    let accounts = rt
        .list_dead_alarms_by_name(Some("Account"), None, 10)
        .await
        .unwrap();
    assert_eq!(listed(&accounts), [key("Account", "a1", "audit")]);
    assert_eq!(accounts.next_cursor, None);
    // A cursor of one listing resumes another, filtered or not.
    let first = rt.list_dead_alarms_by_name(None, None, 1).await.unwrap();
    let mailers = rt
        .list_dead_alarms_by_name(Some("Mailer"), first.next_cursor.as_deref(), 10)
        .await
        .unwrap();
    assert_eq!(
        listed(&mailers),
        [key("Mailer", "m1", "send"), key("Mailer", "m2", "send")]
    );

    let hidden = rt.list_dead_alarms_by_name(Some("Hidden"), None, 10).await;
    assert!(
        matches!(hidden, Err(CallByNameError::UnknownType { .. })),
        "{hidden:?}"
    );
    let foreign = rt
        .list_dead_alarms_by_name(None, Some("a1/audit"), 10)
        .await;
    assert!(
        matches!(foreign, Err(CallByNameError::InvalidCursor(_))),
        "{foreign:?}"
    );

    // Re-queued once the cause is fixed: it fires now, succeeds and is gone.
    let refused = rt
        .requeue_dead_alarm_by_name("Mailer", "m1", "deliver")
        .await;
    assert!(
        matches!(refused, Err(CallByNameError::UnknownAlarm { .. })),
        "{refused:?}"
    );
    assert!(
        !rt.requeue_dead_alarm_by_name("Mailer", "m3", "send")
            .await
            .unwrap()
    );
    rt.call_by_name("Mailer", "m1", "fix", json!({}))
        .await
        .unwrap();
    assert!(
        rt.requeue_dead_alarm_by_name("Mailer", "m1", "send")
            .await
            .unwrap()
    );
    eventually(|| async { Mailer::sent(&rt, "m1").await.unwrap() == 1 }).await;
    eventually(|| async { rt.list_alarms::<Mailer>("m1").await.unwrap().is_empty() }).await;
    // Still broken: re-queued, it fails its one attempt and is dead again.
    assert!(rt.requeue_dead_alarm("m2", Mailer::SEND).await.unwrap());
    eventually(|| async {
        let alarms = rt.list_alarms::<Mailer>("m2").await.unwrap();
        alarms.len() == 1 && alarms[0].dead && alarms[0].attempts == 1
    })
    .await;
    // One that died before this runtime started: its handler runs.
    assert!(
        rt.requeue_dead_alarm_by_name("Account", "a1", "audit")
            .await
            .unwrap()
    );
    eventually(|| async { rt.list_alarms::<Account>("a1").await.unwrap().is_empty() }).await;
    let left = rt.list_dead_alarms_by_name(None, None, 10).await.unwrap();
    assert_eq!(listed(&left), [key("Mailer", "m2", "send")]);
    // The hidden type's dead alarm was never touched.
    let hidden_alarms = store
        .list_alarms(&ObjectKey::new("Hidden", "h1"))
        .await
        .unwrap();
    assert!(hidden_alarms[0].dead);
    rt.shutdown().await;
}

backend_tests!(
    live_objects_are_listed_by_status_and_seen_whole,
    dead_alarms_are_listed_across_objects_and_requeued,
    calls_by_name_and_typed_calls_interleave_one_at_a_time,
    objects_are_inspected_and_deleted_by_type_name,
    same_result_as_typed_call_and_committed_before_reply,
    handler_error_comes_back_as_json_and_rolls_back,
    bad_arguments_name_the_field,
    arguments_that_are_not_an_object_are_refused,
    only_exposed_types_and_handlers_are_reachable,
);
