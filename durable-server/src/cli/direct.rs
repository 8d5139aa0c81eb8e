//! Commands run on a database directly, without a gateway: through a runtime built from the
//! application's types (its by-name operations), or, in the generic binary, through a
//! [`StoreInspector`] over the store alone.
//!
//! The runtime built here never fires alarms, and writes (a write handler, a delete, alarm
//! changes) are refused unless `--offline` asserts that no live runtime uses the database: a
//! live runtime would fence a direct write off by its version check, but it is a foot-gun all
//! the same.

use std::time::SystemTime;

use durable_runtime::inspect::StoreInspector;
use durable_runtime::storage::{AlarmRecord, ObjectKey};
use durable_runtime::{
    Access, AlarmTime, CallOptions, DeadAlarmPage as RuntimeDeadAlarmPage, Error,
    ObjectStatus as RuntimeStatus, Runtime, validate_id,
};
use serde_json::Value;

use crate::client::{
    AlarmInfo, AlarmList, CallReply, Cancelled, DeadAlarm, DeadAlarmPage, Deleted, ObjectInfo,
    ObjectPage, ObjectStatus, ObjectSummary, Requeued, ScheduledAlarm, StateReplaced, TypeInfo,
    TypeList, TypeOptions,
};

use super::Store;
use super::args::{AlarmsCommand, KvCommand, ObjectsCommand, Operation, SetAlarm};
use super::failure::Failure;
use super::render::Reply;

/// A replacement state given on the command line, as JSON.
pub(super) fn state_json(text: &str) -> Result<Value, Failure> {
    serde_json::from_str(text).map_err(|error| {
        Failure::new(
            Some(400),
            "invalid_request",
            format!("the state is not JSON: {error}"),
        )
    })
}

/// The largest page a listing may ask for, as the gateway allows.
const MAX_LIMIT: usize = 1000;

/// A database opened for direct commands.
pub(crate) struct Direct {
    /// The application's runtime over the database, or `None` in the generic binary.
    runtime: Option<Runtime>,
    /// The database read without the objects' types.
    inspector: StoreInspector,
    store: Store,
    /// Writes allowed (`--offline`).
    offline: bool,
}

impl Direct {
    /// Direct commands on `store`, through `runtime` if the application's types are known.
    pub(crate) fn new(runtime: Option<Runtime>, store: Store, offline: bool) -> Self {
        Self {
            runtime,
            inspector: StoreInspector::new(store.clone()),
            store,
            offline,
        }
    }

    /// The runtime built over the database, if any.
    pub(crate) fn runtime(&self) -> Option<&Runtime> {
        self.runtime.as_ref()
    }

    pub(crate) async fn run(&self, operation: Operation) -> Result<Reply, Failure> {
        match operation {
            Operation::Types => self.types().await.map(Reply::Types),
            Operation::Openapi => self.openapi().await.map(Reply::Document),
            Operation::Objects(command) => self.objects(command).await,
            Operation::Alarms(command) => self.alarms(command).await,
            Operation::Kv(command) => self.kv(command).await,
            Operation::Fsm(_) => Err(fsm_needs_a_gateway()),
            Operation::Cluster(command) => super::cluster::direct(&self.store, command).await,
            // Run before a store is opened for the other commands (see `cli::execute`).
            Operation::Migrations(_) => Err(super::gateway::migrations_need_a_database()),
        }
    }

