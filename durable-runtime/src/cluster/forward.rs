//! Forwarded calls: a call (by name, or typed: see `typed.rs`) to an object another node
//! serves is sent to that node
//! through a [`Forwarder`] (the HTTP/2 client of `durable-server`, in practice), with the
//! time left to its deadline, its hop count and its idempotency key. A node that answers
//! "misdirected" makes the sender refresh its shard map from the database and try once more.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{FORWARDED_CALLS, Route};
use crate::CallOptions;
use crate::error::Error;
use crate::exposed::{CallByNameError, ExposedHandler};
use crate::object::BoxFuture;
use crate::object::handle::Runtime;
use crate::storage::ObjectKey;

/// The default hop limit: a call crosses at most two nodes (the first owner it was sent to,
/// then, after a "misdirected" answer and a refreshed shard map, the new one).
pub const DEFAULT_HOP_LIMIT: u32 = 2;

/// A call (by name, or typed and encoded by name) on its way to the node that serves its
/// object.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::cluster::ForwardedCall;
///
/// let call = ForwardedCall::new("10.0.0.2:7100", "Counter", "a", "increment", serde_json::json!({}));
/// assert_eq!((call.hops, call.deadline, call.idempotency_key), (1, None, None));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ForwardedCall {
    /// The address of the node believed to serve the object (its
    /// [`ClusterConfig::advertise`](super::ClusterConfig::advertise)).
    pub owner: Arc<str>,
    /// The object's type name.
    pub type_name: String,
    /// The object's id.
    pub id: String,
    /// The exposed handler's name.
    pub handler: String,
    /// The arguments, a JSON object of arguments by name.
    pub arguments: Value,
    /// How long the caller still waits for the reply; the owner stops waiting after it too.
    pub deadline: Option<Duration>,
    /// How many nodes this call has been sent to, this one included (1 for the first send).
    pub hops: u32,
    /// The call's idempotency key, if any.
    pub idempotency_key: Option<String>,
}

impl ForwardedCall {
    /// A first send (hop 1) of a call without deadline or idempotency key.
    pub fn new(
        owner: impl Into<Arc<str>>,
        type_name: impl Into<String>,
        id: impl Into<String>,
        handler: impl Into<String>,
        arguments: Value,
    ) -> Self {
        Self {
            owner: owner.into(),
            type_name: type_name.into(),
            id: id.into(),
            handler: handler.into(),
            arguments,
            deadline: None,
            hops: 1,
            idempotency_key: None,
        }
    }
}

/// Why a forwarded call failed, as the [`Forwarder`] reports it.
///
/// # Examples
///
/// ```
/// use durable_runtime::cluster::ForwardError;
///
/// assert!(ForwardError::Misdirected { owner: None }.is_retryable());
/// assert!(!ForwardError::HopLimit { hops: 3, limit: 2 }.is_retryable());
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ForwardError {
    /// The handler returned its own error (as JSON); its changes were rolled back.
    #[error("the handler failed: {0}")]
    Handler(Value),
    /// The node does not serve the object's shard (it names the owner it believes in, if
    /// any). Nothing ran there.
    #[error("misdirected: the node does not serve the object{}", owner.as_ref().map(|o| format!(" (its owner is {o})")).unwrap_or_default())]
    Misdirected {
        /// The owner the node believes in.
        owner: Option<String>,
    },
    /// The call was sent to more nodes than the hop limit allows; it was not run.
    #[error("the call crossed {hops} nodes, more than the hop limit of {limit}")]
    HopLimit {
        /// The call's hop count.
        hops: u32,
        /// The limit of the node that refused it.
        limit: u32,
    },
    /// The node refused the cluster's shared secret: the nodes are configured with different
    /// secrets. Nothing ran.
    #[error("the node refused this node's cluster secret")]
    Unauthorized,
    /// The node could not be reached; the call was not sent.
    #[error("the node at {owner} cannot be reached: {message}")]
    Unreachable {
        /// Its address.
        owner: String,
        /// Why.
        message: String,
    },
    /// No answer within the call's deadline: the call may or may not have been applied (as
    /// [`Error::Timeout`]).
    #[error("the node serving the object did not answer within the deadline")]
    Timeout,
    /// The exchange broke after the call was sent: it may or may not have been applied.
    #[error("the call to the node at {owner} was interrupted: {message}")]
    Interrupted {
        /// Its address.
        owner: String,
        /// Why.
        message: String,
    },
    /// A typed call's arguments could not be encoded as JSON (a map whose keys are not
    /// strings, say); nothing was sent.
    #[error("the call's arguments could not be encoded as JSON: {message}")]
    Arguments {
        /// Why.
        message: String,
    },
    /// The owner's reply to a typed call does not decode into the handler's output or error
    /// type (the nodes run different versions of the type?). The call ran on the owner.
    #[error("the owner's reply does not decode into the handler's types: {message}")]
    Reply {
        /// Why.
        message: String,
    },
    /// The owner answered with an error of its own, as the gateway reports errors: its
    /// `code`, `message`, whether retrying may help, and `details`.
    #[error("the owner answered {code}: {message}")]
    Remote {
        /// The error code (`overloaded`, `invalid_arguments`, `timeout`...).
        code: String,
        /// Its message.
        message: String,
        /// Whether retrying may help.
        retryable: bool,
        /// Its details (`null` if none).
        details: Box<Value>,
    },
}

