//! The few connections a store keeps for its commits.
//!
//! A commit is usually one statement, one round trip. A connection taken from sqlx's pool for
//! it costs more round trips than that: the pool pings a connection each time it comes back
//! (and, unless recently used, each time it is taken), and hands its idle connections out in
//! turn, so every server process of the pool wakes for a share of the commits. The store keeps
//! as many connections as it runs commits at once outside the pool instead, and reuses them
//! without a ping while they were used recently.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use durable_runtime::storage::StorageError;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};

use super::db_err;

/// How long after its last use a connection is trusted without a ping: the window of
/// HikariCP's `aliveBypassWindowMs`. A connection the server dropped within it fails the
/// operation that next uses it, with a retryable error, and is replaced.
pub(super) const TRUSTED_AFTER_USE: Duration = Duration::from_millis(500);

/// Connections set aside for commits, taken from the pool once and returned to nobody.
#[derive(Debug)]
pub(super) struct CommitConnections {
    pool: PgPool,
    capacity: usize,
    kept: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    /// Idle connections and when each was last used; the most recently used last.
    idle: Vec<(PgConnection, Instant)>,
    /// Connections kept, idle or lent.
    open: usize,
}

/// A connection lent for one commit.
#[derive(Debug)]
pub(super) enum Lease<'a> {
    /// One of the kept connections: [`Lease::release`] keeps it, dropping the lease closes it.
    Kept(PgConnection, Place<'a>),
    /// All kept connections were lent: one from the pool.
    Pooled(PoolConnection<Postgres>),
}

/// One of the kept connections' places, lent or being opened; dropping it frees the place.
#[derive(Debug)]
pub(super) struct Place<'a>(&'a CommitConnections);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut kept = self.0.kept.lock().unwrap_or_else(|e| e.into_inner());
        kept.open -= 1;
    }
}

/// What [`CommitConnections::lend`] found.
enum Found {
    Idle(PgConnection, Instant),
    Room,
    Full,
}

impl CommitConnections {
    /// Keeps up to `capacity` connections from `pool`.
    pub(super) fn new(pool: PgPool, capacity: usize) -> Self {
        Self {
            pool,
            capacity,
            kept: Mutex::default(),
        }
    }

    /// How many connections are kept at most.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Lends a connection: the most recently used kept one (pinged first if it has been idle
    /// for a while), a new one while fewer than the capacity are kept, else one from the pool.
    pub(super) async fn lend(&self) -> Result<Lease<'_>, StorageError> {
        loop {
            let found = {
                let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
                match kept.idle.pop() {
                    Some((conn, used)) => Found::Idle(conn, used),
                    None if kept.open < self.capacity => {
                        kept.open += 1;
                        Found::Room
                    }
                    None => Found::Full,
                }
            };
            match found {
                Found::Idle(conn, used) => {
                    // Lent from here on: should this future be dropped during the ping, the
                    // lease's drop closes the connection and frees its place.
                    let mut lease = Lease::Kept(conn, Place(self));
                    if used.elapsed() < TRUSTED_AFTER_USE {
                        return Ok(lease);
                    }
                    // Bounded like the pool's own check: a peer that went silent must not
                    // hold the commit forever.
                    let limit = self.pool.options().get_acquire_timeout();
                    if let Ok(Ok(())) = tokio::time::timeout(limit, lease.conn().ping()).await {
                        return Ok(lease);
                    }
                }
                Found::Room => {
                    let place = Place(self);
                    let conn = self.pool.acquire().await.map_err(db_err)?;
                    return Ok(Lease::Kept(conn.detach(), place));
                }
                Found::Full => return self.pool.acquire().await.map(Lease::Pooled).map_err(db_err),
            }
        }
    }
}

impl Lease<'_> {
    /// The connection.
    pub(super) fn conn(&mut self) -> &mut PgConnection {
        match self {
            Lease::Kept(conn, _) => conn,
            Lease::Pooled(conn) => conn,
        }
    }

    /// Gives the connection back for the next commit. Call it only when the commit ended with
    /// the server's answer; after any other error, drop the lease instead, which closes a kept
    /// connection whose protocol state is unknown.
    pub(super) fn release(self) {
        if let Lease::Kept(conn, place) = self {
            let home = place.0;
            // The place stays taken, now by an idle connection.
            std::mem::forget(place);
            let mut kept = home.kept.lock().unwrap_or_else(|e| e.into_inner());
            kept.idle.push((conn, Instant::now()));
        }
    }
}
