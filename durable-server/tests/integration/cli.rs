//! The command line on a real SQLite database: the generic `durable` binary as a process, and
//! an application's command line (`cli::App`) in-process, directly and through a gateway on a
//! loopback port.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use durable_runtime::storage::{Storage, truncate_to_micros};
use durable_runtime::{Runtime, durable_object};
use durable_server::cli::{App, Exit};
use durable_sqlx::SqliteStore;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object(expose)]
impl Counter {
    #[handler]
    fn handle_increment(&mut self, by: i64) -> i64 {
        self.count += by;
        self.count
    }

    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }

    #[handler]
    fn handle_check(&self, at_most: i64) -> Result<i64, String> {
        if self.count > at_most {
            return Err(format!("{} is over {at_most}", self.count));
        }
        Ok(self.count)
    }

    #[alarm]
    fn reset(&mut self) {
        self.count = 0;
    }
}

#[durable_object]
pub struct Reminder {
    fired: u32,
}

#[durable_object(expose)]
impl Reminder {
    #[handler]
    fn handle_fired(&self) -> u32 {
        self.fired
    }

    #[alarm]
    fn ring(&mut self) {
        self.fired += 1;
    }
}

const TOKEN: &str = "test-token";
const READ_ONLY_TOKEN: &str = "read-only-token";

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A database with counters `a`, `b`, `c` (`a` at 3 with its `reset` alarm in an hour) and a
/// reminder `r1` whose `ring` alarm is dead.
fn seeded_database() -> (TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("app.db").display());
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let store = SqliteStore::open(&url).await.unwrap();
        let rt = Runtime::builder(store.clone())
            .expose::<Counter>()
            .expose::<Reminder>()
            .manual_alarms()
            .build();
        Counter::increment(&rt, "a", 3).await.unwrap();
        Counter::increment(&rt, "b", 1).await.unwrap();
        Counter::increment(&rt, "c", 1).await.unwrap();
        rt.schedule_alarm("a", Counter::RESET, Duration::from_secs(3600))
            .await
            .unwrap();
        Reminder::fired(&rt, "r1").await.unwrap();
        rt.schedule_alarm("r1", Reminder::RING, Duration::ZERO)
            .await
            .unwrap();
        rt.shutdown().await;

        // The alarm fails its last attempt: claimed, then failed without a retry.
        let now = truncate_to_micros(SystemTime::now()) + Duration::from_secs(1);
        let claimed = store
            .claim_due_alarms(now, now, now + Duration::from_secs(60), 10)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        let alarm = &claimed[0];
        let failed = store
            .fail_alarm(
                &alarm.key,
                &alarm.name,
                alarm.claimed_at.unwrap(),
                3,
                "boom",
                None,
            )
            .await
            .unwrap();
        assert!(failed);
    });
    (dir, url)
}

/// Runs the generic binary; returns its exit code, standard output and standard error.
fn durable(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_durable"))
        .args(args)
        .env_remove("DURABLE_GATEWAY")
        .env_remove("DURABLE_TOKEN")
        .env_remove("DURABLE_DATABASE_URL")
        .output()
        .unwrap();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    (
        output.status.code().unwrap(),
        text(output.stdout),
        text(output.stderr),
    )
}

/// Runs the generic binary with `--output json` on `url`; the JSON of standard output on
/// success, of standard error on failure.
fn durable_json(url: &str, args: &[&str]) -> (i32, Value) {
    let args = [args, &["--database-url", url, "--output", "json"]].concat();
    let (code, out, err) = durable(&args);
    let text = if code == 0 { out } else { err };
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, json)
}

/// `objects call Counter a <handler>` followed by `more`.
fn call_a<'a>(handler: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    [&["objects", "call", "Counter", "a", handler][..], more].concat()
}

fn app() -> App {
    App::new(|store| {
        Runtime::builder(store)
            .expose::<Counter>()
            .expose::<Reminder>()
    })
}

