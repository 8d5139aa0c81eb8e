//! The alarm scheduler: claims due alarms from storage and fires them at their objects.
//!
//! It sleeps until the earliest known due time, and is woken early whenever this runtime
//! commits an alarm (which may be earlier). The storage poll every `poll_interval` is only
//! the recovery path: it picks up claims left by a crashed process (after `claim_ttl`) and
//! alarms written by another process. Firing is claim based, so several schedulers on one
//! database fire each alarm once per claim.

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::alarms::AlarmSettings;
use crate::call::{Access, call};
use crate::error::Error;
use crate::metrics;
use crate::object::{BoxError, BoxFuture, DurableObject};
use crate::runtime::{Runtime, Shared};
use crate::storage::AlarmRecord;

/// Wakes the scheduler when an alarm is committed.
#[derive(Debug, Default)]
pub(crate) struct SchedulerSignal {
    notify: Notify,
}

impl SchedulerSignal {
    /// An alarm was scheduled: look again at the earliest due time.
    pub(crate) fn alarm_scheduled(&self) {
        self.notify.notify_one();
    }
}

/// Fires an alarm at an object of a type known only by name.
pub(crate) trait AlarmTarget: Send + Sync {
    /// Runs the alarm's handler through the object; the alarm's removal (see [`Removal`]) is
    /// committed with the handler's state.
    fn fire<'a>(
        &'a self,
        runtime: &'a Runtime,
        id: &'a str,
        name: &'a str,
        attempt: u32,
        removal: Removal,
    ) -> BoxFuture<'a, Result<(), Error<BoxError>>>;
}

/// How a fired alarm is removed, in the same commit as its handler's state.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Removal {
    /// If the handler succeeds and the alarm is still claimed with this claim time (a handler
    /// that schedules it again clears the claim).
    Claimed(SystemTime),
    /// Before the handler runs, so that only a schedule made by the handler survives (alarms
    /// fired by hand in tests, which hold no claim).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    Unconditional,
}

/// The [`AlarmTarget`] of object type `O`.
pub(crate) struct TypedTarget<O>(std::marker::PhantomData<fn() -> O>);

impl<O> TypedTarget<O> {
    pub(crate) fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<O: DurableObject> AlarmTarget for TypedTarget<O> {
    fn fire<'a>(
        &'a self,
        runtime: &'a Runtime,
        id: &'a str,
        name: &'a str,
        attempt: u32,
        removal: Removal,
    ) -> BoxFuture<'a, Result<(), Error<BoxError>>> {
        let name = name.to_owned();
        Box::pin(call::<O, (), BoxError, _>(
            runtime,
            id,
            Access::Write,
            "alarm",
            move |state: &mut O, ctx| {
                if let Removal::Unconditional = removal {
                    ctx.remove_alarm(name.clone());
                }
                match state.alarm(ctx, &name, attempt) {
                    Some(fired) => Box::pin(async move {
                        fired.await?;
                        if let Removal::Claimed(claimed_at) = removal {
                            ctx.finish_alarm(name, claimed_at);
                        }
                        Ok(())
                    }),
                    None => {
                        let message =
                            format!("`{}` has no alarm handler named `{name}`", O::TYPE_NAME);
                        Box::pin(std::future::ready(Err(message.into())))
                    }
                }
            },
        ))
    }
}

/// Delay before polling again after storage failed.
const STORAGE_RETRY: Duration = Duration::from_secs(1);

/// Delay before an alarm refused by an overloaded object is offered again.
const OVERLOAD_RETRY: Duration = Duration::from_millis(100);

