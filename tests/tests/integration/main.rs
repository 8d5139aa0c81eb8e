//! The integration tests of the runtime, the storage backends and the FSM engine, in one test
//! binary: each module below was a test file of its own, and names its tests
//! (`alarms::...`, `storage_postgres::...`). One binary is linked once, instead of once per
//! file; cargo-nextest still runs each test in a process of its own.

use std::sync::OnceLock;

use metrics_util::debugging::{DebuggingRecorder, Snapshotter};
use metrics_util::layers::FanoutBuilder;

/// Whether the calling test, which reads the process-wide metrics recorder, runs here: `true`
/// when it is alone in its process (under cargo-nextest, which runs each test in a process of
/// its own, or in the child started below). Under `cargo test`, which runs every module's tests
/// in one process, the others' metrics would reach that recorder too: the test then runs, by
/// its full name, in a child process of this binary, which must pass it, and this returns
/// `false`.
fn alone_in_process(test: &str) -> bool {
    const ALONE: &str = "DURABLE_TEST_ALONE";
    if std::env::var_os(ALONE).is_some()
        || std::env::var("NEXTEST_EXECUTION_MODE").is_ok_and(|mode| mode == "process-per-test")
    {
        return true;
    }
    let output = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, "1")
        .output()
        .expect("run the test in a process of its own");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(" 1 passed;"),
        "{test}, alone in a process:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    false
}

// What several test modules share, declared once. `fsm_backend_tests!` is in scope in every
// module declared after `fsm_support`.
#[macro_use]
mod fsm_support;
mod storage_shared;

/// The process's global metrics recorder, installed by whichever test asks first: a fan-out to
/// one debugging recorder per module that reads it. A snapshot drains what it reads, so under
/// `cargo test`, which runs every module's tests in one process, one module's snapshot must not
/// take another's counts. (cargo-nextest runs each test in a process of its own.)
struct GlobalRecorders {
    cluster: Snapshotter,
    dormancy: Snapshotter,
    fsm_observability: Snapshotter,
    observability: Snapshotter,
}

fn global_recorders() -> &'static GlobalRecorders {
    static RECORDERS: OnceLock<GlobalRecorders> = OnceLock::new();
    RECORDERS.get_or_init(|| {
        let mut fanout = FanoutBuilder::default();
        let mut snapshotter = || {
            let recorder = DebuggingRecorder::new();
            let snapshotter = recorder.snapshotter();
            fanout = std::mem::take(&mut fanout).add_recorder(recorder);
            snapshotter
        };
        let recorders = GlobalRecorders {
            cluster: snapshotter(),
            dormancy: snapshotter(),
            fsm_observability: snapshotter(),
            observability: snapshotter(),
        };
        metrics::set_global_recorder(fanout.build()).expect("the only global metrics recorder");
        recorders
    })
}

mod alarm_args;
mod alarm_limit;
mod alarms;
mod call_options;
mod clock_jumps;
mod cluster;
mod commit_outcomes;
mod crash_sqlite;
mod deletion;
mod direct_reads;
mod dormancy;
mod error_messages;
mod exposed;
mod fsm_concurrency;
mod fsm_controls;
mod fsm_engine;
mod fsm_interleavings;
mod fsm_jobs;
mod fsm_kill_loop;
mod fsm_observability;
mod fsm_store_memory;
mod fsm_store_postgres;
mod fsm_store_sqlite;
mod fsm_tracing;
mod fsm_workers;
mod group_load;
mod idem_kill_loop;
mod idempotency;
mod inspect;
mod introspection;
mod kv;
mod kv_kill_loop;
mod lifecycle;
mod macro_expansion;
mod migration_rollback;
mod object_fsm;
mod object_fsm_kill_loop;
mod observability;
mod operate;
mod outgoing_calls;
mod output_gate;
mod outside_alarms;
mod runtime_core;
mod schemas;
mod shared_database;
mod sqlite_compression;
mod storage_memory;
mod storage_postgres;
mod storage_sqlite;
mod testing_kit;
mod tracing_spans;
