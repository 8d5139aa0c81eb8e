//! Hand-written sqlx baselines with the same database settings as the stores: what a
//! framework-free upsert costs on this machine, measured in the same run.

use std::str::FromStr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AssertSqlSafe, PgPool, QueryBuilder, SqlitePool};

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
