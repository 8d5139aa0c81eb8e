//! Hand-written sqlx baselines with the same database settings as the stores: what a
//! framework-free upsert costs on this machine, measured in the same run.
//!
//! `raw-commit` and `raw-batch` open their database with the store's settings set again here;
//! `raw-spread` opens a store and writes through a connection made from its pool's options,
//! as the store's own writer does, so the two cannot drift apart.

use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, PgPool, QueryBuilder, SqliteConnection, SqlitePool};

/// A raw connection pool to the benchmark's database.
pub(crate) enum RawPool {
    /// SQLite with the store's settings.
    Sqlite(SqlitePool),
    /// Postgres.
    Postgres(PgPool, String),
}

const STATE: &str = r#"{"count":1}"#;

impl RawPool {
    /// Opens a SQLite file with WAL, the given synchronous mode, page size and WAL size at
    /// which a commit checkpoints.
    pub(crate) async fn sqlite(
        path: &std::path::Path,
        full: bool,
        page_size: u32,
        wal_autocheckpoint: u32,
    ) -> Result<Self, String> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))
            .map_err(|e| e.to_string())?
            .create_if_missing(true)
            // The durable store's page size, so that both write the same pages.
            .page_size(page_size)
            .pragma("wal_autocheckpoint", wal_autocheckpoint.to_string())
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if full {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS raw_objects (object_type TEXT NOT NULL, object_id TEXT NOT NULL, \
             state TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (object_type, object_id))",
        )
        .execute(&pool)
        .await
        .map_err(|e| e.to_string())?;
        Ok(Self::Sqlite(pool))
    }

    /// Connects to Postgres and creates a private table.
    pub(crate) async fn postgres(url: &str, table: String) -> Result<Self, String> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .connect(url)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS {table} (object_type TEXT NOT NULL, object_id TEXT NOT NULL, \
             state TEXT NOT NULL, version BIGINT NOT NULL, PRIMARY KEY (object_type, object_id))"
        )))
        .execute(&pool)
        .await
        .map_err(|e| e.to_string())?;
        Ok(Self::Postgres(pool, table))
    }

    /// Drops what the baseline created.
    pub(crate) async fn cleanup(&self) {
        if let Self::Postgres(pool, table) = self {
            let _ = sqlx::query(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
                .execute(pool)
                .await;
        }
    }

    /// One upsert of one row in its own transaction.
    async fn upsert_one(&self, id: &str) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "INSERT INTO raw_objects (object_type, object_id, state, version) VALUES ('Raw', ?1, ?2, 1) \
                     ON CONFLICT (object_type, object_id) DO UPDATE SET state = excluded.state, version = raw_objects.version + 1",
                )
                .bind(id)
                .bind(STATE)
                .execute(&mut *tx)
                .await?;
                tx.commit().await
            }
            Self::Postgres(pool, table) => {
                let mut tx = pool.begin().await?;
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO {table} (object_type, object_id, state, version) VALUES ('Raw', $1, $2, 1) \
                     ON CONFLICT (object_type, object_id) DO UPDATE SET state = excluded.state, version = {table}.version + 1"
                )))
                .bind(id)
                .bind(STATE)
                .execute(&mut *tx)
                .await?;
                tx.commit().await
            }
        }
    }

    /// 100 upserts in one transaction, as one multi-row statement.
    async fn upsert_batch(&self, ids: &[String]) -> Result<(), sqlx::Error> {
        match self {
            Self::Sqlite(pool) => {
                let mut builder = QueryBuilder::new(
                    "INSERT INTO raw_objects (object_type, object_id, state, version) ",
                );
                builder.push_values(ids, |mut row, id| {
                    row.push_bind("Raw")
                        .push_bind(id)
                        .push_bind(STATE)
                        .push_bind(1_i64);
                });
                builder.push(
                    " ON CONFLICT (object_type, object_id) DO UPDATE SET state = excluded.state, version = raw_objects.version + 1",
                );
                let mut tx = pool.begin().await?;
                builder.build().execute(&mut *tx).await?;
                tx.commit().await
            }
            Self::Postgres(pool, table) => {
                let mut builder = QueryBuilder::new(format!(
                    "INSERT INTO {table} (object_type, object_id, state, version) "
                ));
                builder.push_values(ids, |mut row, id| {
                    row.push_bind("Raw")
                        .push_bind(id)
                        .push_bind(STATE)
                        .push_bind(1_i64);
                });
                builder.push(format!(
                    " ON CONFLICT (object_type, object_id) DO UPDATE SET state = excluded.state, version = {table}.version + 1"
                ));
                builder.build().execute(pool).await.map(|_| ())
            }
        }
    }
}

