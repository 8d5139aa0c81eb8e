//! Serving the gateway on a TCP listener, and stopping gracefully: on the shutdown signal the
//! server answers new requests `503 shutting_down` (see `drain`), lets the
//! requests in flight finish (for at most the configured grace), shuts the runtime down,
//! which handles the calls already queued and commits them, and only then closes its
//! listener.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use durable_runtime::Runtime;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::TokenAuthorizer;
use crate::config::ServerConfig;
use crate::drain::Drain;

/// How often the Prometheus recorder's upkeep runs (it also runs on every scrape).
const METRICS_UPKEEP: Duration = Duration::from_secs(5);

/// Serves the gateway over `runtime` on `config.bind` until SIGTERM or Ctrl-C, then stops
/// gracefully (see [`serve_with_shutdown`]).
///
/// # Errors
///
/// The listener cannot be bound, or accepting connections failed.
///
/// # Examples
///
/// ```no_run
/// use durable_runtime::{MemoryStorage, Runtime};
/// use durable_server::ServerConfig;
///
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let runtime = Runtime::builder(MemoryStorage::new()).build(); // .expose::<Counter>() ...
/// let config = ServerConfig::load("durable.toml").expect("a valid configuration");
/// durable_server::serve(runtime, config).await
/// # }
/// ```
pub async fn serve(runtime: Runtime, config: ServerConfig) -> std::io::Result<()> {
    let listener = TcpListener::bind(config.bind).await?;
    serve_with_shutdown(runtime, config, listener, shutdown_signal()).await
}

/// Cluster mode: [`serve_with_shutdown`] with the internal listener (calls forwarded by the
/// other nodes, see [`cluster`](crate::cluster)) on `internal`, already bound: bind both to
/// port 0 to let the system choose, start the runtime advertising `internal`'s address, then
/// serve. `config.cluster` must be set (its `internal_bind` is not used). The internal
/// listener stays up until the runtime has shut down and handed its shards over, so that
/// calls forwarded meanwhile are answered ("misdirected") rather than refused.
///
/// # Errors
///
/// Accepting connections failed, or `config.cluster` is not set.
///
/// # Examples
///
/// ```no_run
/// use durable_runtime::Runtime;
/// use durable_server::ServerConfig;
/// use durable_server::cluster::{ClusterSecret, ClusterSettings};
/// use durable_sqlx::PostgresStore;
/// use tokio::net::TcpListener;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let public = TcpListener::bind("127.0.0.1:0").await?;
/// let internal = TcpListener::bind("127.0.0.1:0").await?;
/// let settings = ClusterSettings::new("node-1", internal.local_addr()?, ClusterSecret::new("s3cret"));
/// let store = PostgresStore::connect("postgres://app@db/app").await?;
/// let runtime = durable_server::cluster::join(Runtime::builder(store), &settings).await?;
/// let config = ServerConfig { cluster: Some(settings), ..ServerConfig::default() };
/// durable_server::serve_cluster_with_shutdown(runtime, config, public, internal, durable_server::shutdown_signal()).await?;
/// # Ok(()) }
/// ```
pub async fn serve_cluster_with_shutdown(
    runtime: Runtime,
    config: ServerConfig,
    listener: TcpListener,
    internal: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if config.cluster.is_none() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "serving an internal listener needs the cluster settings (ServerConfig::cluster)",
        ));
    }
    serve_listeners(runtime, config, listener, Some(internal), shutdown).await
}

/// Serves the gateway over `runtime` on `listener` until `shutdown` completes, then drains:
///
/// 1. `/readyz` answers `503`; the listener stays open and every new request is answered
///    `503 shutting_down` (retryable: nothing was applied), `/healthz`, `/readyz` and
///    `/metrics` excepted; every answer from then on carries `Connection: close`;
/// 2. the requests in flight finish, for at most `config.shutdown_grace` (past it they are no
///    longer waited for);
/// 3. [`Runtime::shutdown`] handles the calls already queued, commits them and stops (in
///    cluster mode, hands its shards over);
/// 4. the listener closes, and the connections still open end (idle ones at once, others
///    within `config.shutdown_grace`).
///
/// So a client always gets a definite answer while the server drains, even on a connection
/// it opened or reused just as the signal came; one that keeps sending to the server after
/// it said `shutting_down` may find the listener closed (connection refused: not sent).
/// Load balancers take the server out on `/readyz`'s `503`.
///
/// With [`ServerConfig::cluster`] set, it also binds and serves the internal listener (see
/// [`serve_cluster_with_shutdown`]).
///
/// It also forwards the runtime's lifecycle events to the audit log
/// ([`audit::spawn_lifecycle_audit`](crate::audit::spawn_lifecycle_audit)).
///
/// # Errors
///
/// Accepting connections failed.
///
/// # Examples
///
/// ```
/// use durable_runtime::{MemoryStorage, Runtime};
/// use durable_server::ServerConfig;
///
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let runtime = Runtime::new(MemoryStorage::new());
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
/// let server = tokio::spawn(durable_server::serve_with_shutdown(
///     runtime,
///     ServerConfig::default(),
///     listener,
///     async { stopped.await.ok(); },
/// ));
/// stop.send(()).ok();
/// server.await.expect("the server task")?;
/// # Ok(()) }
/// ```
pub async fn serve_with_shutdown(
    runtime: Runtime,
    config: ServerConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let internal = match &config.cluster {
        Some(cluster) => Some(TcpListener::bind(cluster.internal_bind).await?),
        None => None,
    };
    serve_listeners(runtime, config, listener, internal, shutdown).await
}

