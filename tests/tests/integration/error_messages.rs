//! The messages of the public error types, as a user reads them: plain prose that names what
//! failed and carries the cause, never Rust's debug formatting.

use std::time::Duration;

use durable_runtime::storage::{CommitError, ObjectKey, StorageError};
use durable_runtime::testing::DrainError;
use durable_runtime::{Error, InvalidId, validate_id};

fn key() -> ObjectKey {
    ObjectKey::new("Counter", "a")
}

fn message(err: Error<String>) -> String {
    err.to_string()
}

#[test]
fn handler_error() {
    assert_eq!(
        message(Error::Handler("not enough funds".to_owned())),
        "handler error: not enough funds"
    );
}

#[test]
fn invalid_id() {
    assert_eq!(
        message(Error::InvalidId(InvalidId::Empty)),
        "invalid object id: object id is empty"
    );
}

#[test]
fn invalid_id_too_long() {
    let err = validate_id(&"x".repeat(5000)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "object id is 5000 bytes long; the limit is {}",
            durable_runtime::MAX_ID_LEN
        )
    );
}

#[test]
fn invalid_id_with_nul() {
    let err = validate_id("ab\0c").unwrap_err();
    assert_eq!(
        err.to_string(),
        "object id contains a NUL character at byte 2"
    );
}

#[test]
fn panicked() {
    let err = Error::Panicked {
        key: key(),
        handler: "increment",
        message: "attempt to add with overflow".to_owned(),
    };
    assert_eq!(
        message(err),
        "handler `increment` of Counter/a panicked: attempt to add with overflow"
    );
}

#[test]
fn storage() {
    let err = Error::Storage {
        key: key(),
        source: StorageError::unavailable("connection reset"),
    };
    assert_eq!(
        message(err),
        "storage failed for Counter/a: storage unavailable: connection reset"
    );
}

#[test]
fn conflict_with_a_newer_version() {
    let err = Error::Conflict {
        key: key(),
        found: Some(226),
    };
    assert_eq!(
        message(err),
        "version conflict on Counter/a: another writer committed version 226 first"
    );
}

#[test]
fn conflict_with_a_deleted_object() {
    let err = Error::Conflict {
        key: key(),
        found: None,
    };
    assert_eq!(
        message(err),
        "version conflict on Counter/a: another writer deleted the object first"
    );
}

#[test]
fn decode() {
    let err = Error::Decode {
        key: key(),
        path: "count".to_owned(),
        message: "invalid type: string \"x\", expected i64".to_owned(),
    };
    assert_eq!(
        message(err),
        "stored state of Counter/a does not decode at `count`: \
         invalid type: string \"x\", expected i64"
    );
}

#[test]
fn encode() {
    let err = Error::Encode {
        key: key(),
        message: "key must be a string".to_owned(),
    };
    assert_eq!(
        message(err),
        "state of Counter/a cannot be encoded: key must be a string"
    );
}

#[test]
fn after_load() {
    let err = Error::AfterLoad {
        key: key(),
        message: "config missing".to_owned(),
    };
    assert_eq!(
        message(err),
        "after_load of Counter/a failed: config missing"
    );
}

#[test]
fn overloaded() {
    let err = Error::Overloaded {
        key: key(),
        capacity: 64,
    };
    assert_eq!(
        message(err),
        "Counter/a is overloaded: its queue of 64 calls is full"
    );
}

#[test]
fn too_many_objects() {
    assert_eq!(
        message(Error::TooManyObjects { key: key() }),
        "cannot start Counter/a: the runtime's cap on live objects is reached and none is idle"
    );
}

#[test]
fn timeout() {
    let err = Error::Timeout {
        key: key(),
        handler: "slow",
    };
    assert_eq!(message(err), "call to `slow` of Counter/a timed out");
}

#[test]
fn call_cycle() {
    let err = Error::CallCycle {
        key: key(),
        chain: vec![key(), ObjectKey::new("Ledger", "main")],
    };
    assert_eq!(
        message(err),
        "call cycle: Counter/a is already handling a call in the chain Counter/a -> Ledger/main"
    );
}

#[test]
fn shutting_down() {
    assert_eq!(message(Error::ShuttingDown), "the runtime is shutting down");
}

