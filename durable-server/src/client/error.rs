//! What a request through [`Client`](super::Client) can fail with.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The gateway's error body: `{"error": {"code", "message", "retryable", "details"}}`, the
/// part inside `"error"`.
///
/// # Examples
///
/// ```
/// use durable_server::client::ApiErrorBody;
///
/// let body: ApiErrorBody = serde_json::from_str(
///     r#"{"code":"unknown_type","message":"no exposed object type is named `x`","retryable":false,"details":null}"#,
/// ).unwrap();
/// assert_eq!(body.code, "unknown_type");
/// assert!(!body.retryable);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiErrorBody {
    /// The error's code, in snake case (`handler_error`, `invalid_arguments`, `overloaded`...).
    pub code: String,
    /// A human-readable message.
    pub message: String,
    /// Whether the same request may succeed if sent again later.
    pub retryable: bool,
    /// More about the error: the handler's own error for `handler_error`, the failing field
    /// for `invalid_arguments`, else usually `null`.
    #[serde(default)]
    pub details: Value,
}

/// The envelope `{"error": ApiErrorBody}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// The error.
    pub error: ApiErrorBody,
}

/// Why a request through the client failed.
///
/// # Examples
///
/// ```
/// use durable_server::client::{ApiErrorBody, ClientError};
///
/// let err = ClientError::Api {
///     status: 404,
///     error: ApiErrorBody {
///         code: "object_not_found".into(),
///         message: "no object `counter/a`".into(),
///         retryable: false,
///         details: serde_json::Value::Null,
///     },
/// };
/// assert!(err.is_not_found());
/// assert_eq!(err.code(), Some("object_not_found"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The gateway answered with an error status and its error body. A reply that is not the
    /// gateway's error body (from a proxy in front of it, say) is reported here too, with the
    /// code `unexpected_response` and the start of the body as its message.
    #[error("{status} {}: {}", error.code, error.message)]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error body.
        error: ApiErrorBody,
    },

    /// The request did not get a reply: connection refused, timeout, TLS failure...
    #[error("request to the gateway failed: {0}")]
    Transport(#[source] reqwest::Error),

    /// A successful reply's body was not the JSON expected (or not the type asked for).
    #[error("the gateway's reply (status {status}) could not be decoded: {source}")]
    Decode {
        /// The HTTP status.
        status: u16,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },

    /// The gateway's base URL is not an absolute `http` or `https` URL.
    #[error("invalid gateway URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ClientError {
    /// The HTTP status of an [`Api`](Self::Api) error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { status, .. } | Self::Decode { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The error code of an [`Api`](Self::Api) error.
    pub fn code(&self) -> Option<&str> {
        match self {
            Self::Api { error, .. } => Some(&error.code),
            _ => None,
        }
    }

    /// Whether the gateway answered 404: an unknown type, handler, alarm or route, or an
    /// absent object.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Api { status: 404, .. })
    }

    /// Whether the gateway refused the request's credentials: 401 (no or unknown token) or
    /// 403 (no grant).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::client::{ApiErrorBody, ClientError};
    ///
    /// let body = ApiErrorBody {
    ///     code: "forbidden".into(),
    ///     message: "no grant".into(),
    ///     retryable: false,
    ///     details: serde_json::Value::Null,
    /// };
    /// assert!(ClientError::Api { status: 403, error: body }.is_denied());
    /// ```
    pub fn is_denied(&self) -> bool {
        matches!(
            self,
            Self::Api {
                status: 401 | 403,
                ..
            }
        )
    }

    /// Whether the same request may succeed if sent again: the gateway said so, or the request
    /// never reached it (a connection failure). A timeout is not retryable: the call may
    /// still have committed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Api { error, .. } => error.retryable,
            Self::Transport(error) => error.is_connect(),
            _ => false,
        }
    }
}
