//! The benchmark program: throughput, latency and memory of durable objects, each figure
//! next to a baseline measured in the same run.
//!
//! ```text
//! cargo run --release -p durable-bench -- <scenario|all> [--backend memory|sqlite|sqlite-normal|postgres]
//!                                         [--secs N] [--runs N] [--page-size N]
//!                                         [--wal-autocheckpoint N] [--workers N] [--smoke]
//! ```
//!
//! Scenarios: `raw-commit`, `raw-batch` (hand-written sqlx baselines), `seq`, `hot`, `spread`,
//! `spread-alarm`, `read`, `cold`, `memory`, `alarms`, `kv` (key-value puts of 1 KiB and reads
//! of cached keys), `outside-alarms` (alarms scheduled from outside on stored objects that are
//! not live, written directly next to through each object), `gateway` (calls over HTTP next to the
//! same calls in process); and, outside `all`, `fsm` (the FSM engine's steps per second with
//! and without group commit, and its pick latency) and `fsm-claim` (on SQLite or Postgres, the claim
//! latency of instances with a concurrency key with 10 and with 10,000 executing rows),
//! `fsm-insert` (instances inserted per second by one producer, `insert` awaited one by one
//! next to batched `insert_async`), and `alarms-scale` (10,000 and 100,000 alarms due within one second next to 10,000 and
//! 1,000,000 stored for later: fired/s, lateness, CPU per firing; with several `--due`, up to
//! which of them alarms fired on time), and `forward` (on Postgres:
//! calls by name through a two-node cluster, to objects the called node serves next to objects
//! it forwards to the other node over HTTP/2). On SQLite, `spread` also runs its
//! same-work baseline `raw-spread` (plain sqlx committing batches of the sizes group commit
//! formed) run by run, and reports its ratio to it. Each figure prints one JSON line; a table
//! follows at the end.
//! `--smoke` runs every scenario briefly on small sizes, to keep the program from rotting.
//! `--page-size` sets the page size of the SQLite databases, the store's and the baselines'
//! alike (default: the store's default); `--wal-autocheckpoint` the WAL size, in pages, at which
//! their commits checkpoint (default: the store's default); `--cache-size`, `--mmap-size` (bytes)
//! and `--inline-checkpoints` the store's page cache, memory map and checkpoints in the commit
//! path (with `--page-size 1024 --cache-size 2048000 --mmap-size 0 --inline-checkpoints`, the
//! store's settings of earlier versions); `--compress-states-from BYTES|off` the state size from
//! which the store compresses states (`off`: never). `scale` (outside `all`; see `scale.rs`) takes
//! `--objects`, `--state-bytes`, `--state-objects` and `--plot PATH`; `alarms-scale` takes `--due`
//! and `--stored` (comma-separated counts); `memory` takes `--memory-objects` (comma-separated
//! counts, default 100,000 and 1,000,000: a later count may reuse what an earlier one freed, so
//! a count measured alone gives the figure of a process that started with it). `--workers` sets
//! the tokio worker threads (default: one per CPU); `--workers 1` shows the CPU cost of a call
//! without cross-thread wake-ups.
//! Built with the `jemalloc` or the `mimalloc` feature, the program allocates with that allocator
//! instead of the system's (the `memory` figures name the allocator in their backend column).

mod alarms_scale;
mod baseline;
mod commits;
mod forward;
mod fsm;
mod fsm_claim;
mod fsm_insert;
mod gateway;
mod objects;
mod outside;
mod peer;
mod pick;
mod report;
mod scale;
mod scenarios;

use std::time::Duration;

use stats_alloc::StatsAlloc;

/// The allocator under the counting one: the system's (glibc), jemalloc with the `jemalloc`
/// feature, or mimalloc with the `mimalloc` feature.
#[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
type Allocator = std::alloc::System;
#[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
const ALLOCATOR: Allocator = std::alloc::System;
#[cfg(feature = "jemalloc")]
type Allocator = tikv_jemallocator::Jemalloc;
#[cfg(feature = "jemalloc")]
const ALLOCATOR: Allocator = tikv_jemallocator::Jemalloc;
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
type Allocator = mimalloc::MiMalloc;
#[cfg(all(feature = "mimalloc", not(feature = "jemalloc")))]
const ALLOCATOR: Allocator = mimalloc::MiMalloc;

