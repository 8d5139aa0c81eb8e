//! The one error body of the gateway, and the one table that maps every failure to a status,
//! a code and whether retrying may help.
//!
//! Every error response, whatever the route, is
//! `{"error": {"code", "message", "retryable", "details"}}`. Messages of server-side failures
//! (a panic, an undecodable state, a refused storage operation) say what failed, never why in
//! the server's own terms: the details go to the server's log.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use durable_runtime::cluster::ForwardError;
use durable_runtime::storage::{FsmRefusal, KvLimitExceeded, StorageErrorKind};
use durable_runtime::{CallByNameError, Error, KvError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::auth::AuthError;

/// How long a client is asked to wait (`Retry-After`) before retrying a retryable failure.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What went wrong, as the `code` of the error body. Each code has one status and one
/// retryability: this is the gateway's mapping table.
///
/// | code | status | retryable |
/// |---|---|---|
/// | `handler_error` | 422 | no |
/// | `invalid_arguments`, `invalid_id`, `invalid_request` | 400 | no |
/// | `unknown_type`, `unknown_handler`, `unknown_alarm`, `object_not_found`, `not_found` | 404 | no |
/// | `overloaded` | 429 + `Retry-After` | yes |
/// | `too_many_objects`, `shutting_down`, `unavailable` | 503 + `Retry-After` | yes |
/// | `outcome_unknown` | 503 | no |
/// | `timeout` | 504 | only for a call with an `Idempotency-Key` |
/// | `conflict` | 409 | yes |
/// | `call_cycle`, `idempotency_key_reused` | 409 | no |
/// | `handler_panicked`, `state_decode_failed`, `state_encode_failed`, `internal` | 500 | no |
/// | `body_too_large`, `kv_value_too_large` | 413 | no |
/// | `kv_key_limit`, `kv_object_quota` | 422 | no |
/// | `kv_key_not_found` | 404 | no |
/// | `fsm_not_enabled` | 404 | no |
/// | `cluster_not_enabled` | 404 | no |
/// | `unknown_fsm`, `instance_not_found` | 404 | no |
/// | `duplicate_instance` | 409 | no |
/// | `unauthenticated` | 401 + `WWW-Authenticate` | no |
/// | `forbidden` | 403 | no |
/// | `method_not_allowed` | 405 | no |
/// | `misdirected` (cluster's internal route only) | 421 | yes |
/// | `hop_limit_exceeded` (cluster's internal route only) | 508 | no |
///
/// # Examples
///
/// ```
/// use durable_server::ErrorCode;
///
/// assert_eq!(ErrorCode::Overloaded.status().as_u16(), 429);
/// assert!(ErrorCode::Overloaded.retryable());
/// assert_eq!(ErrorCode::Overloaded.as_str(), "overloaded");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The handler returned its own error (in `details`).
    HandlerError,
    /// The arguments are not JSON, or do not fit the handler's (`details.field` names the
    /// field).
    InvalidArguments,
    /// The object id is refused.
    InvalidId,
    /// A bad query string (a listing cursor no listing handed out, say), path or request
    /// body.
    InvalidRequest,
    /// No exposed type of that name.
    UnknownType,
    /// The type has no exposed handler of that name.
    UnknownHandler,
    /// The type has no alarm of that name.
    UnknownAlarm,
    /// The object is not live and not stored.
    ObjectNotFound,
    /// No such route.
    NotFound,
    /// The object's queue is full.
    Overloaded,
    /// The runtime holds its maximum of live objects, none idle.
    TooManyObjects,
    /// Setting the alarm would give the object more alarms than it may have; nothing was
    /// written.
    TooManyAlarms,
    /// The server is shutting down.
    ShuttingDown,
    /// Storage cannot be reached.
    Unavailable,
    /// No reply in time: the call may or may not have been applied.
    Timeout,
    /// The call's write may or may not have been applied.
    OutcomeUnknown,
    /// Another writer committed first.
    Conflict,
    /// The call would wait for itself.
    CallCycle,
    /// The call's idempotency key was used by a different call (another handler or other
    /// arguments) on the same object.
    IdempotencyKeyReused,
    /// The handler panicked.
    HandlerPanicked,
    /// The stored state no longer decodes.
    StateDecodeFailed,
    /// The state after the handler could not be encoded.
    StateEncodeFailed,
    /// Any other server-side failure.
    Internal,
    /// The request body is over the configured limit.
    BodyTooLarge,
    /// No valid bearer token.
    Unauthenticated,
    /// The token's principal has no grant for this.
    Forbidden,
    /// The route exists, not with this method.
    MethodNotAllowed,
    /// A key-value value is over the type's size limit (1 MiB by default).
    KvValueTooLarge,
    /// The write would take the object past its key count limit (10,000 by default).
    KvKeyLimit,
    /// The write would take the object past its key-value byte quota (50 MiB by default).
    KvObjectQuota,
    /// No value under that key.
    KvKeyNotFound,
    /// The server was given no FSM engine: the `/fsm` routes are off.
    FsmNotEnabled,
    /// The server's runtime does not run in cluster mode: the `/cluster` routes have nothing
    /// to show.
    ClusterNotEnabled,
    /// No FSM of that name is registered with the server's engine.
    UnknownFsm,
    /// No FSM instance with that id, or no live instance with that id or correlation key
    /// (for a signal).
    InstanceNotFound,
    /// Another instance occupies the correlation key; nothing was inserted.
    DuplicateInstance,
    /// The FSM instance had already ended; nothing changed.
    InstanceEnded,
    /// Cluster's internal route: this node does not serve the object's shard (`details.owner`
    /// names the owner it believes in, or is `null`); nothing ran.
    Misdirected,
    /// Cluster's internal route: the forwarded call crossed more nodes than the hop limit
    /// allows; nothing ran.
    HopLimitExceeded,
}

