//! The command line: your own server binary's ([`run`]) and the generic `durable` binary's
//! ([`run_generic`]).
//!
//! Your binary hands over how to build its runtime from a store; the command line opens the
//! store that `--database-url` names and calls the closure with it:
//!
//! ```no_run
//! use std::process::ExitCode;
//! use durable_runtime::{durable_object, Runtime};
//!
//! #[durable_object]
//! pub struct Counter { count: i64 }
//!
//! #[durable_object(expose)]
//! impl Counter {
//!     #[handler]
//!     fn handle_increment(&mut self, by: i64) -> i64 { self.count += by; self.count }
//! }
//!
//! fn main() -> ExitCode {
//!     durable_server::cli::run(|store| Runtime::builder(store).expose::<Counter>())
//! }
//! ```
//!
//! Commands:
//!
//! ```text
//! serve [--config gateway.toml] [--bind 127.0.0.1:8080]     (needs --database-url)
//! objects list TYPE [--status active|hibernated|stored] [--cursor C] [--limit N]
//! objects get TYPE ID
//! objects call TYPE ID HANDLER ['{"by": 5}' | -]
//! objects delete TYPE ID
//! objects stop TYPE ID                                       (gateway only)
//! objects reload TYPE ID                                     (gateway only)
//! objects replace-state TYPE ID ('{"count": 0}' | -) --expected-version N
//! alarms list TYPE ID
//! alarms set TYPE ID NAME (--fire-at 2026-11-25T18:00:00Z | --delay 30s)
//! alarms cancel TYPE ID NAME
//! alarms dead [--type TYPE] [--cursor C] [--limit N]
//! alarms requeue TYPE ID NAME
//! fsm list [--name FSM] [--status failed] [--after ID] [--limit N]     (gateway only)
//! fsm get ID                                                 (gateway only)
//! fsm signal NAME ['{"cents": 5}' | -] (--id ID | --key KEY) [--dedup-key K]  (gateway only)
//! fsm insert FSM ['{"order_id": "42"}' | -] [--key KEY]     (gateway only)
//! fsm cancel ID                                              (gateway only)
//! fsm pause QUEUE | fsm resume QUEUE | fsm paused             (gateway only)
//! types
//! openapi
//! cluster nodes                                              (gateway or Postgres)
//! cluster shards [--owner NODE]                              (gateway or Postgres)
//! cluster reshard --shards N --offline                       (Postgres only, cluster stopped)
//! migrations status                                          (database only)
//! migrations rollback --offline                              (database only)
//! ```
//!
//! Every command but `serve` goes to a gateway (`--gateway URL --token TOKEN`, or the
//! environment variables `DURABLE_GATEWAY` / `DURABLE_TOKEN`) or reads a database directly
//! (`--database-url URL` or `DURABLE_DATABASE_URL`: `sqlite://app.db`, `postgres://...`;
//! `--db-schema` and `--table-prefix` name a store opened with a schema or a table prefix).
//! Directly, only stored objects are seen (the command line's runtime has nothing live), no
//! alarm fires, and writes (a write handler, a delete, alarm changes) are refused unless
//! `--offline` asserts that no live runtime uses the database. Results print as tables, or
//! with `--output json` as the gateway's JSON replies, the same for both targets. The exit
//! code is 0 on success, 1 on an error, 2 when something is not found, 3 when the gateway
//! refuses the token or grant (see [`Exit`]).

pub(crate) mod args;
mod cluster;
mod database;
pub(crate) mod direct;
pub(crate) mod failure;
mod gateway;
pub(crate) mod render;

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{FromArgMatches, Parser};
use durable_runtime::RuntimeBuilder;
use durable_runtime::storage::Storage;

use crate::client::Client;

use args::{
    AppCli, AppCommand, FsmCommand, GenericCli, Globals, KvCommand, ObjectsCommand, Operation,
};
use database::{Create, Tables};
use direct::Direct;
use failure::Failure;

/// The store the command line opened, handed to your closure to build the runtime on.
pub type Store = Arc<dyn Storage>;

