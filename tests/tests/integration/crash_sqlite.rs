//! A process killed with SIGKILL right after an acknowledged increment loses nothing, and every
//! acknowledged increment was flushed to disk before it was acknowledged; one killed while it
//! holds an alarm's claim delays the alarm by no more than the claim's lease.
//!
//! Reading the file back after the kill cannot tell whether commits were flushed: the kernel's
//! page cache outlives a killed process, so an unflushed write still reads back. The child
//! therefore runs under `strace`, which counts its `fsync`/`fdatasync` calls; at
//! `synchronous = FULL` every acknowledged commit needs one.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use durable_runtime::storage::{ObjectKey, Storage};
use durable_runtime::{Context, Runtime, durable_object};

/// What one run of the child did before it was killed.
struct Run {
    /// The values it acknowledged, in order.
    acknowledged: Vec<u64>,
    /// Its `fsync` and `fdatasync` calls, all threads counted.
    syncs: u64,
}

/// Fails with what to do when `strace` cannot trace a process here: the sync count is the
/// point of the test, so it must not pass without it.
fn require_strace() {
    let problem = match Command::new("strace")
        .args(["-o", "/dev/null", "true"])
        .output()
    {
        Ok(output) if output.status.success() => return,
        Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        Err(err) => err.to_string(),
    };
    panic!(
        "the crash test counts the child's fsync calls with strace, which cannot run here \
         ({problem}): install it (apt-get install strace; .ci/run does) and allow ptrace \
         (in a container: --cap-add SYS_PTRACE)"
    );
}

