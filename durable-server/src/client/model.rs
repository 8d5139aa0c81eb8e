//! The JSON shapes of the gateway's replies and request bodies, shared by the client and by the
//! command line (which prints them, so that its JSON output is the same whether it talks to a
//! gateway or reads a database directly).
//!
//! Times travel as RFC 3339 strings in UTC with milliseconds (`"2026-11-25T18:00:00.123Z"`),
//! durations as humantime strings (`"5m"`, `"30s"`).

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where an object is, as the gateway reports it.
///
/// # Examples
///
/// ```
/// use durable_server::client::ObjectStatus;
///
/// assert_eq!(serde_json::to_string(&ObjectStatus::Hibernated).unwrap(), r#""hibernated""#);
/// assert_eq!("stored".parse::<ObjectStatus>().unwrap(), ObjectStatus::Stored);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjectStatus {
    /// Live in the gateway's runtime, its state in memory.
    Active,
    /// Live in the gateway's runtime, its decoded state dropped until the next call.
    Hibernated,
    /// Not live, but stored.
    Stored,
}

impl ObjectStatus {
    /// The status as it appears in JSON and in query strings.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(durable_server::client::ObjectStatus::Active.as_str(), "active");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Hibernated => "hibernated",
            Self::Stored => "stored",
        }
    }
}

impl std::fmt::Display for ObjectStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not `active`, `hibernated` or `stored`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown object status `{0}` (expected active, hibernated or stored)")]
pub struct UnknownStatus(pub String);

impl std::str::FromStr for ObjectStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "active" => Ok(Self::Active),
            "hibernated" => Ok(Self::Hibernated),
            "stored" => Ok(Self::Stored),
            other => Err(UnknownStatus(other.to_owned())),
        }
    }
}

/// One object as `GET /v1/objects/{type}/{id}` describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ObjectInfo {
    /// The object's type name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The object's id.
    pub id: String,
    /// Where the object is.
    pub status: ObjectStatus,
    /// The committed state as JSON: the stored one, or the default state of a live object
    /// that has not stored a state yet.
    pub state: Value,
    /// The stored state's version (`null` when nothing is stored).
    pub version: Option<u64>,
    /// The object's alarms.
    pub alarms: Vec<AlarmInfo>,
}

/// One entry of an object listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ObjectSummary {
    /// The object's type name.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The object's id.
    pub id: String,
    /// Where the object is.
    pub status: ObjectStatus,
}

/// A page of `GET /v1/objects`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ObjectPage {
    /// The objects on this page.
    pub objects: Vec<ObjectSummary>,
    /// The cursor of the next page, `None` on the last one.
    pub next_cursor: Option<String>,
}

/// An alarm of an object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AlarmInfo {
    /// The alarm's name.
    pub name: String,
    /// When it is due.
    #[serde(with = "rfc3339")]
    pub fire_at: SystemTime,
    /// Failed attempts so far.
    pub attempts: u32,
    /// Whether it exhausted its attempts.
    pub dead: bool,
    /// The argument it was set with, as JSON (absent for an alarm without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Value>,
}

/// The `{"alarms": [..]}` reply listing one object's alarms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AlarmList {
    /// The alarms, by due time then name.
    pub alarms: Vec<AlarmInfo>,
}

/// The reply to scheduling an alarm: its name and when it fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduledAlarm {
    /// The alarm's name.
    pub name: String,
    /// When it is due.
    #[serde(with = "rfc3339")]
    pub fire_at: SystemTime,
}

/// An alarm that exhausted its attempts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeadAlarm {
    /// The type of the object it belongs to.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The id of the object it belongs to.
    pub id: String,
    /// The alarm's name.
    pub name: String,
    /// When it was last due.
    #[serde(with = "rfc3339")]
    pub fire_at: SystemTime,
    /// How many attempts failed.
    pub attempts: u32,
}

/// A page of `GET /v1/alarms/dead`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeadAlarmPage {
    /// The dead alarms on this page.
    pub alarms: Vec<DeadAlarm>,
    /// The cursor of the next page, `None` on the last one.
    pub next_cursor: Option<String>,
}