/// Every code, to read one back from its text.
const ALL_CODES: &[ErrorCode] = &[
    ErrorCode::HandlerError,
    ErrorCode::InvalidArguments,
    ErrorCode::InvalidId,
    ErrorCode::InvalidRequest,
    ErrorCode::UnknownType,
    ErrorCode::UnknownHandler,
    ErrorCode::UnknownAlarm,
    ErrorCode::ObjectNotFound,
    ErrorCode::NotFound,
    ErrorCode::Overloaded,
    ErrorCode::TooManyObjects,
    ErrorCode::TooManyAlarms,
    ErrorCode::ShuttingDown,
    ErrorCode::Unavailable,
    ErrorCode::Timeout,
    ErrorCode::OutcomeUnknown,
    ErrorCode::Conflict,
    ErrorCode::CallCycle,
    ErrorCode::IdempotencyKeyReused,
    ErrorCode::HandlerPanicked,
    ErrorCode::StateDecodeFailed,
    ErrorCode::StateEncodeFailed,
    ErrorCode::Internal,
    ErrorCode::BodyTooLarge,
    ErrorCode::Unauthenticated,
    ErrorCode::Forbidden,
    ErrorCode::MethodNotAllowed,
    ErrorCode::KvValueTooLarge,
    ErrorCode::KvKeyLimit,
    ErrorCode::KvObjectQuota,
    ErrorCode::KvKeyNotFound,
    ErrorCode::FsmNotEnabled,
    ErrorCode::UnknownFsm,
    ErrorCode::InstanceNotFound,
    ErrorCode::DuplicateInstance,
    ErrorCode::InstanceEnded,
    ErrorCode::Misdirected,
    ErrorCode::HopLimitExceeded,
];