/// Runs the child on `db` at `synchronous` under `strace`, reads `values` acknowledged values,
/// kills the child with SIGKILL and collects everything it acknowledged.
fn run_child(db: &Path, synchronous: &str, values: usize, summary: &Path) -> Run {
    let mut tracer = Command::new("strace")
        .args(["-f", "-qq", "-c", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(summary)
        .arg(env!("CARGO_BIN_EXE_crash_child"))
        .arg(db)
        .arg(synchronous)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child process under strace");
    let mut lines = BufReader::new(tracer.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the child's pid").unwrap();
    let pid = first
        .strip_prefix("pid ")
        .unwrap_or_else(|| panic!("expected `pid <id>`, got {first:?}"))
        .to_owned();
    let kill = {
        let pid = pid.clone();
        move || {
            Command::new("kill")
                .args(["-KILL", &pid])
                .status()
                .expect("run kill");
        }
    };
    // A child that stops answering is killed after a minute: its output ends and the test
    // fails on the missing values instead of hanging.
    let (finished, watchdog) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn({
        let kill = kill.clone();
        move || {
            if watchdog.recv_timeout(Duration::from_secs(60)).is_err() {
                kill();
            }
        }
    });
    let mut acknowledged = Vec::with_capacity(values + 16);
    for _ in 0..values {
        let line = lines.next().expect("an acknowledged value").unwrap();
        acknowledged.push(line.parse::<u64>().unwrap());
    }
    // SIGKILL: no destructor, no flush, no graceful anything.
    kill();
    tracer.wait().unwrap();
    finished.send(()).unwrap();
    watchdog.join().unwrap();
    // Values the child acknowledged after we stopped reading are still in the pipe.
    for line in lines.map_while(Result::ok) {
        if let Ok(value) = line.parse::<u64>() {
            acknowledged.push(value);
        }
    }
    let summary = std::fs::read_to_string(summary).expect("strace's summary");
    Run {
        acknowledged,
        syncs: sync_calls(&summary),
    }
}

/// The `fsync` and `fdatasync` calls in a summary of `strace -c`, whose columns are
/// `% time`, `seconds`, `usecs/call`, `calls`, `errors` (empty when none) and `syscall`.
fn sync_calls(summary: &str) -> u64 {
    summary
        .lines()
        .filter_map(|line| {
            let columns: Vec<&str> = line.split_whitespace().collect();
            match columns.last() {
                Some(&("fsync" | "fdatasync")) => columns.get(3)?.parse::<u64>().ok(),
                _ => None,
            }
        })
        .sum()
}

#[tokio::test]
async fn sigkill_after_an_acknowledged_increment_loses_nothing() {
    require_strace();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    for round in 0..3 {
        let summary = dir.path().join(format!("syncs-{round}.txt"));
        let run = run_child(&path, "full", 50 + round * 37, &summary);
        let last_acknowledged = *run.acknowledged.last().unwrap();
        // One commit per acknowledged increment (they run one after the other), each flushed.
        assert!(
            run.syncs >= run.acknowledged.len() as u64,
            "round {round}: {} acknowledged commits, {} fsync/fdatasync calls",
            run.acknowledged.len(),
            run.syncs
        );

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

/// Objects that go dormant between calls wake from the state the registry kept, not from
/// storage: a process killed among such calls loses none it acknowledged, and the next process
/// goes on from what storage holds.
#[tokio::test]
async fn sigkill_among_calls_that_wake_dormant_objects_loses_nothing() {
    // As many counters as the child's `dormant` mode increments in turn.
    const OBJECTS: usize = 8;
    require_strace();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dormant.db");
    let mut stored = [0u64; OBJECTS];
    for round in 0..2 {
        let summary = dir.path().join(format!("syncs-{round}.txt"));
        let run = run_child(&path, "dormant", 6 * OBJECTS, &summary);
        assert!(
            run.syncs >= run.acknowledged.len() as u64,
            "round {round}: {} acknowledged commits, {} fsync/fdatasync calls",
            run.acknowledged.len(),
            run.syncs
        );
        // The child calls the objects in turn, one call at a time: its i-th value is object
        // i % 8's, and each builds on the one before (in this process, a dormant object's).
        for (i, value) in run.acknowledged.iter().enumerate() {
            let expected = stored[i % OBJECTS] + (i / OBJECTS) as u64 + 1;
            assert_eq!(*value, expected, "round {round}, call {i}");
        }
        let store = durable_sqlx::SqliteStore::open(&path).await.unwrap();
        for (object, count) in stored.iter_mut().enumerate() {
            let last_acknowledged = run
                .acknowledged
                .iter()
                .skip(object)
                .step_by(OBJECTS)
                .next_back()
                .copied()
                .unwrap();
            let loaded = store
                .load(&ObjectKey::new("CrashCounter", format!("dormant-{object}")))
                .await
                .unwrap()
                .object()
                .expect("state stored");
            let state: serde_json::Value = serde_json::from_slice(&loaded.state).unwrap();
            *count = state["count"].as_u64().unwrap();
            assert!(
                *count >= last_acknowledged && *count <= last_acknowledged + 1,
                "round {round}, object {object}: stored {count}, last acknowledged \
                 {last_acknowledged}"
            );
        }
        store.close().await;
    }
}

/// Killed while its background checkpointer copies the WAL and catches up with the commits
/// made meanwhile (every 4 pages, so all the time): every acknowledged increment survives,
/// and the database is intact.
#[tokio::test]
async fn sigkill_while_the_checkpointer_catches_up_loses_nothing() {
    require_strace();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("checkpointing.db");
    for round in 0..3 {
        let summary = dir.path().join(format!("syncs-{round}.txt"));
        let run = run_child(&path, "full-short-wal", 200 + round * 37, &summary);
        let last_acknowledged = *run.acknowledged.last().unwrap();
        // Commits and checkpoints both flush.
        assert!(
            run.syncs > run.acknowledged.len() as u64,
            "round {round}: {} acknowledged commits, {} fsync/fdatasync calls",
            run.acknowledged.len(),
            run.syncs
        );
        let store = durable_sqlx::SqliteStore::open(&path).await.unwrap();
        let check: String = durable_sqlx::sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(check, "ok", "round {round}");
        let stored = store
            .load(&ObjectKey::new("CrashCounter", "crash"))
            .await
            .unwrap()
            .object()
            .expect("state stored");
        let state: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
        let count = state["count"].as_u64().unwrap();
        assert!(
            count >= last_acknowledged && count <= last_acknowledged + 1,
            "round {round}: stored {count}, last acknowledged {last_acknowledged}"
        );
        store.close().await;
    }
}

/// The sync count tells a store that flushes each commit from one that does not: at
/// `synchronous = NORMAL` commits are acknowledged without a flush (and the file still reads
/// back complete after the kill).
#[tokio::test]
async fn the_sync_count_tells_commits_that_were_not_flushed() {
    require_strace();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let run = run_child(&path, "normal", 200, &dir.path().join("syncs.txt"));
    assert!(
        run.syncs < run.acknowledged.len() as u64 / 2,
        "{} acknowledged commits, {} fsync/fdatasync calls",
        run.acknowledged.len(),
        run.syncs
    );
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