/// Runs the application's command line in-process with `--output json`.
fn app_json(args: &[&str]) -> (Exit, Value) {
    let args = [&["app"], args, &["--output", "json"]].concat();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let exit = app().run_from(args, &mut out, &mut err);
    let text = String::from_utf8(if exit == Exit::Ok { out } else { err }).unwrap();
    let json = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (exit, json)
}

#[test]
fn the_generic_binary_lists_types_and_ids_and_dumps_states() {
    let (_dir, url) = seeded_database();

    let (code, types) = durable_json(&url, &["types"]);
    assert_eq!(code, 0);
    let names: Vec<&str> = types["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ty| ty["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Counter", "Reminder"]);

    let (code, page) = durable_json(&url, &["objects", "list", "Counter", "--limit", "2"]);
    assert_eq!(code, 0);
    assert_eq!(
        page,
        json!({"objects": [
            {"type": "Counter", "id": "a", "status": "stored"},
            {"type": "Counter", "id": "b", "status": "stored"},
        ], "next_cursor": "b"})
    );
    let (_, rest) = durable_json(
        &url,
        &[
            "objects", "list", "Counter", "--limit", "2", "--cursor", "b",
        ],
    );
    assert_eq!(rest["objects"][0]["id"], "c");
    assert_eq!(rest["next_cursor"], Value::Null);

    let (code, object) = durable_json(&url, &["objects", "get", "Counter", "a"]);
    assert_eq!(code, 0);
    assert_eq!(object["state"], json!({"count": 3}));
    assert_eq!(object["status"], "stored");
    assert!(object["version"].as_u64().unwrap() >= 1);
    assert_eq!(object["alarms"][0]["name"], "reset");
    assert_eq!(object["alarms"][0]["dead"], false);

    // The table form, for people.
    let (code, out, _) = durable(&["objects", "get", "Counter", "a", "--database-url", &url]);
    assert_eq!(code, 0);
    assert!(out.contains("\"count\": 3"), "{out}");
}

#[test]
fn absent_objects_exit_2_and_bad_targets_exit_1() {
    let (dir, url) = seeded_database();
    let (code, error) = durable_json(&url, &["objects", "get", "Counter", "nobody"]);
    assert_eq!(code, 2);
    assert_eq!(error["error"]["code"], "object_not_found");

    // A missing SQLite file is an error, and is not created.
    let missing = dir.path().join("missing.db");
    let missing_url = format!("sqlite://{}", missing.display());
    let (code, error) = durable_json(&missing_url, &["types"]);
    assert_eq!(code, 1);
    assert_eq!(error["error"]["code"], "database_not_found");
    assert!(!Path::new(&missing).exists());

    let (code, _, err) = durable(&["types"]);
    assert_eq!(code, 1);
    assert!(err.contains("--gateway"), "{err}");

    // Calls need the object types.
    let (code, error) = durable_json(&url, &["objects", "call", "Counter", "a", "get"]);
    assert_eq!(code, 1);
    assert_eq!(error["error"]["code"], "needs_types");
}

#[test]
fn the_generic_binary_refuses_direct_writes_without_offline() {
    let (_dir, url) = seeded_database();

    for args in [
        &["alarms", "cancel", "Counter", "a", "reset"][..],
        &["objects", "delete", "Counter", "b"],
        &["alarms", "requeue", "Reminder", "r1", "ring"],
    ] {
        let (code, error) = durable_json(&url, args);
        assert_eq!(code, 1, "{args:?}");
        assert_eq!(error["error"]["code"], "direct_write_refused");
    }
    // Nothing changed.
    let (_, alarms) = durable_json(&url, &["alarms", "list", "Counter", "a"]);
    assert_eq!(alarms["alarms"].as_array().unwrap().len(), 1);
    let (code, _) = durable_json(&url, &["objects", "get", "Counter", "b"]);
    assert_eq!(code, 0);

    // With --offline they are done.
    let (code, reply) = durable_json(
        &url,
        &["alarms", "cancel", "Counter", "a", "reset", "--offline"],
    );
    assert_eq!((code, reply), (0, json!({"cancelled": true})));
    let (_, alarms) = durable_json(&url, &["alarms", "list", "Counter", "a"]);
    assert_eq!(alarms, json!({"alarms": []}));
    let (_, reply) = durable_json(
        &url,
        &["alarms", "cancel", "Counter", "a", "reset", "--offline"],
    );
    assert_eq!(reply, json!({"cancelled": false}));

    let (code, reply) = durable_json(&url, &["objects", "delete", "Counter", "b", "--offline"]);
    assert_eq!((code, reply), (0, json!({"deleted": true})));
    let (code, _) = durable_json(&url, &["objects", "get", "Counter", "b"]);
    assert_eq!(code, 2);
}

#[test]
fn dead_alarms_are_listed_and_requeued() {
    let (_dir, url) = seeded_database();

    let (code, dead) = durable_json(&url, &["alarms", "dead"]);
    assert_eq!(code, 0);
    let alarms = dead["alarms"].as_array().unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(
        (&alarms[0]["type"], &alarms[0]["id"], &alarms[0]["name"]),
        (&json!("Reminder"), &json!("r1"), &json!("ring"))
    );
    assert_eq!(alarms[0]["attempts"], 3);
    let (_, of_counters) = durable_json(&url, &["alarms", "dead", "--type", "Counter"]);
    assert_eq!(of_counters, json!({"alarms": [], "next_cursor": null}));

    let (code, reply) = durable_json(
        &url,
        &["alarms", "requeue", "Reminder", "r1", "ring", "--offline"],
    );
    assert_eq!((code, reply), (0, json!({"requeued": true})));
    let (_, dead) = durable_json(&url, &["alarms", "dead"]);
    assert_eq!(dead["alarms"], json!([]));
    let (_, alarms) = durable_json(&url, &["alarms", "list", "Reminder", "r1"]);
    assert_eq!(alarms["alarms"][0]["dead"], false);
    assert_eq!(alarms["alarms"][0]["attempts"], 0);
}

#[test]
fn an_application_calls_by_name_directly_with_writes_behind_offline() {
    let (_dir, url) = seeded_database();
    let url = url.as_str();

    let directly = ["--database-url", url];

    // A read handler needs no --offline.
    let (exit, reply) = app_json(&call_a("get", &directly));
    assert_eq!((exit, reply), (Exit::Ok, json!({"result": 3})));

    let increment = call_a("increment", &[r#"{"by": 2}"#]);
    let (exit, error) = app_json(&[&increment[..], &directly].concat());
    assert_eq!(exit, Exit::Error);
    assert_eq!(error["error"]["code"], "direct_write_refused");
    let offline = [&increment[..], &directly, &["--offline"]].concat();
    let (exit, reply) = app_json(&offline);
    assert_eq!((exit, reply), (Exit::Ok, json!({"result": 5})));

    // The gateway's error mapping: the handler's error, bad arguments, unknown names.
    let check = call_a("check", &[r#"{"at_most": 1}"#]);
    let (exit, error) = app_json(&[&check[..], &directly].concat());
    assert_eq!(exit, Exit::Error);
    assert_eq!(error["error"]["code"], "handler_error");
    assert_eq!(error["error"]["details"], "5 is over 1");
    let bad = call_a("check", &[r#"{"at_mots": 1}"#]);
    let (exit, error) = app_json(&[&bad[..], &directly].concat());
    assert_eq!(exit, Exit::Error);
    assert_eq!(error["error"]["code"], "invalid_arguments");
    let (exit, error) = app_json(&["objects", "get", "Nope", "a", "--database-url", url]);
    assert_eq!(exit, Exit::NotFound);
    assert_eq!(error["error"]["code"], "unknown_type");
    let (exit, error) = app_json(&call_a("nope", &directly));
    assert_eq!(exit, Exit::NotFound);
    assert_eq!(error["error"]["code"], "unknown_handler");

    // Alarms by name, checked against the type's alarms.
    let set = ["alarms", "set", "Counter", "c", "reset", "--delay", "1h"];
    let (exit, error) = app_json(&[&set[..], &directly].concat());
    assert_eq!(
        (exit, &error["error"]["code"]),
        (Exit::Error, &json!("direct_write_refused"))
    );
    let (exit, reply) = app_json(&[&set[..], &directly, &["--offline"]].concat());
    assert_eq!(exit, Exit::Ok);
    assert_eq!(reply["name"], "reset");
    let wrong = [
        "alarms",
        "set",
        "Counter",
        "c",
        "ring",
        "--delay",
        "1h",
        "--offline",
    ];
    let (exit, error) = app_json(&[&wrong[..], &directly].concat());
    assert_eq!(
        (exit, &error["error"]["code"]),
        (Exit::NotFound, &json!("unknown_alarm"))
    );
    // `--args` is checked against the alarm's argument type: `reset` takes none.
    let with_args = |args: &'static str| {
        let set = ["alarms", "set", "Counter", "c", "reset", "--delay", "1h"];
        [&set[..], &["--args", args, "--offline"], &directly].concat()
    };
    let (exit, reply) = app_json(&with_args("{}"));
    assert_eq!((exit, &reply["name"]), (Exit::Ok, &json!("reset")));
    let (_, error) = app_json(&with_args(r#"{"n": 1}"#));
    assert_eq!(error["error"]["code"], "invalid_arguments");

    // The types with their handlers, from the application.
    let (_, types) = app_json(&["types", "--database-url", url]);
    let counter = &types["types"][0];
    assert_eq!(counter["name"], "Counter");
    assert_eq!(
        counter["handlers"][0],
        json!({"name": "increment", "access": "write", "arguments": ["by"],
            "argument_types": ["i64"], "output": "i64", "error": null, "doc": null})
    );
    assert_eq!(counter["alarms"], json!(["reset"]));
    assert_eq!(
        counter["fields"][0],
        json!({"name": "count", "type": "i64", "default": 0})
    );
}

/// A gateway over the database on a loopback port, until the returned sender is dropped.
struct Gateway {
    address: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    tokio: tokio::runtime::Runtime,
}

impl Gateway {
    fn start(url: &str) -> Self {
        let config = format!(
            r#"
            [[principals]]
            name = "ops"
            tokens_sha256 = ["{}"]
              [[principals.grants]]
              types = ["*"]
              handlers = ["*"]
              ops = ["call", "read", "list", "delete", "alarms", "admin", "kv_read", "kv_write"]

            [[principals]]
            name = "reader"
            tokens_sha256 = ["{}"]
              [[principals.grants]]
              types = ["Counter"]
              ops = ["read"]
            "#,
            sha256_hex(TOKEN),
            sha256_hex(READ_ONLY_TOKEN),
        );
        let config = durable_server::ServerConfig::from_toml_str(&config).unwrap();
        let tokio = tokio::runtime::Runtime::new().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (address, served) = tokio.block_on(async {
            let store = SqliteStore::open(url).await.unwrap();
            let runtime = Runtime::builder(store)
                .expose::<Counter>()
                .expose::<Reminder>()
                .build();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = format!("http://{}", listener.local_addr().unwrap());
            let shutdown = async {
                let _ = stopped.await;
            };
            let served = tokio::spawn(durable_server::serve_with_shutdown(
                runtime, config, listener, shutdown,
            ));
            (address, served)
        });
        Self {
            address,
            stop: Some(stop),
            served: Some(served),
            tokio,
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(served) = self.served.take() {
            let stopped = self
                .tokio
                .block_on(async { tokio::time::timeout(Duration::from_secs(30), served).await });
            if !std::thread::panicking() {
                stopped
                    .expect("the gateway stops within 30 s")
                    .unwrap()
                    .unwrap();
            }
        }
    }
}

#[test]
fn gateway_and_direct_commands_print_the_same_json() {
    let (_dir, url) = seeded_database();
    let gateway = Gateway::start(&url);
    let through_gateway = ["--gateway", gateway.address.as_str(), "--token", TOKEN];
    let directly = ["--database-url", url.as_str()];

    for command in [
        &["types"][..],
        &["objects", "list", "Counter"],
        &[
            "objects", "list", "Counter", "--limit", "1", "--cursor", "a",
        ],
        &["objects", "get", "Counter", "a"],
        &["objects", "get", "Counter", "nobody"],
        &["alarms", "list", "Counter", "a"],
        &call_a("get", &[]),
        &call_a("check", &[r#"{"at_most": 1}"#]),
        &call_a("check", &["[1]"]),
        &call_a("check", &[r#"{"at_mots": 1}"#]),
        &["alarms", "dead"],
        &["alarms", "dead", "--type", "Reminder", "--limit", "1"],
        &["alarms", "dead", "--type", "Counter"],
        &["alarms", "dead", "--cursor", "not-a-cursor"],
        &["alarms", "dead", "--type", "Nope"],
    ] {
        let direct = app_json(&[command, &directly[..]].concat());
        let remote = app_json(&[command, &through_gateway[..]].concat());
        assert_eq!(direct.0, remote.0, "{command:?}");
        if direct.0 == Exit::Ok {
            assert_eq!(direct.1, remote.1, "{command:?}");
        } else {
            assert_eq!(
                direct.1["error"]["code"], remote.1["error"]["code"],
                "{command:?}"
            );
            assert_eq!(
                direct.1["error"]["details"], remote.1["error"]["details"],
                "{command:?}"
            );
        }
    }

    // Writes through the gateway need no --offline.
    let increment = call_a("increment", &[r#"{"by": 4}"#]);
    let (exit, reply) = app_json(&[&increment[..], &through_gateway[..]].concat());
    assert_eq!((exit, reply), (Exit::Ok, json!({"result": 7})));
    let (exit, reply) = app_json(
        &[
            &["objects", "delete", "Counter", "c"][..],
            &through_gateway[..],
        ]
        .concat(),
    );
    assert_eq!((exit, reply), (Exit::Ok, json!({"deleted": true})));
}

#[test]
fn key_value_commands_through_a_gateway_and_directly() {
    let (_dir, url) = seeded_database();
    let gateway = Gateway::start(&url);
    let through_gateway = ["--gateway", gateway.address.as_str(), "--token", TOKEN];
    let directly = ["--database-url", url.as_str()];

    for (key, value) in [("b", r#"{"n":2}"#), ("a", "[1,2]"), ("c", r#""\u0000""#)] {
        let put = ["kv", "put", "Counter", "a", key, value];
        let (exit, reply) = app_json(&[&put[..], &through_gateway[..]].concat());
        assert_eq!(
            (exit, reply),
            (Exit::Ok, json!({"key": key, "bytes": value.len()}))
        );
    }
    for command in [
        &["kv", "get", "Counter", "a", "b"][..],
        &["kv", "get", "Counter", "a", "nothing"],
        &["kv", "list", "Counter", "a"],
        &[
            "kv", "list", "Counter", "a", "--limit", "1", "--cursor", "a",
        ],
        &["kv", "list", "Counter", "a", "--prefix", "c"],
        &["kv", "list", "Nope", "a"],
    ] {
        let direct = app_json(&[command, &directly[..]].concat());
        let remote = app_json(&[command, &through_gateway[..]].concat());
        assert_eq!(direct.0, remote.0, "{command:?}");
        if direct.0 == Exit::Ok {
            assert_eq!(direct.1, remote.1, "{command:?}");
        } else {
            assert_eq!(
                direct.1["error"]["code"], remote.1["error"]["code"],
                "{command:?}"
            );
        }
    }
    let (exit, page) = app_json(
        &[
            &["kv", "list", "Counter", "a", "--limit", "2"][..],
            &directly[..],
        ]
        .concat(),
    );
    assert_eq!(exit, Exit::Ok);
    assert_eq!(page["entries"][1], json!({"key": "b", "value": {"n": 2}}));
    assert_eq!(page["next_cursor"], "b");
    let (exit, error) =
        app_json(&[&["kv", "get", "Counter", "a", "nothing"][..], &directly[..]].concat());
    assert_eq!(
        (exit, error["error"]["code"].clone()),
        (Exit::NotFound, json!("kv_key_not_found"))
    );

    // The generic binary reads keys without the types, and refuses to write them.
    let (code, page) = durable_json(&url, &["kv", "list", "Counter", "a", "--prefix", "a"]);
    assert_eq!(
        (code, page["entries"][0]["value"].clone()),
        (0, json!([1, 2]))
    );
    let (code, error) = durable_json(&url, &["kv", "put", "Counter", "a", "x", "1"]);
    assert_eq!(
        (code, error["error"]["code"].clone()),
        (1, json!("needs_types"))
    );

    // Deleting through the gateway.
    let delete = ["kv", "delete", "Counter", "a", "a"];
    let (exit, reply) = app_json(&[&delete[..], &through_gateway[..]].concat());
    assert_eq!((exit, reply), (Exit::Ok, json!({"deleted": true})));
}

#[test]
fn gateway_refusals_exit_3() {
    let (_dir, url) = seeded_database();
    let gateway = Gateway::start(&url);
    let address = gateway.address.as_str();

    let get_a = ["objects", "get", "Counter", "a"];

    let (exit, error) = app_json(&[&get_a[..], &["--gateway", address]].concat());
    assert_eq!(
        (exit, &error["error"]["code"]),
        (Exit::Denied, &json!("unauthenticated"))
    );
    let wrong = [&get_a[..], &["--gateway", address, "--token", "wrong"]].concat();
    let (exit, _) = app_json(&wrong);
    assert_eq!(exit, Exit::Denied);

    // The read-only token reads counters, and nothing else.
    let reader = ["--gateway", address, "--token", READ_ONLY_TOKEN];
    let (exit, _) = app_json(&[&get_a[..], &reader[..]].concat());
    assert_eq!(exit, Exit::Ok);
    let delete = [&["objects", "delete", "Counter", "a"][..], &reader[..]].concat();
    let (exit, error) = app_json(&delete);
    assert_eq!(
        (exit, &error["error"]["code"]),
        (Exit::Denied, &json!("forbidden"))
    );
    let (exit, _) = app_json(&[&["objects", "get", "Reminder", "r1"][..], &reader[..]].concat());
    assert_eq!(exit, Exit::Denied);

    // The generic binary talks to the gateway too.
    let through_gateway = ["--gateway", address, "--token", TOKEN, "-o", "json"];
    let (code, out, _) = durable(&[&get_a[..], &through_gateway].concat());
    assert_eq!(code, 0);
    let object: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(object["state"], json!({"count": 3}));
    let (code, _, _) = durable(&["types", "--gateway", address]);
    assert_eq!(code, 3);
}

/// A Postgres schema private to one test, dropped with its tables at the end.
struct PostgresSchema {
    url: String,
    name: String,
}

impl PostgresSchema {
    /// `None` (the test is skipped) when `DATABASE_URL` is unset outside CI.
    fn new(test: &str) -> Option<Self> {
        let Ok(url) = std::env::var("DATABASE_URL") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "DATABASE_URL must be set when CI is set"
            );
            eprintln!("skipped: DATABASE_URL not set");
            return None;
        };
        let name = format!("cli_{test}_{}", std::process::id());
        Some(Self { url, name })
    }
}

impl Drop for PostgresSchema {
    fn drop(&mut self) {
        let tokio = tokio::runtime::Runtime::new().unwrap();
        tokio.block_on(async {
            let pool = durable_sqlx::sqlx::PgPool::connect(&self.url)
                .await
                .unwrap();
            let drop = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name);
            durable_sqlx::sqlx::query(durable_sqlx::sqlx::AssertSqlSafe(drop))
                .execute(&pool)
                .await
                .unwrap();
        });
    }
}

#[test]
fn the_generic_binary_reads_postgres_in_its_schema() {
    let Some(schema) = PostgresSchema::new("generic") else {
        return;
    };
    let tokio = tokio::runtime::Runtime::new().unwrap();
    tokio.block_on(async {
        let store = durable_sqlx::PostgresStore::builder(&schema.url)
            .schema(schema.name.as_str())
            .table_prefix("app_")
            .connect()
            .await
            .unwrap();
        let rt = Runtime::builder(store)
            .expose::<Counter>()
            .manual_alarms()
            .build();
        Counter::increment(&rt, "a", 4).await.unwrap();
        rt.schedule_alarm("a", Counter::RESET, Duration::from_secs(60))
            .await
            .unwrap();
        rt.shutdown().await;
    });
    let url = schema.url.as_str();
    let tables = [
        "--db-schema",
        schema.name.as_str(),
        "--table-prefix",
        "app_",
    ];

    let (code, types) = durable_json(url, &[&["types"][..], &tables].concat());
    assert_eq!(code, 0);
    assert_eq!(types["types"][0]["name"], "Counter");
    assert_eq!(types["types"].as_array().unwrap().len(), 1);
    let (code, object) = durable_json(
        url,
        &[&["objects", "get", "Counter", "a"][..], &tables].concat(),
    );
    assert_eq!(code, 0);
    assert_eq!(object["state"], json!({"count": 4}));
    assert_eq!(object["alarms"][0]["name"], "reset");
    let (code, dead) = durable_json(url, &[&["alarms", "dead"][..], &tables].concat());
    assert_eq!(
        (code, dead),
        (0, json!({"alarms": [], "next_cursor": null}))
    );

    let cancel = ["alarms", "cancel", "Counter", "a", "reset", "--offline"];
    let (code, reply) = durable_json(url, &[&cancel[..], &tables].concat());
    assert_eq!((code, reply), (0, json!({"cancelled": true})));

    // The same application through the application's command line, directly.
    let direct = [&call_a("get", &["--database-url", url])[..], &tables].concat();
    assert_eq!(app_json(&direct), (Exit::Ok, json!({"result": 4})));
}

/// `migrations status` reads the schema version without migrating; `migrations rollback` undoes
/// the last migration only with `--offline`, and never through a gateway.
#[test]
fn migrations_are_reported_and_rolled_back() {
    let (_dir, url) = seeded_database();
    let (code, status) = durable_json(&url, &["migrations", "status"]);
    assert_eq!(code, 0);
    let last = status["schema_version"].as_i64().expect("a version");
    assert_eq!(status["rolled_back"], Value::Null);

    let (code, refused) = durable_json(&url, &["migrations", "rollback"]);
    assert_eq!(code, 1);
    assert_eq!(refused["error"]["code"], "offline_required");

    let (code, rolled) = durable_json(&url, &["migrations", "rollback", "--offline"]);
    assert_eq!(code, 0, "{rolled}");
    assert_eq!(rolled["rolled_back"], json!(last));
    assert!(rolled["schema_version"].as_i64().unwrap() < last);
    // Status does not apply the migration again.
    let (_, status) = durable_json(&url, &["migrations", "status"]);
    assert_eq!(status["schema_version"], rolled["schema_version"]);

    let (code, _, err) = durable(&["migrations", "status", "--gateway", "http://127.0.0.1:9"]);
    assert_eq!(code, 1, "{err}");
}
