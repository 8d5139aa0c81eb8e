//! What both dialects do when a batch checked versions inside its own statement and one did
//! not match: the statement failed without saying which write, so the store reads the stored
//! versions of the batch's objects and names the first write whose expectation does not hold.

use std::collections::HashMap;

use durable_runtime::storage::{CommitError, ObjectKey, ObjectWrite, StorageError};

use crate::schema::from_db_version;

/// How often a batch is tried again when the write that failed its version check cannot be
/// found afterwards (another process changed the row again in between).
pub(crate) const UNLOCATED_RETRIES: usize = 8;

/// The error of a batch that failed its version checks [`UNLOCATED_RETRIES`] times without a
/// write to blame.
pub(crate) fn kept_changing() -> CommitError {
    StorageError::unavailable(std::io::Error::other(
        "a batch kept failing its version checks on rows that other writers kept changing",
    ))
    .into()
}

/// Whether `error` is the database error a version check raised: its code is `code` and its
/// message names `check`. (The code keeps out other errors that name it, such as a missing
/// function or table when the store's migrations were not applied.)
pub(crate) fn raised_by(error: &sqlx::Error, code: &str, check: &str) -> bool {
    error
        .as_database_error()
        .is_some_and(|db| db.code().as_deref() == Some(code) && db.message().contains(check))
}

/// A stored row as read to locate a conflict: type, id, version, and whether it holds a state
/// (false for the tombstone of a deleted object).
pub(crate) type StoredVersion = (String, String, i64, bool);

/// The first of `writes` (positions in the batch, in batch order) whose expected version does
/// not hold against the `stored` rows of the batch's objects.
pub(crate) fn first_conflict<'a>(
    writes: impl IntoIterator<Item = (usize, &'a ObjectWrite)>,
    stored: Vec<StoredVersion>,
) -> Result<Option<CommitError>, StorageError> {
    let mut rows: HashMap<ObjectKey, (u64, bool)> = HashMap::with_capacity(stored.len());
    for (object_type, object_id, version, has_state) in stored {
        rows.insert(
            ObjectKey::new(object_type, object_id),
            (from_db_version(version)?, has_state),
        );
    }
    Ok(writes.into_iter().find_map(|(index, write)| {
        let row = rows.get(&write.key).copied();
        // Only a write with a state can create an object, over no row or over a tombstone; a
        // version-only write needs the object stored.
        let holds = match (&write.state, write.expected_version) {
            (Some(_), 0) => row.is_none(),
            (Some(_), expected) => row.is_some_and(|(version, _)| version == expected),
            (None, expected) => row == Some((expected, true)),
        };
        (!holds).then(|| CommitError::Conflict {
            index,
            key: write.key.clone(),
            expected: write.expected_version,
            found: row.map(|(version, _)| version),
        })
    }))
}