    /// Reads go through the runtime if there is one, else to the store; writes need the
    /// runtime (they commit through the object, under its limits) and `--offline`.
    async fn kv(&self, command: KvCommand) -> Result<Reply, Failure> {
        match command {
            KvCommand::Get { type_name, id, key } => {
                let value = match &self.runtime {
                    Some(runtime) => runtime.kv_get_by_name(&type_name, &id, &key).await?,
                    None => {
                        let object = self.key(&type_name, &id)?;
                        self.store
                            .kv_get(&object, &key)
                            .await
                            .map_err(unavailable)?
                    }
                };
                let value = value.ok_or_else(key_not_found)?;
                Ok(Reply::KvValue(raw_value(value)?))
            }
            KvCommand::List {
                type_name,
                id,
                prefix,
                cursor,
                limit,
            } => {
                check_limit(limit)?;
                let prefix = prefix.as_deref().unwrap_or_default();
                let mut listed = match &self.runtime {
                    Some(runtime) => {
                        runtime
                            .kv_list_by_name(&type_name, &id, prefix, cursor.as_deref(), limit + 1)
                            .await?
                    }
                    None => {
                        let object = self.key(&type_name, &id)?;
                        self.store
                            .kv_list(&object, prefix, cursor.as_deref(), limit + 1)
                            .await
                            .map_err(unavailable)?
                    }
                };
                let next_cursor = if listed.len() > limit {
                    listed.truncate(limit);
                    listed.last().map(|(key, _)| key.clone())
                } else {
                    None
                };
                let entries = listed
                    .into_iter()
                    .map(|(key, value)| {
                        Ok(crate::model::KvEntry {
                            key,
                            value: raw_value(value)?,
                        })
                    })
                    .collect::<Result<_, Failure>>()?;
                Ok(Reply::KvPage(crate::model::KvPage {
                    entries,
                    next_cursor,
                }))
            }
            KvCommand::Put {
                type_name,
                id,
                key,
                value,
            } => {
                let runtime = self.runtime_for("write a key")?;
                self.check_offline("write a key")?;
                let bytes = value.len() as u64;
                runtime
                    .kv_put_by_name(&type_name, &id, &key, value.into_bytes())
                    .await?;
                Ok(Reply::KvWritten(crate::model::KvWritten { key, bytes }))
            }
            KvCommand::Delete { type_name, id, key } => {
                let runtime = self.runtime_for("delete a key")?;
                self.check_offline("delete a key")?;
                let deleted = runtime
                    .kv_get_by_name(&type_name, &id, &key)
                    .await?
                    .is_some();
                runtime.kv_delete_by_name(&type_name, &id, &key).await?;
                Ok(Reply::KvDeleted(crate::model::KvDeleted { deleted }))
            }
        }
    }

    async fn objects(&self, command: ObjectsCommand) -> Result<Reply, Failure> {
        match command {
            ObjectsCommand::List {
                type_name,
                status,
                cursor,
                limit,
            } => {
                check_limit(limit)?;
                if matches!(
                    status,
                    Some(ObjectStatus::Active | ObjectStatus::Hibernated)
                ) {
                    return Err(Failure::invalid_request(
                        "only a gateway knows which objects are live: a database read directly \
                         lists stored objects",
                    ));
                }
                let page = match &self.runtime {
                    Some(runtime) => {
                        runtime
                            .list_ids_by_name(&type_name, cursor.as_deref(), limit)
                            .await?
                    }
                    None => {
                        self.inspector
                            .list_ids(&type_name, cursor.as_deref(), limit)
                            .await?
                    }
                };
                let objects = page
                    .ids
                    .into_iter()
                    .map(|id| ObjectSummary {
                        type_name: type_name.clone(),
                        id,
                        status: ObjectStatus::Stored,
                    })
                    .collect();
                Ok(Reply::Objects(ObjectPage {
                    objects,
                    next_cursor: page.next,
                }))
            }
            ObjectsCommand::Get { type_name, id } => self.get(&type_name, &id).await,
            ObjectsCommand::Call {
                type_name,
                id,
                handler,
                arguments,
                idempotency_key,
            } => {
                let arguments = arguments.unwrap_or_else(|| "{}".to_owned());
                let options = match idempotency_key {
                    Some(key) => CallOptions::new().with_idempotency_key(key),
                    None => CallOptions::new(),
                };
                self.call(&type_name, &id, &handler, &arguments, &options)
                    .await
            }
            ObjectsCommand::Delete { type_name, id } => {
                self.check_offline("delete an object")?;
                let deleted = match &self.runtime {
                    Some(runtime) => runtime.delete_by_name(&type_name, &id).await?,
                    None => {
                        let key = self.key(&type_name, &id)?;
                        self.store.delete(&key).await.map_err(unavailable)?
                    }
                };
                Ok(Reply::Deleted(Deleted { deleted }))
            }
            ObjectsCommand::Stop { .. } | ObjectsCommand::Reload { .. } => {
                Err(Failure::invalid_request(
                    "only a gateway holds live objects to stop or reload: a database read \
                     directly holds none (give --gateway)",
                ))
            }
            ObjectsCommand::ReplaceState {
                type_name,
                id,
                state,
                expected_version,
            } => {
                self.check_offline("replace an object's state")?;
                let state = state_json(&state)?;
                let runtime = self.runtime_for("replace an object's state")?;
                let version = runtime
                    .replace_state_by_name(&type_name, &id, state, expected_version)
                    .await?;
                Ok(Reply::Replaced(StateReplaced { version }))
            }
        }
    }

