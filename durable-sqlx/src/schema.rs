//! What both dialects share: table names, the embedded migrations, time and number conversions.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use durable_runtime::storage::{Loaded, StorageError, StoredObject};
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

use crate::error::{Error, rejected};

/// The longest accepted table prefix, in bytes (Postgres identifiers hold at most 63 bytes and
/// the longest name the prefix goes in front of, `durable_fsm_signals_target`, is 26 bytes long).
pub(crate) const MAX_PREFIX_LEN: usize = 32;

/// The longest accepted Postgres schema name, in bytes.
#[cfg(feature = "postgres")]
pub(crate) const MAX_SCHEMA_LEN: usize = 63;

/// Checks that `value` is a plain lowercase identifier (or, for a prefix, empty).
pub(crate) fn validate_name(
    what: &'static str,
    value: &str,
    max_len: usize,
    allow_empty: bool,
) -> Result<(), Error> {
    let invalid = |reason| {
        Err(Error::InvalidName {
            what,
            value: value.to_owned(),
            reason,
        })
    };
    if value.is_empty() {
        return if allow_empty {
            Ok(())
        } else {
            invalid("it is empty")
        };
    }
    if value.len() > max_len {
        return invalid("it is too long (a table prefix holds at most 32 bytes, a schema 63)");
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return invalid("use only lowercase ASCII letters, digits and `_`, e.g. `app1_`");
    }
    if value.as_bytes()[0].is_ascii_digit() {
        return invalid("it must start with a letter or `_`");
    }
    Ok(())
}

/// The names of the store's tables.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    /// Prepended to table names: `schema.` (if any) and the table prefix.
    pub(crate) qualifier: String,
    /// Prepended to index names: the table prefix only.
    pub(crate) index_prefix: String,
    /// The Postgres schema, if any.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) schema: Option<String>,
    pub(crate) objects: String,
    pub(crate) alarms: String,
    /// Key-value storage per object.
    pub(crate) kv: String,
    /// SQLite's commit guard (see its migration).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) commit_guard: String,
    /// The replies stored under idempotency keys.
    pub(crate) idempotency: String,
    pub(crate) migrations: String,
}

impl Names {
    /// Names for an already validated prefix and schema.
    pub(crate) fn new(schema: Option<&str>, prefix: &str) -> Self {
        let qualifier = match schema {
            // Quoted: a valid name may still be a reserved word (`user`, `order`), and quoting
            // a lowercase name does not change which schema it names.
            Some(schema) => format!("\"{schema}\".{prefix}"),
            None => prefix.to_owned(),
        };
        Self {
            objects: format!("{qualifier}durable_objects"),
            alarms: format!("{qualifier}durable_alarms"),
            kv: format!("{qualifier}durable_kv"),
            commit_guard: format!("{qualifier}durable_commit_guard"),
            idempotency: format!("{qualifier}durable_idempotency"),
            migrations: format!("{qualifier}durable_schema_migrations"),
            index_prefix: prefix.to_owned(),
            schema: schema.map(str::to_owned),
            qualifier,
        }
    }

    /// Replaces the placeholders of a migration script.
    pub(crate) fn render(&self, sql: &str) -> String {
        sql.replace("{prefix}", &self.qualifier)
            .replace("{index_prefix}", &self.index_prefix)
    }
}

/// A statement of the store, built once with its table names filled in and shared from then on
/// (cloning it only counts a reference).
///
/// Its text is the store's own SQL with nothing in it but the table names, which
/// [`validate_name`] restricts to lowercase identifiers: nothing a caller passes ever reaches it,
/// which is what sqlx's `AssertSqlSafe` asks to be checked.
pub(crate) fn statement(text: String) -> SqlStr {
    AssertSqlSafe(Arc::<str>::from(text)).into_sql_str()
}

/// One embedded schema migration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Migration {
    pub(crate) version: i64,
    pub(crate) description: &'static str,
    pub(crate) sql: &'static str,
    /// The script that reverts it (`NNNN_name.down.sql`), if there is one.
    pub(crate) down: Option<&'static str>,
}

