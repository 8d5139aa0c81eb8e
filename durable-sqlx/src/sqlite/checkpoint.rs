//! The background checkpointer: copies the WAL into the database file on a connection of its
//! own, so that no commit waits for a checkpoint.
//!
//! With SQLite's automatic checkpoints, the commit that makes the WAL pass its threshold copies
//! every page the WAL holds into the database file before it returns: with many objects, that
//! is thousands of random pages on the one writer, and the tail latency of every call queued
//! behind it. Here the store's connections have automatic checkpoints off and a task watches
//! the WAL instead:
//!
//! - when it holds `threshold` pages not yet copied, a `PASSIVE` checkpoint copies them while
//!   the writer goes on committing (it never waits for, nor blocks, a reader or the writer);
//! - once the WAL is four thresholds long, the pages committed during that checkpoint are
//!   copied too, by further passive checkpoints, the last of them (a few pages) holding the
//!   store's writer's turn: SQLite starts the WAL over, writing it again from its beginning,
//!   only at a commit that finds every frame copied, and under a steady stream of commits a
//!   checkpoint running beside them never catches up alone. Without this the WAL would grow to
//!   `limit` at every cycle (a longer file to extend, and to flush, at every commit), then hold
//!   the writers back for a restarting checkpoint;
//! - when the WAL itself has grown past `limit` bytes (readers kept a passive checkpoint from
//!   finishing, so the writer could not start the WAL over), a `RESTART` checkpoint waits for
//!   them, within the busy timeout, and makes the next commit start the WAL over, which
//!   `journal_size_limit` then truncates to `limit`: the WAL cannot grow without bound.
//!
//! The WAL's size is read from the header of its index, the `-shm` file (two 32-bit counters in
//! a layout SQLite documents as its file format: the last frame written, the last copied), so
//! that watching costs neither a query nor a lock. Checkpoints keep SQLite's ordering (WAL
//! flushed, then the database file), so `synchronous` keeps its meaning.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use super::writer::Writer;

/// How often the task looks at the WAL's size.
const POLL: Duration = Duration::from_millis(10);

/// What the checkpointer is told to do.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Pages not yet copied at which a passive checkpoint runs.
    pub(super) threshold: u32,
    /// WAL size, in bytes, past which a restarting checkpoint runs.
    pub(super) limit: u64,
}

/// The running checkpointer: stopped when dropped (without waiting) or by
/// [`stop`](Self::stop).
#[derive(Debug)]
pub(super) struct Checkpointer {
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Checkpointer {
    /// Starts the task for the database `options` opens, whose commits go through `writer`.
    pub(super) fn start(
        options: Arc<SqliteConnectOptions>,
        limits: Limits,
        writer: Weak<Writer>,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(options, limits, writer, stopped));
        Self {
            stop,
            task: Mutex::new(Some(task)),
        }
    }

    /// Stops the task and waits until it has closed its connection.
    pub(super) async fn stop(&self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.lock().await.take() {
            // A task that panicked has nothing left to close.
            let _ = task.await;
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

async fn run(
    options: Arc<SqliteConnectOptions>,
    limits: Limits,
    writer: Weak<Writer>,
    mut stopped: watch::Receiver<bool>,
) {
    let shm = shm_path(options.get_filename());
    let mut connection: Option<SqliteConnection> = None;
    // The WAL size at the last restarting checkpoint: not asked for again until the WAL changed.
    let mut restarted_at = None;
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            () = tokio::time::sleep(POLL) => {}
        }
        if *stopped.borrow() {
            break;
        }
        let Some(wal) = read_wal_index(&shm) else {
            continue;
        };
        let mode = if wal.bytes() >= limits.limit {
            if restarted_at == Some(wal.max_frame) {
                continue;
            }
            restarted_at = Some(wal.max_frame);
            "RESTART"
        } else if wal.pending() >= limits.threshold {
            "PASSIVE"
        } else {
            continue;
        };
        if connection.is_none() {
            match options.connect().await {
                Ok(opened) => connection = Some(opened),
                Err(err) => {
                    tracing::warn!(error = %err, "checkpointer: cannot connect; retrying");
                    continue;
                }
            }
        }
        let Some(conn) = connection.as_mut() else {
            continue;
        };
        let done = match mode {
            "RESTART" => checkpoint(conn, "PRAGMA wal_checkpoint(RESTART)").await,
            _ => match checkpoint(conn, PASSIVE).await {
                // Not after every checkpoint: each catching-up checkpoint flushes the database
                // file again, and pages written to it between two flushes are written once.
                Ok(()) if wal.max_frame >= limits.threshold.saturating_mul(CATCH_UP_AT) => {
                    catch_up(conn, &shm, &writer, limits.threshold).await
                }
                done => done,
            },
        };
        // A failed checkpoint leaves the WAL as it was: the next look tries again, on a new
        // connection in case this one is broken.
        if let Err(err) = done {
            tracing::warn!(error = %err, mode, "checkpointer: checkpoint failed");
            if let Some(conn) = connection.take() {
                let _ = conn.close().await;
            }
        }
    }
    if let Some(conn) = connection {
        let _ = conn.close().await;
    }
}

const PASSIVE: &str = "PRAGMA wal_checkpoint(PASSIVE)";

/// The WAL's length, in checkpoint thresholds, from which a passive checkpoint is followed by
/// the catching up that lets the WAL start over.
const CATCH_UP_AT: u32 = 4;

/// How many passive checkpoints, after the first, may chase the pages committed during the one
/// before (the last of them holding the writer's turn), before the checkpointer leaves the
/// rest for its next look.
const CATCH_UP_ROUNDS: usize = 2;

async fn checkpoint(
    conn: &mut SqliteConnection,
    statement: &'static str,
) -> Result<(), sqlx::Error> {
    sqlx::query(statement).execute(conn).await.map(drop)
}

/// After a passive checkpoint, copies the pages committed while it ran, so that the next commit
/// starts the WAL over: unlocked while many remain (each round copies what the previous one
/// let through), then, once at most a quarter of `threshold` (at least 64 pages) remain, once
/// more holding the writer's turn, so that no commit of this store comes between that copy and
/// the next commit. A writer in another process can still come between: the WAL then goes on
/// growing until the next look, or the restarting checkpoint at the size limit.
async fn catch_up(
    conn: &mut SqliteConnection,
    shm: &Path,
    writer: &Weak<Writer>,
    threshold: u32,
) -> Result<(), sqlx::Error> {
    let few = (threshold / 4).max(64);
    for _ in 0..CATCH_UP_ROUNDS {
        let Some(wal) = read_wal_index(shm) else {
            return Ok(());
        };
        match wal.pending() {
            0 => return Ok(()),
            pending if pending <= few => {
                let Some(writer) = writer.upgrade() else {
                    return Ok(());
                };
                let _turn = writer.hold().await;
                return checkpoint(conn, PASSIVE).await;
            }
            _ => checkpoint(conn, PASSIVE).await?,
        }
    }
    Ok(())
}

/// The WAL's state in the header of its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WalIndex {
    /// The page size, in bytes.
    page_size: u32,
    /// Frames in the WAL (the last valid one).
    max_frame: u32,
    /// Frames already copied into the database file.
    backfilled: u32,
}

