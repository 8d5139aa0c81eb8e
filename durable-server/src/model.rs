//! The JSON bodies of the gateway's routes, as Rust types: the server writes them, a client
//! reads them with the same definitions. Times are RFC 3339 strings in UTC
//! (`2026-11-25T18:00:00.123Z`), durations humantime strings (`"5m"`).

pub mod cluster;
pub mod fsm;
pub mod fsm_control;

use std::time::SystemTime;

use durable_runtime::storage::AlarmRecord;
use durable_runtime::{Access, ExposedType, ObjectOptions, ObjectStatus, TypeDescription};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `POST /v1/objects/{type}/{id}/call/{handler}`: the handler's output.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::CallReply = serde_json::from_str(r#"{"result": 5}"#).unwrap();
/// assert_eq!(reply.result, serde_json::json!(5));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CallReply {
    /// The handler's output, as JSON.
    pub result: Value,
}

/// Where an object is.
///
/// # Examples
///
/// ```
/// use durable_server::model::Status;
///
/// assert_eq!(serde_json::to_string(&Status::Hibernated).unwrap(), r#""hibernated""#);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Live in the server, its state in memory.
    Active,
    /// Live in the server, its state dropped until the next call.
    Hibernated,
    /// Only stored.
    Stored,
}

impl Status {
    /// The status of a present object; `None` for an absent one.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectStatus;
    /// use durable_server::model::Status;
    ///
    /// assert_eq!(Status::of(ObjectStatus::Stored), Some(Status::Stored));
    /// assert_eq!(Status::of(ObjectStatus::Absent), None);
    /// ```
    pub fn of(status: ObjectStatus) -> Option<Self> {
        match status {
            ObjectStatus::Active => Some(Self::Active),
            ObjectStatus::Hibernated => Some(Self::Hibernated),
            ObjectStatus::Stored => Some(Self::Stored),
            _ => None,
        }
    }
}

/// One alarm of an object.
///
/// # Examples
///
/// ```
/// let text = r#"{"name":"ring","fire_at":"2026-11-25T18:00:00.000Z","attempts":0,"dead":false}"#;
/// let alarm: durable_server::model::AlarmView = serde_json::from_str(text).unwrap();
/// assert_eq!(alarm.name, "ring");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AlarmView {
    /// The alarm's name.
    pub name: String,
    /// When it is due (RFC 3339, UTC).
    pub fire_at: String,
    /// How many attempts failed so far.
    pub attempts: u32,
    /// Whether it exhausted its attempts and is kept as a dead alarm.
    pub dead: bool,
    /// The error of its last failed attempt; absent if no attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The argument it was set with, as JSON (absent for an alarm without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub args: Option<Value>,
}

impl From<&AlarmRecord> for AlarmView {
    fn from(record: &AlarmRecord) -> Self {
        Self {
            name: record.name.clone(),
            fire_at: format_time(record.due_at),
            attempts: record.attempts,
            dead: record.dead,
            last_error: record.last_error.clone(),
            // Arguments are stored as JSON; anything else is not shown.
            args: record
                .payload
                .as_deref()
                .and_then(|payload| serde_json::from_slice(payload).ok()),
        }
    }
}

/// `GET /v1/objects/{type}/{id}`: an object's status, stored state and alarms.
///
/// # Examples
///
/// ```
/// let text = r#"{"type":"Counter","id":"a","status":"active","state":{"count":1},"version":1,"alarms":[]}"#;
/// let object: durable_server::model::ObjectView = serde_json::from_str(text).unwrap();
/// assert_eq!(object.version, Some(1));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ObjectView {
    /// The object's type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The object's id.
    pub id: String,
    /// Where it is.
    pub status: Status,
    /// Its committed state, as JSON: the stored one, or the default state a live object that
    /// has stored nothing yet runs on.
    pub state: Value,
    /// The version of its committed state; `null` if nothing is stored.
    pub version: Option<u64>,
    /// Its alarms, by due time.
    pub alarms: Vec<AlarmView>,
}

/// One object of a listing.
///
/// # Examples
///
/// ```
/// let text = r#"{"type":"Counter","id":"a","status":"stored"}"#;
/// let entry: durable_server::model::ObjectSummary = serde_json::from_str(text).unwrap();
/// assert_eq!(entry.id, "a");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ObjectSummary {
    /// The object's type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The object's id.
    pub id: String,
    /// Where it is.
    pub status: Status,
}