/// How a command ended: the process's exit code.
///
/// # Examples
///
/// ```
/// use durable_server::cli::Exit;
///
/// assert_eq!(Exit::NotFound.code(), 2);
/// let code: std::process::ExitCode = Exit::Denied.into();
/// # let _ = code;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Exit {
    /// 0: the command succeeded.
    Ok,
    /// 1: the command failed (bad usage, a refused write, a handler error, an unreachable
    /// gateway...).
    Error,
    /// 2: the object, type, handler or alarm does not exist.
    NotFound,
    /// 3: the gateway refused the token (401) or it lacks the grant (403).
    Denied,
}

impl Exit {
    /// The numeric exit code.
    pub fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Error => 1,
            Self::NotFound => 2,
            Self::Denied => 3,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

type BuildRuntime = Box<dyn FnOnce(Store) -> RuntimeBuilder>;

/// A command line, configured before it runs: [`run`] and [`run_generic`] are its usual
/// forms.
///
/// # Examples
///
/// A server binary whose database defaults to a local SQLite file:
///
/// ```no_run
/// use std::process::ExitCode;
/// use durable_runtime::{durable_object, Runtime};
/// # #[durable_object] pub struct Counter { count: i64 }
/// # #[durable_object(expose)] impl Counter {}
///
/// fn main() -> ExitCode {
///     durable_server::cli::App::new(|store| Runtime::builder(store).expose::<Counter>())
///         .default_database_url("sqlite://counter.db")
///         .run()
/// }
/// ```
pub struct App {
    build: Option<BuildRuntime>,
    default_database_url: Option<String>,
}

impl fmt::Debug for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("App")
            .field("has_types", &self.build.is_some())
            .field("default_database_url", &self.default_database_url)
            .finish()
    }
}

impl App {
    /// The command line of a server binary whose runtime `build` makes from the store that
    /// `--database-url` names. `build` registers and exposes the object types; the command
    /// line builds the runtime (with alarms off when it reads a database directly).
    pub fn new(build: impl FnOnce(Store) -> RuntimeBuilder + 'static) -> Self {
        Self {
            build: Some(Box::new(build)),
            default_database_url: None,
        }
    }

    /// The command line of the generic `durable` binary, which knows no object types: no
    /// `serve`; directly on a database it lists types and ids, prints stored states and
    /// alarms, and cancels or re-queues alarms (with `--offline`).
    pub fn generic() -> Self {
        Self {
            build: None,
            default_database_url: None,
        }
    }

    /// The database used when neither `--database-url`, `DURABLE_DATABASE_URL` nor
    /// `--gateway` is given.
    #[must_use]
    pub fn default_database_url(mut self, url: impl Into<String>) -> Self {
        self.default_database_url = Some(url.into());
        self
    }

    /// Parses the process's arguments, runs the command, prints to standard output and
    /// error, and returns the exit code.
    pub fn run(self) -> ExitCode {
        let exit = self.run_from(std::env::args_os(), &mut io::stdout(), &mut io::stderr());
        exit.into()
    }

