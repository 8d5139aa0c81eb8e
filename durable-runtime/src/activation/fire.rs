//! An alarm's firing: a call of its object that no caller waits for.
//!
//! The scheduler hands the object an invocation that runs the alarm's handler, with the
//! alarm's removal committed in the handler's own write, and settles the alarm where a call
//! would send its reply: once that write is committed. A call would cost every firing a task
//! waiting for the reply (its future, a channel, and a wake-up on another thread when the
//! reply comes); here the usual outcomes (the handler ran, or the claim was revoked) are
//! settled in place, and only an attempt that failed, which writes its outcome to storage,
//! gets a task of its own. A synchronous handler runs in the object's task without a future
//! ([`AlarmRun::Done`]).
//!
//! The testing kit fires through the same invocation with a caller that waits for the outcome.

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

use crate::activation::call::{Access, Invocation, Outcome, Run, guarded};
use crate::activation::registry::Envelope;
use crate::commit::codec::panic_message;
use crate::error::Error;
use crate::object::chain::Chain;
use crate::object::context::Context;
use crate::object::handle::{AlarmTarget, Fired, Removal, Runtime};
use crate::object::{AlarmRun, BoxError, DurableObject};
use crate::storage::{AlarmRecord, IdempotentReply, ObjectKey, truncate_to_micros};

/// Delay before an alarm refused by an overloaded object is offered again.
const OVERLOAD_RETRY: Duration = Duration::from_millis(100);

/// Delay before an alarm refused because the runtime holds `max_live_objects` is offered again.
const FULL_RETRY: Duration = Duration::from_secs(1);

/// Who learns how a firing ended.
pub(crate) enum Completion {
    /// A caller waiting for the outcome (the testing kit).
    Reply(oneshot::Sender<Result<Fired, Error<BoxError>>>),
    /// Nobody: the firing settles its claim itself (the scheduler's firings).
    Settle(Runtime),
}

/// What a firing runs, and who learns its outcome: taken when it completes.
struct Job {
    alarm: AlarmRecord,
    attempt: u32,
    removal: Removal,
    completion: Completion,
}

/// The firing of one alarm, queued to its object like a call.
pub(crate) struct Firing<O: DurableObject> {
    /// `None` once completed.
    job: Option<Job>,
    /// The handler's result, kept until its write is committed.
    result: Option<Result<Fired, BoxError>>,
    /// The empty chain: a firing comes from outside any handler.
    chain: Chain,
    object: PhantomData<fn() -> O>,
}

/// Hands the object of `alarm` the firing of its attempt `attempt`; `completion` learns how
/// it ended. Returns at once.
pub(crate) fn dispatch<O: DurableObject>(
    runtime: &Runtime,
    alarm: AlarmRecord,
    attempt: u32,
    removal: Removal,
    completion: Completion,
) {
    // The registry looks the object up by its id while the firing is queued to it.
    let id = alarm.key.object_id.clone();
    let firing = Firing::<O> {
        job: Some(Job {
            alarm,
            attempt,
            removal,
            completion,
        }),
        result: None,
        chain: Chain::default(),
        object: PhantomData,
    };
    runtime.dispatch::<O>(&id, Envelope::Call(Box::new(firing)));
}

impl<O: DurableObject> Firing<O> {
    /// Keeps the result of a handler run (or its panic) for the reply; a handler that succeeded
    /// removes its alarm in its own commit.
    fn ran(
        &mut self,
        ctx: &Context,
        removal: Removal,
        result: std::thread::Result<Result<(), BoxError>>,
    ) -> Outcome {
        match result {
            Ok(Ok(())) => {
                if let (Removal::Claimed(claimed_at), Some(job)) = (removal, &self.job) {
                    ctx.finish_alarm(job.alarm.name.clone(), claimed_at);
                }
                self.result = Some(Ok(Fired::Ran));
                Outcome::Returned
            }
            Ok(Err(error)) => {
                self.result = Some(Err(error));
                Outcome::HandlerError
            }
            Err(payload) => Outcome::Panicked(panic_message(&*payload)),
        }
    }

    /// Ends the firing with `outcome`, told to whoever learns it.
    fn complete(&mut self, outcome: Result<Fired, Error<BoxError>>) {
        let Some(job) = self.job.take() else {
            return;
        };
        match job.completion {
            Completion::Reply(reply) => {
                let _ = reply.send(outcome);
            }
            Completion::Settle(runtime) => {
                let Removal::Claimed(claimed_at) = job.removal else {
                    return;
                };
                let target = crate::activation::scheduler::TypedTarget::<O>::new();
                if let Some(error) = settle(&runtime, &target, &job.alarm, claimed_at, outcome) {
                    runtime.clone().spawn_task(async move {
                        record_failure(&runtime, &target, &job.alarm, claimed_at, error).await;
                    });
                }
            }
        }
    }
}