/// `GET /v1/objects`: a page of objects.
///
/// # Examples
///
/// ```
/// let page: durable_server::model::ObjectList =
///     serde_json::from_str(r#"{"objects":[],"next_cursor":null}"#).unwrap();
/// assert!(page.objects.is_empty() && page.next_cursor.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ObjectList {
    /// The objects of this page, by id.
    pub objects: Vec<ObjectSummary>,
    /// Pass it as `cursor` to get the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// `DELETE /v1/objects/{type}/{id}`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::Deleted = serde_json::from_str(r#"{"deleted":true}"#).unwrap();
/// assert!(reply.deleted);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Deleted {
    /// Whether a stored state existed.
    pub deleted: bool,
}

/// `POST /v1/objects/{type}/{id}/stop`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::Stopped = serde_json::from_str(r#"{"stopped":true}"#).unwrap();
/// assert!(reply.stopped);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Stopped {
    /// Whether the object was live in the server.
    pub stopped: bool,
}

/// `POST /v1/objects/{type}/{id}/reload`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::Reloaded = serde_json::from_str(r#"{"reloaded":false}"#).unwrap();
/// assert!(!reply.reloaded);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Reloaded {
    /// Whether the object was live in the server.
    pub reloaded: bool,
}

/// The body of `PUT /v1/objects/{type}/{id}/state`.
///
/// # Examples
///
/// ```
/// let text = r#"{"state":{"count":5},"expected_version":3}"#;
/// let body: durable_server::model::ReplaceState = serde_json::from_str(text).unwrap();
/// assert_eq!(body.expected_version, 3);
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceState {
    /// The new state, as JSON (a missing field takes its default).
    pub state: Value,
    /// The version storage must hold: 0 for an object never stored.
    pub expected_version: u64,
}

/// The reply of `PUT /v1/objects/{type}/{id}/state`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::StateReplaced = serde_json::from_str(r#"{"version":4}"#).unwrap();
/// assert_eq!(reply.version, 4);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StateReplaced {
    /// The version of the state written.
    pub version: u64,
}

/// `GET /v1/objects/{type}/{id}/alarms`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::AlarmList = serde_json::from_str(r#"{"alarms":[]}"#).unwrap();
/// assert!(reply.alarms.is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AlarmList {
    /// The object's alarms, by due time.
    pub alarms: Vec<AlarmView>,
}

/// `POST /v1/objects/{type}/{id}/alarms`: when to fire an alarm, as a time or a delay
/// (exactly one of them). Setting an alarm replaces a pending one of the same name.
///
/// # Examples
///
/// ```
/// use durable_server::model::SetAlarm;
///
/// let body = SetAlarm { name: "ring".into(), args: None, fire_at: None, delay: Some("30s".into()) };
/// assert_eq!(serde_json::to_string(&body).unwrap(), r#"{"name":"ring","delay":"30s"}"#);
/// // With the argument of an alarm whose handler takes one (`method` names it too).
/// let text = r#"{"method":"remind","args":{"text":"hi"},"fire_at":"2026-11-25T18:00:00Z"}"#;
/// let body: SetAlarm = serde_json::from_str(text).unwrap();
/// assert_eq!((body.name.as_str(), body.args), ("remind", Some(serde_json::json!({"text": "hi"}))));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetAlarm {
    /// The alarm's name (one of the type's `#[alarm]` methods).
    #[serde(alias = "method")]
    pub name: String,
    /// The argument its handler takes, as JSON, checked against the handler's argument type
    /// (a misfit is `400 invalid_arguments`); absent, `null` or `{}` for an alarm without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub args: Option<Value>,
    /// When it is due (RFC 3339, UTC, ending in `Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fire_at: Option<String>,
    /// How long from now it is due (humantime: `"30s"`, `"1h 30m"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
}

/// The reply to setting an alarm.
///
/// # Examples
///
/// ```
/// let text = r#"{"name":"ring","fire_at":"2026-11-25T18:00:00.000Z"}"#;
/// let reply: durable_server::model::ScheduledAlarm = serde_json::from_str(text).unwrap();
/// assert_eq!(reply.name, "ring");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ScheduledAlarm {
    /// The alarm's name.
    pub name: String,
    /// When it is due (RFC 3339, UTC).
    pub fire_at: String,
}