/// Upserts one row per transaction, one writer, for `duration`: commits/s and latency.
pub(crate) async fn raw_commit(
    pool: &RawPool,
    duration: Duration,
) -> Result<(f64, Histogram<u64>), String> {
    let mut histogram = crate::report::histogram();
    let started = Instant::now();
    let mut commits = 0u64;
    while started.elapsed() < duration {
        let t = Instant::now();
        pool.upsert_one("row").await.map_err(|e| e.to_string())?;
        histogram.saturating_record(t.elapsed().as_nanos() as u64);
        commits += 1;
    }
    Ok((commits as f64 / started.elapsed().as_secs_f64(), histogram))
}

/// Upserts 100 rows per transaction for `duration`: rows/s.
pub(crate) async fn raw_batch(pool: &RawPool, duration: Duration) -> Result<f64, String> {
    let started = Instant::now();
    let mut rows = 0u64;
    let mut next = 0u64;
    while started.elapsed() < duration {
        let ids: Vec<String> = (0..100)
            .map(|i| format!("row-{}", (next + i) % 10_000))
            .collect();
        next += 100;
        pool.upsert_batch(&ids).await.map_err(|e| e.to_string())?;
        rows += 100;
    }
    Ok(rows as f64 / started.elapsed().as_secs_f64())
}

/// `raw-spread`: upserts batches of random rows of a table of `ids.len()` rows (the store's
/// objects table, holding every id already) for `duration`, one batch per transaction, each
/// batch one multi-row `INSERT .. ON CONFLICT DO UPDATE`. The batch sizes are `sizes`, replayed
/// in order and over again: those group commit formed in `spread`. Like the store's batches,
/// the transaction is one query (`BEGIN IMMEDIATE; ..; COMMIT`), so that the baseline does not
/// pay hand-offs to sqlx's connection thread that the store does not. Each row's new state is
/// `state(count)`. Returns rows/s, the rows written and the latency of each batch's commit.
pub(crate) async fn raw_spread(
    conn: &mut SqliteConnection,
    object_type: &str,
    ids: &[String],
    sizes: &[u32],
    state: &dyn Fn(usize) -> String,
    duration: Duration,
) -> Result<(f64, u64, Histogram<u64>), String> {
    if sizes.is_empty() || ids.is_empty() {
        return Err("raw-spread needs the batch sizes of a spread run and rows".to_owned());
    }
    let mut histogram = crate::report::histogram();
    let mut pick = crate::pick::Picker::new(0x2545_F491_4F6C_DD1D);
    let versions_before = sum_of_versions(conn, object_type).await?;
    let mut batch: Vec<(&str, String)> = Vec::new();
    let started = Instant::now();
    let mut rows = 0u64;
    for &size in sizes.iter().cycle() {
        if started.elapsed() >= duration {
            break;
        }
        // Distinct rows, as in a batch of group commit (one write per object).
        let size = (size as usize).clamp(1, ids.len());
        batch.clear();
        while batch.len() < size {
            let id = ids[pick.below(ids.len())].as_str();
            if batch.iter().all(|(other, _)| *other != id) {
                batch.push((id, state(pick.below(1_000_000))));
            }
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as i64);
        let mut builder = QueryBuilder::new(
            "BEGIN IMMEDIATE; INSERT INTO durable_objects \
             (object_type, object_id, state, version, created_at, updated_at) ",
        );
        builder.push_values(&batch, |mut row, (id, state)| {
            row.push_bind(object_type)
                .push_bind(*id)
                .push_bind(state.as_str())
                .push_bind(1_i64)
                .push_bind(now)
                .push_bind(now);
        });
        builder.push(
            " ON CONFLICT (object_type, object_id) DO UPDATE SET state = excluded.state, \
             version = durable_objects.version + 1, updated_at = excluded.updated_at; COMMIT;",
        );
        let t = Instant::now();
        builder
            .build()
            .execute(&mut *conn)
            .await
            .map_err(|e| e.to_string())?;
        histogram.saturating_record(t.elapsed().as_nanos() as u64);
        rows += size as u64;
    }
    let rate = rows as f64 / started.elapsed().as_secs_f64();
    // Every row written must show in the versions: a baseline that wrote less would flatter
    // nothing but itself.
    let versions = sum_of_versions(conn, object_type).await?;
    let expected = versions_before + rows;
    if versions != expected {
        return Err(format!(
            "raw-spread wrote {rows} rows but the versions add up to {versions}, not {expected}"
        ));
    }
    Ok((rate, rows, histogram))
}

/// The sum of the versions of the stored objects of `object_type`.
async fn sum_of_versions(conn: &mut SqliteConnection, object_type: &str) -> Result<u64, String> {
    let versions: i64 =
        sqlx::query_scalar("SELECT sum(version) FROM durable_objects WHERE object_type = ?1")
            .bind(object_type)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| e.to_string())?;
    u64::try_from(versions).map_err(|e| e.to_string())
}

