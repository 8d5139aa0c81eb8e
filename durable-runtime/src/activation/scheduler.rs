//! The alarm scheduler: claims alarms from storage shortly before they are due and fires each
//! at its object on time.
//!
//! It sleeps until `claim_ahead` before the earliest known due time, and is woken early
//! whenever this runtime commits an alarm due before that. It then claims the alarms due
//! within `claim_ahead` (longer when looks at storage are slow: see [`LookTime`]) in one
//! storage round trip, starts their objects from one batched read of their states, and queues
//! the alarms by due time (`alarms::timers`); one firing task hands each to its object when it
//! is due (`activation::fire`), so that neither the claim nor the object's load is paid at the
//! due time (an object the batched read did not start is activated, loading its state, before
//! the wait). A batch's objects are read while the next batch is claimed.
//!
//! The claims a runtime owns are capped (`max_claimed`): a burst of due alarms larger than what
//! it fires in a moment is claimed batch by batch as firings make room, so that claims do not
//! wait long enough for their leases to need renewing, and other runtimes take their share.
//!
//! A claim taken ahead is *held* in memory until it fires. A call of this runtime that
//! schedules or cancels the alarm before then *revokes* it (in the same step that stages the
//! change), so an alarm cancelled or moved before its due time never fires under the old claim.
//! Claims still held at shutdown are released in storage, so a restart fires them at once.
//!
//! Every claim is a lease of `claim_ttl`, renewed while this runtime holds or fires the alarm
//! (see [`renew_leases`]); the claim of a process that died lapses when its lease ends, and
//! the scheduler, which sleeps until the earliest time an alarm becomes claimable (due, or its
//! lease ended), takes it over then. The storage poll every `poll_interval` is only the
//! recovery path for alarms written by another process. Firing is claim based, so several
//! schedulers on one database fire each alarm once per claim.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use tokio::sync::oneshot;

use crate::activation::call::{Access, SyncBody, call};
use crate::activation::fire::{self, Completion};
use crate::alarms::AlarmSettings;
use crate::alarms::claims::Hold;
use crate::alarms::handle::SchedulerHandle;
use crate::error::Error;
use crate::object::context::Context;
use crate::object::handle::{AlarmTarget, Removal, Runtime, Shared};
use crate::object::{BoxFuture, DurableObject};
use crate::observe::metrics;
use crate::storage::{AlarmClaim, AlarmRecord, Loaded, load_all, truncate_to_micros};

/// The [`AlarmTarget`] of object type `O`.
pub(crate) struct TypedTarget<O>(std::marker::PhantomData<fn() -> O>);

impl<O> TypedTarget<O> {
    pub(crate) fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<O: DurableObject> AlarmTarget for TypedTarget<O> {
    fn alarm_fired(&self, outcome: &'static str) {
        metrics::alarm_of_type_fired::<O>(outcome);
    }

    fn fetch_epoch(&self, runtime: &Runtime, id: &str) -> Option<u64> {
        runtime.with_type_entry::<O, _>(|entry| entry.fetch_epoch(id))
    }

    fn start_fetched(&self, runtime: &Runtime, id: &str, stored: Loaded, epoch: u64) {
        runtime.with_type_entry::<O, _>(|entry| entry.start_fetched(runtime, id, stored, epoch));
    }

    fn activate<'a>(&'a self, runtime: &'a Runtime, id: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let started = call::<O, (), std::convert::Infallible, _>(
                runtime,
                id,
                Access::Read,
                "activate",
                SyncBody(|_: &mut O, _: &Context| Ok(())),
            )
            .await;
            // The alarm's own call reports any failure.
            drop(started);
        })
    }

    fn fire(
        &self,
        runtime: &Runtime,
        alarm: AlarmRecord,
        attempt: u32,
        removal: Removal,
        completion: Completion,
    ) {
        fire::dispatch::<O>(runtime, alarm, attempt, removal, completion);
    }
}

/// How many alarms one look claims at most: a batch of none would read as a full batch every
/// time, and the scheduler would look again at once, forever.
fn claim_batch(settings: &AlarmSettings) -> usize {
    settings.claim_batch.max(1)
}

/// How many claims this runtime owns at most: with none, the scheduler could never claim.
fn max_claimed(settings: &AlarmSettings) -> usize {
    settings.max_claimed.max(1)
}

