//! A process making calls with idempotency keys, each changing its object's state and keys,
//! killed with SIGKILL twenty times. After each kill, every acknowledged key replayed gets
//! its stored reply without running again; a key the process started but did not see
//! acknowledged either ran once (and replays) or not at all (and runs now, once); no call ever
//! ran twice.

#[path = "../../shared/tally.rs"]
mod tally;
use tally::Tally;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use durable_runtime::Runtime;
use durable_runtime::storage::{ObjectKey, Storage};

/// What the child printed: the keys it started (with their amounts) and the replies it got.
#[derive(Default)]
struct Seen {
    started: BTreeMap<String, u64>,
    acknowledged: BTreeMap<String, u64>,
}

impl Seen {
    /// Takes one line of the child's output; returns whether it was an acknowledgement.
    fn take(&mut self, line: &str) -> bool {
        let parts: Vec<&str> = line.split(' ').collect();
        match parts[..] {
            ["start", key, amount] => {
                self.started.insert(key.to_owned(), amount.parse().unwrap());
                false
            }
            ["ack", key, _, reply] => {
                self.acknowledged
                    .insert(key.to_owned(), reply.parse().unwrap());
                true
            }
            // A line cut short by the kill.
            _ => false,
        }
    }
}

/// Runs the child on `db` until it acknowledged `steps` calls, kills it with SIGKILL and
/// returns what it printed.
fn run_child(db: &Path, round: usize, steps: usize) -> Seen {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idem_child"))
        .arg(db)
        .arg(round.to_string())
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
    let mut seen = Seen::default();
    let mut acks = 0;
    while acks < steps {
        let line = lines.next().expect("an acknowledged call").unwrap();
        if seen.take(&line) {
            acks += 1;
        }
    }
    // SIGKILL: no destructor, no flush.
    child.kill().unwrap();
    child.wait().unwrap();
    finished.send(()).unwrap();
    watchdog.join().unwrap();
    // Lines printed after we stopped reading are still in the pipe.
    for line in lines.map_while(Result::ok) {
        seen.take(&line);
    }
    seen
}

/// The calls recorded as run, with the count each made.
async fn ran(store: &dyn Storage) -> BTreeMap<String, u64> {
    let key = ObjectKey::new("Tally", "t");
    store
        .kv_list(&key, "ran/", None, usize::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|(k, v)| {
            let call = k.strip_prefix("ran/").unwrap().to_owned();
            (call, serde_json::from_slice(&v).unwrap())
        })
        .collect()
}

/// `calls` and `total` of the stored tally.
async fn tally(rt: &Runtime) -> (u64, u64) {
    let state = rt.read_state::<Tally>("t").await.unwrap().expect("stored");
    (state.calls, state.total)
}

/// Checks that no call ran twice: one count, one key and one amount per call run.
async fn check_counted(rt: &Runtime, store: &dyn Storage, amounts: &BTreeMap<String, u64>) {
    let ran = ran(store).await;
    let (calls, total) = tally(rt).await;
    assert_eq!(calls, ran.len() as u64, "a call ran twice");
    let mut counts: Vec<u64> = ran.values().copied().collect();
    counts.sort_unstable();
    assert_eq!(
        counts,
        (1..=calls).collect::<Vec<_>>(),
        "each run counted once"
    );
    let expected: u64 = ran.keys().map(|call| amounts[call]).sum();
    assert_eq!(total, expected, "amounts added once each");
}

async fn replay(rt: &Runtime, call: &str, amount: u64) -> u64 {
    Tally::with(rt)
        .idempotency_key(call)
        .add("t", call.to_owned(), amount)
        .await
        .unwrap()
}

#[tokio::test]
async fn idempotent_replies_survive_twenty_kills() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("idem.db");
    let mut amounts = BTreeMap::new();
    let mut acknowledged = BTreeMap::new();
    for round in 0..20 {
        let steps = 3 + (round * 7) % 13;
        let seen = run_child(&db, round, steps);
        amounts.extend(seen.started.clone());
        acknowledged.extend(seen.acknowledged.clone());

        let store = std::sync::Arc::new(durable_sqlx::SqliteStore::open(&db).await.unwrap());
        let rt = Runtime::new(std::sync::Arc::clone(&store));
        check_counted(&rt, &*store, &amounts).await;
        let ran_before = ran(&*store).await;
        let (calls_before, _) = tally(&rt).await;

        // Every acknowledged key, of this round and the earlier ones, replays its reply.
        for (call, reply) in &acknowledged {
            assert_eq!(
                ran_before.get(call),
                Some(reply),
                "round {round}: {call} ran"
            );
            assert_eq!(
                replay(&rt, call, amounts[call]).await,
                *reply,
                "round {round}: {call} replayed"
            );
        }
        assert_eq!(
            tally(&rt).await.0,
            calls_before,
            "round {round}: no replay ran"
        );

        // A key started but not acknowledged ran once or not at all.
        let mut calls = calls_before;
        for (call, amount) in &seen.started {
            if seen.acknowledged.contains_key(call) {
                continue;
            }
            let reply = replay(&rt, call, *amount).await;
            match ran_before.get(call) {
                Some(stored) => assert_eq!(reply, *stored, "round {round}: {call} replayed"),
                None => {
                    calls += 1;
                    assert_eq!(reply, calls, "round {round}: {call} ran now");
                }
            }
            assert_eq!(replay(&rt, call, *amount).await, reply);
            acknowledged.insert(call.clone(), reply);
        }
        assert_eq!(tally(&rt).await.0, calls, "round {round}");
        check_counted(&rt, &*store, &amounts).await;
        rt.shutdown().await;
    }
    assert!(acknowledged.len() >= 20 * 3);
}