/// `DELETE /v1/objects/{type}/{id}/alarms/{name}`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::Cancelled = serde_json::from_str(r#"{"cancelled":false}"#).unwrap();
/// assert!(!reply.cancelled);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Cancelled {
    /// Whether the alarm was scheduled.
    pub cancelled: bool,
}

/// One dead alarm: it exhausted its attempts.
///
/// # Examples
///
/// ```
/// let text = r#"{"type":"Job","id":"j","name":"run","fire_at":"2026-11-25T18:00:00.000Z",
///     "attempts":3,"last_error":"the mail server refused"}"#;
/// let alarm: durable_server::model::DeadAlarm = serde_json::from_str(text).unwrap();
/// assert_eq!(alarm.attempts, 3);
/// assert_eq!(alarm.last_error.as_deref(), Some("the mail server refused"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeadAlarm {
    /// The object's type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The object's id.
    pub id: String,
    /// The alarm's name.
    pub name: String,
    /// When it was due.
    pub fire_at: String,
    /// How many attempts failed.
    pub attempts: u32,
    /// The error of its last attempt: why it died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl From<&AlarmRecord> for DeadAlarm {
    fn from(record: &AlarmRecord) -> Self {
        Self {
            type_name: record.key.object_type.clone(),
            id: record.key.object_id.clone(),
            name: record.name.clone(),
            fire_at: format_time(record.due_at),
            attempts: record.attempts,
            last_error: record.last_error.clone(),
        }
    }
}

/// `GET /v1/alarms/dead`: a page of dead alarms.
///
/// # Examples
///
/// ```
/// let page: durable_server::model::DeadAlarmList =
///     serde_json::from_str(r#"{"alarms":[],"next_cursor":null}"#).unwrap();
/// assert!(page.alarms.is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeadAlarmList {
    /// The dead alarms of this page, by type, id, then name.
    pub alarms: Vec<DeadAlarm>,
    /// Pass it as `cursor` to get the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// `POST /v1/alarms/dead/requeue`: which dead alarm to fire again.
///
/// # Examples
///
/// ```
/// let body: durable_server::model::Requeue =
///     serde_json::from_str(r#"{"type":"Job","id":"j","name":"run"}"#).unwrap();
/// assert_eq!(body.type_name, "Job");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Requeue {
    /// The object's type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The object's id.
    pub id: String,
    /// The alarm's name.
    pub name: String,
}

/// The reply to a re-queue.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::Requeued = serde_json::from_str(r#"{"requeued":true}"#).unwrap();
/// assert!(reply.requeued);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Requeued {
    /// Whether a dead alarm of that name was found and re-queued.
    pub requeued: bool,
}

/// Whether a handler reads or writes its object's state.
///
/// # Examples
///
/// ```
/// use durable_server::model::AccessView;
///
/// assert_eq!(AccessView::from(durable_runtime::Access::Write), AccessView::Write);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AccessView {
    /// `&self`: runs on the committed state, changes nothing.
    Read,
    /// `&mut self`: its changes are committed before it replies.
    Write,
}

impl From<Access> for AccessView {
    fn from(access: Access) -> Self {
        match access {
            Access::Read => Self::Read,
            _ => Self::Write,
        }
    }
}

/// One exposed handler.
///
/// # Examples
///
/// ```
/// let text = r#"{"name":"increment","access":"write","arguments":["by"]}"#;
/// let handler: durable_server::model::HandlerView = serde_json::from_str(text).unwrap();
/// assert_eq!(handler.arguments, ["by"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HandlerView {
    /// The handler's name.
    pub name: String,
    /// Whether it reads or writes.
    pub access: AccessView,
    /// The names of its arguments: the fields of its JSON arguments object.
    pub arguments: Vec<String>,
    /// The Rust types of its arguments, in the order of `arguments`, as written in the source.
    #[serde(default)]
    pub argument_types: Vec<String>,
    /// The Rust type of its output (`()` for none).
    #[serde(default)]
    pub output: Option<String>,
    /// The Rust type of its own error, for a handler that returns `Result`.
    #[serde(default)]
    pub error: Option<String>,
    /// Its doc comment.
    #[serde(default)]
    pub doc: Option<String>,
}

