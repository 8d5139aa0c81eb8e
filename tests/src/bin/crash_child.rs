//! A process to be killed with SIGKILL by the crash tests. Two modes:
//!
//! - `crash_child <database file> [full|normal]`: increments a counter in a SQLite file as fast
//!   as it can and prints every acknowledged value, the store at that `synchronous` level
//!   (`full` by default; `full-short-wal` checkpoints every 4 pages, so that the background
//!   checkpointer copies, and catches up with, commits all the time). Its first line is
//!   `pid <id>`, so that the test can kill it when it runs under a tracer;
//! - `crash_child <database file> alarm <delay in ms>`: schedules an alarm that long ahead,
//!   prints `claimed` once its scheduler has claimed it, and never finishes firing it (its
//!   handler waits forever), so that the kill always falls between the claim and the firing's
//!   commit.
//! - `crash_child <database file> dormant`: increments 8 counters (`dormant-0` to `dormant-7`)
//!   in turn, waiting before each call until its object has gone dormant, so that every call
//!   after an object's first wakes it from the state the registry kept; prints every
//!   acknowledged value. Its first line is `pid <id>`.
//! - `crash_child <database file> large`: appends 4 KiB entries to a [`Journal`] (a state of
//!   up to 64 KiB, which the store compresses) as fast as it can and prints how many it has
//!   appended after each acknowledged append. Its first line is `pid <id>`.

use std::io::Write;
use std::time::Duration;

use durable_runtime::{Context, ObjectOptions, ObjectStatus, Runtime, durable_object};
use durable_sqlx::{SqliteStore, Synchronous};
use durable_tests::large_state::{Journal, letters};

#[durable_object]
pub struct CrashCounter {
    count: u64,
}

#[durable_object]
impl CrashCounter {
    #[handler]
    fn handle_increment(&mut self) -> u64 {
        self.count += 1;
        self.count
    }
}

/// The alarm the crash test's restarted runtime fires (it declares the same type and alarm).
#[durable_object]
pub struct CrashAlarm {
    fired_micros: u64,
}

#[durable_object]
impl CrashAlarm {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context, delay_ms: u64) {
        ctx.schedule_alarm(CrashAlarm::RING, Duration::from_millis(delay_ms));
    }

    #[alarm]
    async fn ring(&mut self) {
        std::future::pending::<()>().await;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: crash_child <database file> [full|normal|alarm <delay in ms>]");
    let open_with = |synchronous, wal_pages| {
        let path = path.clone();
        async move {
            SqliteStore::builder(&path)
                .synchronous(synchronous)
                .wal_autocheckpoint(wal_pages)
                .open()
                .await
                .expect("open SQLite")
        }
    };
    let open = |synchronous| {
        open_with(
            synchronous,
            durable_sqlx::SqliteStoreBuilder::DEFAULT_WAL_AUTOCHECKPOINT,
        )
    };
    match args.next().as_deref() {
        None | Some("full") => increment_forever(Runtime::new(open(Synchronous::Full).await)).await,
        Some("full-short-wal") => {
            increment_forever(Runtime::new(open_with(Synchronous::Full, 4).await)).await
        }
        Some("normal") => increment_forever(Runtime::new(open(Synchronous::Normal).await)).await,
        Some("alarm") => {
            let delay_ms = args
                .next()
                .and_then(|delay| delay.parse().ok())
                .expect("alarm <delay in ms>");
            let store = open(Synchronous::Full).await;
            let rt = Runtime::builder(store).register::<CrashAlarm>().build();
            arm_and_hang(rt, delay_ms).await;
        }
        Some("dormant") => {
            let store = open(Synchronous::Full).await;
            let dormant_soon = ObjectOptions::new().with_hibernate_after(Duration::from_millis(1));
            let rt = Runtime::builder(store)
                .register_with::<CrashCounter>(dormant_soon)
                .build();
            increment_dormant(rt).await
        }
        Some("large") => {
            let store = open(Synchronous::Full).await;
            append_forever(Runtime::builder(store).register::<Journal>().build()).await
        }
        Some(other) => {
            panic!(
                "unknown mode {other}: use full, full-short-wal, normal, alarm, dormant or large"
            )
        }
    }
}

async fn increment_forever(rt: Runtime) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).expect("stdout");
    loop {
        let value = CrashCounter::increment(&rt, "crash")
            .await
            .expect("increment");
        writeln!(out, "{value}").expect("stdout");
        out.flush().expect("stdout");
    }
}

/// How many counters the `dormant` mode increments in turn.
const DORMANT_OBJECTS: usize = 8;

async fn increment_dormant(rt: Runtime) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).expect("stdout");
    let ids: Vec<String> = (0..DORMANT_OBJECTS)
        .map(|object| format!("dormant-{object}"))
        .collect();
    for round in 0.. {
        for id in &ids {
            while round > 0
                && rt.status::<CrashCounter>(id).await.expect("status") != ObjectStatus::Hibernated
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let value = CrashCounter::increment(&rt, id).await.expect("increment");
            writeln!(out, "{value}").expect("stdout");
            out.flush().expect("stdout");
        }
    }
}

async fn append_forever(rt: Runtime) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).expect("stdout");
    for seed in 0.. {
        let appended = Journal::append(&rt, "crash", letters(4096, seed))
            .await
            .expect("append");
        writeln!(out, "{appended}").expect("stdout");
        out.flush().expect("stdout");
    }
}

async fn arm_and_hang(rt: Runtime, delay_ms: u64) {
    CrashAlarm::arm(&rt, "crash", delay_ms).await.expect("arm");
    loop {
        let alarms = rt.list_alarms::<CrashAlarm>("crash").await.expect("list");
        if alarms.iter().any(|alarm| alarm.claimed_at.is_some()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "claimed").expect("stdout");
    out.flush().expect("stdout");
    std::future::pending::<()>().await;
}
