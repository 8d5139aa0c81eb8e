//! Large states on SQLite are stored compressed (`SqliteStoreBuilder::compress_states_from`):
//! the runtime and the application see the same bytes, small states stay JSON text that SQL
//! reads, a compressed state that does not decompress fails its object alone and is kept, and
//! the write path's guarantees hold for compressed states as for text: a failed or unknown
//! commit rolls the object back to what is stored, two runtimes on one file fence each other's
//! writes, and a killed process loses no acknowledged write. The store's statement journals
//! stay in memory, so that a batch of large states does not write them to a temporary file.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use durable_runtime::storage::{Loaded, ObjectKey, ObjectWrite, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{DurableObject, Error, Runtime};
use durable_sqlx::{SqliteStore, SqliteStoreBuilder};
use durable_tests::large_state::{Journal, letters};

/// A write creating `key` with `state`.
fn insert(key: &ObjectKey, state: &[u8]) -> ObjectWrite {
    ObjectWrite {
        key: key.clone(),
        expected_version: 0,
        state: Some(state.to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    }
}

/// A JSON state of about `bytes` bytes of varied letters.
fn json_state(bytes: usize, seed: u64) -> Vec<u8> {
    format!(r#"{{"n":1,"pad":"{}"}}"#, letters(bytes, seed)).into_bytes()
}

/// How `key`'s state is stored: SQLite's type of the value, and its length in bytes.
async fn stored_form(store: &SqliteStore, key: &ObjectKey) -> (String, i64) {
    durable_sqlx::sqlx::query_as(
        "SELECT typeof(state), length(CAST(state AS BLOB)) FROM durable_objects
             WHERE object_type = ?1 AND object_id = ?2",
    )
    .bind(&key.object_type)
    .bind(&key.object_id)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// The state stored for `key`, as the store loads it.
async fn loaded_state(store: &impl Storage, key: &ObjectKey) -> Vec<u8> {
    store
        .load(key)
        .await
        .unwrap()
        .object()
        .expect("stored")
        .state
}

#[tokio::test]
async fn large_states_are_stored_compressed_and_read_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).await.unwrap();
    let large = ObjectKey::new("Doc", "large");
    let small = ObjectKey::new("Doc", "small");
    let large_state = json_state(64 * 1024, 1);
    let small_state = json_state(1024, 2);
    store
        .commit(&[insert(&large, &large_state), insert(&small, &small_state)])
        .await
        .unwrap();

    let (form, bytes) = stored_form(&store, &large).await;
    assert_eq!(form, "blob");
    // 26 letters take under 5 of a byte's 8 bits once entropy-coded.
    assert!(
        bytes < large_state.len() as i64 * 7 / 10,
        "{bytes} bytes stored for a {}-byte state",
        large_state.len()
    );
    assert_eq!(stored_form(&store, &small).await.0, "text");
    let (n,): (i64,) = durable_sqlx::sqlx::query_as(
        "SELECT json_extract(state, '$.n') FROM durable_objects WHERE object_id = 'small'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(n, 1);

    assert_eq!(loaded_state(&store, &large).await, large_state);
    assert_eq!(loaded_state(&store, &small).await, small_state);
    let missing = ObjectKey::new("Doc", "missing");
    let many = store
        .load_many(&[small.clone(), large.clone(), missing])
        .await
        .unwrap();
    assert_eq!(many[0].clone().object().unwrap().state, small_state);
    assert_eq!(many[1].clone().object().unwrap().state, large_state);
    assert_eq!(many[2], Loaded::Absent);

    // An update replaces a compressed state with another, and a state that shrinks below the
    // threshold goes back to text.
    let next = json_state(48 * 1024, 3);
    let mut write = insert(&large, &next);
    write.expected_version = 1;
    store.commit(&[write]).await.unwrap();
    assert_eq!(stored_form(&store, &large).await.0, "blob");
    assert_eq!(loaded_state(&store, &large).await, next);
    let mut write = insert(&large, &small_state);
    write.expected_version = 2;
    store.commit(&[write]).await.unwrap();
    assert_eq!(stored_form(&store, &large).await.0, "text");
    assert_eq!(loaded_state(&store, &large).await, small_state);
}

/// A batch's multi-row statements journal the pages they change; SQLite spills that journal to
/// a temporary file past 64 KiB, which for large states handed as many bytes again to `write`
/// as the WAL got. Every connection of the store keeps temporary storage in memory.
#[tokio::test]
async fn statement_journals_stay_in_memory_on_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::builder(dir.path().join("c.db"))
        .max_connections(3)
        .open()
        .await
        .unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = store.pool().acquire().await.unwrap();
        let temp_store: i64 = durable_sqlx::sqlx::query_scalar("PRAGMA temp_store")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(temp_store, 2, "MEMORY");
        held.push(conn);
    }
}