/// The allocator's name in the figures.
pub(crate) const ALLOCATOR_NAME: &str = if cfg!(feature = "jemalloc") {
    "jemalloc"
} else if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    "system"
};

static COUNTING: StatsAlloc<Allocator> = StatsAlloc::new(ALLOCATOR);

#[global_allocator]
static GLOBAL: &StatsAlloc<Allocator> = &COUNTING;

/// Where objects are stored during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackendKind {
    /// `MemoryStorage`.
    Memory,
    /// SQLite, WAL, synchronous FULL.
    Sqlite,
    /// SQLite, WAL, synchronous NORMAL.
    SqliteNormal,
    /// Postgres at `DATABASE_URL`.
    Postgres,
}

impl BackendKind {
    fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "memory" => Self::Memory,
            "sqlite" => Self::Sqlite,
            "sqlite-normal" => Self::SqliteNormal,
            "postgres" => Self::Postgres,
            other => return Err(format!("unknown backend `{other}`")),
        })
    }

    /// The name used on the command line and in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Sqlite => "sqlite",
            Self::SqliteNormal => "sqlite-normal",
            Self::Postgres => "postgres",
        }
    }
}

/// Command-line settings.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// Scenarios to run, in order.
    pub(crate) scenarios: Vec<String>,
    /// The storage backend.
    pub(crate) backend: BackendKind,
    /// Duration of each timed run.
    pub(crate) secs: Duration,
    /// Runs per scenario (the median is reported).
    pub(crate) runs: usize,
    /// The page size of SQLite databases, in bytes.
    pub(crate) page_size: u32,
    /// The WAL size, in pages, at which SQLite commits checkpoint.
    pub(crate) wal_autocheckpoint: u32,
    /// The page cache of each SQLite connection, in bytes (default: the store's).
    pub(crate) cache_size: Option<u64>,
    /// The memory map of each SQLite connection, in bytes (default: the store's).
    pub(crate) mmap_size: Option<u64>,
    /// SQLite checkpoints in the commit path instead of in the background.
    pub(crate) inline_checkpoints: bool,
    /// The state size from which SQLite stores states compressed (`Some(None)`: never;
    /// default: the store's).
    pub(crate) compress_states_from: Option<Option<usize>>,
    /// The object counts of `memory`, each measured in turn.
    pub(crate) memory_objects: Vec<usize>,
    /// The options of `scale`.
    pub(crate) scale: scale::Options,
    /// The options of `alarms-scale`.
    pub(crate) alarms_scale: alarms_scale::Options,
    /// Tokio worker threads.
    pub(crate) workers: usize,
    /// Small sizes and short runs.
    pub(crate) smoke: bool,
}

const ALL: &[&str] = &[
    "raw-commit",
    "raw-batch",
    "seq",
    "hot",
    "spread",
    "spread-alarm",
    "read",
    "cold",
    "memory",
    "alarms",
    "kv",
    "outside-alarms",
    "gateway",
];

/// The value after `flag`, parsed.
fn value<T>(args: &mut impl Iterator<Item = String>, flag: &str) -> Result<T, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    args.next()
        .ok_or(format!("{flag} needs a value"))?
        .parse()
        .map_err(|e| format!("{flag}: {e}"))
}