    /// Runs the command line `args` (the program name first), printing results to `out` and
    /// errors to `err`; for tests and for embedding.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::cli::{App, Exit};
    ///
    /// let (mut out, mut err) = (Vec::new(), Vec::new());
    /// let exit = App::generic().run_from(["durable", "--version"], &mut out, &mut err);
    /// assert_eq!(exit, Exit::Ok);
    /// assert!(String::from_utf8(out).unwrap().starts_with("durable "));
    /// ```
    pub fn run_from<I, T>(self, args: I, out: &mut dyn Write, err: &mut dyn Write) -> Exit
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let parsed = match &self.build {
            Some(_) => AppCli::try_parse_from(args).map(|cli| (cli.globals, cli.command)),
            None => generic_command()
                .try_get_matches_from(args)
                .and_then(|matches| GenericCli::from_arg_matches(&matches))
                .map(|cli| (cli.globals, AppCommand::Operation(cli.command))),
        };
        let (globals, command) = match parsed {
            Ok(parsed) => parsed,
            Err(usage) => {
                // Help and version are not failures; usage errors exit 1, not clap's 2, which
                // means "not found" here.
                let text = usage.render().to_string();
                return if usage.use_stderr() {
                    let _ = write!(err, "{text}");
                    Exit::Error
                } else {
                    let _ = write!(out, "{text}");
                    Exit::Ok
                };
            }
        };
        let format = globals.output;
        let tokio = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(tokio) => tokio,
            Err(error) => {
                let failure = Failure::local("internal", format!("cannot start tokio: {error}"));
                let _ = render::write_failure(&failure, format, err);
                return failure.exit();
            }
        };
        match tokio.block_on(self.execute(globals, command)) {
            Ok(Some(reply)) => match reply.write(format, out) {
                // A reader that stopped early (`| head`) is not a failure of the command.
                Ok(()) => Exit::Ok,
                Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Exit::Ok,
                Err(error) => {
                    let _ = writeln!(err, "error: cannot print the result: {error}");
                    Exit::Error
                }
            },
            Ok(None) => Exit::Ok,
            Err(failure) => {
                let _ = render::write_failure(&failure, format, err);
                failure.exit()
            }
        }
    }

    /// Runs one command; `None` for `serve`, which prints nothing when it ends.
    async fn execute(
        self,
        globals: Globals,
        command: AppCommand,
    ) -> Result<Option<render::Reply>, Failure> {
        let database_url = globals
            .database_url
            .clone()
            .or_else(|| match &globals.gateway {
                Some(_) => None,
                None => self.default_database_url.clone(),
            });
        let tables = Tables {
            schema: globals.db_schema.clone(),
            prefix: globals.table_prefix.clone().unwrap_or_default(),
        };
        let operation = match command {
            AppCommand::Serve(serve) => {
                let url = database_url.ok_or_else(|| {
                    Failure::local("usage", "serve needs a database: pass --database-url")
                })?;
                let build = self.build.ok_or_else(|| {
                    Failure::local("usage", "serve needs the object types of your own binary")
                })?;
                serve_command(build, &url, &tables, serve).await?;
                return Ok(None);
            }
            AppCommand::Operation(operation) => read_arguments(operation)?,
        };
        match (&globals.gateway, database_url) {
            (Some(_), Some(_)) => Err(Failure::local(
                "usage",
                "give either --gateway or --database-url, not both",
            )),
            (Some(url), _) => {
                let mut client = Client::new(url);
                if let Some(token) = &globals.token {
                    client = client.with_token(token);
                }
                gateway::run(&client, operation).await.map(Some)
            }
            (None, Some(_)) if matches!(operation, Operation::Fsm(_)) => {
                Err(direct::fsm_needs_a_gateway())
            }
            (None, Some(url)) if cluster::is_reshard(&operation) => {
                cluster::reshard(&url, &tables, operation, globals.offline)
                    .await
                    .map(Some)
            }
            (None, Some(url)) if matches!(operation, Operation::Migrations(_)) => {
                let Operation::Migrations(command) = operation else {
                    unreachable!("matched above");
                };
                database::migrations(&url, &tables, command, globals.offline)
                    .await
                    .map(Some)
            }
            (None, Some(url)) => {
                let store = database::open(&url, &tables, Create::Refused).await?;
                let runtime = self
                    .build
                    .map(|build| build(Arc::clone(&store)).manual_alarms().build());
                let direct = Direct::new(runtime, store, globals.offline);
                let reply = direct.run(operation).await;
                if let Some(runtime) = direct.runtime() {
                    runtime.shutdown().await;
                }
                reply.map(Some)
            }
            (None, None) => Err(Failure::local(
                "usage",
                "no target: pass --gateway URL (or DURABLE_GATEWAY) to use a gateway, or \
                 --database-url URL (or DURABLE_DATABASE_URL) to read a database",
            )),
        }
    }
}

/// The generic binary's clap command (its name is `durable` whatever the binary is called).
fn generic_command() -> clap::Command {
    <GenericCli as clap::CommandFactory>::command()
}