/// One field of an exposed type's state.
///
/// # Examples
///
/// ```
/// let text = r#"{"name":"count","type":"i64","default":0}"#;
/// let field: durable_server::model::FieldView = serde_json::from_str(text).unwrap();
/// assert_eq!((field.name.as_str(), field.ty.as_str()), ("count", "i64"));
/// assert_eq!(field.default, Some(serde_json::json!(0)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FieldView {
    /// The field's name, as stored.
    pub name: String,
    /// Its Rust type, as written in the source.
    #[serde(rename = "type")]
    pub ty: String,
    /// Its value in the default state, as JSON; `null` when the state does not store it.
    #[serde(default)]
    pub default: Option<Value>,
}

/// An exposed type's options.
///
/// # Examples
///
/// ```
/// use durable_runtime::ObjectOptions;
/// use durable_server::model::OptionsView;
///
/// let options = ObjectOptions::new().with_hibernate_after(std::time::Duration::from_secs(300));
/// assert_eq!(OptionsView::from(&options).hibernate_after.as_deref(), Some("5m"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OptionsView {
    /// Idle time before the state is dropped from memory; `null` for never.
    pub hibernate_after: Option<String>,
    /// Idle time before the object leaves memory; `null` for never.
    pub shutdown_after: Option<String>,
    /// How long a call may take.
    pub call_timeout: Option<String>,
    /// How many calls may wait for the object.
    pub queue_capacity: Option<usize>,
}

impl From<&ObjectOptions> for OptionsView {
    fn from(options: &ObjectOptions) -> Self {
        let text = |duration: Option<std::time::Duration>| {
            duration.map(|duration| humantime::format_duration(duration).to_string())
        };
        Self {
            hibernate_after: text(options.hibernate_after),
            shutdown_after: text(options.shutdown_after),
            call_timeout: text(options.call_timeout),
            queue_capacity: options.queue_capacity,
        }
    }
}

/// One exposed type: its handlers, alarms and options.
///
/// # Examples
///
/// ```
/// let text = r#"{"name":"Counter","handlers":[],"alarms":["reset"],
///     "options":{"hibernate_after":"5m","shutdown_after":null,"call_timeout":"30s","queue_capacity":1024}}"#;
/// let view: durable_server::model::TypeView = serde_json::from_str(text).unwrap();
/// assert_eq!(view.alarms, ["reset"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TypeView {
    /// The type's name, as routes take it.
    pub name: String,
    /// Its handlers callable over HTTP.
    pub handlers: Vec<HandlerView>,
    /// The names of its alarms.
    pub alarms: Vec<String>,
    /// Its options.
    pub options: OptionsView,
    /// The fields of its state, with their types and defaults.
    #[serde(default)]
    pub fields: Vec<FieldView>,
}

