//! A Postgres database of its own for one test, created from `DATABASE_URL` and dropped
//! (with its connections) when the test ends.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test module uses part of this module"
)]

use durable_sqlx::PostgresStore;
use durable_sqlx::sqlx::{self, Connection, PgConnection};

/// A database created for one test.
pub struct FreshDatabase {
    admin_url: String,
    name: String,
    /// Where the database is.
    pub url: String,
}

impl FreshDatabase {
    /// A new database named after `prefix`, the process and the time; `None` (the test is
    /// skipped) when `DATABASE_URL` is unset outside CI.
    pub async fn new(prefix: &str) -> Option<Self> {
        let Ok(admin_url) = std::env::var("DATABASE_URL") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "DATABASE_URL must be set when CI is set"
            );
            eprintln!("skipped: DATABASE_URL not set");
            return None;
        };
        Some(Self::on(admin_url, prefix).await)
    }

    /// A new database named after `prefix`, the process and the time, on the server of
    /// `admin_url`.
    pub async fn on(admin_url: String, prefix: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let name = format!("{prefix}_{}_{nanos}", std::process::id());
        let mut conn = PgConnection::connect(&admin_url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create the test database");
        conn.close().await.ok();
        let base = admin_url
            .rsplit_once('/')
            .map_or(admin_url.as_str(), |(base, _)| base);
        let url = format!("{base}/{name}");
        Self {
            admin_url,
            name,
            url,
        }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A store on the database.
    pub async fn store(&self) -> PostgresStore {
        PostgresStore::connect(&self.url)
            .await
            .expect("connect to the test database")
    }

    /// Runs `statement` on the database.
    pub async fn execute(&self, statement: &str) {
        let mut conn = PgConnection::connect(&self.url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned()))
            .execute(&mut conn)
            .await
            .expect("run the statement");
        conn.close().await.ok();
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio");
            rt.block_on(async move {
                let mut conn = PgConnection::connect(&url).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        })
        .join();
        if let Ok(Err(err)) = dropped {
            eprintln!("could not drop database {}: {err}", self.name);
        }
    }
}