    async fn alarms(&self, command: AlarmsCommand) -> Result<Reply, Failure> {
        match command {
            AlarmsCommand::List { type_name, id } => {
                let alarms = self.list_alarms(&type_name, &id).await?;
                Ok(Reply::Alarms(AlarmList {
                    alarms: alarms.into_iter().map(alarm_info).collect(),
                }))
            }
            AlarmsCommand::Set(set) => {
                let runtime = self.runtime_for("schedule an alarm")?;
                self.check_offline("schedule an alarm")?;
                let when: AlarmTime = set.when();
                let SetAlarm {
                    type_name,
                    id,
                    name,
                    args,
                    ..
                } = set;
                runtime
                    .schedule_alarm_by_name_with(&type_name, &id, &name, args, when)
                    .await?;
                let alarms = runtime.list_alarms_by_name(&type_name, &id).await?;
                let fire_at = alarms
                    .into_iter()
                    .find(|alarm| alarm.name == name)
                    .map_or_else(SystemTime::now, |alarm| alarm.due_at);
                Ok(Reply::Scheduled(ScheduledAlarm { name, fire_at }))
            }
            AlarmsCommand::Cancel {
                type_name,
                id,
                name,
            } => {
                self.check_offline("cancel an alarm")?;
                let cancelled = match &self.runtime {
                    Some(runtime) => {
                        let existed = runtime
                            .list_alarms_by_name(&type_name, &id)
                            .await?
                            .iter()
                            .any(|alarm| alarm.name == name);
                        runtime.cancel_alarm_by_name(&type_name, &id, &name).await?;
                        existed
                    }
                    None => self.inspector.cancel_alarm(&type_name, &id, &name).await?,
                };
                Ok(Reply::Cancelled(Cancelled { cancelled }))
            }
            AlarmsCommand::Dead {
                type_name,
                cursor,
                limit,
            } => {
                check_limit(limit)?;
                let (type_name, cursor) = (type_name.as_deref(), cursor.as_deref());
                // Through the runtime, the exposed types only, as the gateway lists them.
                let page = match &self.runtime {
                    Some(runtime) => {
                        runtime
                            .list_dead_alarms_by_name(type_name, cursor, limit)
                            .await?
                    }
                    None => {
                        self.inspector
                            .list_dead_alarms(type_name, cursor, limit)
                            .await?
                    }
                };
                Ok(Reply::Dead(dead_alarm_page(page)))
            }
            AlarmsCommand::Requeue {
                type_name,
                id,
                name,
            } => {
                self.check_offline("re-queue an alarm")?;
                let requeued = match &self.runtime {
                    Some(runtime) => {
                        runtime
                            .requeue_dead_alarm_by_name(&type_name, &id, &name)
                            .await?
                    }
                    None => {
                        self.inspector
                            .requeue_dead_alarm(&type_name, &id, &name)
                            .await?
                    }
                };
                Ok(Reply::Requeued(Requeued { requeued }))
            }
        }
    }

