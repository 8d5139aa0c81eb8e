//! Commands sent to a gateway through the HTTP client.

use serde_json::Value;

use crate::client::{
    AlarmList, AlarmWhen, CallReply, Cancelled, Client, Deleted, FsmListing, Reloaded, Requeued,
    StateReplaced, Stopped, TypeList,
};
use crate::model::fsm::{Inserted, SendSignal};

use super::args::{AlarmsCommand, FsmCommand, KvCommand, ObjectsCommand, Operation};
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
        Operation::Fsm(command) => fsm(client, command).await?,
        Operation::Cluster(command) => super::cluster::gateway(client, command).await?,
        Operation::Migrations(_) => return Err(migrations_need_a_database()),
    })
}

/// JSON given on the command line, or `fallback` when absent.
fn json_argument(text: Option<&str>, what: &str, fallback: Value) -> Result<Value, Failure> {
    match text {
        Some(text) => serde_json::from_str(text).map_err(|error| {
            Failure::new(
                Some(400),
                "invalid_arguments",
                format!("the {what} is not JSON: {error}"),
            )
        }),
        None => Ok(fallback),
    }
}

async fn fsm(client: &Client, command: FsmCommand) -> Result<Reply, Failure> {
    let fsm = client.fsm();
    Ok(match command {
        FsmCommand::List {
            name,
            status,
            after,
            limit,
        } => Reply::FsmInstances(
            fsm.list(&FsmListing {
                name,
                status,
                after,
                limit: Some(limit),
            })
            .await?,
        ),
        FsmCommand::Get { id } => Reply::FsmInstance(Box::new(fsm.get(id).await?)),
        FsmCommand::Signal {
            name,
            payload,
            id,
            key,
            dedup_key,
        } => {
            let payload = json_argument(payload.as_deref(), "payload", Value::Null)?;
            Reply::FsmSignalled(
                fsm.signal(&SendSignal {
                    id,
                    correlation_key: key,
                    name,
                    payload,
                    dedup_key,
                })
                .await?,
            )
        }
        FsmCommand::Insert { name, args, key } => {
            let args = json_argument(
                args.as_deref(),
                "state",
                Value::Object(serde_json::Map::new()),
            )?;
            Reply::FsmInserted(Inserted {
                id: fsm.insert(&name, &args, key.as_deref()).await?,
            })
        }
        FsmCommand::Cancel { id } => Reply::FsmCancelled(fsm.cancel(id).await?),
        FsmCommand::Pause { queue } => Reply::FsmQueue(fsm.pause_queue(&queue).await?),
        FsmCommand::Resume { queue } => Reply::FsmQueue(fsm.resume_queue(&queue).await?),
        FsmCommand::Paused => Reply::FsmPaused(fsm.paused_queues().await?),
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