/// Delay before polling again after storage failed.
const STORAGE_RETRY: Duration = Duration::from_secs(1);

/// The scheduler task. It holds the runtime weakly and ends when the runtime is gone. At
/// shutdown it releases in storage the claims still queued, so that a restart fires them at
/// once: here, after its last claim, so that none is queued after the release.
pub(crate) async fn run(
    shared: Weak<Shared>,
    handle: Arc<SchedulerHandle>,
    shutdown: CancellationToken,
) {
    claim_until_shutdown(&shared, &handle, &shutdown).await;
    let Some(runtime) = Runtime::upgrade(&shared) else {
        return;
    };
    for alarm in handle.timers().take_all() {
        if let Some(claimed_at) = alarm.claimed_at
            && handle.claims().take(&alarm.key, &alarm.name, claimed_at)
        {
            release(&runtime, claim_of(&alarm, claimed_at)).await;
        }
    }
}

/// The scheduler's loop: claims due alarms until shutdown, or until the runtime is gone.
async fn claim_until_shutdown(
    shared: &Weak<Shared>,
    handle: &Arc<SchedulerHandle>,
    shutdown: &CancellationToken,
) {
    if let Some(runtime) = Runtime::upgrade(shared) {
        runtime.spawn_task(renew_leases(
            shared.clone(),
            Arc::clone(handle),
            shutdown.clone(),
        ));
        runtime.spawn_task(fire_due(
            shared.clone(),
            Arc::clone(handle),
            shutdown.clone(),
        ));
    }
    let mut looks = LookTime::default();
    let mut arming = Arming::default();
    claim_while_running(shared, handle, shutdown, &mut looks, &mut arming).await;
    // Its alarms are queued before the scheduler releases what is queued.
    arming.settle(&mut looks).await;
}

/// The objects of the last claimed batch loading, and its alarms waiting to be queued: one
/// batch's objects load while the next batch is claimed, so that a burst is claimed at the
/// pace of the store's claims, not of a claim and a read in turn.
#[derive(Default)]
struct Arming {
    in_flight: Option<tokio::task::JoinHandle<Duration>>,
}

impl Arming {
    /// Waits for the batch in flight, if any, and counts its look (from the start of its claim
    /// to its alarms queued).
    async fn settle(&mut self, looks: &mut LookTime) {
        if let Some(batch) = self.in_flight.take()
            && let Ok(took) = batch.await
        {
            looks.took(took);
        }
    }

    /// Starts the objects of `held` and queues them, once the batch before is queued.
    async fn start(
        &mut self,
        runtime: &Runtime,
        held: Vec<AlarmRecord>,
        started: tokio::time::Instant,
        looks: &mut LookTime,
    ) {
        self.settle(looks).await;
        let task = runtime.clone();
        self.in_flight = Some(runtime.spawn_joined(async move {
            arm(&task, held).await;
            started.elapsed()
        }));
    }
}

