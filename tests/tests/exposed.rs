//! Handlers callable by name, on every storage backend: a call by name has the semantics of
//! the typed call (same result, state committed before the reply, the read path), the
//! handler's own error comes back as JSON, arguments that do not fit are refused naming the
//! field, only exposed types and handlers are reachable, and objects of an exposed type are
//! inspected and deleted by its name.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::{ObjectKey, Storage};
use durable_runtime::{Access, CallByNameError, Error, ObjectStatus, Runtime, durable_object};
use durable_tests::backend_tests;
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

backend_tests!(
    calls_by_name_and_typed_calls_interleave_one_at_a_time,
    objects_are_inspected_and_deleted_by_type_name,
    same_result_as_typed_call_and_committed_before_reply,
    handler_error_comes_back_as_json_and_rolls_back,
    bad_arguments_name_the_field,
    only_exposed_types_and_handlers_are_reachable,
);