impl ErrorCode {
    /// The code as it appears in error bodies (`snake_case`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_server::ErrorCode::CallCycle.as_str(), "call_cycle");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HandlerError => "handler_error",
            Self::InvalidArguments => "invalid_arguments",
            Self::InvalidId => "invalid_id",
            Self::InvalidRequest => "invalid_request",
            Self::UnknownType => "unknown_type",
            Self::UnknownHandler => "unknown_handler",
            Self::UnknownAlarm => "unknown_alarm",
            Self::ObjectNotFound => "object_not_found",
            Self::NotFound => "not_found",
            Self::Overloaded => "overloaded",
            Self::TooManyObjects => "too_many_objects",
            Self::TooManyAlarms => "too_many_alarms",
            Self::ShuttingDown => "shutting_down",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::OutcomeUnknown => "outcome_unknown",
            Self::Conflict => "conflict",
            Self::CallCycle => "call_cycle",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::HandlerPanicked => "handler_panicked",
            Self::StateDecodeFailed => "state_decode_failed",
            Self::StateEncodeFailed => "state_encode_failed",
            Self::Internal => "internal",
            Self::BodyTooLarge => "body_too_large",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::KvValueTooLarge => "kv_value_too_large",
            Self::KvKeyLimit => "kv_key_limit",
            Self::KvObjectQuota => "kv_object_quota",
            Self::KvKeyNotFound => "kv_key_not_found",
            Self::FsmNotEnabled => "fsm_not_enabled",
            Self::ClusterNotEnabled => "cluster_not_enabled",
            Self::UnknownFsm => "unknown_fsm",
            Self::InstanceNotFound => "instance_not_found",
            Self::DuplicateInstance => "duplicate_instance",
            Self::InstanceEnded => "instance_ended",
            Self::Misdirected => "misdirected",
            Self::HopLimitExceeded => "hop_limit_exceeded",
        }
    }

    /// The code whose text ([`as_str`](Self::as_str)) is `code`, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::ErrorCode;
    ///
    /// assert_eq!(ErrorCode::parse("overloaded"), Some(ErrorCode::Overloaded));
    /// assert_eq!(ErrorCode::parse("nope"), None);
    /// ```
    pub fn parse(code: &str) -> Option<Self> {
        ALL_CODES
            .iter()
            .copied()
            .find(|known| known.as_str() == code)
    }

    /// The HTTP status of responses with this code.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_server::ErrorCode::Timeout.status().as_u16(), 504);
    /// ```
    pub fn status(self) -> StatusCode {
        match self {
            Self::HandlerError | Self::KvKeyLimit | Self::KvObjectQuota | Self::TooManyAlarms => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Self::InvalidArguments | Self::InvalidId | Self::InvalidRequest => {
                StatusCode::BAD_REQUEST
            }
            Self::UnknownType
            | Self::UnknownHandler
            | Self::UnknownAlarm
            | Self::ObjectNotFound
            | Self::KvKeyNotFound
            | Self::UnknownFsm
            | Self::InstanceNotFound
            | Self::NotFound => StatusCode::NOT_FOUND,
            Self::FsmNotEnabled | Self::ClusterNotEnabled => StatusCode::NOT_FOUND,
            Self::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            Self::TooManyObjects
            | Self::ShuttingDown
            | Self::Unavailable
            | Self::OutcomeUnknown => StatusCode::SERVICE_UNAVAILABLE,
            Self::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Self::Conflict
            | Self::CallCycle
            | Self::IdempotencyKeyReused
            | Self::DuplicateInstance
            | Self::InstanceEnded => StatusCode::CONFLICT,
            Self::HandlerPanicked
            | Self::StateDecodeFailed
            | Self::StateEncodeFailed
            | Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::BodyTooLarge | Self::KvValueTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unauthenticated => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Misdirected => StatusCode::MISDIRECTED_REQUEST,
            Self::HopLimitExceeded => StatusCode::LOOP_DETECTED,
        }
    }

    /// Whether sending the same request again later may succeed, the first attempt having
    /// had no effect.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::ErrorCode;
    ///
    /// assert!(ErrorCode::Unavailable.retryable());
    /// assert!(!ErrorCode::OutcomeUnknown.retryable()); // it may have been applied
    /// ```
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::Overloaded
                | Self::TooManyObjects
                | Self::ShuttingDown
                | Self::Unavailable
                | Self::Conflict
                | Self::Misdirected
        )
    }

    /// Whether responses with this code carry `Retry-After`: the retryable ones answered
    /// 429 or 503.
    fn retry_after(self) -> bool {
        self.retryable() && !matches!(self, Self::Conflict | Self::Misdirected)
    }
}

/// An error response of the gateway: a code from the [mapping table](ErrorCode), a message
/// for humans and optional JSON details.
///
/// # Examples
///
/// ```
/// use durable_runtime::{CallByNameError, Error};
/// use durable_runtime::storage::ObjectKey;
/// use durable_server::{ApiError, ErrorCode};
///
/// let full = Error::Overloaded { key: ObjectKey::new("Counter", "a"), capacity: 8 };
/// let error = ApiError::from(CallByNameError::from(full));
/// assert_eq!(error.code(), ErrorCode::Overloaded);
/// assert_eq!(error.code().status().as_u16(), 429);
/// ```
#[derive(Clone, Debug)]
pub struct ApiError {
    code: ErrorCode,
    message: String,
    details: Option<Value>,
    /// Retryability when it differs from the code's (a timeout of a call with a key).
    retryable: Option<bool>,
}