impl TypeView {
    /// The view of `exposed`, with the fields and handler signatures of its `description`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, DurableObject, MemoryStorage, Runtime};
    /// use durable_server::model::TypeView;
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// let view = TypeView::described(&rt.exposed_types()[0], Some(&Counter::describe()));
    /// assert_eq!(view.fields[0].ty, "i64");
    /// assert_eq!(view.handlers[0].argument_types, ["i64"]);
    /// assert_eq!(view.handlers[0].output.as_deref(), Some("i64"));
    /// ```
    pub fn described(exposed: &ExposedType, description: Option<&TypeDescription>) -> Self {
        let signature = |name: &str| {
            description.and_then(|description| {
                description
                    .handlers
                    .iter()
                    .find(|signature| signature.name == name)
            })
        };
        Self {
            name: exposed.name.to_owned(),
            handlers: exposed
                .handlers
                .iter()
                .map(|handler| {
                    let signature = signature(handler.name);
                    HandlerView {
                        name: handler.name.to_owned(),
                        access: handler.access.into(),
                        arguments: handler.arguments.iter().map(|&a| a.to_owned()).collect(),
                        argument_types: signature
                            .map(|s| s.arguments.iter().map(|a| a.ty.to_owned()).collect())
                            .unwrap_or_default(),
                        output: signature.map(|s| s.output.to_owned()),
                        error: signature.and_then(|s| s.error).map(str::to_owned),
                        doc: signature
                            .map(|s| s.doc)
                            .filter(|doc| !doc.is_empty())
                            .map(str::to_owned),
                    }
                })
                .collect(),
            alarms: exposed.alarms.iter().map(|&a| a.to_owned()).collect(),
            options: OptionsView::from(&exposed.options),
            fields: description
                .map(|description| {
                    description
                        .fields
                        .iter()
                        .map(|field| FieldView {
                            name: field.name.to_owned(),
                            ty: field.ty.to_owned(),
                            default: field.default.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

impl From<&ExposedType> for TypeView {
    fn from(exposed: &ExposedType) -> Self {
        Self::described(exposed, None)
    }
}

/// `GET /v1/types`: the exposed types the caller may list.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::TypeList = serde_json::from_str(r#"{"types":[]}"#).unwrap();
/// assert!(reply.types.is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TypeList {
    /// The types.
    pub types: Vec<TypeView>,
}

/// `GET /healthz` and `GET /readyz`.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::Health = serde_json::from_str(r#"{"status":"ok"}"#).unwrap();
/// assert_eq!(reply.status, "ok");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` (health) or `ready` (readiness).
    pub status: String,
}

/// A time as the gateway writes it: RFC 3339 in UTC with milliseconds.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
/// assert_eq!(durable_server::model::format_time(at), "2023-11-14T22:13:20.123Z");
/// ```
pub fn format_time(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// Parses a time as the gateway reads it: RFC 3339 in UTC (ending in `Z`), with or without
/// fractional seconds.
///
/// # Errors
///
/// The parser's message, for text that is not such a time.
///
/// # Examples
///
/// ```
/// use durable_server::model::{format_time, parse_time};
///
/// let at = parse_time("2026-11-25T18:00:00.123Z").unwrap();
/// assert_eq!(format_time(at), "2026-11-25T18:00:00.123Z");
/// assert!(parse_time("tomorrow").is_err());
/// ```
pub fn parse_time(text: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339(text).map_err(|error| error.to_string())
}

/// One entry of an object's key-value storage: its key and its JSON value, as stored.
///
/// # Examples
///
/// ```
/// use durable_server::model::KvEntry;
///
/// let entry: KvEntry = serde_json::from_str(r#"{"key":"a","value":{"n":1}}"#).unwrap();
/// assert_eq!((entry.key.as_str(), entry.value.get()), ("a", r#"{"n":1}"#));
/// ```
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KvEntry {
    /// The key.
    pub key: String,
    /// The value, byte for byte as stored.
    #[schema(value_type = Object)]
    pub value: Box<serde_json::value::RawValue>,
}

/// `GET /v1/objects/{type}/{id}/storage`: a page of an object's key-value storage, in the
/// order of the keys' bytes.
///
/// # Examples
///
/// ```
/// use durable_server::model::KvPage;
///
/// let page: KvPage = serde_json::from_str(r#"{"entries":[],"next_cursor":null}"#).unwrap();
/// assert!(page.entries.is_empty() && page.next_cursor.is_none());
/// ```
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct KvPage {
    /// The entries.
    pub entries: Vec<KvEntry>,
    /// The `cursor` of the next page, if there is one.
    pub next_cursor: Option<String>,
}

/// `PUT /v1/objects/{type}/{id}/storage/{key}`: the key written and its value's size.
///
/// # Examples
///
/// ```
/// use durable_server::model::KvWritten;
///
/// let reply: KvWritten = serde_json::from_str(r#"{"key":"a","bytes":3}"#).unwrap();
/// assert_eq!(reply.bytes, 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KvWritten {
    /// The key.
    pub key: String,
    /// The size of the stored value, in bytes.
    pub bytes: u64,
}

/// `DELETE /v1/objects/{type}/{id}/storage/{key}`: whether the key held a value.
///
/// # Examples
///
/// ```
/// use durable_server::model::KvDeleted;
///
/// let reply: KvDeleted = serde_json::from_str(r#"{"deleted":true}"#).unwrap();
/// assert!(reply.deleted);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KvDeleted {
    /// Whether the key held a value.
    pub deleted: bool,
}