/// What [`raw_firing`] measured.
pub(crate) struct Firing {
    /// Alarms fired.
    pub(crate) fired: usize,
    /// From each alarm's due time to the start of the commit that fired it (the moment a
    /// handler would run), in nanoseconds.
    pub(crate) lateness: Histogram<u64>,
    /// From each alarm's due time to the end of that commit, in nanoseconds.
    pub(crate) committed: Histogram<u64>,
    /// When the last commit ended.
    pub(crate) last: SystemTime,
    /// Commits made.
    pub(crate) commits: usize,
    /// Time spent claiming, reading and committing (not waiting for alarms to become due).
    pub(crate) busy: Duration,
}

/// A claimed alarm: `[type, id, name, claimed at (µs)]`, and its due time (µs).
type Claimed = ((String, String, String, i64), i64);

/// How the baseline claims: as the scheduler's defaults.
pub(crate) struct Claiming {
    /// Alarms claimed in one statement at most.
    pub(crate) batch: usize,
    /// How long before their due time alarms are claimed.
    pub(crate) ahead: Duration,
    /// Fired alarms committed in one transaction at most: group commit's largest batch.
    pub(crate) commit_batch: usize,
}

/// The same-work baseline of firing alarms: `expected` alarms of the store's tables
/// (`durable_alarms`, `durable_objects`) fired with plain sqlx when they are due, with the
/// storage work a firing does and nothing else. It claims the alarms due within `ahead` (one
/// `UPDATE .. RETURNING` of at most `batch`, through the index of unclaimed alarms by due time,
/// as the scheduler's claim) once fewer than half a batch are held and the last claim's window
/// is half gone, reads their objects' states (one query), and commits every held alarm that is
/// due (up to `commit_batch`: as group commit takes every write waiting when the commit before
/// ends), each batch one transaction sent as one query that writes every object's new state
/// (its version plus one) and deletes its alarm under its claim. Lateness runs to the start of
/// the firing commit, where the runtime's handler would run, and to its end.
pub(crate) async fn raw_firing(
    conn: &mut SqliteConnection,
    expected: usize,
    claiming: &Claiming,
    timeout: Duration,
) -> Result<Firing, String> {
    let micros = |at: SystemTime| {
        at.duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as i64)
    };
    let ahead = claiming.ahead.as_micros() as i64;
    let batch_limit = claiming.batch.max(1);
    let mut lateness = crate::report::histogram();
    let mut committed = crate::report::histogram();
    let mut held: std::collections::VecDeque<Claimed> = std::collections::VecDeque::new();
    // The due time up to which every alarm has been claimed.
    let mut horizon = i64::MIN;
    let (mut fired, mut commits, mut busy) = (0, 0, Duration::ZERO);
    let mut last = SystemTime::now();
    let started = Instant::now();
    while fired < expected {
        if started.elapsed() > timeout {
            return Err(format!(
                "raw firing: {fired} of {expected} fired in {timeout:?}"
            ));
        }
        let round = Instant::now();
        let now = micros(SystemTime::now());
        if held.len() < batch_limit / 2 && now + ahead / 2 >= horizon {
            let claimed = claim(conn, now, now + ahead, batch_limit).await?;
            horizon = match claimed.last() {
                Some((_, due)) if claimed.len() == batch_limit => *due,
                _ => now + ahead,
            };
            read_states(conn, &claimed).await?;
            held.extend(claimed);
        }
        let due = held
            .iter()
            .take(claiming.commit_batch.max(1))
            .take_while(|(_, due)| *due <= now)
            .count();
        if due == 0 {
            busy += round.elapsed();
            // Until the first held alarm is due, or the claim window is half gone.
            let until = match held.front() {
                Some((_, first)) => *first,
                None => next_due(conn)
                    .await?
                    .unwrap_or(i64::MAX)
                    .max(horizon - ahead / 2),
            };
            let wait = (until - micros(SystemTime::now())).clamp(0, 100_000);
            tokio::time::sleep(Duration::from_micros(wait as u64)).await;
            continue;
        }
        let batch: Vec<Claimed> = held.drain(..due).collect();
        let firing = micros(SystemTime::now());
        commit_firings(conn, &batch, firing).await?;
        commits += 1;
        last = SystemTime::now();
        let done = micros(last);
        for (_, due_at) in &batch {
            lateness.saturating_record((firing - due_at).max(0) as u64 * 1000);
            committed.saturating_record((done - due_at).max(0) as u64 * 1000);
        }
        fired += batch.len();
        busy += round.elapsed();
    }
    check_fired(conn, fired, micros(last)).await?;
    Ok(Firing {
        fired,
        lateness,
        committed,
        last,
        commits,
        busy,
    })
}