/// Whether a handler reads or writes its object's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// A `&self` handler.
    Read,
    /// A `&mut self` handler.
    Write,
}

/// A handler of an exposed type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HandlerInfo {
    /// The handler's name.
    pub name: String,
    /// Whether it reads or writes.
    pub access: Access,
    /// Its argument names: the fields of its JSON arguments object.
    pub arguments: Vec<String>,
    /// The Rust types of its arguments, in the order of `arguments` (empty from a gateway
    /// that does not describe them).
    #[serde(default)]
    pub argument_types: Vec<String>,
    /// The Rust type of its output.
    #[serde(default)]
    pub output: Option<String>,
    /// The Rust type of its own error, if it returns `Result`.
    #[serde(default)]
    pub error: Option<String>,
    /// Its doc comment.
    #[serde(default)]
    pub doc: Option<String>,
}

/// A field of an exposed type's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FieldInfo {
    /// The field's name.
    pub name: String,
    /// Its Rust type, as written in the source.
    #[serde(rename = "type")]
    pub ty: String,
    /// Its default value, as JSON.
    #[serde(default)]
    pub default: Option<Value>,
}

/// The options of an exposed type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TypeOptions {
    /// Inactivity after which an object drops its decoded state.
    #[serde(with = "duration", default)]
    pub hibernate_after: Option<Duration>,
    /// Inactivity after which an object leaves memory.
    #[serde(with = "duration", default)]
    pub shutdown_after: Option<Duration>,
    /// The longest a handler may run.
    #[serde(with = "duration", default)]
    pub call_timeout: Option<Duration>,
    /// How many calls may wait in an object's queue.
    #[serde(default)]
    pub queue_capacity: Option<usize>,
}

/// An exposed object type: its handlers, alarms and options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TypeInfo {
    /// The type name, as used in routes.
    pub name: String,
    /// Its handlers callable by name.
    pub handlers: Vec<HandlerInfo>,
    /// Its alarm names.
    pub alarms: Vec<String>,
    /// Its options (all unset when only the stored name is known, as when the `durable`
    /// binary reads a database directly).
    #[serde(default)]
    pub options: TypeOptions,
    /// The fields of its state (empty when the gateway does not describe them, or when only
    /// the stored name is known).
    #[serde(default)]
    pub fields: Vec<FieldInfo>,
}

/// The `{"types": [..]}` reply of `GET /v1/types`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TypeList {
    /// The exposed types.
    pub types: Vec<TypeInfo>,
}

/// The `{"result": ..}` reply of a call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallReply<T = Value> {
    /// The handler's output.
    pub result: T,
}

/// The `{"deleted": bool}` reply of deleting an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Deleted {
    /// Whether a stored state existed.
    pub deleted: bool,
}

/// The `{"stopped": bool}` reply of stopping an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Stopped {
    /// Whether the object was live in the server.
    pub stopped: bool,
}

/// The `{"reloaded": bool}` reply of reloading an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Reloaded {
    /// Whether the object was live in the server.
    pub reloaded: bool,
}

/// The `{"version": n}` reply of replacing an object's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StateReplaced {
    /// The version of the state written.
    pub version: u64,
}

/// The `{"cancelled": bool}` reply of cancelling an alarm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Cancelled {
    /// Whether the alarm was scheduled.
    pub cancelled: bool,
}

/// The `{"requeued": bool}` reply of re-queueing a dead alarm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Requeued {
    /// Whether a dead alarm of that name existed and was scheduled again.
    pub requeued: bool,
}

/// When an alarm set through the gateway fires: at a time, or after a delay from now (the
/// gateway's now).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_server::client::AlarmWhen;
///
/// let when: AlarmWhen = Duration::from_secs(30).into();
/// assert_eq!(when, AlarmWhen::After(Duration::from_secs(30)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlarmWhen {
    /// At this time (`fire_at`).
    At(SystemTime),
    /// After this delay (`delay`).
    After(Duration),
}