#[tokio::test]
async fn without_compression_states_stay_text_and_compressed_rows_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let state = json_state(64 * 1024, 4);
    let compressing = SqliteStore::builder(&path)
        .compress_states_from(Some(SqliteStoreBuilder::DEFAULT_COMPRESS_STATES_FROM))
        .open()
        .await
        .unwrap();
    let plain = SqliteStore::builder(&path)
        .compress_states_from(None)
        .open()
        .await
        .unwrap();
    let text = ObjectKey::new("Doc", "text");
    let packed = ObjectKey::new("Doc", "packed");
    plain.commit(&[insert(&text, &state)]).await.unwrap();
    compressing
        .commit(&[insert(&packed, &state)])
        .await
        .unwrap();
    assert_eq!(stored_form(&plain, &text).await.0, "text");
    assert_eq!(stored_form(&plain, &packed).await.0, "blob");
    // Each store reads both forms.
    for store in [&plain, &compressing] {
        assert_eq!(loaded_state(store, &text).await, state);
        assert_eq!(loaded_state(store, &packed).await, state);
    }
    // A threshold above the state leaves it text.
    let high = SqliteStore::builder(&path)
        .compress_states_from(Some(state.len() + 1))
        .open()
        .await
        .unwrap();
    let below = ObjectKey::new("Doc", "below");
    high.commit(&[insert(&below, &state)]).await.unwrap();
    assert_eq!(stored_form(&high, &below).await.0, "text");
}

#[tokio::test]
async fn a_compressed_state_that_does_not_decompress_fails_its_object_alone_and_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).await.unwrap();
    let rt = Runtime::new(store.clone());
    for entry in 0..6 {
        Journal::append(&rt, "broken", letters(4096, entry))
            .await
            .unwrap();
        Journal::append(&rt, "sound", letters(4096, entry + 100))
            .await
            .unwrap();
    }
    rt.shutdown().await;
    let broken = ObjectKey::new(Journal::TYPE_NAME, "broken");
    let sound = ObjectKey::new(Journal::TYPE_NAME, "sound");
    assert_eq!(stored_form(&store, &broken).await.0, "blob");
    // Cut the frame short: it still starts as a zstd frame, but does not decompress.
    durable_sqlx::sqlx::query(
        "UPDATE durable_objects SET state = substr(state, 1, length(state) / 2)
             WHERE object_id = 'broken'",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let cut: (Vec<u8>,) = durable_sqlx::sqlx::query_as(
        "SELECT state FROM durable_objects WHERE object_id = 'broken'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();

    let rt = Runtime::new(store.clone());
    let failed = Journal::append(&rt, "broken", "more".into()).await;
    assert!(matches!(failed, Err(Error::Decode { .. })), "{failed:?}");
    assert!(matches!(
        Journal::appended(&rt, "broken").await,
        Err(Error::Decode { .. })
    ));
    // Its neighbour, loaded in the same batched read, is unaffected.
    let many = store
        .load_many(&[broken.clone(), sound.clone()])
        .await
        .unwrap();
    assert_eq!(many[0].clone().object().unwrap().state, cut.0);
    assert_eq!(Journal::append(&rt, "sound", "x".into()).await.unwrap(), 7);
    rt.shutdown().await;
    let kept: (Vec<u8>, i64) = durable_sqlx::sqlx::query_as(
        "SELECT state, version FROM durable_objects WHERE object_id = 'broken'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(kept, (cut.0, 6), "the undecodable row is never overwritten");
}

/// Appends `entries` entries of 4 KiB to `id` on `rt` (stored compressed from the fourth).
async fn fill(rt: &Runtime, id: &str, entries: u64) {
    for entry in 0..entries {
        Journal::append(rt, id, letters(4096, entry)).await.unwrap();
    }
}

/// What storage holds for the journal `key`.
async fn stored_journal(store: &impl Storage, key: &ObjectKey) -> serde_json::Value {
    serde_json::from_slice(&loaded_state(store, key).await).unwrap()
}

#[tokio::test]
async fn a_failed_or_unknown_commit_of_a_large_state_rolls_the_object_back_to_storage() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("c.db")).await.unwrap();
    let faulty = FaultyStorage::new(store.clone());
    let rt = Runtime::new(faulty.clone());
    fill(&rt, "j", 8).await;
    let key = ObjectKey::new(Journal::TYPE_NAME, "j");
    assert_eq!(stored_form(&store, &key).await.0, "blob");

    // Failed: nothing is written, and the object answers from the stored state.
    faulty.fail_commits(1);
    let failed = Journal::append(&rt, "j", letters(4096, 50)).await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(Journal::appended(&rt, "j").await.unwrap(), 8);
    assert_eq!(
        rt.read_state::<Journal>("j")
            .await
            .unwrap()
            .unwrap()
            .appended,
        8
    );

    // Applied, but reported failed: the outcome is unknown, and the object reloads what
    // storage holds (the write, here) instead of keeping its own copy.
    faulty.fail_commits_after_applying(1);
    let unknown = Journal::append(&rt, "j", letters(4096, 51)).await;
    assert!(unknown.is_err(), "{unknown:?}");
    assert_eq!(Journal::appended(&rt, "j").await.unwrap(), 9);
    assert_eq!(Journal::append(&rt, "j", "last".into()).await.unwrap(), 10);
    rt.shutdown().await;

    let stored = stored_journal(&store, &key).await;
    assert_eq!(stored["appended"], 10);
    let entries = stored["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 10);
    assert_eq!(entries[8].as_str().unwrap(), letters(4096, 51));
    assert_eq!(entries[9], "last");
}