/// The embedded migration of `version`, if this build knows it.
pub(crate) fn find(migrations: &'static [Migration], version: i64) -> Option<&'static Migration> {
    migrations
        .iter()
        .find(|migration| migration.version == version)
}

/// The migration to roll back when `version` is the last one applied, with its down script.
pub(crate) fn to_roll_back(
    migrations: &'static [Migration],
    version: i64,
) -> Result<(&'static Migration, &'static str), Error> {
    let migration = find(migrations, version).ok_or(Error::UnknownMigration { version })?;
    let down = migration.down.ok_or(Error::Irreversible {
        version,
        description: migration.description,
    })?;
    Ok((migration, down))
}

/// SQLite's migrations, in order of version (numbers may have gaps: each is applied once,
/// whatever else is applied): every `migrations/sqlite/NNNN_name.sql`, listed by the build
/// script with its `NNNN_name.down.sql`.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE_MIGRATIONS: &[Migration] =
    include!(concat!(env!("OUT_DIR"), "/sqlite_migrations.rs"));

/// Postgres' migrations, in order of version (numbers may have gaps), listed as SQLite's are.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_MIGRATIONS: &[Migration] =
    include!(concat!(env!("OUT_DIR"), "/postgres_migrations.rs"));

/// Microseconds since the Unix epoch (negative before it).
pub(crate) fn to_micros(time: SystemTime) -> Result<i64, StorageError> {
    let (micros, offset) = match time.duration_since(UNIX_EPOCH) {
        Ok(since) => (i64::try_from(since.as_micros()), (since, "after")),
        Err(before) => {
            let before = before.duration();
            (
                i64::try_from(before.as_micros()).map(|m| -m),
                (before, "before"),
            )
        }
    };
    micros.map_err(|_| {
        let (distance, side) = offset;
        rejected(format!(
            "time {} s {side} the Unix epoch is out of the storable range",
            distance.as_secs()
        ))
    })
}

/// The inverse of [`to_micros`].
pub(crate) fn from_micros(micros: i64) -> Result<SystemTime, StorageError> {
    let delta = Duration::from_micros(micros.unsigned_abs());
    let time = if micros >= 0 {
        UNIX_EPOCH.checked_add(delta)
    } else {
        UNIX_EPOCH.checked_sub(delta)
    };
    time.ok_or_else(|| rejected(format!("stored time {micros} µs is out of range")))
}

/// The current time in microseconds since the Unix epoch.
#[cfg(feature = "sqlite")]
pub(crate) fn now_micros() -> i64 {
    to_micros(SystemTime::now()).unwrap_or(i64::MAX)
}

/// A version as stored (SQL integers are signed).
pub(crate) fn to_db_version(version: u64) -> Result<i64, StorageError> {
    i64::try_from(version).map_err(|_| rejected(format!("version {version} is out of range")))
}

/// A stored version.
pub(crate) fn from_db_version(version: i64) -> Result<u64, StorageError> {
    u64::try_from(version).map_err(|_| rejected(format!("stored version {version} is negative")))
}

/// A stored attempt count.
pub(crate) fn from_db_attempts(attempts: i64) -> Result<u32, StorageError> {
    u32::try_from(attempts)
        .map_err(|_| rejected(format!("stored attempt count {attempts} is out of range")))
}

/// A page limit as a SQL integer, with room for the extra row that tells whether a next page
/// exists.
pub(crate) fn fetch_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1)
}