/// Reads a call's arguments (or a replacement state) from standard input when given as `-`.
fn read_arguments(operation: Operation) -> Result<Operation, Failure> {
    let stdin = || {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| Failure::local("usage", format!("cannot read the input: {error}")))?;
        Ok::<_, Failure>(text)
    };
    match operation {
        Operation::Objects(ObjectsCommand::ReplaceState {
            type_name,
            id,
            state,
            expected_version,
        }) if state == "-" => Ok(Operation::Objects(ObjectsCommand::ReplaceState {
            type_name,
            id,
            state: stdin()?,
            expected_version,
        })),
        Operation::Objects(ObjectsCommand::Call {
            type_name,
            id,
            handler,
            arguments: Some(dash),
            idempotency_key,
        }) if dash == "-" => {
            let mut text = String::new();
            io::stdin().read_to_string(&mut text).map_err(|error| {
                Failure::local("usage", format!("cannot read the arguments: {error}"))
            })?;
            Ok(Operation::Objects(ObjectsCommand::Call {
                type_name,
                id,
                handler,
                arguments: Some(text),
                idempotency_key,
            }))
        }
        Operation::Kv(KvCommand::Put {
            type_name,
            id,
            key,
            value,
        }) if value == "-" => {
            let mut text = String::new();
            io::stdin().read_to_string(&mut text).map_err(|error| {
                Failure::local("usage", format!("cannot read the value: {error}"))
            })?;
            Ok(Operation::Kv(KvCommand::Put {
                type_name,
                id,
                key,
                value: text,
            }))
        }
        Operation::Fsm(FsmCommand::Insert {
            name,
            args: Some(dash),
            key,
        }) if dash == "-" => Ok(Operation::Fsm(FsmCommand::Insert {
            name,
            args: Some(stdin()?),
            key,
        })),
        Operation::Fsm(FsmCommand::Signal {
            name,
            payload: Some(dash),
            id,
            key,
            dedup_key,
        }) if dash == "-" => Ok(Operation::Fsm(FsmCommand::Signal {
            name,
            payload: Some(stdin()?),
            id,
            key,
            dedup_key,
        })),
        other => Ok(other),
    }
}

/// `serve`: opens (or creates) the database, builds the runtime with its alarms, and serves
/// it until SIGTERM or Ctrl-C.
async fn serve_command(
    build: BuildRuntime,
    database_url: &str,
    tables: &Tables,
    args: args::ServeArgs,
) -> Result<(), Failure> {
    init_tracing();
    let mut config = match &args.config {
        Some(path) => crate::ServerConfig::load(path),
        None => crate::ServerConfig::from_toml_str(""),
    }
    .map_err(|error| Failure::local("invalid_config", error.to_string()))?;
    if let Some(bind) = args.bind {
        config.bind = bind;
    }
    let store = database::open(database_url, tables, Create::Allowed).await?;
    let runtime = build(store).build();
    crate::serve(runtime, config)
        .await
        .map_err(|error| Failure::local("serve_failed", format!("the gateway stopped: {error}")))
}

/// Logs (the audit trail included) to standard error, filtered by `RUST_LOG` (default
/// `info`).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .with_writer(io::stderr)
        .try_init();
}

/// Runs your server binary's command line: `build` makes the runtime (registering and
/// exposing your object types) from the store that `--database-url` names. See the
/// [module documentation](self) for the commands.
///
/// # Examples
///
/// ```no_run
/// use std::process::ExitCode;
/// use durable_runtime::{durable_object, Runtime};
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object(expose)]
/// impl Counter {
///     #[handler]
///     fn handle_get(&self) -> i64 { self.count }
/// }
///
/// fn main() -> ExitCode {
///     durable_server::cli::run(|store| Runtime::builder(store).expose::<Counter>())
/// }
/// ```
pub fn run(build: impl FnOnce(Store) -> RuntimeBuilder + 'static) -> ExitCode {
    App::new(build).run()
}

/// Runs the generic `durable` binary's command line, which needs no object types (see
/// [`App::generic`]).
///
/// # Examples
///
/// ```no_run
/// fn main() -> std::process::ExitCode {
///     durable_server::cli::run_generic()
/// }
/// ```
pub fn run_generic() -> ExitCode {
    App::generic().run()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(app: App, args: &[&str]) -> (Exit, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let exit = app.run_from(args.iter().copied(), &mut out, &mut err);
        let text = |bytes| String::from_utf8(bytes).unwrap();
        (exit, text(out), text(err))
    }

    #[test]
    fn usage_errors_exit_1_and_help_exits_0() {
        let (exit, _, err) = run(App::generic(), &["durable", "objects", "frobnicate"]);
        assert_eq!(exit, Exit::Error);
        assert!(err.contains("frobnicate"), "{err}");
        let (exit, out, _) = run(App::generic(), &["durable", "--help"]);
        assert_eq!(exit, Exit::Ok);
        assert!(out.contains("--database-url"), "{out}");
    }

    #[test]
    fn the_generic_binary_has_no_serve() {
        let (exit, _, err) = run(App::generic(), &["durable", "serve"]);
        assert_eq!(exit, Exit::Error);
        assert!(err.contains("serve"), "{err}");
    }
}
