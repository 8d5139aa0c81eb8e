//! Commands run on a database directly, without a gateway: through a runtime built from the
//! application's types (its by-name operations), or, in the generic binary, through the
//! store alone.
//!
//! The runtime built here never fires alarms, and writes (a write handler, a delete, alarm
//! changes) are refused unless `--offline` asserts that no live runtime uses the database: a
//! live runtime would fence a direct write off by its version check, but it is a foot-gun all
//! the same.

use std::time::{Duration, SystemTime};

use durable_runtime::storage::{
    AlarmChange, AlarmRecord, CommitError, Loaded, ObjectKey, ObjectWrite, truncate_to_micros,
};
use durable_runtime::{
    Access, AlarmTime, Error, ObjectStatus as RuntimeStatus, Runtime, validate_id,
};
use serde_json::Value;

use crate::client::{
    self, AlarmInfo, AlarmList, CallReply, Cancelled, Deleted, HandlerInfo, ObjectInfo, ObjectPage,
    ObjectStatus, ObjectSummary, Requeued, ScheduledAlarm, TypeInfo, TypeList, TypeOptions,
};

use super::Store;
use super::args::{AlarmsCommand, ObjectsCommand, Operation};
use super::database::Database;
use super::failure::Failure;
use super::inspect;
use super::render::Reply;

/// The largest page a listing may ask for, as the gateway allows.
const MAX_LIMIT: usize = 1000;

/// A database opened for direct commands.
pub(crate) struct Direct {
    /// The application's runtime over the database, or `None` in the generic binary.
    pub(crate) runtime: Option<Runtime>,
    /// The database, when the command line opened it (the stored types are read from it).
    pub(crate) database: Option<Database>,
    pub(crate) store: Store,
    /// Writes allowed (`--offline`).
    pub(crate) offline: bool,
}

impl Direct {
    pub(crate) async fn run(&self, operation: Operation) -> Result<Reply, Failure> {
        match operation {
            Operation::Types => self.types().await.map(Reply::Types),
            Operation::Openapi => self.openapi().await.map(Reply::Document),
            Operation::Objects(command) => self.objects(command).await,
            Operation::Alarms(command) => self.alarms(command).await,
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
                    None => self
                        .store
                        .list_ids(&type_name, cursor.as_deref(), limit)
                        .await
                        .map_err(unavailable)?,
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
            } => {
                let arguments = arguments.unwrap_or_else(|| "{}".to_owned());
                self.call(&type_name, &id, &handler, &arguments).await
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
            AlarmsCommand::Set {
                type_name,
                id,
                name,
                fire_at,
                delay,
            } => {
                let runtime = self.runtime("schedule an alarm")?;
                self.check_offline("schedule an alarm")?;
                let when = match (fire_at, delay) {
                    (Some(time), _) => AlarmTime::from(time),
                    (None, delay) => AlarmTime::from(delay.unwrap_or(Duration::ZERO)),
                };
                runtime
                    .schedule_alarm_by_name(&type_name, &id, &name, when)
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
                let existed = self
                    .list_alarms(&type_name, &id)
                    .await?
                    .iter()
                    .any(|alarm| alarm.name == name);
                match &self.runtime {
                    Some(runtime) => runtime.cancel_alarm_by_name(&type_name, &id, &name).await?,
                    None if existed => {
                        let change = AlarmChange::Cancel { name: name.clone() };
                        self.write_alarm(&type_name, &id, change).await?;
                    }
                    None => {}
                }
                Ok(Reply::Cancelled(Cancelled { cancelled: existed }))
            }
            AlarmsCommand::Dead {
                type_name,
                cursor,
                limit,
            } => {
                check_limit(limit)?;
                let types = match (type_name, &self.runtime) {
                    (Some(type_name), _) => vec![type_name],
                    (None, Some(runtime)) => runtime
                        .exposed_types()
                        .iter()
                        .map(|exposed| exposed.name.to_owned())
                        .collect(),
                    (None, None) => self.stored_type_names().await?,
                };
                let page =
                    inspect::dead_alarms(&*self.store, &types, cursor.as_deref(), limit).await?;
                Ok(Reply::Dead(page))
            }
            AlarmsCommand::Requeue {
                type_name,
                id,
                name,
            } => {
                self.check_offline("re-queue an alarm")?;
                let dead = self
                    .list_alarms(&type_name, &id)
                    .await?
                    .iter()
                    .any(|alarm| alarm.name == name && alarm.dead);
                if dead {
                    match &self.runtime {
                        Some(runtime) => {
                            runtime
                                .schedule_alarm_by_name(&type_name, &id, &name, Duration::ZERO)
                                .await?;
                        }
                        None => {
                            let due_at = truncate_to_micros(SystemTime::now());
                            let change = AlarmChange::Set { name, due_at };
                            self.write_alarm(&type_name, &id, change).await?;
                        }
                    }
                }
                Ok(Reply::Requeued(Requeued { requeued: dead }))
            }
        }
    }

