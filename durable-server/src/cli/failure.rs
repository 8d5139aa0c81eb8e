//! A command's failure: the gateway's error body (whichever target produced it) and the exit
//! code it maps to.

use durable_runtime::inspect::InspectError;
use durable_runtime::{CallByNameError, Error};
use serde_json::{Value, json};

use crate::client::{ApiErrorBody, ClientError};

use super::Exit;

/// Why a command failed, in the gateway's error shape so that both targets print the same.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The HTTP status the gateway answers (or would answer) with; `None` for failures of the
    /// command line itself (bad usage, a database that cannot be opened, a refused write).
    pub(crate) status: Option<u16>,
    /// Boxed: failures travel in every `Result` of the command line.
    pub(crate) error: Box<ApiErrorBody>,
}

impl Failure {
    pub(crate) fn new(status: Option<u16>, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            error: Box::new(ApiErrorBody {
                code: code.to_owned(),
                message: message.into(),
                retryable: false,
                details: Value::Null,
            }),
        }
    }

    /// A failure of the command line itself.
    pub(crate) fn local(code: &str, message: impl Into<String>) -> Self {
        Self::new(None, code, message)
    }

    /// A request the gateway would refuse with 400 `invalid_request`.
    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(Some(400), "invalid_request", message)
    }

    /// An absent object, as `GET /v1/objects/{type}/{id}` reports it.
    pub(crate) fn object_not_found(type_name: &str, id: &str) -> Self {
        Self::new(
            Some(404),
            "object_not_found",
            format!("no object `{type_name}/{id}` is live or stored"),
        )
    }

    fn retryable(mut self, retryable: bool) -> Self {
        self.error.retryable = retryable;
        self
    }

    fn details(mut self, details: Value) -> Self {
        self.error.details = details;
        self
    }

    /// The exit code: 3 for a refused token or grant, 2 for something absent, else 1.
    pub(crate) fn exit(&self) -> Exit {
        match self.status {
            Some(401 | 403) => Exit::Denied,
            Some(404) => Exit::NotFound,
            _ => Exit::Error,
        }
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Api { status, error } => Self {
                status: Some(status),
                error: Box::new(error),
            },
            ClientError::Transport(error) => {
                let retryable = error.is_connect();
                Self::local("unreachable", format!("cannot reach the gateway: {error}"))
                    .retryable(retryable)
            }
            other => Self::local("bad_reply", other.to_string()),
        }
    }
}

impl From<CallByNameError> for Failure {
    /// The gateway's mapping of a call by name's failure, for the direct target.
    fn from(error: CallByNameError) -> Self {
        let message = error.to_string();
        match error {
            CallByNameError::UnknownType { .. } => Self::new(Some(404), "unknown_type", message),
            CallByNameError::UnknownHandler { .. } => {
                Self::new(Some(404), "unknown_handler", message)
            }
            CallByNameError::UnknownAlarm { .. } => Self::new(Some(404), "unknown_alarm", message),
            CallByNameError::BadArguments {
                path,
                message: reason,
                ..
            } => {
                // The details the gateway gives: the field, and where decoding failed.
                let field = crate::error::argument_field(&path, &reason);
                Self::new(Some(400), "invalid_arguments", message)
                    .details(json!({ "field": field, "path": path }))
            }
            CallByNameError::InvalidCursor(_) => Self::invalid_request(message),
            CallByNameError::Handler { error, .. } => {
                Self::new(Some(422), "handler_error", message).details(error)
            }
            CallByNameError::Runtime(error) => error.into(),
            _ => Self::new(Some(500), "internal", message),
        }
    }
}

impl From<InspectError> for Failure {
    /// The gateway's mapping of a direct read or write's failure.
    fn from(error: InspectError) -> Self {
        let retryable = error.is_retryable();
        let message = error.to_string();
        let (status, code) = match &error {
            InspectError::InvalidId(_) => (400, "invalid_id"),
            InspectError::InvalidCursor(_) => (400, "invalid_request"),
            InspectError::NotJson { .. } => (500, "state_decode_failed"),
            InspectError::Conflict { .. } => (409, "conflict"),
            InspectError::Storage(_) if retryable => (503, "unavailable"),
            _ => (500, "internal"),
        };
        Self::new(Some(status), code, message).retryable(retryable)
    }
}

impl From<Error> for Failure {
    /// The gateway's mapping of a runtime error, for the direct target.
    fn from(error: Error) -> Self {
        let retryable = error.is_retryable();
        let message = error.to_string();
        let (status, code) = match &error {
            Error::InvalidId(_) => (400, "invalid_id"),
            Error::Overloaded { .. } => (429, "overloaded"),
            Error::TooManyObjects { .. } => (503, "too_many_objects"),
            Error::TooManyAlarms { .. } => (422, "too_many_alarms"),
            Error::ShuttingDown => (503, "shutting_down"),
            Error::Storage { .. } if retryable => (503, "unavailable"),
            Error::Timeout { .. } => (504, "timeout"),
            Error::OutcomeUnknown { .. } => (503, "outcome_unknown"),
            Error::Conflict { .. } => (409, "conflict"),
            Error::CallCycle { .. } => (409, "call_cycle"),
            Error::FsmRefused {
                refusal: durable_runtime::storage::FsmRefusal::Duplicate { .. },
                ..
            } => (409, "duplicate_instance"),
            Error::FsmRefused {
                refusal: durable_runtime::storage::FsmRefusal::NoTarget { .. },
                ..
            } => (404, "instance_not_found"),
            Error::Panicked { .. } => (500, "handler_panicked"),
            Error::Decode { .. } => (500, "state_decode_failed"),
            Error::Encode { .. } => (500, "state_encode_failed"),
            _ => (500, "internal"),
        };
        Self::new(Some(status), code, message).retryable(retryable)
    }
}

#[cfg(test)]
mod tests {
    use durable_runtime::storage::ObjectKey;

    use super::*;

    #[test]
    fn exit_codes_follow_the_status() {
        let exit = |status| Failure::new(status, "x", "m").exit();
        assert_eq!(exit(Some(401)), Exit::Denied);
        assert_eq!(exit(Some(403)), Exit::Denied);
        assert_eq!(exit(Some(404)), Exit::NotFound);
        assert_eq!(exit(Some(422)), Exit::Error);
        assert_eq!(exit(None), Exit::Error);
    }

    #[test]
    fn runtime_errors_map_as_the_gateway_maps_them() {
        let key = ObjectKey::new("Counter", "a");
        let overloaded: Failure = Error::Overloaded {
            key: key.clone(),
            capacity: 8,
        }
        .into();
        assert_eq!(
            (overloaded.status, overloaded.error.code.as_str()),
            (Some(429), "overloaded")
        );
        assert!(overloaded.error.retryable);
        let cycle: Failure = CallByNameError::Runtime(Error::CallCycle {
            key,
            chain: Vec::new(),
        })
        .into();
        assert_eq!(
            (cycle.status, cycle.error.code.as_str()),
            (Some(409), "call_cycle")
        );
        let bad: Failure = CallByNameError::BadArguments {
            handler: "increment",
            path: "by".into(),
            message: "missing field `by`".into(),
        }
        .into();
        assert_eq!(bad.error.details, json!({"field": "by", "path": "by"}));
    }
}
