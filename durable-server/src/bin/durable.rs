//! The generic `durable` binary: inspects a database directly (no object types needed) and
//! operates any gateway. See `durable --help`.

fn main() -> std::process::ExitCode {
    durable_server::cli::run_generic()
}