/// The scheduler's loop proper, until shutdown or until the runtime is gone; the batch it
/// claimed last may still be arming when it returns.
async fn claim_while_running(
    shared: &Weak<Shared>,
    handle: &Arc<SchedulerHandle>,
    shutdown: &CancellationToken,
    looks: &mut LookTime,
    arming: &mut Arming,
) {
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        let Some(runtime) = Runtime::upgrade(shared) else {
            return;
        };
        let settings = *runtime.alarm_settings();
        let max_claimed = max_claimed(&settings);
        if handle.claims().owned() >= max_claimed {
            // Claimed ahead of what fires: more is claimed as firings make room.
            drop(runtime);
            tokio::select! {
                () = handle.claims().room_below(max_claimed) => {}
                () = shutdown.cancelled() => return,
            }
            continue;
        }
        handle.awake();
        let started = tokio::time::Instant::now();
        let claimed = match claim(&runtime, &settings, looks.lead(&settings)).await {
            Ok((claimed, held)) => {
                // A look that claimed nothing read no objects: it says nothing of how long
                // that takes, and has nothing to arm.
                if !held.is_empty() {
                    arming.start(&runtime, held, started, looks).await;
                }
                Ok(claimed)
            }
            Err(()) => Err(()),
        };
        let lead = looks.lead(&settings);
        let wait = match claimed {
            Ok(Claimed::Full) => continue,
            Ok(Claimed::Some) => time_until_next(&runtime, &settings, lead).await,
            // Nothing within the lead was claimable: what comes next is due after it, or a
            // claim whose lease ends (at its end exactly, not a lead before).
            Ok(Claimed::None) => match time_until_next(&runtime, &settings, lead).await {
                Duration::ZERO => time_until_next(&runtime, &settings, Duration::ZERO).await,
                wait => wait,
            },
            Err(()) => STORAGE_RETRY,
        };
        // The next look claims what is due `lead` after it, and it comes `wait` from now (or
        // a hair later): an alarm due after that is claimed on time without a wake.
        handle.sleeping(runtime.now().checked_add(wait.saturating_add(lead)));
        drop(runtime);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = handle.notify.notified() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// How long looks at storage (a claim and the read of its objects) take, so that alarms are
/// claimed early enough to fire on time when storage is slow.
#[derive(Debug, Default)]
struct LookTime {
    /// Follows a slower look at once and a faster one slowly, so that one quick look does
    /// not make the next large batch late. Only looks that claimed alarms count.
    typical: Duration,
}

impl LookTime {
    fn took(&mut self, took: Duration) {
        self.typical = if took >= self.typical {
            took
        } else {
            (self.typical * 7 + took) / 8
        };
    }

    /// How long before their due time alarms are claimed: `claim_ahead`, or twice the time a
    /// look takes when that is longer, up to [`MAX_LEAD`] and a quarter of the claim's
    /// time-to-live. A `claim_ahead` of zero (claim only due alarms) is kept.
    fn lead(&self, settings: &AlarmSettings) -> Duration {
        if settings.claim_ahead.is_zero() {
            return Duration::ZERO;
        }
        let needed = (self.typical * 2).min(MAX_LEAD).min(settings.claim_ttl / 4);
        settings.claim_ahead.max(needed)
    }
}

/// Keeps the leases of the claims this runtime owns from ending: every quarter of `claim_ttl`
/// (while it owns any), extends to `claim_ttl` from now, in one storage call, each lease with
/// less than three quarters of it left. A lease thus has at least half of `claim_ttl` to go
/// when the renewal that extends it is sent, so that a renewal may be that slow to reach
/// storage before another scheduler takes the alarm over.
///
/// A slow store eats into that margin twice: a lease not yet due when a slow renewal is sent
/// comes due while it is in flight, and the next renewal's own way to storage is as slow.
/// Renewals are therefore counted from when the previous one was sent (one that took longer
/// than the interval is followed at once), and each renews the leases that end within the
/// time the last renewal took on top of the three quarters.
async fn renew_leases(
    shared: Weak<Shared>,
    handle: Arc<SchedulerHandle>,
    shutdown: CancellationToken,
) {
    // How long the last renewal took to reach storage, and of the interval since it was sent,
    // how much went by waiting for it (none after a tick that renewed nothing).
    let (mut last_took, mut waited) = (Duration::ZERO, Duration::ZERO);
    loop {
        if !handle.claims().owns_any() {
            tokio::select! {
                () = handle.claims().claimed() => {}
                () = shutdown.cancelled() => return,
            }
        }
        let Some(ttl) = Runtime::upgrade(&shared).map(|runtime| runtime.alarm_settings().claim_ttl)
        else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep(renewal_interval(ttl).saturating_sub(waited)) => {}
            () = shutdown.cancelled() => return,
        }
        let Some(runtime) = Runtime::upgrade(&shared) else {
            return;
        };
        let now = runtime.now();
        let horizon = ttl.saturating_sub(ttl / 4).saturating_add(last_took);
        let due = handle.claims().due_for_renewal(lease_end(now, horizon));
        waited = Duration::ZERO;
        if due.is_empty() {
            continue;
        }
        let lease_until = lease_end(now, ttl);
        let sent = tokio::time::Instant::now();
        let renewed = runtime
            .storage()
            .renew_alarm_claims(&due, lease_until)
            .await;
        last_took = sent.elapsed();
        waited = last_took;
        match renewed {
            Ok(_) => handle.claims().renewed(&due, lease_until),
            Err(error) => {
                tracing::warn!(%error, claims = due.len(), "renewing alarm claims failed; retrying");
            }
        }
    }
}

