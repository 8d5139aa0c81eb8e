//! Hand-written sqlx baselines with the same database settings as the stores: what a
//! framework-free upsert costs on this machine, measured in the same run.
//!
//! `raw-commit` and `raw-batch` open their database with the store's settings set again here;
//! `raw-spread` opens a store and writes through a connection made from its pool's options,
//! as the store's own writer does, so the two cannot drift apart.

use std::str::FromStr;
use std::time::{Duration, Instant};

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
/// pay hand-offs to sqlx's connection thread that the store does not. Returns rows/s and the
/// latency of each batch's commit.
pub(crate) async fn raw_spread(
    conn: &mut SqliteConnection,
    object_type: &str,
    ids: &[String],
    sizes: &[u32],
    duration: Duration,
) -> Result<(f64, Histogram<u64>), String> {
    if sizes.is_empty() || ids.is_empty() {
        return Err("raw-spread needs the batch sizes of a spread run and rows".to_owned());
    }
    let mut histogram = crate::report::histogram();
    let mut seed = 0x2545_F491_4F6C_DD1D_u64;
    let mut random = move |below: usize| {
        // xorshift, as the callers of `spread` pick their objects.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
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
            let id = ids[random(ids.len())].as_str();
            if batch.iter().all(|(other, _)| *other != id) {
                batch.push((id, format!(r#"{{"count":{}}}"#, random(1_000_000))));
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
    let versions: i64 =
        sqlx::query_scalar("SELECT sum(version) FROM durable_objects WHERE object_type = ?1")
            .bind(object_type)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| e.to_string())?;
    let expected = ids.len() as u64 + rows;
    if u64::try_from(versions).ok() != Some(expected) {
        return Err(format!(
            "raw-spread wrote {rows} rows but the versions add up to {versions}, not {expected}"
        ));
    }
    Ok((rate, histogram))
}