/// Serves the public listener, and the internal one if any.
async fn serve_listeners(
    runtime: Runtime,
    config: ServerConfig,
    listener: TcpListener,
    internal: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let internal_stopping = CancellationToken::new();
    let internal_server = match (internal, &config.cluster) {
        (Some(internal), Some(cluster)) => {
            if let Ok(address) = internal.local_addr() {
                tracing::info!(%address, "serving forwarded calls from the cluster's nodes");
            }
            let app = crate::cluster::internal_router(runtime.clone(), cluster);
            let server = crate::drain::serve(internal, app, internal_stopping.clone());
            Some(tokio::spawn(server))
        }
        _ => None,
    };
    let drain = Drain::new(CancellationToken::new());
    let closing = CancellationToken::new();
    let authorizer = Arc::new(TokenAuthorizer::new(&config.auth));
    let app = crate::routes::build(runtime.clone(), &config, authorizer, drain.clone());
    let audit = crate::audit::spawn_lifecycle_audit(&runtime);
    let upkeep = tokio::spawn(metrics_upkeep(closing.clone()));
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "serving durable objects over HTTP");
    }

    // The listener stays open through the drain: it closes on `closing`, once the runtime
    // has stopped.
    let mut server = tokio::spawn(crate::drain::serve(listener, app, closing.clone()));
    let ended = tokio::select! {
        joined = &mut server => Some(served(joined)),
        () = shutdown => None,
    };
    if ended.is_none() {
        tracing::info!("shutting down: refusing new requests, finishing those in flight");
        drain.begin();
        if tokio::time::timeout(config.shutdown_grace, drain.admitted_ended())
            .await
            .is_err()
        {
            tracing::warn!(
                grace = %humantime::format_duration(config.shutdown_grace),
                "requests still in flight after the grace period are no longer waited for"
            );
        }
    }
    drain.begin();
    runtime.shutdown().await;
    closing.cancel();
    if let (Some(cluster), Some(_)) = (&config.cluster, &internal_server) {
        // The shards are released, and the other nodes see it at their next look (every
        // `renew_every`); until then they may still forward calls here. Answered, those calls
        // send their callers elsewhere (this node no longer owns the object); cut mid-send by
        // a listener closing under them, they would end with an unknown outcome.
        tokio::time::sleep(cluster.node.renew_every().min(config.shutdown_grace)).await;
    }
    internal_stopping.cancel();
    let result = match ended {
        Some(result) => result,
        // Left: connections idle or with a request past the grace; idle ones close at once.
        None => match tokio::time::timeout(config.shutdown_grace, &mut server).await {
            Ok(joined) => served(joined),
            Err(_) => {
                server.abort();
                tracing::warn!("connections still open after the grace period are closed");
                Ok(())
            }
        },
    };
    if let Some(internal) = internal_server
        && tokio::time::timeout(config.shutdown_grace, internal)
            .await
            .is_err()
    {
        tracing::warn!(
            "forwarded calls still in flight after the grace period are no longer waited for"
        );
    }
    audit.abort();
    upkeep.abort();
    tracing::info!("stopped");
    result
}

/// The outcome of the serving task.
fn served(joined: Result<(), tokio::task::JoinError>) -> std::io::Result<()> {
    joined.map_err(std::io::Error::other)
}

/// Completes on SIGTERM or Ctrl-C (SIGINT): the shutdown signal of [`serve`].
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main] async fn main() {
/// durable_server::shutdown_signal().await;
/// println!("stopping");
/// # }
/// ```
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

/// Runs the Prometheus recorder's upkeep until the server stops, so histograms do not grow
/// between scrapes.
async fn metrics_upkeep(stopping: CancellationToken) {
    let Some(handle) = crate::metrics::prometheus() else {
        return;
    };
    let mut ticks = tokio::time::interval(METRICS_UPKEEP);
    loop {
        tokio::select! {
            () = stopping.cancelled() => break,
            _ = ticks.tick() => handle.run_upkeep(),
        }
    }
}