impl ForwardError {
    /// Whether sending the call again may succeed without having applied it twice.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Misdirected { .. } | Self::Unreachable { .. } => true,
            Self::Remote { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// The outcome label of [`FORWARDED_CALLS`](super::FORWARDED_CALLS) for this failure.
    fn outcome(&self) -> &'static str {
        match self {
            Self::Handler(_)
            | Self::Remote { .. }
            | Self::Arguments { .. }
            | Self::Reply { .. } => "error",
            Self::Misdirected { .. } => "misdirected",
            Self::HopLimit { .. } => "hop_limit",
            Self::Unauthorized => "unauthorized",
            Self::Unreachable { .. } => "unreachable",
            Self::Interrupted { .. } => "interrupted",
            Self::Timeout => "timeout",
        }
    }
}

/// Sends a call to the node that serves its object, and returns that node's reply: how a
/// cluster node reaches its peers. Set with
/// [`RuntimeBuilder::forwarder`](crate::RuntimeBuilder::forwarder); `durable-server` provides
/// one over HTTP/2 (`durable_server::cluster::HttpForwarder`).
///
/// Without a forwarder, a call to an object another node serves fails at once with
/// [`Error::NotOwner`] naming the owner.
///
/// # Examples
///
/// ```
/// use durable_runtime::BoxFuture;
/// use durable_runtime::cluster::{ForwardError, ForwardedCall, Forwarder};
///
/// /// Refuses every call, as a node whose peers are all down would see it.
/// struct Nowhere;
///
/// impl Forwarder for Nowhere {
///     fn forward(&self, call: ForwardedCall) -> BoxFuture<'static, Result<serde_json::Value, ForwardError>> {
///         Box::pin(async move {
///             Err(ForwardError::Unreachable { owner: call.owner.to_string(), message: "down".into() })
///         })
///     }
/// }
/// # let _: &dyn Forwarder = &Nowhere;
/// ```
pub trait Forwarder: Send + Sync + 'static {
    /// Sends `call` to `call.owner` and returns the handler's output as JSON. The runtime
    /// bounds the wait by `call.deadline`.
    fn forward(&self, call: ForwardedCall) -> BoxFuture<'static, Result<Value, ForwardError>>;
}

/// Where a forwarded call ended: the owner's reply, or here, the shard map refreshed after a
/// "misdirected" answer having found the object served by this node (nothing ran elsewhere).
#[derive(Debug)]
pub(crate) enum Sent {
    /// The owner's reply.
    Reply(Value),
    /// Run the call here, with its arguments back and the time left to its deadline.
    Here {
        /// The arguments, as they were to be sent.
        arguments: Value,
        /// The time left.
        remaining: Duration,
    },
}

/// How long a forwarded call waits without a per-call timeout when its type sets no
/// `call_timeout` (the runtime's built-in default).
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(30);

impl Runtime {
    /// In cluster mode with a forwarder, the owner's address of a call to an object another
    /// node serves; `None` when the call is to run here (always without a cluster: one
    /// branch).
    #[inline]
    pub(crate) fn forward_target(&self, type_name: &str, id: &str) -> Option<Arc<str>> {
        let node = self.inner.cluster.get()?;
        node.forwarder.as_ref()?;
        match self.route(type_name, id) {
            Route::Remote(owner) => Some(owner),
            // Local runs here; Unavailable fails at once with `NotOwner` when dispatched.
            Route::Local | Route::Unavailable => None,
        }
    }

