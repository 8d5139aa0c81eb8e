//! The command line's arguments (clap derive): the target and output options shared by every
//! command, the operations both binaries have, and `serve`, which only a binary with object
//! types has.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::client::ObjectStatus;

/// Your server binary's command line: `serve` plus every operation.
#[derive(Debug, Parser)]
#[command(version, about = "Serve, call and inspect durable objects")]
pub(crate) struct AppCli {
    #[command(flatten)]
    pub(crate) globals: Globals,
    #[command(subcommand)]
    pub(crate) command: AppCommand,
}

/// The generic `durable` binary's command line: the operations that need no object type.
#[derive(Debug, Parser)]
#[command(
    name = "durable",
    version,
    about = "Inspect durable objects in a database, or operate them through a gateway",
    after_help = "Reading a database (--database-url) needs no object types: it lists types, \
                  ids, stored states and alarms. Calls and alarm scheduling need the types: \
                  send them through a gateway (--gateway) or your own binary."
)]
pub(crate) struct GenericCli {
    #[command(flatten)]
    pub(crate) globals: Globals,
    #[command(subcommand)]
    pub(crate) command: Operation,
}

/// Where commands go and how their results are printed.
#[derive(Debug, Args)]
pub(crate) struct Globals {
    /// The gateway to send commands to, e.g. http://127.0.0.1:8080 (https:// needs the `tls`
    /// feature).
    #[arg(long, env = "DURABLE_GATEWAY", global = true, value_name = "URL")]
    pub(crate) gateway: Option<String>,

    /// The bearer token for the gateway.
    #[arg(
        long,
        env = "DURABLE_TOKEN",
        global = true,
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub(crate) token: Option<String>,

    /// The database to read directly (sqlite://file.db, postgres://...), or to serve from.
    #[arg(long, env = "DURABLE_DATABASE_URL", global = true, value_name = "URL")]
    pub(crate) database_url: Option<String>,

    /// The Postgres schema of the store's tables, when not the connection's default.
    #[arg(long, env = "DURABLE_DB_SCHEMA", global = true, value_name = "NAME")]
    pub(crate) db_schema: Option<String>,

    /// The prefix of the store's table names, when it has one.
    #[arg(
        long,
        env = "DURABLE_TABLE_PREFIX",
        global = true,
        value_name = "PREFIX"
    )]
    pub(crate) table_prefix: Option<String>,

    /// Allow writes to the database given by --database-url: asserts that no live runtime
    /// uses it.
    #[arg(long, global = true)]
    pub(crate) offline: bool,

    /// How results are printed.
    #[arg(long, short, value_enum, default_value_t = OutputFormat::Table, global = true)]
    pub(crate) output: OutputFormat,
}

/// How results are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    /// Aligned columns for people.
    Table,
    /// The gateway's JSON replies, for scripts.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AppCommand {
    /// Serve the objects over HTTP.
    Serve(ServeArgs),
    #[command(flatten)]
    Operation(Operation),
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The gateway's configuration (TOML: bind, timeouts, tokens and grants).
    #[arg(long, env = "DURABLE_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// The address to listen on, overriding the configuration's `bind`.
    #[arg(long, value_name = "ADDR")]
    pub(crate) bind: Option<SocketAddr>,
}

/// The operations both binaries have.
#[derive(Debug, Subcommand)]
pub(crate) enum Operation {
    /// Call, read, list and delete objects.
    #[command(subcommand)]
    Objects(ObjectsCommand),
    /// List, schedule and cancel alarms; list and re-queue dead alarms.
    #[command(subcommand)]
    Alarms(AlarmsCommand),
    /// Read, write, delete and list an object's key-value storage.
    #[command(subcommand)]
    Kv(KvCommand),
    /// Insert, signal, read and list FSM instances (through a gateway).
    #[command(subcommand)]
    Fsm(FsmCommand),
    /// List the object types with their handlers, alarms and options.
    Types,
    /// Print the gateway's OpenAPI document.
    Openapi,
    /// The store's schema migrations (on a database directly).
    #[command(subcommand)]
    Migrations(MigrationsCommand),
    /// The nodes and shards of a cluster (through a gateway, or on its database directly).
    #[command(subcommand)]
    Cluster(ClusterCommand),
}

