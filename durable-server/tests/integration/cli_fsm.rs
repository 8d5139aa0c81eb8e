//! `durable fsm insert|signal|get|list`: the generic binary as a process, against a gateway
//! on a loopback port that runs an FSM engine on the in-memory FSM store.

use std::process::Command;
use std::time::Duration;

use durable_runtime::fsm::{
    Engine, InstanceId, MemoryFsmStore, Outcome, Settled, StepContext, durable_fsm,
};
use durable_runtime::{MemoryStorage, Runtime};
use serde_json::{Value, json};

#[durable_fsm(name = "order", result = String)]
pub struct Order {
    order_id: String,
}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::await_signal(["paid"], Self::SETTLE)
    }

    #[step]
    fn settle(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(format!("receipt for {}", self.order_id))
    }
}

/// Runs the generic binary against `gateway` with `--output json`: exit code and the JSON of
/// standard output (or of standard error on failure).
fn durable(gateway: &str, args: &[&str]) -> (i32, Value) {
    let output = Command::new(env!("CARGO_BIN_EXE_durable"))
        .args(args)
        .args(["--gateway", gateway, "--output", "json"])
        .env_remove("DURABLE_TOKEN")
        .env_remove("DURABLE_DATABASE_URL")
        .output()
        .unwrap();
    let code = output.status.code().unwrap();
    let text = String::from_utf8(if code == 0 {
        output.stdout
    } else {
        output.stderr
    })
    .unwrap();
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, json)
}

fn table(gateway: &str, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_durable"))
        .args(args)
        .args(["--gateway", gateway])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn fsm_commands_through_a_gateway() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (engine, address, served) = tokio.block_on(async {
        let engine = Engine::builder(MemoryFsmStore::new())
            .register::<Order>()
            .queue("default", 2)
            .poll_interval(Duration::from_millis(20), Duration::from_millis(100))
            .build()
            .unwrap();
        let mut config = durable_server::ServerConfig::default().with_fsm(engine.clone());
        config.auth.disabled = true;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(durable_server::serve_with_shutdown(
            Runtime::new(MemoryStorage::new()),
            config,
            listener,
            async {
                let _ = stopped.await;
            },
        ));
        (engine, address, served)
    });
    let gateway = address.as_str();
    let settle = |id: i64, ended: bool| {
        tokio.block_on(async {
            let id = InstanceId::new(id);
            let wait = Duration::from_secs(20);
            if ended {
                engine.await_ended(id, wait).await.unwrap()
            } else {
                engine.await_settled(id, wait).await.unwrap()
            }
        })
    };

    let (code, inserted) = durable(
        gateway,
        &[
            "fsm",
            "insert",
            "order",
            r#"{"order_id": "42"}"#,
            "--key",
            "order:42",
        ],
    );
    assert_eq!(code, 0, "{inserted}");
    let id = inserted["id"].as_i64().unwrap();
    assert!(matches!(settle(id, false), Settled::Awaiting(_)));
    let (code, other) = durable(gateway, &["fsm", "insert", "order"]);
    assert_eq!(code, 0, "{other}");
    let other = other["id"].as_i64().unwrap();

    let (code, instance) = durable(gateway, &["fsm", "get", &id.to_string()]);
    assert_eq!(code, 0);
    assert_eq!(instance["status"], "awaiting_signal");
    assert_eq!(instance["state"], json!({"order_id": "42"}));
    let printed = table(gateway, &["fsm", "get", &id.to_string()]);
    assert!(printed.contains("status:   awaiting_signal"), "{printed}");

    let (code, sent) = durable(
        gateway,
        &[
            "fsm",
            "signal",
            "paid",
            "1250",
            "--key",
            "order:42",
            "--dedup-key",
            "e1",
        ],
    );
    assert_eq!(
        (code, sent["target"].as_i64(), sent["woke"].clone()),
        (0, Some(id), json!(true))
    );
    assert!(matches!(settle(id, true), Settled::Done { .. }));
    let (_, instance) = durable(gateway, &["fsm", "get", &id.to_string()]);
    assert_eq!(instance["result"], "receipt for 42");

    let (code, page) = durable(gateway, &["fsm", "list", "--status", "done"]);
    assert_eq!(code, 0);
    assert_eq!(page["instances"][0]["id"].as_i64(), Some(id));
    assert_eq!(page["instances"].as_array().unwrap().len(), 1);
    let (_, page) = durable(gateway, &["fsm", "list", "--name", "order", "--limit", "1"]);
    assert_eq!(page["next_after"].as_i64(), Some(id));
    let (_, page) = durable(
        gateway,
        &["fsm", "list", "--name", "order", "--after", &id.to_string()],
    );
    assert_eq!(page["instances"][0]["id"].as_i64(), Some(other));
    let printed = table(gateway, &["fsm", "list", "--limit", "1"]);
    assert!(
        printed.contains("awaiting_signal") || printed.contains("done"),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("(more: --after {id})")),
        "{printed}"
    );

    // Typed failures: not found exits 2, bad input 1.
    let (code, error) = durable(gateway, &["fsm", "signal", "paid", "--key", "order:42"]);
    assert_eq!(
        (code, error["error"]["code"].clone()),
        (2, json!("instance_not_found"))
    );
    let (code, error) = durable(gateway, &["fsm", "get", "999999"]);
    assert_eq!(
        (code, error["error"]["code"].clone()),
        (2, json!("instance_not_found"))
    );
    let (code, error) = durable(gateway, &["fsm", "insert", "order", r#"{"order_id": 1}"#]);
    assert_eq!(
        (code, error["error"]["code"].clone()),
        (1, json!("invalid_arguments"))
    );
    let (code, error) = durable(gateway, &["fsm", "insert", "refund"]);
    assert_eq!(
        (code, error["error"]["code"].clone()),
        (2, json!("unknown_fsm"))
    );
    let (code, error) = durable(gateway, &["fsm", "list", "--status", "sleeping"]);
    assert_eq!(
        (code, error["error"]["code"].clone()),
        (1, json!("invalid_request"))
    );

    drop(stop);
    tokio.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), served)
            .await
            .expect("the gateway stops")
            .unwrap()
            .unwrap();
        engine.shutdown().await;
    });
}