/// The error body's inner object: `{"code", "message", "retryable", "details"}`; clients
/// deserialize it from `{"error": ...}`.
///
/// # Examples
///
/// ```
/// use durable_server::{ApiErrorBody, ErrorEnvelope};
///
/// let text = r#"{"error":{"code":"overloaded","message":"busy","retryable":true,"details":null}}"#;
/// let body: ErrorEnvelope = serde_json::from_str(text).unwrap();
/// assert_eq!(body.error.code, "overloaded");
/// assert!(body.error.retryable);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApiErrorBody {
    /// What went wrong, in `snake_case` (see the mapping table).
    pub code: String,
    /// What went wrong, for humans.
    pub message: String,
    /// Whether sending the same request again later may succeed.
    pub retryable: bool,
    /// Structured details: the handler's own error for `handler_error`, the offending field
    /// for `invalid_arguments`; `null` otherwise.
    #[serde(default)]
    pub details: Option<Value>,
}

/// Every error response's body: `{"error": {...}}`.
///
/// # Examples
///
/// ```
/// use durable_server::{ApiError, ErrorCode, ErrorEnvelope};
///
/// let envelope = ApiError::new(ErrorCode::Forbidden, "no").body();
/// assert_eq!(
///     serde_json::to_value(&envelope).unwrap(),
///     serde_json::json!({"error": {"code": "forbidden", "message": "no", "retryable": false, "details": null}})
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ApiErrorBody,
}

impl ApiError {
    /// An error with `code` and `message`, no details.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::{ApiError, ErrorCode};
    ///
    /// let error = ApiError::new(ErrorCode::InvalidRequest, "limit must be at most 1000");
    /// assert_eq!(error.message(), "limit must be at most 1000");
    /// ```
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: None,
            retryable: None,
        }
    }

    /// The same error, retryable or not whatever its code says: a timeout is retryable for a
    /// call with an idempotency key, since the retry is answered from the first call's stored
    /// reply if it was applied.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::{ApiError, ErrorCode};
    ///
    /// let error = ApiError::new(ErrorCode::Timeout, "no reply in time");
    /// assert!(!error.retryable());
    /// assert!(error.with_retryable(true).retryable());
    /// ```
    #[must_use]
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = Some(retryable);
        self
    }

    /// Whether sending the same request again is safe and may succeed.
    pub fn retryable(&self) -> bool {
        self.retryable.unwrap_or(self.code.retryable())
    }

    /// The same error with `details`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_server::{ApiError, ErrorCode};
    ///
    /// let error = ApiError::new(ErrorCode::HandlerError, "failed").with_details(serde_json::json!("too big"));
    /// assert_eq!(error.details(), Some(&serde_json::json!("too big")));
    /// ```
    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The details, if any.
    pub fn details(&self) -> Option<&Value> {
        self.details.as_ref()
    }

    /// The body this error is sent as.
    pub fn body(&self) -> ErrorEnvelope {
        ErrorEnvelope {
            error: ApiErrorBody {
                code: self.code.as_str().to_owned(),
                message: self.message.clone(),
                retryable: self.retryable(),
                details: self.details.clone(),
            },
        }
    }

    pub(crate) fn not_found() -> Self {
        Self::new(ErrorCode::NotFound, "no such route")
    }

    pub(crate) fn method_not_allowed() -> Self {
        Self::new(
            ErrorCode::MethodNotAllowed,
            "this route does not accept this method",
        )
    }

    pub(crate) fn forbidden() -> Self {
        Self::new(
            ErrorCode::Forbidden,
            "the caller has no grant for this operation",
        )
    }

    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    pub(crate) fn timeout(after: Duration) -> Self {
        Self::new(
            ErrorCode::Timeout,
            format!(
                "no reply within {}: the outcome is unknown (the call may still be applied)",
                humantime::format_duration(after)
            ),
        )
    }

    pub(crate) fn shutting_down() -> Self {
        Self::new(ErrorCode::ShuttingDown, "the server is shutting down")
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub(crate) fn unknown_type(type_name: &str) -> Self {
        CallByNameError::UnknownType {
            type_name: type_name.to_owned(),
        }
        .into()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code;
        let mut response = (code.status(), Json(self.body())).into_response();
        let headers = response.headers_mut();
        if code.retry_after() {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(RETRY_AFTER.as_secs()),
            );
        }
        if code == ErrorCode::Unauthenticated {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        Self::new(ErrorCode::Unauthenticated, error.to_string())
    }
}

