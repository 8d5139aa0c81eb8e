//! [`HttpForwarder`]: the runtime's [`Forwarder`] over HTTP/2, one pooled connection per peer.

use std::time::Duration;

use axum::http::StatusCode;
use durable_runtime::BoxFuture;
use durable_runtime::cluster::{ForwardError, ForwardedCall, Forwarder};
use serde_json::Value;

use super::headers::{DEADLINE_MS, HOPS, SECRET, deadline_value};
use super::internal::InternalCall;
use super::{ClusterSecret, INTERNAL_CALL_PATH};
use crate::error::ErrorEnvelope;
use crate::model::CallReply;

/// How long connecting to a peer may take before the call fails as unreachable (nothing sent).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the cluster's HTTP client: {0}")]
pub struct ForwarderError(#[from] reqwest::Error);

/// Forwards calls to the internal listener of the node serving their object, over HTTP/2
/// (cleartext, prior knowledge), reusing one connection per peer. Set it on the runtime with
/// [`RuntimeBuilder::forwarder`](durable_runtime::RuntimeBuilder::forwarder), or start the
/// node with [`join`](super::join), which does.
///
/// The owner's answer comes back typed: its reply, the handler's own error
/// ([`ForwardError::Handler`]), "misdirected" ([`ForwardError::Misdirected`], which makes the
/// runtime refresh its shard map and try once more), or its error body
/// ([`ForwardError::Remote`]). A peer that cannot be connected to is
/// [`ForwardError::Unreachable`] (nothing sent); an exchange broken after sending is
/// [`ForwardError::Interrupted`] (outcome unknown).
///
/// # Examples
///
/// ```
/// use durable_runtime::{MemoryStorage, Runtime};
/// use durable_server::cluster::{ClusterSecret, HttpForwarder};
///
/// let forwarder = HttpForwarder::new(ClusterSecret::new("s3cret")).unwrap();
/// let builder = Runtime::builder(MemoryStorage::new()).forwarder(forwarder);
/// # drop(builder);
/// ```
#[derive(Clone, Debug)]
pub struct HttpForwarder {
    client: reqwest::Client,
    secret: ClusterSecret,
}

impl HttpForwarder {
    /// A forwarder sending `secret` with every call.
    ///
    /// # Errors
    ///
    /// The HTTP client could not be built (no usable TLS or DNS setup on this system).
    pub fn new(secret: ClusterSecret) -> Result<Self, ForwarderError> {
        let client = reqwest::Client::builder()
            .http2_prior_knowledge()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        Ok(Self { client, secret })
    }
}

impl Forwarder for HttpForwarder {
    fn forward(&self, call: ForwardedCall) -> BoxFuture<'static, Result<Value, ForwardError>> {
        let client = self.client.clone();
        let secret = self.secret.clone();
        Box::pin(async move {
            let owner = call.owner.to_string();
            let body = InternalCall {
                type_name: call.type_name,
                id: call.id,
                handler: call.handler,
                arguments: call.arguments,
            };
            let mut request = client
                .post(format!("http://{owner}{INTERNAL_CALL_PATH}"))
                .header(SECRET, secret.expose())
                .header(HOPS, call.hops)
                .json(&body);
            if let Some(deadline) = call.deadline {
                request = request
                    .header(DEADLINE_MS, deadline_value(deadline))
                    .timeout(deadline);
            }
            if let Some(key) = &call.idempotency_key {
                request = request.header(crate::routes::objects::IDEMPOTENCY_KEY, key);
            }
            let response = request
                .send()
                .await
                .map_err(|error| sent_error(&owner, &error))?;
            let status = response.status();
            let bytes = response
                .bytes()
                .await
                .map_err(|error| interrupted(&owner, &error))?;
            decode(&owner, status, &bytes)
        })
    }
}

/// The failure of a request that got no response.
fn sent_error(owner: &str, error: &reqwest::Error) -> ForwardError {
    if error.is_timeout() {
        ForwardError::Timeout
    } else if error.is_connect() {
        ForwardError::Unreachable {
            owner: owner.to_owned(),
            message: error_chain(error),
        }
    } else {
        interrupted(owner, error)
    }
}

fn interrupted(owner: &str, error: &reqwest::Error) -> ForwardError {
    if error.is_timeout() {
        return ForwardError::Timeout;
    }
    ForwardError::Interrupted {
        owner: owner.to_owned(),
        message: error_chain(error),
    }
}

/// The error and its causes, for messages: reqwest's own says little.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The owner's answer, typed.
fn decode(owner: &str, status: StatusCode, body: &[u8]) -> Result<Value, ForwardError> {
    if status.is_success() {
        return serde_json::from_slice::<CallReply>(body)
            .map(|reply| reply.result)
            .map_err(|error| ForwardError::Interrupted {
                owner: owner.to_owned(),
                message: format!("the reply is not a call's reply: {error}"),
            });
    }
    if status == StatusCode::UNAUTHORIZED {
        return Err(ForwardError::Unauthorized);
    }
    let envelope: ErrorEnvelope =
        serde_json::from_slice(body).map_err(|error| ForwardError::Interrupted {
            owner: owner.to_owned(),
            message: format!("answered {status} without an error body: {error}"),
        })?;
    let error = envelope.error;
    let details = error.details.unwrap_or(Value::Null);
    Err(match error.code.as_str() {
        "misdirected" => ForwardError::Misdirected {
            owner: details["owner"].as_str().map(str::to_owned),
        },
        "hop_limit_exceeded" => ForwardError::HopLimit {
            hops: number(&details["hops"]),
            limit: number(&details["limit"]),
        },
        "handler_error" => ForwardError::Handler(details),
        // The owner stopped waiting at the deadline it was given.
        "timeout" => ForwardError::Timeout,
        _ => ForwardError::Remote {
            code: error.code,
            message: error.message,
            retryable: error.retryable,
            details: Box::new(details),
        },
    })
}

fn number(value: &Value) -> u32 {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or_default()
}
