//! Printing a command's result: the gateway's JSON reply (`--output json`), or aligned columns
//! for people (`--output table`).

use crate::model::fsm::{FsmInstance, FsmInstanceList, Inserted, SignalSent};
use std::io::{self, Write};

use comfy_table::{Table, presets};
use serde::Serialize;
use serde_json::Value;

use crate::client::{
    AlarmInfo, AlarmList, CallReply, Cancelled, DeadAlarmPage, Deleted, ErrorReply, ObjectInfo,
    ObjectPage, Reloaded, Requeued, ScheduledAlarm, StateReplaced, Stopped, TypeList, format_time,
};

use super::args::OutputFormat;
use super::failure::Failure;

/// `migrations status|rollback`: the store's schema version, and the migration rolled back.
#[derive(Debug, Serialize)]
pub(crate) struct SchemaStatus {
    /// The last migration applied, `null` before the first.
    pub(crate) schema_version: Option<i64>,
    /// The migration a rollback undid (`null` if none was applied, or for `status`).
    pub(crate) rolled_back: Option<i64>,
}

/// One handler as a line: `add(by: i64) -> i64 write`, the types left out when unknown.
fn handler_line(handler: &crate::client::HandlerInfo) -> String {
    let access = match handler.access {
        crate::client::Access::Read => "read",
        crate::client::Access::Write => "write",
    };
    let arguments: Vec<String> = handler
        .arguments
        .iter()
        .enumerate()
        .map(|(index, name)| match handler.argument_types.get(index) {
            Some(ty) => format!("{name}: {ty}"),
            None => name.clone(),
        })
        .collect();
    let output = match (&handler.output, &handler.error) {
        (Some(output), Some(error)) => format!(" -> Result<{output}, {error}>"),
        (Some(output), None) if output != "()" => format!(" -> {output}"),
        _ => String::new(),
    };
    format!(
        "{}({}){output} {access}",
        handler.name,
        arguments.join(", ")
    )
}

/// A command's result: one of the gateway's replies.
#[derive(Debug)]
pub(crate) enum Reply {
    Object(ObjectInfo),
    Objects(ObjectPage),
    Call(CallReply),
    Deleted(Deleted),
    Stopped(Stopped),
    Reloaded(Reloaded),
    Replaced(StateReplaced),
    Schema(SchemaStatus),
    Alarms(AlarmList),
    Scheduled(ScheduledAlarm),
    Cancelled(Cancelled),
    Dead(DeadAlarmPage),
    Requeued(Requeued),
    Types(TypeList),
    Document(Value),
    KvValue(Box<serde_json::value::RawValue>),
    KvPage(crate::model::KvPage),
    KvWritten(crate::model::KvWritten),
    KvDeleted(crate::model::KvDeleted),
    FsmInstance(Box<FsmInstance>),
    FsmInstances(FsmInstanceList),
    FsmInserted(Inserted),
    FsmSignalled(SignalSent),
    FsmCancelled(crate::model::fsm_control::CancelledInstance),
    FsmQueue(crate::model::fsm_control::QueueState),
    FsmPaused(crate::model::fsm_control::PausedQueues),
    ClusterNodes(crate::model::cluster::ClusterNodes),
    ClusterShards(crate::model::cluster::ClusterShards),
    Resharded(super::cluster::ReshardReport),
}

impl Reply {
    pub(crate) fn write(&self, format: OutputFormat, out: &mut dyn Write) -> io::Result<()> {
        match format {
            OutputFormat::Json => self.write_json(out),
            OutputFormat::Table => self.write_table(out),
        }
    }

    fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Self::Object(reply) => json(out, reply),
            Self::Objects(reply) => json(out, reply),
            Self::Call(reply) => json(out, reply),
            Self::Deleted(reply) => json(out, reply),
            Self::Stopped(reply) => json(out, reply),
            Self::Reloaded(reply) => json(out, reply),
            Self::Replaced(reply) => json(out, reply),
            Self::Schema(reply) => json(out, reply),
            Self::Alarms(reply) => json(out, reply),
            Self::Scheduled(reply) => json(out, reply),
            Self::Cancelled(reply) => json(out, reply),
            Self::Dead(reply) => json(out, reply),
            Self::Requeued(reply) => json(out, reply),
            Self::Types(reply) => json(out, reply),
            Self::Document(reply) => json(out, reply),
            Self::KvValue(value) => writeln!(out, "{}", value.get()),
            Self::KvPage(reply) => json(out, reply),
            Self::KvWritten(reply) => json(out, reply),
            Self::KvDeleted(reply) => json(out, reply),
            Self::FsmInstance(reply) => json(out, reply),
            Self::FsmInstances(reply) => json(out, reply),
            Self::FsmInserted(reply) => json(out, reply),
            Self::FsmSignalled(reply) => json(out, reply),
            Self::FsmCancelled(reply) => json(out, reply),
            Self::FsmQueue(reply) => json(out, reply),
            Self::FsmPaused(reply) => json(out, reply),
            Self::ClusterNodes(reply) => json(out, reply),
            Self::ClusterShards(reply) => json(out, reply),
            Self::Resharded(reply) => json(out, reply),
        }
    }

    fn write_table(&self, out: &mut dyn Write) -> io::Result<()> {
        match self {
            Self::Object(object) => {
                writeln!(out, "type:    {}", object.type_name)?;
                writeln!(out, "id:      {}", object.id)?;
                writeln!(out, "status:  {}", object.status)?;
                match object.version {
                    Some(version) => writeln!(out, "version: {version}")?,
                    None => writeln!(out, "version: -")?,
                }
                writeln!(out, "state:   {}", pretty(&object.state))?;
                if !object.alarms.is_empty() {
                    writeln!(out, "alarms:")?;
                    table(out, alarm_table(&object.alarms))?;
                }
                Ok(())
            }
            Self::Objects(page) => {
                let mut rows = new_table(["TYPE", "ID", "STATUS"]);
                for object in &page.objects {
                    rows.add_row(vec![
                        object.type_name.clone(),
                        object.id.clone(),
                        object.status.to_string(),
                    ]);
                }
                table(out, rows)?;
                next_page(out, page.next_cursor.as_deref())
            }
            Self::Call(reply) => writeln!(out, "{}", pretty(&reply.result)),
            Self::Stopped(reply) => writeln!(
                out,
                "{}",
                if reply.stopped {
                    "stopped"
                } else {
                    "not live: nothing stopped"
                }
            ),
            Self::Reloaded(reply) => writeln!(
                out,
                "{}",
                if reply.reloaded {
                    "reloaded: the next call reads storage"
                } else {
                    "not live: the next call reads storage"
                }
            ),
            Self::Replaced(reply) => writeln!(out, "replaced: version {}", reply.version),
            Self::Schema(reply) => {
                if let Some(version) = reply.rolled_back {
                    writeln!(out, "rolled back migration {version}")?;
                }
                match reply.schema_version {
                    Some(version) => writeln!(out, "schema version: {version}"),
                    None => writeln!(out, "schema version: none (no migration applied)"),
                }
            }
            Self::Deleted(reply) => writeln!(
                out,
                "{}",
                if reply.deleted {
                    "deleted"
                } else {
                    "nothing stored: nothing deleted"
                }
            ),
            Self::Alarms(list) => table(out, alarm_table(&list.alarms)),
            Self::Scheduled(alarm) => writeln!(
                out,
                "alarm `{}` fires at {}",
                alarm.name,
                format_time(alarm.fire_at)
            ),
            Self::Cancelled(reply) => writeln!(
                out,
                "{}",
                if reply.cancelled {
                    "cancelled"
                } else {
                    "not scheduled: nothing cancelled"
                }
            ),
            Self::Dead(page) => {
                let mut rows = new_table(["TYPE", "ID", "ALARM", "FIRE AT", "ATTEMPTS"]);
                for alarm in &page.alarms {
                    rows.add_row(vec![
                        alarm.type_name.clone(),
                        alarm.id.clone(),
                        alarm.name.clone(),
                        format_time(alarm.fire_at),
                        alarm.attempts.to_string(),
                    ]);
                }
                table(out, rows)?;
                next_page(out, page.next_cursor.as_deref())
            }
            Self::Requeued(reply) => writeln!(
                out,
                "{}",
                if reply.requeued {
                    "requeued"
                } else {
                    "no such dead alarm: nothing requeued"
                }
            ),
            Self::Types(list) => {
                let mut rows = new_table(["TYPE", "FIELDS", "HANDLERS", "ALARMS"]);
                for ty in &list.types {
                    let fields: Vec<String> = ty
                        .fields
                        .iter()
                        .map(|field| format!("{}: {}", field.name, field.ty))
                        .collect();
                    let handlers: Vec<String> = ty.handlers.iter().map(handler_line).collect();
                    rows.add_row(vec![
                        ty.name.clone(),
                        fields.join("\n"),
                        handlers.join("\n"),
                        ty.alarms.join(", "),
                    ]);
                }
                table(out, rows)
            }
            Self::Document(document) => json(out, document),
            Self::KvValue(value) => writeln!(out, "{}", value.get()),
            Self::KvPage(page) => {
                let mut rows = new_table(["KEY", "VALUE"]);
                for entry in &page.entries {
                    rows.add_row(vec![entry.key.clone(), entry.value.get().to_owned()]);
                }
                table(out, rows)?;
                next_page(out, page.next_cursor.as_deref())
            }
            Self::KvWritten(reply) => {
                writeln!(out, "stored `{}` ({} bytes)", reply.key, reply.bytes)
            }
            Self::KvDeleted(reply) => writeln!(
                out,
                "{}",
                if reply.deleted {
                    "deleted"
                } else {
                    "no such key: nothing deleted"
                }
            ),
            Self::FsmInstance(instance) => {
                writeln!(out, "id:       {}", instance.id)?;
                writeln!(out, "fsm:      {} v{}", instance.fsm, instance.fsm_version)?;
                writeln!(out, "status:   {}", instance.status)?;
                writeln!(out, "step:     {}", instance.step)?;
                writeln!(out, "attempt:  {}", instance.attempt)?;
                if let Some(key) = &instance.correlation_key {
                    writeln!(out, "key:      {key}")?;
                }
                writeln!(out, "updated:  {}", instance.updated_at)?;
                writeln!(out, "state:    {}", pretty(&instance.state))?;
                if let Some(result) = &instance.result {
                    writeln!(out, "result:   {}", pretty(result))?;
                }
                if let Some(error) = &instance.error {
                    writeln!(out, "error:    {error}")?;
                }
                let inbox = instance.inbox.as_deref().unwrap_or_default();
                if !inbox.is_empty() {
                    writeln!(out, "inbox:")?;
                    let mut rows = new_table(["SIGNAL", "NAME", "PAYLOAD", "AT"]);
                    for signal in inbox {
                        rows.add_row(vec![
                            signal.id.to_string(),
                            signal.name.clone(),
                            signal.payload.to_string(),
                            signal.inserted_at.clone(),
                        ]);
                    }
                    table(out, rows)?;
                }
                Ok(())
            }
            Self::FsmInstances(page) => {
                let mut rows = new_table(["ID", "FSM", "STATUS", "STEP", "KEY", "UPDATED"]);
                for instance in &page.instances {
                    rows.add_row(vec![
                        instance.id.to_string(),
                        instance.fsm.clone(),
                        instance.status.clone(),
                        instance.step.clone(),
                        instance.correlation_key.clone().unwrap_or_default(),
                        instance.updated_at.clone(),
                    ]);
                }
                table(out, rows)?;
                match page.next_after {
                    Some(after) => writeln!(out, "(more: --after {after})"),
                    None => Ok(()),
                }
            }
            Self::FsmInserted(reply) => writeln!(out, "inserted instance {}", reply.id),
            Self::FsmCancelled(reply) => writeln!(
                out,
                "cancelled instance {} ({} instances ended)",
                reply.id, reply.instances
            ),
            Self::FsmQueue(reply) => writeln!(
                out,
                "queue {} {}{}",
                reply.queue,
                if reply.paused { "paused" } else { "running" },
                if reply.changed { "" } else { " (unchanged)" }
            ),
            Self::FsmPaused(reply) => {
                if reply.queues.is_empty() {
                    return writeln!(out, "no paused queues");
                }
                for queue in &reply.queues {
                    writeln!(out, "{}  paused at {}", queue.queue, queue.paused_at)?;
                }
                Ok(())
            }
            Self::ClusterNodes(reply) => cluster_nodes(out, reply),
            Self::ClusterShards(reply) => cluster_shards(out, reply),
            Self::Resharded(reply) => writeln!(
                out,
                "resharded: {} -> {} shards, {} objects placed again, shards start at epoch {}",
                reply.from, reply.to, reply.objects, reply.epoch
            ),
            Self::FsmSignalled(reply) => match reply.signal {
                Some(signal) => writeln!(
                    out,
                    "signal {signal} delivered to instance {}{}",
                    reply.target,
                    if reply.woke { ", which woke" } else { "" }
                ),
                None => writeln!(
                    out,
                    "instance {} already holds a signal with this dedup key: nothing added",
                    reply.target
                ),
            },
        }
    }
}

