//! The Rust client against a gateway on a loopback port, over an SQLite database.

use std::time::{Duration, SystemTime};

use durable_runtime::storage::{Storage, truncate_to_micros};
use durable_runtime::{Runtime, durable_object};
use durable_server::client::{Client, ClientError, ObjectStatus};
use durable_sqlx::SqliteStore;
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

#[durable_object]
pub struct Account {
    balance: u64,
}

#[derive(Debug, Serialize)]
pub(crate) enum AccountError {
    Insufficient { balance: u64 },
}

#[durable_object(expose)]
impl Account {
    #[handler]
    fn handle_deposit(&mut self, amount: u64) -> u64 {
        self.balance += amount;
        self.balance
    }

    #[handler]
    fn handle_withdraw(&mut self, amount: u64) -> Result<u64, AccountError> {
        if amount > self.balance {
            return Err(AccountError::Insufficient {
                balance: self.balance,
            });
        }
        self.balance -= amount;
        Ok(self.balance)
    }

    #[handler]
    fn handle_balance(&self) -> u64 {
        self.balance
    }

    #[alarm]
    fn statement(&mut self) {}
}

const TOKEN: &str = "client-test-token";

struct Gateway {
    client: Client,
    store: SqliteStore,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

impl Gateway {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("app.db")).await.unwrap();
        let hash: String = Sha256::digest(TOKEN.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let config = durable_server::ServerConfig::from_toml_str(&format!(
            r#"
            [[principals]]
            name = "ops"
            tokens_sha256 = ["{hash}"]
              [[principals.grants]]
              types = ["*"]
              handlers = ["*"]
              ops = ["call", "read", "list", "delete", "alarms", "admin"]
            "#
        ))
        .unwrap();
        let runtime = Runtime::builder(store.clone())
            .expose::<Account>()
            .manual_alarms()
            .build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(durable_server::serve_with_shutdown(
            runtime,
            config,
            listener,
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            client: Client::new(&address).with_token(TOKEN),
            store,
            stop: Some(stop),
            served,
            _dir: dir,
        }
    }

    async fn stop(mut self) {
        drop(self.stop.take());
        tokio::time::timeout(Duration::from_secs(30), self.served)
            .await
            .expect("the gateway stops within 30 s")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_decode_outputs_and_typed_errors() {
    let gateway = Gateway::start().await;
    let objects = gateway.client.objects();

    let balance: u64 = objects
        .call("Account", "a", "deposit", &json!({"amount": 10}))
        .await
        .unwrap();
    assert_eq!(balance, 10);
    let balance: u64 = objects
        .call("Account", "a", "balance", &json!({}))
        .await
        .unwrap();
    assert_eq!(balance, 10);

    // Arguments may be any serializable value with the argument names as fields.
    #[derive(Serialize)]
    struct Withdraw {
        amount: u64,
    }
    let err = objects
        .call::<_, u64>("Account", "a", "withdraw", &Withdraw { amount: 50 })
        .await
        .unwrap_err();
    match &err {
        ClientError::Api { status, error } => {
            assert_eq!(*status, 422);
            assert_eq!(error.code, "handler_error");
            assert_eq!(error.details, json!({"Insufficient": {"balance": 10}}));
        }
        other => panic!("{other}"),
    }
    assert!(!err.is_retryable());

    let err = objects
        .call::<_, u64>("Account", "a", "deposit", &json!({"amont": 1}))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(400), Some("invalid_arguments"))
    );
    let err = objects
        .call::<_, u64>("Account", "a", "close", &json!({}))
        .await
        .unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.code(), Some("unknown_handler"));