    /// Forwards a call by name to `owner`; on a "misdirected" answer, refreshes the shard map
    /// and tries once more (here if the object turns out to be served here).
    #[allow(
        clippy::too_many_arguments,
        reason = "the call by name's own arguments, passed on"
    )]
    pub(crate) async fn forward_call(
        &self,
        owner: Arc<str>,
        type_name: &str,
        id: &str,
        exposed: &ExposedHandler,
        arguments: Value,
        options: &CallOptions,
        call_timeout: Duration,
    ) -> Result<Value, CallByNameError> {
        let sent = self
            .forward(
                owner,
                type_name,
                id,
                exposed.name,
                arguments,
                options,
                call_timeout,
            )
            .await;
        match sent {
            Ok(Sent::Reply(reply)) => Ok(reply),
            Ok(Sent::Here {
                arguments,
                remaining,
            }) => {
                let options = CallOptions {
                    timeout: Some(remaining),
                    ..options.clone()
                };
                (exposed.invoke)(self, id, arguments, &options).await
            }
            Err(error) => Err(match error.split() {
                Err(error) => CallByNameError::Handler {
                    handler: exposed.name,
                    error,
                },
                Ok(Error::Forward { source, .. }) => CallByNameError::Forward(source),
                Ok(error) => CallByNameError::Runtime(error),
            }),
        }
    }

    /// Sends a call to `owner` through the forwarder with the time left to its deadline, its
    /// hop count and its idempotency key; on a "misdirected" answer, refreshes the shard map
    /// and sends it once more to the owner found (or hands it back to run here). The handler's
    /// own error comes back as JSON in [`Error::Handler`]; a failed exchange as
    /// [`Error::Forward`]. Shared by calls by name and typed calls.
    #[allow(
        clippy::too_many_arguments,
        reason = "the call's own arguments, passed on"
    )]
    pub(crate) async fn forward(
        &self,
        owner: Arc<str>,
        type_name: &str,
        id: &str,
        handler: &'static str,
        arguments: Value,
        options: &CallOptions,
        call_timeout: Duration,
    ) -> Result<Sent, Error<Value>> {
        // Without a per-call timeout the caller waits as long as the handler may run.
        let wait = options.timeout.unwrap_or(call_timeout);
        let Some(forwarder) = self
            .inner
            .cluster
            .get()
            .and_then(|node| node.forwarder.clone())
        else {
            return Ok(Sent::Here {
                arguments,
                remaining: wait,
            });
        };
        let key = || ObjectKey::new(type_name, id);
        let deadline = Instant::now() + wait;
        let mut call = ForwardedCall {
            owner,
            type_name: type_name.to_owned(),
            id: id.to_owned(),
            handler: handler.to_owned(),
            arguments,
            deadline: Some(wait),
            hops: 1,
            idempotency_key: options.idempotency_key.clone(),
        };
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let timeout = || {
                metrics::counter!(FORWARDED_CALLS, "outcome" => "timeout").increment(1);
                Error::Timeout {
                    key: key(),
                    handler,
                }
            };
            if remaining.is_zero() {
                return Err(timeout());
            }
            call.deadline = Some(remaining);
            let sent = tokio::time::timeout(remaining, forwarder.forward(call.clone())).await;
            let error = match sent {
                Err(_) => return Err(timeout()),
                Ok(Ok(reply)) => {
                    metrics::counter!(FORWARDED_CALLS, "outcome" => "ok").increment(1);
                    return Ok(Sent::Reply(reply));
                }
                Ok(Err(error)) => error,
            };
            metrics::counter!(FORWARDED_CALLS, "outcome" => error.outcome()).increment(1);
            match error {
                ForwardError::Timeout => {
                    return Err(Error::Timeout {
                        key: key(),
                        handler,
                    });
                }
                ForwardError::Handler(error) => return Err(Error::Handler(error)),
                ForwardError::Misdirected { owner } if call.hops < DEFAULT_HOP_LIMIT => {
                    tracing::debug!(
                        object = %key(),
                        to = %call.owner,
                        believed = ?owner,
                        "misdirected forward: refreshing the shard map"
                    );
                    if let Err(error) = self.refresh_shard_map().await {
                        tracing::warn!(%error, "could not refresh the shard map");
                    }
                    match self.route(type_name, id) {
                        Route::Local => {
                            return Ok(Sent::Here {
                                arguments: call.arguments,
                                remaining: deadline.saturating_duration_since(Instant::now()),
                            });
                        }
                        Route::Remote(next) => {
                            call.owner = next;
                            call.hops += 1;
                        }
                        Route::Unavailable => {
                            return Err(Error::NotOwner {
                                key: key(),
                                owner: None,
                            });
                        }
                    }
                }
                // Still misdirected after a refreshed map: the shard is moving; retryable.
                ForwardError::Misdirected { owner } => {
                    return Err(Error::NotOwner { key: key(), owner });
                }
                other => {
                    return Err(Error::Forward {
                        key: key(),
                        source: Box::new(other),
                    });
                }
            }
        }
    }
}