/// `cluster nodes` for people: one node a line, then the shards nobody holds.
fn cluster_nodes(
    out: &mut dyn Write,
    reply: &crate::model::cluster::ClusterNodes,
) -> io::Result<()> {
    let mut rows = new_table(["NODE", "ADDRESS", "GENERATION", "LIVE", "SHARDS"]);
    for node in &reply.nodes {
        let me = reply.node.as_deref() == Some(node.node_id.as_str());
        rows.add_row(vec![
            if me {
                format!("{} (answering)", node.node_id)
            } else {
                node.node_id.clone()
            },
            node.address.clone(),
            node.generation.to_string(),
            yes_no(node.live).to_owned(),
            node.shards.to_string(),
        ]);
    }
    table(out, rows)?;
    writeln!(
        out,
        "{} shards, {} held by no node",
        reply.shard_count, reply.unowned
    )
}

/// `cluster shards` for people: one shard a line, then the summary.
fn cluster_shards(
    out: &mut dyn Write,
    reply: &crate::model::cluster::ClusterShards,
) -> io::Result<()> {
    let mut rows = new_table(["SHARD", "OWNER", "EPOCH", "FREE"]);
    for shard in &reply.shards {
        rows.add_row(vec![
            shard.shard.to_string(),
            shard.owner.clone().unwrap_or_else(|| "-".to_owned()),
            shard.epoch.to_string(),
            yes_no(shard.free).to_owned(),
        ]);
    }
    table(out, rows)?;
    let summary = &reply.summary;
    let per_node: Vec<String> = summary
        .per_node
        .iter()
        .map(|(node, shards)| format!("{node}: {shards}"))
        .collect();
    writeln!(
        out,
        "{} shards; per node: {}; held by no node: {}; highest epoch: {}",
        summary.total,
        if per_node.is_empty() {
            "none".to_owned()
        } else {
            per_node.join(", ")
        },
        summary.unowned,
        summary.max_epoch
    )
}