#[tokio::test]
async fn two_runtimes_on_one_file_fence_each_others_large_states() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    let one = Runtime::new(SqliteStore::open(&path).await.unwrap());
    let two = Runtime::new(SqliteStore::open(&path).await.unwrap());
    fill(&one, "j", 6).await;
    // `two` loads the compressed state `one` wrote and writes its own on top.
    assert_eq!(
        Journal::append(&two, "j", "from two".into()).await.unwrap(),
        7
    );
    // `one` still holds 6 entries: its write is refused, and it reloads.
    let refused = Journal::append(&one, "j", "from one".into()).await;
    assert!(
        matches!(refused, Err(Error::Conflict { .. })),
        "{refused:?}"
    );
    assert_eq!(
        Journal::append(&one, "j", "from one".into()).await.unwrap(),
        8
    );
    assert_eq!(
        Journal::appended(&two, "j").await.unwrap(),
        7,
        "two's copy until it writes"
    );
    one.shutdown().await;
    two.shutdown().await;

    let store = SqliteStore::open(&path).await.unwrap();
    let key = ObjectKey::new(Journal::TYPE_NAME, "j");
    assert_eq!(stored_form(&store, &key).await.0, "blob");
    let stored = stored_journal(&store, &key).await;
    let entries: Vec<&str> = stored["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry.as_str().unwrap())
        .collect();
    assert_eq!(entries.len(), 8);
    assert_eq!(&entries[6..], ["from two", "from one"]);
}

/// Runs `crash_child <db> large`, reads `values` acknowledged appends, kills it with SIGKILL
/// and returns the last value it acknowledged.
fn append_until_killed(db: &Path, values: usize) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_crash_child"))
        .arg(db)
        .arg("large")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the child's pid").unwrap();
    assert!(first.starts_with("pid "), "{first:?}");
    // A child that stops answering is killed after a minute: the test fails on the missing
    // values instead of hanging.
    let pid = child.id().to_string();
    let (finished, watchdog) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if watchdog.recv_timeout(Duration::from_secs(60)).is_err() {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    });
    let mut last = 0;
    for _ in 0..values {
        let line = lines.next().expect("an acknowledged value").unwrap();
        last = line.parse::<u64>().unwrap();
    }
    // SIGKILL: no destructor, no flush, no graceful anything.
    child.kill().expect("SIGKILL the child");
    child.wait().unwrap();
    finished.send(()).unwrap();
    watchdog.join().unwrap();
    // Values acknowledged after we stopped reading are still in the pipe.
    for line in lines.map_while(Result::ok) {
        if let Ok(value) = line.parse::<u64>() {
            last = value;
        }
    }
    last
}

#[tokio::test]
async fn sigkill_while_writing_large_states_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.db");
    for round in 0..3 {
        let last = append_until_killed(&path, 40 + round * 17);
        let store = SqliteStore::open(&path).await.unwrap();
        let check: String = durable_sqlx::sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(check, "ok", "round {round}");
        let key = ObjectKey::new(Journal::TYPE_NAME, "crash");
        assert_eq!(stored_form(&store, &key).await.0, "blob", "round {round}");
        let entries = stored_journal(&store, &key).await["appended"]
            .as_u64()
            .unwrap();
        // Every acknowledged append is there; at most the one in flight may be too.
        assert!(
            entries >= last && entries <= last + 1,
            "round {round}: {entries} stored, last acknowledged {last}"
        );
        store.close().await;
    }
}