/// The field an argument error is about: the path where decoding failed, or for an unknown
/// or missing field (reported at the arguments object itself) the name serde quotes.
pub(crate) fn argument_field(path: &str, message: &str) -> Option<String> {
    if path != "." {
        return Some(path.to_owned());
    }
    ["unknown field `", "missing field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field.to_owned())
}

impl From<CallByNameError> for ApiError {
    fn from(error: CallByNameError) -> Self {
        match error {
            CallByNameError::UnknownType { type_name } => Self::new(
                ErrorCode::UnknownType,
                format!("no exposed object type is named `{type_name}`"),
            ),
            CallByNameError::UnknownHandler { type_name, handler } => Self::new(
                ErrorCode::UnknownHandler,
                format!("the object type `{type_name}` has no exposed handler `{handler}`"),
            ),
            CallByNameError::UnknownAlarm { type_name, alarm } => Self::new(
                ErrorCode::UnknownAlarm,
                format!("the object type `{type_name}` has no alarm `{alarm}`"),
            ),
            CallByNameError::BadArguments {
                handler,
                path,
                message,
            } => {
                let field = argument_field(&path, &message);
                let text = match &field {
                    Some(field) if path != "." => {
                        format!("bad arguments for `{handler}`: field `{field}`: {message}")
                    }
                    _ => format!("bad arguments for `{handler}`: {message}"),
                };
                Self::new(ErrorCode::InvalidArguments, text)
                    .with_details(json!({"field": field, "path": path}))
            }
            CallByNameError::Handler { handler, error } => Self::new(
                ErrorCode::HandlerError,
                format!("the handler `{handler}` returned an error"),
            )
            .with_details(error),
            CallByNameError::InvalidCursor(invalid) => Self::invalid_request(format!(
                "{invalid}: pass the `next_cursor` of the previous page as it is"
            )),
            CallByNameError::Encode { handler, message } => {
                tracing::error!(handler, %message, "a reply could not be encoded as JSON");
                Self::internal(format!(
                    "the reply of `{handler}` could not be encoded as JSON"
                ))
            }
            CallByNameError::Runtime(error) => error.into(),
            CallByNameError::Forward(error) => forward_error(*error),
            CallByNameError::Kv(error) => kv_error(error),
            other => {
                tracing::error!(error = %other, "call failed");
                Self::internal("the call failed")
            }
        }
    }
}

impl From<durable_runtime::fsm::Error> for ApiError {
    fn from(error: durable_runtime::fsm::Error) -> Self {
        use durable_runtime::fsm::Error as FsmError;
        match error {
            FsmError::UnknownFsm { .. } => Self::new(ErrorCode::UnknownFsm, error.to_string()),
            FsmError::InvalidArgs { .. } => {
                Self::new(ErrorCode::InvalidArguments, error.to_string())
            }
            FsmError::Duplicate { .. } => {
                Self::new(ErrorCode::DuplicateInstance, error.to_string())
            }
            FsmError::NoTarget { .. } | FsmError::UnknownInstance { .. } => {
                Self::new(ErrorCode::InstanceNotFound, error.to_string())
            }
            FsmError::AlreadyEnded { .. } => Self::new(ErrorCode::InstanceEnded, error.to_string()),
            FsmError::InvalidRateLimit { .. } => {
                Self::new(ErrorCode::InvalidRequest, error.to_string())
            }
            FsmError::Unencodable { .. } => {
                Self::new(ErrorCode::InvalidArguments, error.to_string())
            }
            FsmError::Storage(source) if source.kind() == StorageErrorKind::Unavailable => {
                tracing::warn!(error = %source, "FSM storage unavailable");
                Self::new(ErrorCode::Unavailable, "storage is unavailable")
            }
            other => {
                tracing::error!(error = %other, "an FSM engine operation failed");
                Self::internal("the FSM engine's storage failed")
            }
        }
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        match error {
            Error::InvalidId(invalid) => Self::new(ErrorCode::InvalidId, invalid.to_string()),
            Error::Overloaded { capacity, .. } => Self::new(
                ErrorCode::Overloaded,
                format!("the object's queue of {capacity} calls is full"),
            ),
            Error::TooManyObjects { .. } => Self::new(
                ErrorCode::TooManyObjects,
                "the server holds its maximum of live objects and none is idle",
            ),
            Error::TooManyAlarms { limit, .. } => Self::new(
                ErrorCode::TooManyAlarms,
                format!(
                    "the object already has {limit} alarms, the most one object may have; nothing was written"
                ),
            ),
            Error::ShuttingDown => Self::shutting_down(),
            // Cluster mode: the object's shard is served by another node (or by none for a
            // moment); nothing was applied.
            Error::Fenced { .. } | Error::NotOwner { .. } => Self::new(
                ErrorCode::Unavailable,
                "this node does not serve the object now (its shard is moving); nothing was applied",
            ),
            // A typed call a handler made, forwarded to another node, failed there.
            Error::Forward { source, .. } => forward_error(*source),
            Error::Storage { source, .. } if source.kind() == StorageErrorKind::Unavailable => {
                tracing::warn!(error = %source, "storage unavailable");
                Self::new(ErrorCode::Unavailable, "storage is unavailable")
            }
            Error::Timeout { handler, .. } => Self::new(
                ErrorCode::Timeout,
                format!(
                    "the call to `{handler}` timed out: the outcome is unknown (the call may still be applied)"
                ),
            ),
            Error::OutcomeUnknown { key, source } => {
                tracing::warn!(%key, error = %source, "a commit failed with its outcome unknown");
                Self::new(
                    ErrorCode::OutcomeUnknown,
                    "storage failed during the commit: the call may or may not have been applied",
                )
            }
            Error::KvLimit { limit, .. } => {
                let (code, details) = match limit {
                    KvLimitExceeded::Keys { max, found } => (
                        ErrorCode::KvKeyLimit,
                        json!({"max_keys": max, "keys": found}),
                    ),
                    KvLimitExceeded::Bytes { max, found } => (
                        ErrorCode::KvObjectQuota,
                        json!({"max_bytes": max, "bytes": found}),
                    ),
                };
                Self::new(
                    code,
                    format!(
                        "the object's key-value storage would hold {limit}; nothing was applied"
                    ),
                )
                .with_details(details)
            }
            Error::Conflict { .. } => Self::new(
                ErrorCode::Conflict,
                "another writer committed a newer version of the object first; nothing was applied",
            ),
            Error::IdempotencyKeyReused {
                idempotency_key, ..
            } => Self::new(
                ErrorCode::IdempotencyKeyReused,
                format!(
                    "the idempotency key {idempotency_key:?} was used by a different call (another handler or other arguments) on this object; nothing was applied"
                ),
            ),
            // The handler's FSM insert or signal was refused in its commit: a business outcome,
            // answered as the FSM routes answer the same refusal.
            Error::FsmRefused {
                refusal: refusal @ FsmRefusal::Duplicate { .. },
                ..
            } => Self::new(
                ErrorCode::DuplicateInstance,
                format!("{refusal}; nothing of the call was applied"),
            ),
            Error::FsmRefused {
                refusal: refusal @ FsmRefusal::NoTarget { .. },
                ..
            } => Self::new(
                ErrorCode::InstanceNotFound,
                format!("{refusal}; nothing of the call was applied"),
            ),
            Error::CallCycle { .. } => Self::new(
                ErrorCode::CallCycle,
                "the call would wait for itself: its object is already handling a call further up the chain",
            ),
            Error::Panicked {
                key,
                handler,
                message,
            } => {
                tracing::error!(%key, handler, %message, "a handler panicked");
                Self::new(
                    ErrorCode::HandlerPanicked,
                    format!("the handler `{handler}` panicked; nothing was applied"),
                )
            }
            Error::Decode { key, path, message } => {
                tracing::error!(%key, %path, %message, "a stored state does not decode");
                Self::new(
                    ErrorCode::StateDecodeFailed,
                    "the object's stored state could not be decoded",
                )
            }
            Error::Encode { key, message } => {
                tracing::error!(%key, %message, "a state could not be encoded");
                Self::new(
                    ErrorCode::StateEncodeFailed,
                    "the object's state could not be encoded; nothing was applied",
                )
            }
            other => {
                tracing::error!(error = %other, "request failed");
                Self::internal("the server failed to handle the request")
            }
        }
    }
}

/// A forwarded call's failure, as the node the call was first sent to answers its caller:
/// the owner's own error body as the owner gave it, the others as this node's.
fn forward_error(error: ForwardError) -> ApiError {
    match error {
        ForwardError::Remote {
            code,
            message,
            retryable,
            details,
        } => {
            let Some(known) = ErrorCode::parse(&code) else {
                tracing::error!(%code, %message, "the owner of a forwarded call answered an unknown error code");
                return ApiError::internal("the node serving the object failed");
            };
            let error = ApiError::new(known, message).with_retryable(retryable);
            if details.is_null() {
                error
            } else {
                error.with_details(*details)
            }
        }
        ForwardError::Handler(details) => {
            ApiError::new(ErrorCode::HandlerError, "the handler returned an error")
                .with_details(details)
        }
        ForwardError::Misdirected { .. } | ForwardError::Unreachable { .. } => {
            tracing::warn!(%error, "a forwarded call did not reach the object's owner");
            ApiError::new(
                ErrorCode::Unavailable,
                "the node serving the object cannot be reached now (its shard may be moving); nothing was applied",
            )
        }
        ForwardError::Interrupted { .. } => {
            tracing::warn!(%error, "a forwarded call was interrupted");
            ApiError::new(
                ErrorCode::OutcomeUnknown,
                "the connection to the node serving the object broke during the call: it may or may not have been applied",
            )
        }
        ForwardError::Timeout => ApiError::new(
            ErrorCode::Timeout,
            "the node serving the object did not answer in time: the outcome is unknown (the call may still be applied)",
        ),
        ForwardError::HopLimit { hops, limit } => ApiError::new(
            ErrorCode::HopLimitExceeded,
            format!(
                "the call crossed {hops} nodes, more than the hop limit of {limit}; nothing was applied"
            ),
        ),
        other => {
            tracing::error!(error = %other, "a forwarded call failed");
            ApiError::internal("the call could not be forwarded to the node serving the object")
        }
    }
}

/// A key-value operation's own error.
fn kv_error(error: KvError) -> ApiError {
    match error {
        KvError::ValueTooLarge { size, max, .. } => ApiError::new(
            ErrorCode::KvValueTooLarge,
            format!("the value is {size} bytes, more than the limit of {max}"),
        )
        .with_details(json!({"size": size, "max_bytes": max})),
        KvError::Encode { message, .. } => {
            ApiError::invalid_request(format!("the value is not JSON: {message}"))
        }
        KvError::Storage { source, .. } if source.kind() == StorageErrorKind::Unavailable => {
            tracing::warn!(error = %source, "storage unavailable");
            ApiError::new(ErrorCode::Unavailable, "storage is unavailable")
        }
        other => {
            tracing::error!(error = %other, "a key-value operation failed");
            ApiError::internal("the key-value operation failed")
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::invalid_request(rejection.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        Self::invalid_request(rejection.body_text())
    }
}

impl From<BytesRejection> for ApiError {
    fn from(rejection: BytesRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Self::new(
                ErrorCode::BodyTooLarge,
                "the request body is larger than the server accepts",
            )
        } else {
            Self::invalid_request(rejection.body_text())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::argument_field;

    #[test]
    fn the_field_of_an_argument_error() {
        assert_eq!(argument_field("by", "invalid type").as_deref(), Some("by"));
        let unknown = "unknown field `amout`, expected `amount`";
        assert_eq!(argument_field(".", unknown).as_deref(), Some("amout"));
        let missing = "missing field `amount`";
        assert_eq!(argument_field(".", missing).as_deref(), Some("amount"));
        assert_eq!(argument_field(".", "EOF while parsing"), None);
    }
}