/// Claims up to `limit` unclaimed alarms due by `until`, in due order.
async fn claim(
    conn: &mut SqliteConnection,
    now: i64,
    until: i64,
    limit: usize,
) -> Result<Vec<Claimed>, String> {
    let rows: Vec<(String, String, String, i64, i64)> = sqlx::query_as(
        "UPDATE durable_alarms SET claimed_at = ?1, claim_expires_at = ?1 + 1500000
         WHERE rowid IN (
             SELECT rowid FROM durable_alarms
             WHERE dead = 0 AND claimed_at IS NULL AND due_at <= ?2
             ORDER BY due_at, object_type, object_id, name
             LIMIT ?3
         )
         RETURNING object_type, object_id, name, claimed_at, due_at",
    )
    .bind(now)
    .bind(until)
    .bind(limit as i64)
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| e.to_string())?;
    // `RETURNING` gives no order.
    let mut claimed: Vec<Claimed> = rows
        .into_iter()
        .map(|(t, i, n, c, d)| ((t, i, n, c), d))
        .collect();
    claimed.sort_by_key(|(_, due)| *due);
    Ok(claimed)
}

/// Reads the states of the claimed alarms' objects in one query, as the scheduler does.
async fn read_states(conn: &mut SqliteConnection, claimed: &[Claimed]) -> Result<(), String> {
    if claimed.is_empty() {
        return Ok(());
    }
    let keys: Vec<(&str, &str)> = claimed
        .iter()
        .map(|((t, i, ..), _)| (t.as_str(), i.as_str()))
        .collect();
    let states: Vec<(Option<String>, Option<i64>)> = sqlx::query_as(
        "SELECT o.state, o.version FROM json_each(?1) AS k
         LEFT JOIN durable_objects AS o
             ON o.object_type = k.value->>0 AND o.object_id = k.value->>1
         ORDER BY k.key",
    )
    .bind(serde_json::to_string(&keys).map_err(|e| e.to_string())?)
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| e.to_string())?;
    if states.len() != claimed.len() || states.iter().any(|(state, _)| state.is_none()) {
        return Err("raw firing: an alarm of an object not stored".to_owned());
    }
    Ok(())
}

/// The earliest due time of an unclaimed alarm.
async fn next_due(conn: &mut SqliteConnection) -> Result<Option<i64>, String> {
    sqlx::query_scalar(
        "SELECT min(due_at) FROM durable_alarms WHERE dead = 0 AND claimed_at IS NULL",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| e.to_string())
}

/// Commits `batch` fired: each object's new state, its alarm deleted under its claim; one
/// transaction sent as one query.
async fn commit_firings(
    conn: &mut SqliteConnection,
    batch: &[Claimed],
    now: i64,
) -> Result<(), String> {
    let updates: Vec<(&str, &str, &str)> = batch
        .iter()
        .map(|((t, i, ..), _)| (t.as_str(), i.as_str(), r#"{"rung":1}"#))
        .collect();
    let finishes: Vec<&(String, String, String, i64)> =
        batch.iter().map(|(claim, _)| claim).collect();
    sqlx::query(
        "BEGIN IMMEDIATE;
         UPDATE durable_objects SET state = w.s, version = version + 1, updated_at = ?1
             FROM (SELECT value->>0 AS t, value->>1 AS i, value->>2 AS s FROM json_each(?2)) AS w
             WHERE object_type = w.t AND object_id = w.i;
         DELETE FROM durable_alarms WHERE (object_type, object_id, name, claimed_at) IN
             (SELECT value->>0, value->>1, value->>2, value->>3 FROM json_each(?3));
         COMMIT;",
    )
    .bind(now)
    .bind(serde_json::to_string(&updates).map_err(|e| e.to_string())?)
    .bind(serde_json::to_string(&finishes).map_err(|e| e.to_string())?)
    .execute(&mut *conn)
    .await
    .map(drop)
    .map_err(|e| e.to_string())
}

/// Checks that every fired alarm is gone and its object has a new state: a baseline that
/// wrote less would flatter itself.
async fn check_fired(conn: &mut SqliteConnection, fired: usize, last: i64) -> Result<(), String> {
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM durable_alarms WHERE claimed_at IS NOT NULL OR due_at <= ?1",
    )
    .bind(last)
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| e.to_string())?;
    if left != 0 {
        return Err(format!("raw firing: {left} fired alarms are still stored"));
    }
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM durable_objects WHERE version > 1")
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| e.to_string())?;
    if written != fired as i64 {
        return Err(format!(
            "raw firing: {fired} alarms fired but {written} objects have a new state"
        ));
    }
    Ok(())
}
