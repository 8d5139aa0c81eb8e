//! A process killed with SIGKILL right after an acknowledged increment loses nothing, and one
//! killed while it holds an alarm's claim delays the alarm by no more than the claim's lease.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use durable_runtime::storage::{ObjectKey, Storage};
use durable_runtime::{Context, Runtime, durable_object};

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

/// The restarted side of the child's `CrashAlarm`: records when its alarm fires.
#[durable_object]
pub struct CrashAlarm {
    fired_micros: u64,
}

#[durable_object]
impl CrashAlarm {
    #[alarm]
    fn ring(&mut self, ctx: &Context) {
        self.fired_micros = micros(ctx.now());
    }
}

fn micros(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

/// A process killed after its scheduler claimed an alarm (300 ms ahead, as in the child's
/// mode) and before the firing committed leaves a claim nobody renews. A runtime restarted with
/// the default settings fires the alarm once the claim's lease ends: within 2 s of the later
/// of its due time and the restart (asserted with room for a loaded machine; a claim that
/// lasted a minute, as claims once did, fails it by far).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_claimed_by_a_killed_process_fires_soon_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("alarm.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_crash_child"))
        .arg(&path)
        .args(["alarm", "300"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().expect("the child reports the claim").unwrap();
    assert_eq!(line, "claimed");
    child.kill().unwrap();
    child.wait().unwrap();
    let restarted = SystemTime::now();

    let store = durable_sqlx::SqliteStore::open(&path).await.unwrap();
    let rt = Runtime::builder(store).register::<CrashAlarm>().build();
    let alarms = rt.list_alarms::<CrashAlarm>("crash").await.unwrap();
    let due = alarms[0].due_at;
    assert!(
        alarms[0].claimed_at.is_some(),
        "left claimed by the killed process"
    );
    let fired = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(state) = rt.read_state::<CrashAlarm>("crash").await.unwrap()
                && state.fired_micros > 0
            {
                return UNIX_EPOCH + Duration::from_micros(state.fired_micros);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the alarm fires within 30 s of the restart");
    let late = fired
        .duration_since(due.max(restarted))
        .unwrap_or(Duration::ZERO);
    eprintln!("fired {late:?} after the later of its due time and the restart");
    assert!(late < Duration::from_secs(4), "fired {late:?} late");
    rt.shutdown().await;
}
