//! A process killed with SIGKILL right after an acknowledged increment loses nothing.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use durable_runtime::storage::{ObjectKey, Storage};

#[tokio::test]
async fn sigkill_after_an_acknowledged_increment_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    for round in 0..3 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_crash_child"))
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the child process");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut last_acknowledged = 0;
        for _ in 0..(50 + round * 37) {
            last_acknowledged = lines
                .next()
                .expect("a value")
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
        // SIGKILL: no destructor, no flush, no graceful anything.
        child.kill().unwrap();
        child.wait().unwrap();
        // Values the child acknowledged after we stopped reading are still in the pipe.
        for line in lines.map_while(Result::ok) {
            if let Ok(value) = line.parse::<u64>() {
                last_acknowledged = value;
            }
        }

        let store = durable_sqlx::SqliteStore::open(&path).await.unwrap();
        let stored = store
            .load(&ObjectKey::new("CrashCounter", "crash"))
            .await
            .unwrap()
            .object()
            .expect("state stored");
        let state: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
        let count = state["count"].as_u64().unwrap();
        // Every acknowledged increment is there; at most the one in flight may be too.
        assert!(
            count >= last_acknowledged && count <= last_acknowledged + 1,
            "round {round}: stored {count}, last acknowledged {last_acknowledged}"
        );
    }
}