#[test]
fn commit_conflict_on_an_object_that_already_exists() {
    let err = CommitError::Conflict {
        index: 0,
        key: key(),
        expected: 0,
        found: Some(226),
    };
    assert_eq!(
        err.to_string(),
        "version conflict on Counter/a: expected no stored object, found version 226"
    );
}

#[test]
fn commit_conflict_on_a_missing_object() {
    let err = CommitError::Conflict {
        index: 0,
        key: key(),
        expected: 4,
        found: None,
    };
    assert_eq!(
        err.to_string(),
        "version conflict on Counter/a: expected version 4, found no stored object"
    );
}

#[test]
fn commit_conflict_on_a_newer_version() {
    let err = CommitError::Conflict {
        index: 1,
        key: key(),
        expected: 4,
        found: Some(5),
    };
    assert_eq!(
        err.to_string(),
        "version conflict on Counter/a: expected version 4, found version 5"
    );
}

#[test]
fn commit_storage_failure() {
    let err = CommitError::from(StorageError::rejected("no such table: durable_objects"));
    assert_eq!(
        err.to_string(),
        "storage rejected the operation: no such table: durable_objects"
    );
}

#[test]
fn drain_storage_failure() {
    let err = DrainError::from(StorageError::unavailable("disk I/O error"));
    assert_eq!(err.to_string(), "storage unavailable: disk I/O error");
}

#[test]
fn store_invalid_name() {
    let err = durable_sqlx::Error::InvalidName {
        what: "table prefix",
        value: "app-1".to_owned(),
        reason: "use lowercase letters, digits and `_`",
    };
    assert_eq!(
        err.to_string(),
        "invalid table prefix \"app-1\": use lowercase letters, digits and `_`"
    );
}

#[test]
fn store_invalid_page_size() {
    assert_eq!(
        durable_sqlx::Error::InvalidPageSize(1000).to_string(),
        "invalid SQLite page size 1000: use a power of two from 512 to 65536 bytes"
    );
}

#[tokio::test]
async fn store_invalid_location() {
    let err = durable_sqlx::PostgresStore::connect("postgres://[not a host")
        .await
        .unwrap_err();
    assert!(matches!(err, durable_sqlx::Error::InvalidLocation(_)));
    assert_eq!(
        err.to_string(),
        "invalid database location: error with configuration: invalid IPv6 address"
    );
}

#[test]
fn store_migration() {
    let err = durable_sqlx::Error::Migration {
        version: 3,
        description: "version mismatch",
        source: StorageError::rejected("permission denied for schema public"),
    };
    assert_eq!(
        err.to_string(),
        "schema migration 3 (version mismatch) failed: \
         storage rejected the operation: permission denied for schema public"
    );
}

#[test]
fn store_storage_failure() {
    let err = durable_sqlx::Error::from(StorageError::unavailable("connection refused"));
    assert_eq!(err.to_string(), "storage unavailable: connection refused");
}

#[tokio::test]
async fn sqlite_in_a_missing_directory_names_the_path_and_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let path = missing.join("app.db");
    let err = durable_sqlx::SqliteStore::open(&path).await.unwrap_err();
    assert!(matches!(err, durable_sqlx::Error::Open { .. }), "{err:?}");
    assert!(!err.is_retryable());
    assert_eq!(
        err.to_string(),
        format!(
            "cannot open SQLite database {} (directory {} does not exist): \
             storage rejected the operation: \
             error returned from database: (code: 14) unable to open database file",
            path.display(),
            missing.display()
        )
    );
}

#[tokio::test]
async fn postgres_on_a_closed_port_fails_at_once_with_the_cause() {
    // A port nothing listens on: bound, then released.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("postgres://postgres@127.0.0.1:{port}/test");
    let connecting = durable_sqlx::PostgresStore::connect(&url);
    // The pool's acquire timeout is 10 s: an answer well before it means no retry loop ran.
    let err = tokio::time::timeout(Duration::from_secs(3), connecting)
        .await
        .expect("connecting to a closed port fails at once, not after the acquire timeout")
        .unwrap_err();
    assert!(matches!(err, durable_sqlx::Error::Open { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert_eq!(
        err.to_string(),
        format!(
            "cannot open PostgreSQL database `test` at 127.0.0.1:{port}: storage unavailable: \
             error communicating with database: Connection refused (os error 111)"
        )
    );
}