impl From<SystemTime> for AlarmWhen {
    fn from(time: SystemTime) -> Self {
        Self::At(time)
    }
}

impl From<Duration> for AlarmWhen {
    fn from(delay: Duration) -> Self {
        Self::After(delay)
    }
}

/// The body of `POST /v1/objects/{type}/{id}/alarms`.
#[derive(Serialize)]
pub(crate) struct SetAlarmBody<'a> {
    pub(crate) name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) args: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fire_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) delay: Option<String>,
}

impl<'a> SetAlarmBody<'a> {
    pub(crate) fn new(name: &'a str, when: AlarmWhen) -> Self {
        match when {
            AlarmWhen::At(time) => Self {
                name,
                args: None,
                fire_at: Some(format_time(time)),
                delay: None,
            },
            AlarmWhen::After(delay) => Self {
                name,
                args: None,
                fire_at: None,
                delay: Some(humantime::format_duration(delay).to_string()),
            },
        }
    }
}

/// The body of `POST /v1/alarms/dead/requeue`.
#[derive(Serialize)]
pub(crate) struct RequeueBody<'a> {
    #[serde(rename = "type")]
    pub(crate) type_name: &'a str,
    pub(crate) id: &'a str,
    pub(crate) name: &'a str,
}

/// A time as the gateway writes it: RFC 3339, UTC, milliseconds.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let time = UNIX_EPOCH + Duration::from_millis(1_795_629_600_123);
/// assert_eq!(durable_server::client::format_time(time), "2026-11-25T18:00:00.123Z");
/// ```
pub fn format_time(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// Serde for RFC 3339 times: written with milliseconds, read with any precision.
mod rfc3339 {
    use std::time::SystemTime;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(time: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_time(*time))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SystemTime, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        humantime::parse_rfc3339_weak(&text).map_err(D::Error::custom)
    }
}

/// Serde for optional durations as humantime strings (`"5m"`), `null` for none.
mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(
        duration: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match duration {
            Some(duration) => s.serialize_str(&humantime::format_duration(*duration).to_string()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text = <Option<std::borrow::Cow<'de, str>>>::deserialize(d)?;
        text.map(|text| humantime::parse_duration(&text).map_err(D::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use serde_json::json;

    use super::*;

    #[test]
    fn alarm_times_round_trip_with_milliseconds() {
        let alarm: AlarmInfo = serde_json::from_value(json!({
            "name": "reset", "fire_at": "2026-11-25T18:00:00.123456Z", "attempts": 2, "dead": false
        }))
        .unwrap();
        assert_eq!(
            alarm.fire_at,
            UNIX_EPOCH + Duration::from_micros(1_795_629_600_123_456)
        );
        let written = serde_json::to_value(&alarm).unwrap();
        assert_eq!(written["fire_at"], "2026-11-25T18:00:00.123Z");
    }

    #[test]
    fn type_options_are_humantime_strings_or_null() {
        let options = TypeOptions {
            hibernate_after: Some(Duration::from_secs(300)),
            queue_capacity: Some(8),
            ..TypeOptions::default()
        };
        let json = serde_json::to_value(&options).unwrap();
        assert_eq!(
            json,
            json!({"hibernate_after": "5m", "shutdown_after": null, "call_timeout": null, "queue_capacity": 8})
        );
        assert_eq!(
            serde_json::from_value::<TypeOptions>(json).unwrap(),
            options
        );
    }

    #[test]
    fn alarm_bodies_carry_exactly_one_time() {
        let at = serde_json::to_value(SetAlarmBody::new("r", AlarmWhen::At(UNIX_EPOCH))).unwrap();
        assert_eq!(
            at,
            json!({"name": "r", "fire_at": "1970-01-01T00:00:00.000Z"})
        );
        let after = SetAlarmBody::new("r", Duration::from_secs(90).into());
        let after = serde_json::to_value(after).unwrap();
        assert_eq!(after, json!({"name": "r", "delay": "1m 30s"}));
    }
}