/// When a lease of `length` taken at `now` ends (a year at most: settings may say "forever").
fn lease_end(now: SystemTime, length: Duration) -> SystemTime {
    const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);
    truncate_to_micros(now + length.min(LONGEST))
}

/// How often leases are renewed: a quarter of their length (at least a millisecond).
fn renewal_interval(claim_ttl: Duration) -> Duration {
    (claim_ttl / 4).max(Duration::from_millis(1))
}

/// The most a slow storage makes alarms claimed ahead of their due time: a claim held ahead
/// ties its alarm to this runtime until it fires.
const MAX_LEAD: Duration = Duration::from_secs(1);

/// What a look at storage claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Claimed {
    None,
    Some,
    /// A full batch: more may be due.
    Full,
}

/// Claims one batch of alarms due within `lead`; returns what it claimed and the alarms this
/// runtime now holds, to be armed.
async fn claim(
    runtime: &Runtime,
    settings: &AlarmSettings,
    lead: Duration,
) -> Result<(Claimed, Vec<AlarmRecord>), ()> {
    let now = truncate_to_micros(runtime.now());
    let due_by = now + lead;
    let lease_until = lease_end(now, settings.claim_ttl);
    let claims = runtime.scheduler().claims();
    let room = max_claimed(settings).saturating_sub(claims.owned());
    let limit = claim_batch(settings).min(room.max(1));
    let query = claims.begin_query();
    let claimed = match runtime
        .storage()
        .claim_due_alarms(now, due_by, lease_until, limit)
        .await
    {
        Ok(claimed) => claimed,
        Err(error) => {
            claims.end_query(query);
            tracing::warn!(%error, "claiming due alarms failed");
            return Err(());
        }
    };
    let outcome = if claimed.len() >= limit {
        Claimed::Full
    } else if claimed.is_empty() {
        Claimed::None
    } else {
        Claimed::Some
    };
    let mut held = Vec::with_capacity(claimed.len());
    for alarm in claimed {
        match claims.hold(&query, &alarm, lease_until) {
            Hold::Held => held.push(alarm),
            Hold::Release => {
                if let Some(claimed_at) = alarm.claimed_at {
                    release_claims(runtime, vec![claim_of(&alarm, claimed_at)]);
                }
            }
        }
    }
    claims.end_query(query);
    Ok((outcome, held))
}

/// Starts the objects of held alarms from one batched read and queues the alarms until they
/// are due.
async fn arm(runtime: &Runtime, held: Vec<AlarmRecord>) {
    start_objects(runtime, &held).await;
    activate_missed(runtime, &held);
    runtime.scheduler().timers().arm(held);
}

/// Activates, each in a task of its own, the objects of `alarms` due later that the batched
/// read did not start (it failed, or there was no room), so that they load before their alarm
/// is due. An object the read started decodes that state as its task starts: activating it
/// too would cost a call of its own.
fn activate_missed(runtime: &Runtime, alarms: &[AlarmRecord]) {
    let now = runtime.now();
    let mut seen = HashSet::new();
    for alarm in alarms {
        if alarm.due_at <= now || !seen.insert(&alarm.key) {
            continue;
        }
        let Some(target) = runtime.alarm_target(&alarm.key.object_type) else {
            continue;
        };
        if target.fetch_epoch(runtime, &alarm.key.object_id).is_some() {
            let (task, id) = (runtime.clone(), alarm.key.object_id.clone());
            runtime.spawn_task(async move { target.activate(&task, &id).await });
        }
    }
}

/// Starts the objects of `alarms` that are not live, from one batched read of their states,
/// so that each does not load on its own (one storage round trip per object). An object this
/// misses (the read failed, or the registry moved meanwhile) loads when its alarm activates it.
async fn start_objects(runtime: &Runtime, alarms: &[AlarmRecord]) {
    let mut keys = Vec::new();
    let mut targets = Vec::new();
    let mut seen = HashSet::new();
    for alarm in alarms {
        if !seen.insert(&alarm.key) {
            continue;
        }
        let Some(target) = runtime.alarm_target(&alarm.key.object_type) else {
            continue;
        };
        if let Some(epoch) = target.fetch_epoch(runtime, &alarm.key.object_id) {
            keys.push(alarm.key.clone());
            targets.push((target, epoch));
        }
    }
    if keys.is_empty() {
        return;
    }
    let loaded = match load_all(runtime.storage().as_ref(), &keys).await {
        Ok(loaded) => loaded,
        Err(error) => {
            tracing::warn!(%error, "loading the objects of claimed alarms failed; they load one by one");
            return;
        }
    };
    for ((key, (target, epoch)), stored) in keys.iter().zip(targets).zip(loaded) {
        // An alarm of an object with no stored state: the object was deleted since the claim.
        // Not started, so its alarm checks its claim before firing.
        if let Loaded::Object(_) = stored {
            target.start_fetched(runtime, &key.object_id, stored, epoch);
        }
    }
}

