//! Commands sent to a gateway through the HTTP client.

use serde_json::Value;

use crate::client::{
    AlarmList, AlarmWhen, CallReply, Cancelled, Client, Deleted, Reloaded, Requeued, StateReplaced,
    Stopped, TypeList,
};

use super::args::{AlarmsCommand, KvCommand, ObjectsCommand, Operation};
use super::failure::Failure;
use super::render::Reply;

pub(crate) async fn run(client: &Client, operation: Operation) -> Result<Reply, Failure> {
    Ok(match operation {
        Operation::Types => Reply::Types(TypeList {
            types: client.types().await?,
        }),
        Operation::Openapi => Reply::Document(client.openapi().await?),
        Operation::Objects(command) => objects(client, command).await?,
        Operation::Alarms(command) => alarms(client, command).await?,
        Operation::Kv(command) => kv(client, command).await?,
        Operation::Migrations(_) => return Err(migrations_need_a_database()),
    })
}

async fn kv(client: &Client, command: KvCommand) -> Result<Reply, Failure> {
    let kv = client.kv();
    Ok(match command {
        KvCommand::Get { type_name, id, key } => match kv.get(&type_name, &id, &key).await? {
            Some(value) => Reply::KvValue(value),
            None => return Err(super::direct::key_not_found()),
        },
        KvCommand::Put {
            type_name,
            id,
            key,
            value,
        } => Reply::KvWritten(kv.put(&type_name, &id, &key, &value).await?),
        KvCommand::Delete { type_name, id, key } => Reply::KvDeleted(crate::model::KvDeleted {
            deleted: kv.delete(&type_name, &id, &key).await?,
        }),
        KvCommand::List {
            type_name,
            id,
            prefix,
            cursor,
            limit,
        } => Reply::KvPage(
            kv.list(
                &type_name,
                &id,
                prefix.as_deref(),
                cursor.as_deref(),
                Some(limit),
            )
            .await?,
        ),
    })
}

async fn objects(client: &Client, command: ObjectsCommand) -> Result<Reply, Failure> {
    let objects = client.objects();
    Ok(match command {
        ObjectsCommand::List {
            type_name,
            status,
            cursor,
            limit,
        } => Reply::Objects(
            objects
                .list(&type_name, status, cursor.as_deref(), Some(limit))
                .await?,
        ),
        ObjectsCommand::Get { type_name, id } => Reply::Object(objects.get(&type_name, &id).await?),
        ObjectsCommand::Call {
            type_name,
            id,
            handler,
            arguments,
            idempotency_key,
        } => {
            let arguments: Value = match arguments {
                Some(text) => serde_json::from_str(&text).map_err(|error| {
                    Failure::new(
                        Some(400),
                        "invalid_arguments",
                        format!("the arguments are not JSON: {error}"),
                    )
                })?,
                None => Value::Object(serde_json::Map::new()),
            };
            let result = objects
                .call_with_key(
                    &type_name,
                    &id,
                    &handler,
                    &arguments,
                    idempotency_key.as_deref(),
                )
                .await?;
            Reply::Call(CallReply { result })
        }
        ObjectsCommand::Delete { type_name, id } => Reply::Deleted(Deleted {
            deleted: objects.delete(&type_name, &id).await?,
        }),
        ObjectsCommand::Stop { type_name, id } => Reply::Stopped(Stopped {
            stopped: objects.stop(&type_name, &id).await?,
        }),
        ObjectsCommand::Reload { type_name, id } => Reply::Reloaded(Reloaded {
            reloaded: objects.reload(&type_name, &id).await?,
        }),
        ObjectsCommand::ReplaceState {
            type_name,
            id,
            state,
            expected_version,
        } => {
            let state = super::direct::state_json(&state)?;
            Reply::Replaced(StateReplaced {
                version: objects
                    .replace_state(&type_name, &id, &state, expected_version)
                    .await?,
            })
        }
    })
}

async fn alarms(client: &Client, command: AlarmsCommand) -> Result<Reply, Failure> {
    let alarms = client.alarms();
    Ok(match command {
        AlarmsCommand::List { type_name, id } => Reply::Alarms(AlarmList {
            alarms: alarms.list(&type_name, &id).await?,
        }),
        AlarmsCommand::Set(set) => {
            let when: AlarmWhen = set.when();
            let args = set.args.as_ref();
            Reply::Scheduled(
                alarms
                    .set_with(&set.type_name, &set.id, &set.name, args, when)
                    .await?,
            )
        }
        AlarmsCommand::Cancel {
            type_name,
            id,
            name,
        } => Reply::Cancelled(Cancelled {
            cancelled: alarms.cancel(&type_name, &id, &name).await?,
        }),
        AlarmsCommand::Dead {
            type_name,
            cursor,
            limit,
        } => Reply::Dead(
            alarms
                .dead(type_name.as_deref(), cursor.as_deref(), Some(limit))
                .await?,
        ),
        AlarmsCommand::Requeue {
            type_name,
            id,
            name,
        } => Reply::Requeued(Requeued {
            requeued: alarms.requeue(&type_name, &id, &name).await?,
        }),
    })
}

/// Migrations run on the database itself, not through a gateway.
pub(crate) fn migrations_need_a_database() -> Failure {
    Failure::local(
        "usage",
        "migrations run on the database directly: pass --database-url, not --gateway",
    )
}