/// The scheduler task. It holds the runtime weakly and ends when the runtime is gone.
pub(crate) async fn run(
    shared: Weak<Shared>,
    signal: Arc<SchedulerSignal>,
    shutdown: CancellationToken,
) {
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let Some(runtime) = Runtime::upgrade(&shared) else {
            return;
        };
        let settings = *runtime.alarm_settings();
        let wait = match claim_and_fire(&runtime, &settings).await {
            Ok(true) => continue,
            Ok(false) => time_until_next(&runtime, &settings).await,
            Err(()) => STORAGE_RETRY,
        };
        drop(runtime);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = signal.notify.notified() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Claims one batch of due alarms and fires each in its own task. Returns whether the batch
/// was full (more may be due).
async fn claim_and_fire(runtime: &Runtime, settings: &AlarmSettings) -> Result<bool, ()> {
    let now = runtime.now();
    let expired_before = now
        .checked_sub(settings.claim_ttl)
        .unwrap_or(std::time::UNIX_EPOCH);
    let claimed = runtime
        .storage()
        .claim_due_alarms(now, expired_before, settings.claim_batch)
        .await
        .map_err(|error| tracing::warn!(%error, "claiming due alarms failed"))?;
    let full = claimed.len() >= settings.claim_batch;
    for alarm in claimed {
        runtime.spawn_task(fire(runtime.clone(), alarm));
    }
    Ok(full)
}

/// How long to sleep: until the earliest unclaimed alarm is due, at most the poll interval.
async fn time_until_next(runtime: &Runtime, settings: &AlarmSettings) -> Duration {
    match runtime.storage().next_alarm_due().await {
        Ok(Some(due)) => due
            .duration_since(runtime.now())
            .unwrap_or(Duration::ZERO)
            .min(settings.poll_interval),
        Ok(None) => settings.poll_interval,
        Err(error) => {
            tracing::warn!(%error, "reading the next alarm failed");
            STORAGE_RETRY
        }
    }
}

/// Fires one claimed alarm and records the outcome.
pub(crate) async fn fire(runtime: Runtime, alarm: AlarmRecord) {
    let key = &alarm.key;
    let Some(claimed_at) = alarm.claimed_at else {
        return;
    };
    let Some(target) = runtime.alarm_target(&key.object_type) else {
        // Kept claimed: it is offered again after `claim_ttl`, and reported each time.
        tracing::warn!(
            object_type = %key.object_type,
            alarm = %alarm.name,
            "alarm for an object type this runtime does not know; kept in storage"
        );
        runtime.emit_unknown_alarm(&alarm);
        return;
    };
    let attempt = alarm.attempts + 1;
    let outcome = target
        .fire(
            &runtime,
            &key.object_id,
            &alarm.name,
            attempt,
            Removal::Claimed(claimed_at),
        )
        .await;
    let storage = runtime.storage();
    let recorded = match outcome {
        Ok(()) => {
            // Removed in the handler's own commit.
            metrics::alarm_fired(&key.object_type, "ok");
            return;
        }
        Err(Error::Overloaded { .. } | Error::ShuttingDown) => {
            metrics::alarm_fired(&key.object_type, "deferred");
            // Not an attempt: offer it again shortly without counting it.
            let retry_at = runtime.now() + OVERLOAD_RETRY;
            storage
                .fail_alarm(
                    key,
                    &alarm.name,
                    claimed_at,
                    alarm.attempts,
                    "object overloaded",
                    Some(retry_at),
                )
                .await
        }
        Err(error) => {
            let message = match &error {
                Error::Handler(inner) => inner.to_string(),
                other => other.to_string(),
            };
            let retry = runtime.alarm_settings().retry;
            let retry_at =
                (attempt < retry.max_attempts).then(|| runtime.now() + retry.delay_after(attempt));
            if retry_at.is_none() {
                tracing::error!(
                    object = %key,
                    alarm = %alarm.name,
                    attempts = attempt,
                    error = %message,
                    "alarm failed for the last time; kept as a dead alarm"
                );
            } else {
                tracing::warn!(object = %key, alarm = %alarm.name, attempt, error = %message, "alarm failed; will retry");
            }
            metrics::alarm_fired(
                &key.object_type,
                if retry_at.is_none() { "dead" } else { "retry" },
            );
            runtime.emit_alarm_failed(&alarm, attempt, &message, retry_at.is_none());
            let retry_at = retry_at.map(crate::storage::truncate_to_micros);
            storage
                .fail_alarm(key, &alarm.name, claimed_at, attempt, &message, retry_at)
                .await
        }
    };
    match recorded {
        Ok(_) => runtime.signal_alarm_scheduled(),
        Err(error) => {
            tracing::warn!(%error, object = %key, alarm = %alarm.name, "recording an alarm outcome failed; the claim will expire and the alarm fire again")
        }
    }
}