impl WalIndex {
    /// Pages waiting to be copied.
    fn pending(self) -> u32 {
        self.max_frame.saturating_sub(self.backfilled)
    }

    /// The WAL's valid length: its header and frames (a 24-byte header and a page each).
    fn bytes(self) -> u64 {
        32 + u64::from(self.max_frame) * (u64::from(self.page_size) + 24)
    }
}

fn shm_path(database: &Path) -> PathBuf {
    let mut path = database.as_os_str().to_owned();
    path.push("-shm");
    PathBuf::from(path)
}

/// The version number the wal-index header starts with.
const WAL_INDEX_VERSION: u32 = 3_007_000;

/// Reads the header of the wal-index file (see SQLite's "WAL-mode File Format": two copies of a
/// 48-byte header, then the checkpoint information; native byte order). `None` while the file
/// does not exist or does not hold a header of a known version.
fn read_wal_index(shm: &Path) -> Option<WalIndex> {
    let mut header = [0u8; 100];
    std::fs::File::open(shm)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
    parse_wal_index(&header)
}

fn parse_wal_index(header: &[u8; 100]) -> Option<WalIndex> {
    let u32_at = |at: usize| {
        u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    if u32_at(0) != WAL_INDEX_VERSION || header[12] == 0 {
        return None;
    }
    let page_size = match u16::from_ne_bytes([header[14], header[15]]) {
        1 => 65_536,
        size => u32::from(size),
    };
    Some(WalIndex {
        page_size,
        max_frame: u32_at(16),
        backfilled: u32_at(96),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(page_size: u16, max_frame: u32, backfilled: u32) -> [u8; 100] {
        let mut header = [0u8; 100];
        header[0..4].copy_from_slice(&WAL_INDEX_VERSION.to_ne_bytes());
        header[12] = 1;
        header[14..16].copy_from_slice(&page_size.to_ne_bytes());
        header[16..20].copy_from_slice(&max_frame.to_ne_bytes());
        header[96..100].copy_from_slice(&backfilled.to_ne_bytes());
        header
    }

    #[test]
    fn the_header_gives_the_frames_and_their_size() {
        let wal = parse_wal_index(&header(4096, 100, 40)).expect("a valid header");
        assert_eq!(wal.pending(), 60);
        assert_eq!(wal.bytes(), 32 + 100 * 4120);
        let large = parse_wal_index(&header(1, 1, 1)).expect("a valid header");
        assert_eq!(large.page_size, 65_536);
        assert_eq!(large.pending(), 0);
    }

    #[test]
    fn unknown_or_uninitialised_headers_are_ignored() {
        let mut unknown = header(4096, 1, 0);
        unknown[0] = unknown[0].wrapping_add(1);
        assert_eq!(parse_wal_index(&unknown), None);
        let mut uninitialised = header(4096, 1, 0);
        uninitialised[12] = 0;
        assert_eq!(parse_wal_index(&uninitialised), None);
    }
}