impl<O: DurableObject> Drop for Firing<O> {
    fn drop(&mut self) {
        // Dropped unanswered, its object stopped with the runtime: refused as by a runtime
        // shutting down. Outside tokio there is nowhere to write that from, and the claim
        // lapses with its lease.
        if self.job.is_some() && tokio::runtime::Handle::try_current().is_ok() {
            self.complete(Err(Error::ShuttingDown));
        }
    }
}

impl<O: DurableObject> Invocation<O> for Firing<O> {
    fn access(&self) -> Access {
        Access::Write
    }

    fn handler(&self) -> &'static str {
        "alarm"
    }

    fn chain(&self) -> &Chain {
        &self.chain
    }

    fn runs_in_place(&self) -> bool {
        false
    }

    fn run<'a>(
        &'a mut self,
        state: &'a mut O,
        ctx: &'a Context,
        chain: Chain,
        limit: Option<Duration>,
    ) -> Run<'a> {
        let Some(job) = &self.job else {
            return Run::Finished(Outcome::Panicked("the alarm fired twice".to_owned()));
        };
        let Job {
            alarm,
            attempt,
            removal,
            ..
        } = job;
        let (name, removal) = (alarm.name.as_str(), *removal);
        match removal {
            Removal::Unconditional => ctx.remove_alarm(name.to_owned()),
            Removal::Claimed(claimed_at) => {
                // Taken inside the object's task, so a call that cancels the alarm is either
                // before this (revoked) or after it (the alarm has fired).
                let claims = ctx.runtime().scheduler().claims();
                if !claims.take(ctx.key(), name, claimed_at) {
                    self.result = Some(Ok(Fired::Revoked));
                    return Run::Finished(Outcome::Returned);
                }
            }
        }
        // In the chain's scope, as a synchronous call's body: the handler may run here.
        let started = chain.clone().sync_scope(|| {
            catch_unwind(AssertUnwindSafe(move || {
                // Moved in, so that an `async` handler's future may hold the state for `'a`.
                let state = state;
                state.alarm(ctx, name, *attempt, alarm.payload.as_deref())
            }))
        });
        let future = match started {
            Ok(Some(AlarmRun::Done(result))) => {
                let outcome = self.ran(ctx, removal, Ok(result));
                return Run::Finished(outcome);
            }
            Ok(Some(AlarmRun::Running(future))) => future,
            Ok(None) => {
                let message = format!("`{}` has no alarm handler named `{name}`", O::TYPE_NAME);
                self.result = Some(Err(message.into()));
                return Run::Finished(Outcome::HandlerError);
            }
            Err(payload) => return Run::Finished(Outcome::Panicked(panic_message(&*payload))),
        };
        Run::Running(Box::pin(async move {
            let result = guarded(chain, future, limit).await?;
            Some(self.ran(ctx, removal, result))
        }))
    }

    fn reply(mut self: Box<Self>) {
        let outcome = match self.result.take() {
            Some(Ok(fired)) => Ok(fired),
            Some(Err(error)) => Err(Error::Handler(error)),
            // Never answered: settled as dropped.
            None => return,
        };
        self.complete(outcome);
    }

    fn fail(mut self: Box<Self>, error: Error) {
        self.complete(Err(error.widen()));
    }

    fn idempotency_key(&self) -> Option<&str> {
        None
    }

    fn replay(self: Box<Self>, _key: &ObjectKey, _stored: IdempotentReply) {
        // Never called: a firing carries no idempotency key. Dropped, it settles as refused.
    }

    fn stored_reply(&self, _expires_at: SystemTime) -> Option<Result<IdempotentReply, String>> {
        None
    }
}

/// Records how the firing of `alarm` under the claim made at `claimed_at` ended, as far as it
/// can without storage: a handler that ran (its write removed the alarm) or a revoked claim is
/// settled; a failed or refused attempt is returned, for [`record_failure`].
pub(crate) fn settle(
    runtime: &Runtime,
    target: &dyn AlarmTarget,
    alarm: &AlarmRecord,
    claimed_at: SystemTime,
    outcome: Result<Fired, Error<BoxError>>,
) -> Option<Error<BoxError>> {
    let claims = runtime.scheduler().claims();
    // A call that never reached the handler leaves the claim held.
    claims.take(&alarm.key, &alarm.name, claimed_at);
    match outcome {
        Ok(Fired::Ran) => {
            // Removed in the handler's own commit.
            claims.let_go(&alarm.key, &alarm.name, claimed_at);
            target.alarm_fired("ok");
            None
        }
        Ok(Fired::Revoked) => {
            // The change that revoked it answers for its claim.
            target.alarm_fired("revoked");
            None
        }
        Err(error) => Some(error),
    }
}