/// How long to sleep: until `lead` before the earliest time an alarm becomes claimable (due,
/// and unclaimed or its lease ended), at most the poll interval.
async fn time_until_next(runtime: &Runtime, settings: &AlarmSettings, lead: Duration) -> Duration {
    match runtime.storage().next_alarm_due().await {
        Ok(Some(due)) => due
            .duration_since(runtime.now() + lead)
            .unwrap_or(Duration::ZERO)
            .min(settings.poll_interval),
        Ok(None) => settings.poll_interval,
        Err(error) => {
            tracing::warn!(%error, "reading the next alarm failed");
            STORAGE_RETRY
        }
    }
}

/// Alarms the firing task takes from the queue before it lets other tasks run.
const FIRE_BATCH: usize = 256;

/// The firing task: fires each held alarm when it is due, unless it was revoked first, until
/// shutdown (the scheduler task then releases what is left). It holds the runtime weakly and
/// ends when the runtime is gone.
async fn fire_due(shared: Weak<Shared>, handle: Arc<SchedulerHandle>, shutdown: CancellationToken) {
    let timers = handle.timers();
    let mut due = Vec::with_capacity(FIRE_BATCH);
    loop {
        let Some(runtime) = Runtime::upgrade(&shared) else {
            return;
        };
        let next = timers.take_due(runtime.now(), FIRE_BATCH, &mut due);
        let full = due.len() == FIRE_BATCH;
        for alarm in due.drain(..) {
            fire_now(&runtime, alarm);
        }
        if full {
            drop(runtime);
            tokio::task::yield_now().await;
            continue;
        }
        // Re-read the clock: the wait is to the earliest alarm left.
        let wait = next.map(|at| at.duration_since(runtime.now()).unwrap_or(Duration::ZERO));
        drop(runtime);
        let sleep = async {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = sleep => {}
            () = timers.earlier.notified() => {}
            () = shutdown.cancelled() => return,
        }
    }
}

/// Fires one held alarm that is due, unless it was revoked: at once if its object is live,
/// else from a task that first checks the claim is still there.
fn fire_now(runtime: &Runtime, alarm: AlarmRecord) {
    let Some(claimed_at) = alarm.claimed_at else {
        return;
    };
    if !runtime
        .scheduler()
        .claims()
        .is_held(&alarm.key, &alarm.name, claimed_at)
    {
        metrics::alarm_fired(alarm.key.object_type.clone(), "revoked");
        return;
    }
    match runtime.alarm_target(&alarm.key.object_type) {
        Some(target) if target.fetch_epoch(runtime, &alarm.key.object_id).is_none() => {
            let attempt = alarm.attempts + 1;
            let completion = Completion::Settle(runtime.clone());
            target.fire(
                runtime,
                alarm,
                attempt,
                Removal::Claimed(claimed_at),
                completion,
            );
        }
        _ => runtime.spawn_task(fire_held(runtime.clone(), alarm, false)),
    }
}

/// The claim `alarm` was claimed under at `claimed_at`.
fn claim_of(alarm: &AlarmRecord, claimed_at: SystemTime) -> AlarmClaim {
    AlarmClaim {
        key: alarm.key.clone(),
        name: alarm.name.clone(),
        claimed_at,
    }
}

/// Gives a claim this runtime will not fire back to storage, due as before, and lets it go.
async fn release(runtime: &Runtime, claim: AlarmClaim) {
    let released = runtime
        .storage()
        .release_alarm(&claim.key, &claim.name, claim.claimed_at)
        .await;
    runtime
        .scheduler()
        .claims()
        .let_go(&claim.key, &claim.name, claim.claimed_at);
    match released {
        Ok(true) => runtime.signal_alarm_scheduled(),
        Ok(false) => {}
        Err(error) => {
            tracing::warn!(%error, object = %claim.key, alarm = %claim.name, "releasing an alarm claim failed; it fires again when its lease ends");
        }
    }
}