    async fn types(&self) -> Result<TypeList, Failure> {
        let types = match &self.runtime {
            // What the gateway would list, in its encoding, read as a client reads it.
            Some(runtime) => {
                let descriptions = runtime.describe_types();
                runtime
                    .exposed_types()
                    .iter()
                    .map(|exposed| {
                        let description = descriptions.iter().find(|d| d.name == exposed.name);
                        let view = crate::model::TypeView::described(exposed, description);
                        serde_json::to_value(view)
                            .and_then(serde_json::from_value::<TypeInfo>)
                            .map_err(|error| Failure::local("internal", error.to_string()))
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => self
                .inspector
                .list_types()
                .await?
                .into_iter()
                .map(|name| TypeInfo {
                    name,
                    handlers: Vec::new(),
                    alarms: Vec::new(),
                    options: TypeOptions::default(),
                    fields: Vec::new(),
                })
                .collect(),
        };
        Ok(TypeList { types })
    }

    /// The OpenAPI document the gateway would serve for this runtime, built in-process.
    async fn openapi(&self) -> Result<Value, Failure> {
        use tower::ServiceExt;

        let runtime = self.runtime_for("describe the API")?;
        let config = crate::ServerConfig::from_toml_str("public = [\"openapi\"]")
            .map_err(|error| Failure::local("internal", error.to_string()))?;
        let request = axum::http::Request::get("/openapi.json")
            .body(axum::body::Body::empty())
            .map_err(|error| Failure::local("internal", error.to_string()))?;
        let response = crate::router(runtime.clone(), &config)
            .oneshot(request)
            .await
            .map_err(|error| Failure::local("internal", error.to_string()))?;
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .map_err(|error| Failure::local("internal", error.to_string()))?;
        if status != 200 {
            return Err(Failure::local(
                "internal",
                format!("the OpenAPI document could not be built (status {status})"),
            ));
        }
        serde_json::from_slice(&body).map_err(|error| Failure::local("internal", error.to_string()))
    }

    async fn get(&self, type_name: &str, id: &str) -> Result<Reply, Failure> {
        // Through the runtime, a type it does not expose is refused as the gateway refuses it,
        // and the object is seen as the gateway sees it.
        let object = match &self.runtime {
            Some(runtime) => runtime
                .inspect_by_name(type_name, id)
                .await?
                .and_then(|view| {
                    let status = match view.status {
                        RuntimeStatus::Active => ObjectStatus::Active,
                        RuntimeStatus::Hibernated => ObjectStatus::Hibernated,
                        RuntimeStatus::Stored => ObjectStatus::Stored,
                        _ => return None,
                    };
                    Some((status, view.state, view.version, view.alarms))
                }),
            None => match self.inspector.read_state(type_name, id).await? {
                Some(stored) => {
                    let alarms = self.inspector.list_alarms(type_name, id).await?;
                    let version = Some(stored.version);
                    Some((ObjectStatus::Stored, stored.state, version, alarms))
                }
                None => None,
            },
        };
        let Some((status, state, version, alarms)) = object else {
            return Err(Failure::object_not_found(type_name, id));
        };
        Ok(Reply::Object(ObjectInfo {
            type_name: type_name.to_owned(),
            id: id.to_owned(),
            status,
            state,
            version,
            alarms: alarms.into_iter().map(alarm_info).collect(),
        }))
    }

    async fn call(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: &str,
        options: &CallOptions,
    ) -> Result<Reply, Failure> {
        let runtime = self.runtime_for("call a handler")?;
        let writes = runtime
            .exposed_types()
            .iter()
            .filter(|exposed| exposed.name == type_name)
            .flat_map(|exposed| exposed.handlers)
            .any(|exposed| exposed.name == handler && exposed.access != Access::Read);
        if writes {
            self.check_offline(&format!("call the write handler `{handler}`"))?;
        }
        let result = runtime
            .call_by_name_json_with(type_name, id, handler, arguments.as_bytes(), options)
            .await?;
        Ok(Reply::Call(CallReply { result }))
    }

    async fn list_alarms(&self, type_name: &str, id: &str) -> Result<Vec<AlarmRecord>, Failure> {
        match &self.runtime {
            Some(runtime) => Ok(runtime.list_alarms_by_name(type_name, id).await?),
            None => Ok(self.inspector.list_alarms(type_name, id).await?),
        }
    }

    fn key(&self, type_name: &str, id: &str) -> Result<ObjectKey, Failure> {
        validate_id(id).map_err(|invalid| Failure::from(Error::from(invalid)))?;
        Ok(ObjectKey::new(type_name, id))
    }

    fn runtime_for(&self, what: &str) -> Result<&Runtime, Failure> {
        self.runtime.as_ref().ok_or_else(|| {
            Failure::local(
                "needs_types",
                format!(
                    "to {what}, the object types are needed: send the command through a gateway \
                     (--gateway), or run it with your own binary (durable_server::cli::run)"
                ),
            )
        })
    }

    fn check_offline(&self, what: &str) -> Result<(), Failure> {
        if self.offline {
            return Ok(());
        }
        Err(Failure::local(
            "direct_write_refused",
            format!(
                "refusing to {what} in the database directly: a live runtime may be using it. \
                 Send the command through its gateway (--gateway), or pass --offline if no \
                 runtime uses this database"
            ),
        ))
    }
}

fn check_limit(limit: usize) -> Result<(), Failure> {
    if (1..=MAX_LIMIT).contains(&limit) {
        Ok(())
    } else {
        Err(Failure::invalid_request(format!(
            "limit must be between 1 and {MAX_LIMIT}, not {limit}"
        )))
    }
}

fn dead_alarm_page(page: RuntimeDeadAlarmPage) -> DeadAlarmPage {
    DeadAlarmPage {
        alarms: page
            .alarms
            .into_iter()
            .map(|record| DeadAlarm {
                type_name: record.key.object_type,
                id: record.key.object_id,
                name: record.name,
                fire_at: record.due_at,
                attempts: record.attempts,
            })
            .collect(),
        next_cursor: page.next_cursor,
    }
}

fn alarm_info(record: AlarmRecord) -> AlarmInfo {
    AlarmInfo {
        name: record.name,
        fire_at: record.due_at,
        attempts: record.attempts,
        dead: record.dead,
        args: record
            .payload
            .as_deref()
            .and_then(|payload| serde_json::from_slice(payload).ok()),
    }
}

/// The failure of a key with no value.
pub(crate) fn key_not_found() -> Failure {
    Failure::new(
        Some(404),
        "kv_key_not_found",
        "no value is stored under this key".to_owned(),
    )
}

/// A stored value as JSON, byte for byte.
fn raw_value(value: Vec<u8>) -> Result<Box<serde_json::value::RawValue>, Failure> {
    String::from_utf8(value)
        .ok()
        .and_then(|text| serde_json::value::RawValue::from_string(text).ok())
        .ok_or_else(|| Failure::local("internal", "a stored value is not JSON"))
}

fn unavailable(error: durable_runtime::storage::StorageError) -> Failure {
    let retryable = error.is_retryable();
    let mut failure = Failure::new(
        Some(if retryable { 503 } else { 500 }),
        if retryable { "unavailable" } else { "internal" },
        error.to_string(),
    );
    failure.error.retryable = retryable;
    failure
}

/// FSM instances are read and changed through a gateway's engine, never in the database.
pub(crate) fn fsm_needs_a_gateway() -> Failure {
    Failure::local(
        "usage",
        "fsm commands go through a gateway that runs an FSM engine: pass --gateway",
    )
}