/// Read directly from a database, `fsm` commands say they need a gateway.
#[test]
fn fsm_commands_need_a_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("app.db").display());
    let output = Command::new(env!("CARGO_BIN_EXE_durable"))
        .args(["fsm", "list", "--database-url", &url, "--output", "json"])
        .env_remove("DURABLE_GATEWAY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let error: Value = serde_json::from_slice(&output.stderr).unwrap();
    assert_eq!(error["error"]["code"], "usage");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--gateway"),
        "{error}"
    );
}

/// `durable fsm cancel|pause|resume|paused` through a gateway.
#[test]
fn fsm_cancel_and_queue_commands() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (engine, address, served) = tokio.block_on(async {
        let engine = Engine::builder(MemoryFsmStore::new())
            .register::<Order>()
            .queue("default", 2)
            .poll_interval(Duration::from_millis(20), Duration::from_millis(100))
            .build()
            .unwrap();
        let mut config = durable_server::ServerConfig::default().with_fsm(engine.clone());
        config.auth.disabled = true;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let served = tokio::spawn(durable_server::serve_with_shutdown(
            Runtime::new(MemoryStorage::new()),
            config,
            listener,
            async {
                let _ = stopped.await;
            },
        ));
        (engine, address, served)
    });
    let gateway = address.as_str();

    let (code, inserted) = durable(gateway, &["fsm", "insert", "order"]);
    assert_eq!(code, 0, "{inserted}");
    let id = inserted["id"].as_i64().unwrap().to_string();
    let (code, cancelled) = durable(gateway, &["fsm", "cancel", &id]);
    assert_eq!(code, 0, "{cancelled}");
    assert_eq!(cancelled["instances"], 1);
    let (code, error) = durable(gateway, &["fsm", "cancel", &id]);
    assert_ne!(code, 0);
    assert_eq!(error["error"]["code"], "instance_ended", "{error}");
    let (_, instance) = durable(gateway, &["fsm", "get", &id]);
    assert_eq!(
        (instance["status"].as_str(), instance["error"].as_str()),
        (Some("failed"), Some("cancelled"))
    );

    let (code, paused) = durable(gateway, &["fsm", "pause", "default"]);
    assert_eq!((code, paused["paused"].clone()), (0, json!(true)));
    assert!(table(gateway, &["fsm", "paused"]).contains("default"));
    let (code, resumed) = durable(gateway, &["fsm", "resume", "default"]);
    assert_eq!((code, resumed["changed"].clone()), (0, json!(true)));
    assert!(table(gateway, &["fsm", "paused"]).contains("no paused queues"));

    drop(stop);
    tokio.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), served)
            .await
            .expect("the gateway stops")
            .unwrap()
            .unwrap();
        engine.shutdown().await;
    });
}
