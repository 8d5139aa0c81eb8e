//! A process changing an object's state and keys together, killed with SIGKILL twenty times:
//! after each kill, the state and every key come from the same acknowledged call, never mixed,
//! and never older than the last call the process acknowledged.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use durable_runtime::storage::{ObjectKey, Storage};

/// Runs the child on `db` until it acknowledged `steps` calls, kills it with SIGKILL and
/// returns the highest step it acknowledged.
fn run_child(db: &Path, steps: usize) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kv_child"))
        .arg(db)
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

/// Checks that state and keys name one step, at least `acknowledged`; returns it.
async fn check(db: &Path, acknowledged: u64, round: usize) -> u64 {
    let store = durable_sqlx::SqliteStore::open(db).await.unwrap();
    let key = ObjectKey::new("KvSteps", "steps");
    let stored = store.load(&key).await.unwrap().object().expect("stored");
    let state: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
    let n = state["n"].as_u64().unwrap();
    assert!(
        n >= acknowledged,
        "round {round}: state {n} is older than acknowledged step {acknowledged}"
    );
    let number = |bytes: Vec<u8>| serde_json::from_slice::<u64>(&bytes).unwrap();
    let last = store.kv_get(&key, "last").await.unwrap().map(number);
    assert_eq!(last, Some(n), "round {round}: `last` and the state differ");
    let steps = store.kv_list(&key, "step", None, 10).await.unwrap();
    let steps: Vec<(String, u64)> = steps.into_iter().map(|(k, v)| (k, number(v))).collect();
    assert_eq!(steps, [(format!("step{n:09}"), n)], "round {round}");
    for slot in 0..10u64 {
        let value = store
            .kv_get(&key, &format!("slot{slot}"))
            .await
            .unwrap()
            .map(number);
        // The latest step that wrote this slot.
        let latest = (1..=n).rev().find(|m| m % 10 == slot);
        assert_eq!(value, latest, "round {round}: slot {slot} at step {n}");
    }
    let usage = store.kv_usage(&key).await.unwrap();
    assert_eq!(usage.keys, 2 + n.min(10), "round {round}: counted keys");
    drop(store);
    n
}

#[tokio::test]
async fn state_and_keys_survive_twenty_kills_together() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kv.db");
    let mut previous = 0;
    for round in 0..20 {
        let steps = 3 + (round * 7) % 13;
        let acknowledged = run_child(&db, steps);
        assert!(acknowledged > previous, "round {round}: no progress");
        previous = check(&db, acknowledged, round).await;
    }
}