/// `cluster ...`: the admin routes of a gateway in cluster mode, or the cluster's tables read
/// directly.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// List the nodes, each with how many shards it holds.
    Nodes {
        /// Directly on a database: a node whose heartbeat is older than this is not live (the
        /// cluster's lease TTL; a gateway uses its own).
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        lease_ttl: Duration,
    },
    /// List the shards with their owners and epochs, and a summary per node.
    Shards {
        /// Only the shards this node holds.
        #[arg(long, value_name = "NODE")]
        owner: Option<String>,
        /// Directly on a database: the cluster's lease TTL (see `cluster nodes`).
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        lease_ttl: Duration,
    },
    /// Change the shard count of a stopped cluster (database only, needs --offline).
    Reshard {
        /// The new shard count.
        #[arg(long, value_name = "N")]
        shards: u32,
        /// The cluster's lease TTL: a node whose heartbeat is younger than this is running,
        /// and the command refuses.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        lease_ttl: Duration,
    },
}

/// `migrations ...`: run on the database itself (`--database-url`), never through a gateway.
#[derive(Debug, Subcommand)]
pub(crate) enum MigrationsCommand {
    /// The version of the last migration applied to the store's tables.
    Status,
    /// Roll back the last migration applied (needs --offline: no runtime may use the database).
    Rollback,
}