/// A claim limit as a SQL integer.
pub(crate) fn claim_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The claimed alarms read from `rows`, earliest first. A row that cannot be read (edited by
/// hand, say) is logged and left out rather than failing the claim: the alarms claimed with
/// it would otherwise wait for their claims to expire, again and again. It stays claimed, so
/// it comes back, and is logged again, every `claim_ttl`; nothing is deleted.
pub(crate) fn claimed_alarms<R>(
    rows: &[R],
    read: impl Fn(&R) -> Result<durable_runtime::storage::AlarmRecord, StorageError>,
) -> Vec<durable_runtime::storage::AlarmRecord> {
    let mut alarms: Vec<_> = rows
        .iter()
        .filter_map(|row| {
            read(row)
                .inspect_err(|error| {
                    tracing::error!(%error, "a claimed alarm's row cannot be read; it is skipped");
                })
                .ok()
        })
        .collect();
    // RETURNING does not keep the subquery's order.
    alarms.sort_by(|a, b| (a.due_at, &a.key, &a.name).cmp(&(b.due_at, &b.key, &b.name)));
    alarms
}

/// Checks that an encoded state can be stored in a TEXT column and borrows it as text.
pub(crate) fn state_text(state: &[u8]) -> Result<&str, StorageError> {
    let text = std::str::from_utf8(state)
        .map_err(|err| rejected(format!("encoded state is not UTF-8: {err}")))?;
    if let Some(position) = text.bytes().position(|b| b == 0) {
        return Err(rejected(format!(
            "encoded state holds a raw NUL byte at {position} (JSON writes it as the escape \\u0000)"
        )));
    }
    Ok(text)
}

/// What a load read in an object's row: its state (`NULL` for a tombstone) and version, or no
/// row (both `NULL` in a batched load's outer join).
pub(crate) fn loaded(state: Option<Vec<u8>>, version: Option<i64>) -> Result<Loaded, StorageError> {
    Ok(match (state, version) {
        (Some(state), Some(version)) => Loaded::Object(StoredObject {
            state,
            version: from_db_version(version)?,
        }),
        // A cluster's placeholder row (version 0) holds nothing.
        (None, Some(0)) => Loaded::Absent,
        (None, Some(version)) => Loaded::Deleted {
            version: from_db_version(version)?,
        },
        (_, None) => Loaded::Absent,
    })
}

/// The rows of a batched load (state and version per key, in key order) as what each key
/// holds, checking that every key got its row.
pub(crate) fn loaded_rows(
    rows: Vec<(Option<Vec<u8>>, Option<i64>)>,
    keys: usize,
) -> Result<Vec<Loaded>, StorageError> {
    if rows.len() != keys {
        return Err(rejected(format!(
            "a batched load of {keys} objects returned {} rows",
            rows.len()
        )));
    }
    rows.into_iter()
        .map(|(state, version)| loaded(state, version))
        .collect()
}

/// The versions of a batched version check, one row per key (`None` for an absent object).
pub(crate) fn stored_versions(
    rows: Vec<Option<i64>>,
    keys: usize,
) -> Result<Vec<Option<u64>>, StorageError> {
    if rows.len() != keys {
        return Err(rejected(format!(
            "a batched version check of {keys} objects returned {} rows",
            rows.len()
        )));
    }
    rows.into_iter()
        // A cluster's placeholder row (version 0) holds nothing.
        .map(|version| version.filter(|&v| v != 0).map(from_db_version).transpose())
        .collect()
}

/// Turns the rows fetched with [`fetch_limit`] into a page.
/// The page of dead alarms made of `rows` (fetched with [`fetch_limit`]).
pub(crate) fn alarm_page<R>(
    rows: &[R],
    limit: usize,
    read: impl Fn(&R) -> Result<durable_runtime::storage::AlarmRecord, StorageError>,
) -> Result<durable_runtime::storage::AlarmPage, StorageError> {
    let alarms = rows.iter().map(read).collect::<Result<Vec<_>, _>>()?;
    Ok(durable_runtime::storage::AlarmPage::from_listed(
        alarms, limit,
    ))
}

pub(crate) fn id_page(mut ids: Vec<String>, limit: usize) -> durable_runtime::storage::IdPage {
    let next = if ids.len() > limit {
        ids.truncate(limit);
        ids.last().cloned()
    } else {
        None
    };
    durable_runtime::storage::IdPage { ids, next }
}

/// The position of the first of `chunk` (positions with their keys) whose key is not among the
/// `written` rows of a multi-row write, which returned `(object_type, object_id)` per row.
#[cfg(feature = "postgres")]
pub(crate) fn first_missing<'a>(
    chunk: impl ExactSizeIterator<Item = (usize, &'a durable_runtime::storage::ObjectKey)>,
    written: &[(String, String)],
) -> Option<usize> {
    if written.len() == chunk.len() {
        return None;
    }
    let written: std::collections::HashSet<(&str, &str)> = written
        .iter()
        .map(|(t, i)| (t.as_str(), i.as_str()))
        .collect();
    chunk
        .filter(|(_, key)| !written.contains(&(key.object_type.as_str(), key.object_id.as_str())))
        .map(|(position, _)| position)
        .next()
}

/// A stored reply row (`fingerprint`, `reply`, `expires_at` in µs) read under `key`.
pub(crate) fn stored_reply(
    key: &str,
    row: Option<(Vec<u8>, Vec<u8>, i64)>,
) -> Result<Option<durable_runtime::storage::IdempotentReply>, StorageError> {
    row.map(|(fingerprint, reply, expires_at)| {
        Ok(durable_runtime::storage::IdempotentReply {
            key: key.to_owned(),
            fingerprint,
            reply,
            expires_at: from_micros(expires_at)?,
        })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("table prefix", "", MAX_PREFIX_LEN, true).is_ok());
        assert!(validate_name("table prefix", "app1_", MAX_PREFIX_LEN, true).is_ok());
        assert!(validate_name("table prefix", "_x", MAX_PREFIX_LEN, true).is_ok());
        for bad in [
            "App",
            "a-b",
            "1a",
            "a b",
            "a;drop",
            "\"a\"",
            &"a".repeat(33),
        ] {
            assert!(
                validate_name("table prefix", bad, MAX_PREFIX_LEN, true).is_err(),
                "{bad:?}"
            );
        }
        assert!(validate_name("schema", "", 63, false).is_err());
    }

    #[test]
    fn rendering() {
        let names = Names::new(Some("app"), "x_");
        assert_eq!(names.objects, "\"app\".x_durable_objects");
        assert_eq!(
            names.render("CREATE INDEX {index_prefix}i ON {prefix}t"),
            "CREATE INDEX x_i ON \"app\".x_t"
        );
    }

    #[test]
    fn micros_round_trip() {
        for micros in [0, 1, -1, 1_700_000_000_123_456, i64::MAX / 2, -5_000_000] {
            assert_eq!(to_micros(from_micros(micros).unwrap()).unwrap(), micros);
        }
    }

    #[test]
    fn a_time_out_of_range_is_named_in_seconds() {
        let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
        assert_eq!(
            to_micros(far).unwrap_err().to_string(),
            "storage rejected the operation: \
             time 4611686018427387903 s after the Unix epoch is out of the storable range"
        );
    }

    #[test]
    fn state_must_be_text() {
        assert!(state_text(b"{\"a\":\"\\u0000\"}").is_ok());
        assert!(state_text(b"\xff").is_err());
        assert!(state_text(b"a\0b").is_err());
    }

    fn listed(dir: &str) -> Vec<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(dir);
        let mut files: Vec<String> = std::fs::read_dir(path)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| !name.ends_with(".down.sql"))
            .collect();
        files.sort();
        files
    }

    fn check_list(dir: &str, migrations: &[Migration]) {
        let files = listed(dir);
        assert_eq!(files.len(), migrations.len(), "{dir}: {files:?}");
        assert!(
            migrations.windows(2).all(|w| w[0].version < w[1].version),
            "{dir}: versions must increase"
        );
        for (file, migration) in files.iter().zip(migrations) {
            assert!(
                file.starts_with(&format!("{:04}_", migration.version)),
                "{file} is not migration {}",
                migration.version
            );
            // Every migration can be rolled back: its `.down.sql` sibling exists.
            assert!(
                migration.down.is_some_and(|down| !down.trim().is_empty()),
                "{dir}/{file} has no down script ({})",
                file.replace(".sql", ".down.sql")
            );
        }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn every_sqlite_migration_is_listed_with_its_down_script() {
        check_list("sqlite", SQLITE_MIGRATIONS);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn every_postgres_migration_is_listed_with_its_down_script() {
        check_list("postgres", POSTGRES_MIGRATIONS);
    }
}
