//! The gateway's drain on shutdown: once it begins, the public listener stays open and every
//! new request gets a definite answer, `503 shutting_down` (retryable, nothing applied) with
//! `Connection: close`, while the requests admitted before it run to their end ([`admit`]).
//! Then the listener closes without dropping a request it was sent ([`serve`]).
//!
//! Closing the listener at once would not refuse new requests cleanly: a connection the
//! kernel accepted just before, or one the server had not read a request from yet, would be
//! dropped after the client sent its request, and the client could not tell whether it ran.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::http::header::CONNECTION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::error::ApiError;

/// The paths still served while draining: probes and metrics, which apply nothing.
const SERVED_WHILE_DRAINING: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Whether the gateway is draining, and the requests admitted before it began.
#[derive(Clone, Debug, Default)]
pub(crate) struct Drain {
    /// Cancelled when the drain begins (`/readyz` answers `503` from then on).
    stopping: CancellationToken,
    admitted: TaskTracker,
}

impl Drain {
    /// A drain that begins when `stopping` is cancelled.
    pub(crate) fn new(stopping: CancellationToken) -> Self {
        Self {
            stopping,
            admitted: TaskTracker::new(),
        }
    }

    /// The token cancelled when the drain begins.
    pub(crate) fn stopping(&self) -> &CancellationToken {
        &self.stopping
    }

    /// Begins the drain: new requests are refused from now on.
    pub(crate) fn begin(&self) {
        self.stopping.cancel();
        self.admitted.close();
    }

    /// Completes once every request admitted before [`begin`](Self::begin) has ended.
    pub(crate) async fn admitted_ended(&self) {
        self.admitted.wait().await;
    }
}

/// Admits a request, or refuses it if the drain has begun. Responses given while draining
/// carry `Connection: close`, so that clients stop reusing their connections to this server.
pub(crate) async fn admit(State(drain): State<Drain>, request: Request, next: Next) -> Response {
    // Counted before the check: a request that saw no drain is always waited for.
    let admitted = drain.admitted.token();
    let mut response = if drain.stopping.is_cancelled()
        && !SERVED_WHILE_DRAINING.contains(&request.uri().path())
    {
        ApiError::shutting_down().into_response()
    } else {
        next.run(request).await
    };
    drop(admitted);
    if drain.stopping.is_cancelled() {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// How long a connection accepted but silent when the listener closes may take to send its
/// first request before it is closed.
const FIRST_REQUEST_WAIT: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `closing` is cancelled, then closes the listener without
/// dropping a request sent to it: the connections already waiting in the kernel's queue are
/// accepted first, and each open connection ends after the request it has — one that has not
/// sent its first request yet is given it (answered, with `Connection: close` while
/// draining), one idle between requests closes at once. Completes once every connection has
/// ended.
pub(crate) async fn serve(listener: TcpListener, app: Router, closing: CancellationToken) {
    let connections = TaskTracker::new();
    loop {
        tokio::select! {
            // A connection waiting is taken before the close is seen.
            biased;
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => serve_connection(&connections, stream, &app, &closing),
                Err(error) => accept_failed(&error).await,
            },
            () = closing.cancelled() => break,
        }
    }
    // The reactor may not have seen the latest connections yet: ask the socket itself.
    match listener.into_std() {
        Ok(listener) => loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    let stream = stream
                        .set_nonblocking(true)
                        .and_then(|()| TcpStream::from_std(stream));
                    match stream {
                        Ok(stream) => serve_connection(&connections, stream, &app, &closing),
                        Err(error) => tracing::warn!(%error, "cannot serve an accepted connection"),
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) if is_connection_error(&error) => {}
                Err(error) => {
                    tracing::warn!(%error, "cannot accept the connections left in the queue");
                    break;
                }
            }
        },
        Err(error) => tracing::warn!(%error, "cannot drain the listener's queue"),
    }
    connections.close();
    connections.wait().await;
}

/// Serves one connection, until it ends or, once `closing`, until its current (or first)
/// request is answered.
fn serve_connection(
    connections: &TaskTracker,
    stream: TcpStream,
    app: &Router,
    closing: &CancellationToken,
) {
    stream.set_nodelay(true).ok();
    let requested = Arc::new(Notify::new());
    let seen = Arc::clone(&requested);
    let service = app
        .clone()
        .map_request(move |request: Request<hyper::body::Incoming>| {
            // One stored permit: "this connection has had a request".
            seen.notify_one();
            request.map(axum::body::Body::new)
        });
    let closing = closing.clone();
    connections.spawn(async move {
        let mut builder = Builder::new(TokioExecutor::new());
        builder.http2().enable_connect_protocol();
        let connection = builder.serve_connection_with_upgrades(
            TokioIo::new(stream),
            TowerToHyperService::new(service),
        );
        let mut connection = std::pin::pin!(connection);
        tokio::select! {
            result = connection.as_mut() => return ended(result),
            () = closing.cancelled() => {}
        }
        tokio::select! {
            result = connection.as_mut() => return ended(result),
            () = requested.notified() => {}
            () = tokio::time::sleep(FIRST_REQUEST_WAIT) => {}
        }
        connection.as_mut().graceful_shutdown();
        ended(connection.await);
    });
}

fn ended(result: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(error) = result {
        tracing::trace!(%error, "connection ended with an error");
    }
}

/// An error of one connection (the next accept may succeed at once).
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        error.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// After a failed accept: at once for a connection's error, after a pause for the others
/// (out of file descriptors: give connections time to close).
async fn accept_failed(error: &std::io::Error) {
    if !is_connection_error(error) {
        tracing::error!(%error, "accepting a connection failed");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