/// `fsm ...`: sent to a gateway that runs an FSM engine.
#[derive(Debug, Subcommand)]
pub(crate) enum FsmCommand {
    /// List instances by id, optionally of one FSM and in one status.
    List {
        /// Only instances of this FSM.
        #[arg(long, value_name = "FSM")]
        name: Option<String>,
        /// Only instances in this status: runnable, executing, awaiting_signal,
        /// awaiting_children, done, failed.
        #[arg(long)]
        status: Option<String>,
        /// Where the previous page ended (its next_after).
        #[arg(long, value_name = "ID")]
        after: Option<i64>,
        /// At most this many instances (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Show an instance: status, step, state, result or error, inbox.
    Get {
        /// The instance id.
        id: i64,
    },
    /// Send a signal to an instance, by id or by correlation key.
    Signal {
        /// The signal's name.
        name: String,
        /// The payload as JSON; `-` reads it from standard input. `null` if absent.
        #[arg(value_name = "JSON")]
        payload: Option<String>,
        /// The instance, by id.
        #[arg(long, required_unless_present = "key", conflicts_with = "key")]
        id: Option<i64>,
        /// The instance occupying this correlation key.
        #[arg(long, value_name = "CORRELATION_KEY")]
        key: Option<String>,
        /// Deduplicates: the same key sent again adds nothing while the first is in the inbox.
        #[arg(long, value_name = "KEY")]
        dedup_key: Option<String>,
    },
    /// Insert an instance of a registered FSM.
    Insert {
        /// The FSM.
        #[arg(value_name = "FSM")]
        name: String,
        /// Its first state as a JSON object; `-` reads it from standard input. `{}` (every
        /// field at its default) if absent.
        #[arg(value_name = "JSON")]
        args: Option<String>,
        /// Its correlation key.
        #[arg(long, value_name = "KEY")]
        key: Option<String>,
    },
    /// Cancel a live instance (and its live descendants): it ends failed, "cancelled".
    Cancel {
        /// The instance id.
        id: i64,
    },
    /// Pause a queue: no engine claims its instances until it is resumed.
    Pause {
        /// The queue.
        queue: String,
    },
    /// Resume a paused queue.
    Resume {
        /// The queue.
        queue: String,
    },
    /// List the paused queues.
    Paused,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ObjectsCommand {
    /// List the objects of a type.
    List {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// Only objects in this state (active and hibernated need a gateway).
        #[arg(long, value_parser = parse_status)]
        status: Option<ObjectStatus>,
        /// Where the previous page ended (its next_cursor).
        #[arg(long)]
        cursor: Option<String>,
        /// At most this many objects (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Show an object: status, stored state and version, alarms.
    Get {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
    },
    /// Call a handler.
    Call {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
        /// The handler.
        handler: String,
        /// The arguments as a JSON object, e.g. '{"by": 5}'; `-` reads them from standard
        /// input. None for a handler without arguments.
        #[arg(value_name = "JSON")]
        arguments: Option<String>,
        /// Send the call with this idempotency key: its reply is stored with its commit, and a
        /// call with the same key to the same object gets that reply without running the
        /// handler again (a timed-out call is then safe to send again).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// Delete an object: its state and its alarms.
    Delete {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
    },
    /// Stop an object in the gateway: it leaves memory after the calls queued before it.
    Stop {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
    },
    /// Reload an object in the gateway: the next call reads its state from storage (after a
    /// change made in the database by hand).
    Reload {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
    },
    /// Replace an object's state, if its stored version is the one expected.
    ReplaceState {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
        /// The new state as a JSON object; `-` reads it from standard input.
        #[arg(value_name = "JSON")]
        state: String,
        /// The version storage must hold (0 for an object never stored; see `objects get`).
        #[arg(long)]
        expected_version: u64,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum AlarmsCommand {
    /// List an object's alarms.
    List {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
    },
    /// Schedule an alarm, replacing a schedule of the same alarm.
    Set(SetAlarm),
    /// Cancel an alarm.
    Cancel {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
        /// The alarm.
        name: String,
    },
    /// List the alarms that exhausted their attempts.
    Dead {
        /// Only alarms of objects of this type.
        #[arg(long = "type", value_name = "TYPE")]
        type_name: Option<String>,
        /// Where the previous page ended (its next_cursor).
        #[arg(long)]
        cursor: Option<String>,
        /// At most this many alarms (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Schedule a dead alarm again, due now with its attempts reset.
    Requeue {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
        /// The alarm.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum KvCommand {
    /// Print the JSON value under a key.
    Get {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
        /// The key.
        key: String,
    },
    /// Store a JSON value under a key, through the object.
    Put {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
        /// The key.
        key: String,
        /// The value as JSON, e.g. '{"items": []}'; `-` reads it from standard input.
        #[arg(value_name = "JSON")]
        value: String,
    },
    /// Delete a key, through the object.
    Delete {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
        /// The key.
        key: String,
    },
    /// List an object's keys and values, in the order of the keys' bytes.
    List {
        /// The object type.
        #[arg(value_name = "TYPE")]
        type_name: String,
        /// The object id.
        id: String,
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Where the previous page ended (its next_cursor).
        #[arg(long)]
        cursor: Option<String>,
        /// At most this many entries (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

fn parse_status(text: &str) -> Result<ObjectStatus, String> {
    text.parse()
        .map_err(|error: crate::client::UnknownStatus| error.to_string())
}

fn parse_time(text: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(text).map_err(|error| error.to_string())
}

/// The arguments of `alarms set`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("when").required(true).args(["fire_at", "delay"]))]
pub(crate) struct SetAlarm {
    /// The object type.
    #[arg(value_name = "TYPE")]
    pub(crate) type_name: String,
    /// The object id.
    pub(crate) id: String,
    /// The alarm.
    pub(crate) name: String,
    /// When it fires (RFC 3339, e.g. 2026-11-25T18:00:00Z).
    #[arg(long, value_parser = parse_time)]
    fire_at: Option<SystemTime>,
    /// After how long it fires (e.g. 30s, 5m, 1h 30m).
    #[arg(long, value_parser = humantime::parse_duration)]
    delay: Option<Duration>,
    /// The argument of an alarm whose handler takes one, as JSON (e.g. '{"text":"hi"}').
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    pub(crate) args: Option<serde_json::Value>,
}

fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|error| format!("not JSON: {error}"))
}

impl SetAlarm {
    /// When the alarm fires: at `--fire-at`, else after `--delay`.
    pub(crate) fn when<T: From<SystemTime> + From<Duration>>(&self) -> T {
        match (self.fire_at, self.delay) {
            (Some(time), _) => T::from(time),
            (None, delay) => T::from(delay.unwrap_or_default()),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn both_command_lines_are_well_formed() {
        AppCli::command().debug_assert();
        GenericCli::command().debug_assert();
    }

    #[test]
    fn an_alarm_needs_exactly_one_time() {
        let parse = |args: &[&str]| AppCli::try_parse_from(args.iter().copied());
        let base = ["app", "alarms", "set", "Session", "s1", "expire"];
        assert!(parse(&base).is_err());
        assert!(parse(&[&base[..], &["--delay", "30s"]].concat()).is_ok());
        let both = [
            &base[..],
            &["--delay", "30s", "--fire-at", "2026-01-01T00:00:00Z"],
        ]
        .concat();
        assert!(parse(&both).is_err());
    }

    #[test]
    fn global_options_go_anywhere() {
        let cli = AppCli::try_parse_from([
            "app",
            "objects",
            "get",
            "Counter",
            "a",
            "--output",
            "json",
            "--offline",
        ])
        .unwrap();
        assert_eq!(cli.globals.output, OutputFormat::Json);
        assert!(cli.globals.offline);
    }
}