fn parse_args() -> Result<Settings, String> {
    let mut args = std::env::args().skip(1);
    let mut settings = Settings {
        scenarios: Vec::new(),
        backend: BackendKind::Sqlite,
        secs: Duration::from_secs(5),
        runs: 3,
        page_size: durable_sqlx::SqliteStoreBuilder::DEFAULT_PAGE_SIZE,
        wal_autocheckpoint: durable_sqlx::SqliteStoreBuilder::DEFAULT_WAL_AUTOCHECKPOINT,
        cache_size: None,
        mmap_size: None,
        inline_checkpoints: false,
        compress_states_from: None,
        memory_objects: vec![100_000, 1_000_000],
        scale: scale::Options::default(),
        alarms_scale: alarms_scale::Options::default(),
        workers: std::thread::available_parallelism().map_or(1, usize::from),
        smoke: false,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--backend" => {
                settings.backend = BackendKind::parse(&value::<String>(&mut args, "--backend")?)?
            }
            "--secs" => settings.secs = Duration::from_secs_f64(value(&mut args, "--secs")?),
            "--runs" => settings.runs = value(&mut args, "--runs")?,
            "--page-size" => {
                settings.page_size = value(&mut args, "--page-size")?;
                if !durable_sqlx::SqliteStoreBuilder::is_valid_page_size(settings.page_size) {
                    return Err("--page-size: a power of two from 512 to 65536".to_owned());
                }
            }
            "--wal-autocheckpoint" => {
                settings.wal_autocheckpoint = value(&mut args, "--wal-autocheckpoint")?
            }
            "--workers" => {
                settings.workers = value(&mut args, "--workers")?;
                if settings.workers == 0 {
                    return Err("--workers: at least 1".to_owned());
                }
            }
            "--cache-size" => settings.cache_size = Some(value(&mut args, "--cache-size")?),
            "--mmap-size" => settings.mmap_size = Some(value(&mut args, "--mmap-size")?),
            "--inline-checkpoints" => settings.inline_checkpoints = true,
            "--compress-states-from" => {
                let bytes = value::<String>(&mut args, "--compress-states-from")?;
                settings.compress_states_from = Some(match bytes.as_str() {
                    "off" => None,
                    bytes => Some(
                        bytes
                            .parse()
                            .map_err(|e| format!("--compress-states-from: {e}"))?,
                    ),
                });
            }
            "--memory-objects" => {
                let counts = value::<String>(&mut args, "--memory-objects")?;
                settings.memory_objects = scale::list("--memory-objects", &counts)?;
            }
            "--smoke" => settings.smoke = true,
            "scale" => settings.scenarios.push("scale".to_owned()),
            flag if settings.scale.parse(flag, &mut args)? => {}
            flag if settings.alarms_scale.parse(flag, &mut args)? => {}
            "all" => settings.scenarios.extend(ALL.iter().map(|s| s.to_string())),
            // The FSM engine's figures (memory, sqlite or postgres), outside `all`.
            "fsm" => settings.scenarios.push("fsm".to_owned()),
            // Alarms due within a second next to many stored for later, outside `all`.
            "alarms-scale" => settings.scenarios.push("alarms-scale".to_owned()),
            // The claim latency of concurrency keys as the executing set grows (sqlite or postgres).
            "fsm-claim" => settings.scenarios.push("fsm-claim".to_owned()),
            // `insert` one by one against `insert_async` batches (memory, sqlite or postgres).
            "fsm-insert" => settings.scenarios.push("fsm-insert".to_owned()),
            // Calls by name through a two-node cluster, local next to forwarded (postgres).
            "forward" => settings.scenarios.push("forward".to_owned()),
            name if ALL.contains(&name) => settings.scenarios.push(name.to_owned()),
            other => return Err(format!("unknown argument `{other}`; scenarios: {ALL:?}")),
        }
    }
    if settings.scenarios.is_empty() {
        return Err(format!("name a scenario or `all`: {ALL:?}"));
    }
    if settings.smoke {
        settings.secs = settings.secs.min(Duration::from_millis(300));
        settings.runs = 1;
    }
    Ok(settings)
}

fn main() {
    let settings = match parse_args() {
        Ok(settings) => settings,
        Err(message) => {
            eprintln!("durable-bench: {message}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.workers)
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run(settings)),
        Err(error) => {
            eprintln!("durable-bench: cannot start the tokio runtime: {error}");
            std::process::exit(1);
        }
    }
}

async fn run(settings: Settings) {
    let mut results = Vec::new();
    for scenario in &settings.scenarios {
        match scenarios::run(scenario, &settings).await {
            Ok(mut figures) => {
                for figure in &mut figures {
                    report::attach_baseline(figure, &results);
                    println!("{}", figure.to_json());
                }
                results.extend(figures);
            }
            Err(message) => {
                eprintln!("durable-bench: {scenario}: {message}");
                std::process::exit(1);
            }
        }
    }
    report::print_table(&results);
}