    async fn types(&self) -> Result<TypeList, Failure> {
        let types = match &self.runtime {
            Some(runtime) => runtime
                .exposed_types()
                .into_iter()
                .map(|exposed| TypeInfo {
                    name: exposed.name.to_owned(),
                    handlers: exposed
                        .handlers
                        .iter()
                        .map(|handler| HandlerInfo {
                            name: handler.name.to_owned(),
                            access: match handler.access {
                                Access::Read => client::Access::Read,
                                _ => client::Access::Write,
                            },
                            arguments: handler.arguments.iter().map(|&a| a.to_owned()).collect(),
                        })
                        .collect(),
                    alarms: exposed.alarms.iter().map(|&a| a.to_owned()).collect(),
                    options: TypeOptions {
                        hibernate_after: exposed.options.hibernate_after,
                        shutdown_after: exposed.options.shutdown_after,
                        call_timeout: exposed.options.call_timeout,
                        queue_capacity: exposed.options.queue_capacity,
                    },
                })
                .collect(),
            None => self
                .stored_type_names()
                .await?
                .into_iter()
                .map(|name| TypeInfo {
                    name,
                    handlers: Vec::new(),
                    alarms: Vec::new(),
                    options: TypeOptions::default(),
                })
                .collect(),
        };
        Ok(TypeList { types })
    }

    /// The OpenAPI document the gateway would serve for this runtime, built in-process.
    async fn openapi(&self) -> Result<Value, Failure> {
        use tower::ServiceExt;

        let runtime = self.runtime("describe the API")?;
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
        // and a live object (only in a runtime that serves) is reported as such.
        let live = match &self.runtime {
            Some(runtime) => match runtime.status_by_name(type_name, id).await? {
                RuntimeStatus::Active => Some(ObjectStatus::Active),
                RuntimeStatus::Hibernated => Some(ObjectStatus::Hibernated),
                _ => None,
            },
            None => None,
        };
        let key = self.key(type_name, id)?;
        let (state, version) = match self.store.load(&key).await.map_err(unavailable)? {
            Loaded::Object(stored) => {
                let state = serde_json::from_slice(&stored.state).map_err(|error| {
                    Failure::from(Error::Decode {
                        key: key.clone(),
                        path: ".".to_owned(),
                        message: error.to_string(),
                    })
                })?;
                (state, Some(stored.version))
            }
            // Live on its default state, not stored yet.
            _ if live.is_some() => (Value::Null, None),
            _ => return Err(Failure::object_not_found(type_name, id)),
        };
        let alarms = self.store.list_alarms(&key).await.map_err(unavailable)?;
        Ok(Reply::Object(ObjectInfo {
            type_name: type_name.to_owned(),
            id: id.to_owned(),
            status: live.unwrap_or(ObjectStatus::Stored),
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
    ) -> Result<Reply, Failure> {
        let runtime = self.runtime("call a handler")?;
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
            .call_by_name_json(type_name, id, handler, arguments.as_bytes())
            .await?;
        Ok(Reply::Call(CallReply { result }))
    }

    async fn list_alarms(&self, type_name: &str, id: &str) -> Result<Vec<AlarmRecord>, Failure> {
        match &self.runtime {
            Some(runtime) => Ok(runtime.list_alarms_by_name(type_name, id).await?),
            None => {
                let key = self.key(type_name, id)?;
                self.store.list_alarms(&key).await.map_err(unavailable)
            }
        }
    }

    /// Commits one alarm change to a stored object, keeping its state (the generic binary's
    /// cancel and re-queue).
    async fn write_alarm(
        &self,
        type_name: &str,
        id: &str,
        change: AlarmChange,
    ) -> Result<(), Failure> {
        let key = self.key(type_name, id)?;
        let Loaded::Object(stored) = self.store.load(&key).await.map_err(unavailable)? else {
            return Err(Failure::object_not_found(type_name, id));
        };
        let write = ObjectWrite {
            key: key.clone(),
            expected_version: stored.version,
            state: None,
            alarms: vec![change],
        };
        self.store
            .commit(std::slice::from_ref(&write))
            .await
            .map_err(|error| match error {
                CommitError::Conflict { found, .. } => {
                    Failure::from(Error::Conflict { key, found })
                }
                other => Failure::new(Some(503), "unavailable", other.to_string()),
            })
    }

    async fn stored_type_names(&self) -> Result<Vec<String>, Failure> {
        match &self.database {
            Some(database) => inspect::stored_type_names(database).await,
            None => Ok(Vec::new()),
        }
    }

    fn key(&self, type_name: &str, id: &str) -> Result<ObjectKey, Failure> {
        validate_id(id).map_err(|invalid| Failure::from(Error::from(invalid)))?;
        Ok(ObjectKey::new(type_name, id))
    }

    fn runtime(&self, what: &str) -> Result<&Runtime, Failure> {
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

fn alarm_info(record: AlarmRecord) -> AlarmInfo {
    AlarmInfo {
        name: record.name,
        fire_at: record.due_at,
        attempts: record.attempts,
        dead: record.dead,
    }
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