/// Releases, in a task of their own, claims this runtime owns but will not fire: revoked by a
/// change whose write failed, or returned by a claim query that may have missed a change.
pub(crate) fn release_claims(runtime: &Runtime, claims: Vec<AlarmClaim>) {
    if claims.is_empty() {
        return;
    }
    let task = runtime.clone();
    runtime.spawn_task(async move {
        for claim in claims {
            release(&task, claim).await;
        }
    });
}

/// Whether the alarm is still claimed in storage under this claim: checked before firing at
/// an object that is not live, whose deletion by another runtime would otherwise go unseen
/// (the fire would create the object again).
async fn still_claimed(runtime: &Runtime, alarm: &AlarmRecord, claimed_at: SystemTime) -> bool {
    match runtime.storage().list_alarms(&alarm.key).await {
        Ok(alarms) => alarms
            .iter()
            .any(|stored| stored.name == alarm.name && stored.claimed_at == Some(claimed_at)),
        // Fired all the same: an alarm is never dropped for a failed look.
        Err(_) => true,
    }
}

/// Fires one claimed alarm now and returns once its outcome is recorded.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) async fn fire(runtime: Runtime, alarm: AlarmRecord) {
    let lease_until = lease_end(runtime.now(), runtime.alarm_settings().claim_ttl);
    runtime
        .scheduler()
        .claims()
        .hold_unchecked(&alarm, lease_until);
    fire_held(runtime, alarm, true).await;
}

/// Fires one held alarm: hands it to its object, which records the outcome once the handler's
/// write is committed; `waited`, returns only once the outcome is recorded.
async fn fire_held(runtime: Runtime, alarm: AlarmRecord, waited: bool) {
    let key = &alarm.key;
    let Some(claimed_at) = alarm.claimed_at else {
        return;
    };
    let claims = runtime.scheduler().claims();
    let Some(target) = runtime.alarm_target(&key.object_type) else {
        claims.take(key, &alarm.name, claimed_at);
        // Kept claimed for a while: offered again later, and reported each time.
        tracing::warn!(
            object_type = %key.object_type,
            alarm = %alarm.name,
            "alarm for an object type this runtime does not know; kept in storage"
        );
        runtime.emit_unknown_alarm(&alarm);
        let claim = claim_of(&alarm, claimed_at);
        // Offered again (to a runtime that may know it) after a poll interval rather than
        // a lease, so that it is not reported every second.
        let settings = runtime.alarm_settings();
        let kept_for = settings.poll_interval.max(settings.claim_ttl);
        let lease_until = lease_end(runtime.now(), kept_for);
        let kept = runtime
            .storage()
            .renew_alarm_claims(std::slice::from_ref(&claim), lease_until)
            .await;
        claims.let_go(key, &alarm.name, claimed_at);
        if let Err(error) = kept {
            tracing::warn!(%error, object = %key, alarm = %alarm.name, "extending the claim of an alarm of an unknown type failed");
        }
        return;
    };
    if target.fetch_epoch(&runtime, &key.object_id).is_some()
        && !still_claimed(&runtime, &alarm, claimed_at).await
    {
        // Deleted (or changed) by another runtime since the claim: nothing to fire.
        claims.take(key, &alarm.name, claimed_at);
        claims.let_go(key, &alarm.name, claimed_at);
        target.alarm_fired("revoked");
        return;
    }
    let attempt = alarm.attempts + 1;
    let removal = Removal::Claimed(claimed_at);
    if !waited {
        let completion = Completion::Settle(runtime.clone());
        target.fire(&runtime, alarm, attempt, removal, completion);
        return;
    }
    let (reply, outcome) = oneshot::channel();
    target.fire(
        &runtime,
        alarm.clone(),
        attempt,
        removal,
        Completion::Reply(reply),
    );
    let outcome = outcome.await.unwrap_or(Err(Error::ShuttingDown));
    if let Some(error) = fire::settle(&runtime, target.as_ref(), &alarm, claimed_at, outcome) {
        fire::record_failure(&runtime, target.as_ref(), &alarm, claimed_at, error).await;
    }
}