/// Writes the outcome of a failed or refused attempt to fire `alarm` (see [`settle`]): a
/// refused one is offered again later without counting as an attempt, a failed one is retried
/// after the retry policy's delay or kept as a dead alarm; then lets the claim go.
pub(crate) async fn record_failure(
    runtime: &Runtime,
    target: &dyn AlarmTarget,
    alarm: &AlarmRecord,
    claimed_at: SystemTime,
    error: Error<BoxError>,
) {
    let key = &alarm.key;
    let attempt = alarm.attempts + 1;
    let storage = runtime.storage();
    let recorded = match error {
        Error::Overloaded { .. }
        | Error::ShuttingDown
        | Error::TooManyObjects { .. }
        | Error::Conflict { .. } => {
            target.alarm_fired("deferred");
            // Not an attempt (the handler did not run, or ran on a state another runtime had
            // replaced, and the object reloads): offer it again later without counting it,
            // so that contention alone never makes an alarm dead. A full runtime frees room
            // only as objects go idle, so it waits longer.
            let after = match error {
                Error::TooManyObjects { .. } => FULL_RETRY,
                _ => OVERLOAD_RETRY,
            };
            storage
                .fail_alarm(
                    key,
                    &alarm.name,
                    claimed_at,
                    alarm.attempts,
                    &error.to_string(),
                    Some(runtime.now() + after),
                )
                .await
        }
        error => {
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
            target.alarm_fired(if retry_at.is_none() { "dead" } else { "retry" });
            runtime.emit_alarm_failed(alarm, attempt, &message, retry_at.is_none());
            let retry_at = retry_at.map(truncate_to_micros);
            storage
                .fail_alarm(key, &alarm.name, claimed_at, attempt, &message, retry_at)
                .await
        }
    };
    runtime
        .scheduler()
        .claims()
        .let_go(key, &alarm.name, claimed_at);
    match recorded {
        Ok(_) => runtime.signal_alarm_scheduled(),
        Err(error) => {
            tracing::warn!(%error, object = %key, alarm = %alarm.name, "recording an alarm outcome failed; the alarm fires again when its lease ends")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::storage::Storage;
    use crate::{MemoryStorage, durable_object};

    #[durable_object]
    pub struct Ringer {
        attempts: Vec<u32>,
    }

    #[durable_object]
    impl Ringer {
        #[alarm]
        fn ring(&mut self, attempt: u32) {
            self.attempts.push(attempt);
        }
    }

    #[durable_object]
    pub struct Fragile {
        rung: u32,
    }

    #[durable_object]
    impl Fragile {
        /// A synchronous handler: it runs without a future, and its panic is caught there.
        #[alarm]
        fn ring(&mut self) {
            self.rung += 1;
            panic!("the bell cracked");
        }

        #[handler]
        fn handle_rung(&self) -> u32 {
            self.rung
        }
    }

    /// A synchronous alarm handler that panics fails its attempt like an `async` one: its
    /// change is rolled back, the panic is the alarm's last error, the alarm stays for a retry,
    /// and the object goes on answering calls.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_synchronous_alarm_handler_that_panics_fails_its_attempt_and_rolls_back() {
        let rt = Runtime::new(MemoryStorage::new());
        rt.schedule_alarm("f", Fragile::RING, Duration::ZERO)
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let failed = loop {
            let alarms = rt.list_alarms::<Fragile>("f").await.unwrap();
            if let [alarm] = &alarms[..]
                && alarm.attempts >= 1
            {
                break alarm.clone();
            }
            assert!(
                Instant::now() < deadline,
                "the alarm was attempted: {alarms:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let error = failed.last_error.expect("the attempt's error");
        assert!(error.contains("the bell cracked"), "{error}");
        assert_eq!(Fragile::rung(&rt, "f").await.unwrap(), 0, "rolled back");
        rt.shutdown().await;
    }

    /// A firing dropped before its object answered (its object stopped with the runtime)
    /// settles its claim as refused: the alarm is offered again at once, not when the claim's
    /// hour-long lease ends, and the refusal does not count as an attempt.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_firing_dropped_unanswered_is_offered_again_without_counting_an_attempt() {
        let storage = MemoryStorage::new();
        let rt = Runtime::new(storage.clone());
        let hour = Duration::from_secs(3600);
        rt.schedule_alarm("r", Ringer::RING, hour).await.unwrap();
        let now = rt.now();
        let claimed = storage
            .claim_due_alarms(now, now + 2 * hour, now + hour, 1)
            .await
            .unwrap();
        let [alarm] = &claimed[..] else {
            panic!("one alarm claimed: {claimed:?}");
        };
        let claimed_at = alarm.claimed_at.expect("claimed");
        rt.scheduler().claims().hold_unchecked(alarm, now + hour);
        drop(Firing::<Ringer> {
            job: Some(Job {
                alarm: alarm.clone(),
                attempt: 1,
                removal: Removal::Claimed(claimed_at),
                completion: Completion::Settle(rt.clone()),
            }),
            result: None,
            chain: Chain::default(),
            object: PhantomData,
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = rt.read_state::<Ringer>("r").await.unwrap();
            if let Some(state) = state
                && !state.attempts.is_empty()
            {
                assert_eq!(state.attempts, [1], "the refusal was not an attempt");
                break;
            }
            assert!(Instant::now() < deadline, "the alarm fired again");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(rt.list_alarms::<Ringer>("r").await.unwrap().is_empty());
        rt.shutdown().await;
    }
}