fn yes_no(flag: bool) -> &'static str {
    if flag { "yes" } else { "no" }
}

/// Prints a failure: its error body as JSON, or one line for people.
pub(crate) fn write_failure(
    failure: &Failure,
    format: OutputFormat,
    err: &mut dyn Write,
) -> io::Result<()> {
    match format {
        OutputFormat::Json => json(
            err,
            &ErrorReply {
                error: (*failure.error).clone(),
            },
        ),
        OutputFormat::Table => {
            let error = &failure.error;
            write!(err, "error: {} ({}", error.message, error.code)?;
            if let Some(status) = failure.status {
                write!(err, ", HTTP {status}")?;
            }
            if error.retryable {
                write!(err, ", retryable")?;
            }
            writeln!(err, ")")?;
            if !error.details.is_null() {
                writeln!(err, "details: {}", pretty(&error.details))?;
            }
            Ok(())
        }
    }
}

fn json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

fn new_table<const N: usize>(header: [&str; N]) -> Table {
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).set_header(header);
    table
}

fn alarm_table(alarms: &[AlarmInfo]) -> Table {
    let mut rows = new_table(["ALARM", "FIRE AT", "ATTEMPTS", "DEAD"]);
    for alarm in alarms {
        rows.add_row(vec![
            alarm.name.clone(),
            format_time(alarm.fire_at),
            alarm.attempts.to_string(),
            if alarm.dead { "yes" } else { "no" }.to_owned(),
        ]);
    }
    rows
}

fn table(out: &mut dyn Write, mut table: Table) -> io::Result<()> {
    // Flush left, two spaces between columns.
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    for line in table.lines() {
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

fn next_page(out: &mut dyn Write, cursor: Option<&str>) -> io::Result<()> {
    match cursor {
        Some(cursor) => writeln!(out, "(more: --cursor '{cursor}')"),
        None => Ok(()),
    }
}