    // An output of another type than asked for.
    let err = objects
        .call::<_, String>("Account", "a", "balance", &json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::Decode { status: 200, .. }),
        "{err}"
    );

    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_are_read_listed_and_deleted_under_any_id() {
    let gateway = Gateway::start().await;
    let objects = gateway.client.objects();
    // Ids travel percent-encoded in the path.
    let ids = ["user/1 ?#%", "b", "c"];
    for id in ids {
        let _: u64 = objects
            .call("Account", id, "deposit", &json!({"amount": 1}))
            .await
            .unwrap();
    }

    let object = objects.get("Account", ids[0]).await.unwrap();
    assert_eq!(
        (object.type_name.as_str(), object.id.as_str()),
        ("Account", ids[0])
    );
    assert_eq!(object.state, json!({"balance": 1}));
    assert_eq!(object.version, Some(1));
    assert_eq!(object.status, ObjectStatus::Active);

    let mut listed = Vec::new();
    let mut cursor = None;
    loop {
        let page = objects
            .list("Account", None, cursor.as_deref(), Some(2))
            .await
            .unwrap();
        assert!(page.objects.len() <= 2);
        listed.extend(page.objects.into_iter().map(|object| object.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut expected = ids.map(str::to_owned).to_vec();
    expected.sort();
    assert_eq!(listed, expected);

    assert!(objects.delete("Account", ids[0]).await.unwrap());
    assert!(!objects.delete("Account", ids[0]).await.unwrap());
    let err = objects.get("Account", ids[0]).await.unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.code(), Some("object_not_found"));

    let err = objects.get("Nope", "a").await.unwrap_err();
    assert_eq!(err.code(), Some("unknown_type"));

    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn alarms_are_set_cancelled_and_requeued() {
    let gateway = Gateway::start().await;
    let alarms = gateway.client.alarms();
    let _: u64 = gateway
        .client
        .objects()
        .call("Account", "a", "deposit", &json!({"amount": 1}))
        .await
        .unwrap();

    let before = SystemTime::now();
    let set = alarms
        .set("Account", "a", "statement", Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(set.name, "statement");
    let ahead = set.fire_at.duration_since(before).unwrap();
    assert!(ahead >= Duration::from_secs(3599), "{ahead:?}");

    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(4_000_000_000);
    let set = alarms.set("Account", "a", "statement", at).await.unwrap();
    assert_eq!(set.fire_at, at);
    let listed = alarms.list("Account", "a").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].fire_at, listed[0].dead), (at, false));

    let err = alarms
        .set("Account", "a", "nope", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("unknown_alarm"));

    assert!(alarms.cancel("Account", "a", "statement").await.unwrap());
    assert!(!alarms.cancel("Account", "a", "statement").await.unwrap());
    assert!(alarms.list("Account", "a").await.unwrap().is_empty());

    // A dead alarm (its last attempt failed) is scheduled again by a re-queue.
    alarms
        .set("Account", "a", "statement", Duration::ZERO)
        .await
        .unwrap();
    let now = truncate_to_micros(SystemTime::now()) + Duration::from_secs(1);
    let claimed = gateway
        .store
        .claim_due_alarms(now, now, now + Duration::from_secs(60), 10)
        .await
        .unwrap();
    let alarm = &claimed[0];
    let claimed_at = alarm.claimed_at.unwrap();
    gateway
        .store
        .fail_alarm(&alarm.key, &alarm.name, claimed_at, 3, "boom", None)
        .await
        .unwrap();
    assert!(alarms.list("Account", "a").await.unwrap()[0].dead);
    assert!(alarms.requeue("Account", "a", "statement").await.unwrap());
    let listed = alarms.list("Account", "a").await.unwrap();
    assert_eq!((listed[0].dead, listed[0].attempts), (false, 0));
    assert!(!alarms.requeue("Account", "a", "statement").await.unwrap());

    gateway.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn types_openapi_readiness_and_refusals() {
    let gateway = Gateway::start().await;
    let client = &gateway.client;

    let types = client.types().await.unwrap();
    assert_eq!(types.len(), 1);
    assert_eq!(types[0].name, "Account");
    let handlers: Vec<&str> = types[0].handlers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(handlers, ["deposit", "withdraw", "balance"]);
    assert_eq!(types[0].handlers[0].arguments, ["amount"]);
    assert_eq!(types[0].alarms, ["statement"]);

    let document = client.openapi().await.unwrap();
    assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));
    assert!(client.ready().await.unwrap());

    let anonymous = Client::new(client.base_url());
    let err = anonymous.types().await.unwrap_err();
    assert_eq!(err.status(), Some(401));
    assert!(err.is_denied());
    let err = Client::new(client.base_url())
        .with_token("not-a-token")
        .objects()
        .get("Account", "a")
        .await
        .unwrap_err();
    assert!(err.is_denied());

    let address = client.base_url().to_owned();
    gateway.stop().await;

    // Nothing listens any more: a transport error, retryable since nothing was sent.
    let err = Client::new(&address).types().await.unwrap_err();
    assert!(matches!(err, ClientError::Transport(_)), "{err}");
    assert!(err.is_retryable());
}
