//! A process whose object calls each insert an FSM instance in the same commit as the object's
//! state, killed with SIGKILL ten times, on SQLite and on Postgres: after each kill, every
//! acknowledged call's instance exists exactly once, and no instance exists without the state
//! change that inserted it.
//!
//! Postgres is found through `DATABASE_URL`; without it that test is skipped, unless `CI` is
//! set: then it fails.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use durable_runtime::fsm::store::{FsmStore, ListFilter};
use durable_runtime::storage::{ObjectKey, Storage};
use durable_tests::SchemaGuard;

/// Runs the child with `args` (its database) until it acknowledged `steps` calls, kills it with
/// SIGKILL and returns the highest step it acknowledged.
fn run_child(args: &[&OsStr], steps: usize) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_obj_fsm_child"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child process");
    let pid = child.id().to_string();
    // A child that stops answering is killed after a minute: its output ends and the test
    // fails on the missing steps instead of hanging.
    let (finished, watchdog) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if watchdog.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acknowledged = 0;
    for _ in 0..steps {
        let line = lines.next().expect("an acknowledged step").unwrap();
        acknowledged = acknowledged.max(line.parse::<u64>().unwrap());
    }
    // SIGKILL: no destructor, no flush.
    child.kill().unwrap();
    child.wait().unwrap();
    finished.send(()).unwrap();
    watchdog.join().unwrap();
    // Steps acknowledged after we stopped reading are still in the pipe.
    for line in lines.map_while(Result::ok) {
        if let Ok(step) = line.parse::<u64>() {
            acknowledged = acknowledged.max(step);
        }
    }
    acknowledged
}

/// Checks that the stored step is at least `acknowledged` and that the instances are exactly
/// those of steps 1 to it, once each; returns it.
async fn check(store: &dyn Storage, fsm: &dyn FsmStore, acknowledged: u64, round: usize) -> u64 {
    let stored = store
        .load(&ObjectKey::new("FsmSteps", "steps"))
        .await
        .unwrap()
        .object()
        .expect("stored");
    let state: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
    let n = state["n"].as_u64().unwrap();
    assert!(
        n >= acknowledged,
        "round {round}: state {n} is older than acknowledged step {acknowledged}"
    );
    let mut keys = Vec::new();
    let mut filter = ListFilter::default().fsm("kill_step").limit(1000);
    loop {
        let page = fsm.list(&filter).await.unwrap();
        let Some(last) = page.last().map(|row| row.id) else {
            break;
        };
        keys.extend(page.into_iter().map(|row| row.correlation_key.unwrap()));
        filter = filter.after(last);
    }
    keys.sort_by_key(|key| key["step:".len()..].parse::<u64>().unwrap());
    let expected: Vec<String> = (1..=n).map(|step| format!("step:{step}")).collect();
    assert_eq!(
        keys, expected,
        "round {round}: the instances of steps 1 to {n}"
    );
    n
}

#[tokio::test]
async fn sqlite_state_and_instances_survive_ten_kills_together() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("objects.db");
    let mut previous = 0;
    for round in 0..10 {
        let steps = 3 + (round * 7) % 13;
        let acknowledged = run_child(&[db.as_os_str()], steps);
        assert!(acknowledged > previous, "round {round}: no progress");
        let store = durable_sqlx::SqliteStore::open(&db).await.unwrap();
        previous = check(&store, &store.fsm(), acknowledged, round).await;
        store.close().await;
    }
}

#[tokio::test]
async fn postgres_state_and_instances_survive_ten_kills_together() {
    let url = match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "DATABASE_URL must be set when CI is set: the Postgres tests cannot be skipped"
            );
            eprintln!("skipped: DATABASE_URL not set");
            return;
        }
    };
    let guard = SchemaGuard::new(&url, "objfsm_kill").await;
    // Migrated once here, so that the children only connect.
    let store = durable_sqlx::PostgresStore::builder(&url)
        .schema(&guard.name)
        .max_connections(2)
        .connect()
        .await
        .expect("connect to Postgres");
    let fsm = store.fsm();
    let mut previous = 0;
    for round in 0..10 {
        let steps = 3 + (round * 7) % 13;
        let args = [OsStr::new(&url), OsStr::new(&guard.name)];
        let acknowledged = run_child(&args, steps);
        assert!(acknowledged > previous, "round {round}: no progress");
        previous = check(&store, &fsm, acknowledged, round).await;
    }
}
