//! The engine's background work: one picker per queue (claims runnable rows and runs each
//! step in a task of its own), the heartbeat of running steps, group commit of outcomes, the
//! reaper (expired leases and await timeouts) and garbage collection.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use super::engine::{PendingCommit, Shared, lock};
use super::metrics;
use super::run::Executed;
use super::store::{Claimed, Committed, Lease, OutcomeCommit, PickRequest};
use crate::storage::StorageError;

/// Starts every task the settings ask for.
pub(crate) fn start(shared: &Arc<Shared>, pending: mpsc::UnboundedReceiver<PendingCommit>) {
    let settings = &shared.settings;
    shared
        .maintenance
        .spawn(group_commit(Arc::clone(shared), pending));
    if !settings.queues.is_empty() {
        shared.maintenance.spawn(heartbeat(Arc::clone(shared)));
    }
    for (queue, concurrency) in &settings.queues {
        shared
            .steps
            .spawn(picker(Arc::clone(shared), queue.clone(), *concurrency));
    }
    if let Some(interval) = settings.reaper {
        shared
            .maintenance
            .spawn(reaper(Arc::clone(shared), interval));
    }
    if settings.gc.is_some() {
        shared.maintenance.spawn(gc(Arc::clone(shared)));
    }
}

/// Claims rows of `queue` while it has free slots, and runs each claimed step in a task.
async fn picker(shared: Arc<Shared>, queue: String, concurrency: usize) {
    let slots = Arc::new(Semaphore::new(concurrency));
    let mut idle = shared.settings.poll_interval;
    loop {
        let first = tokio::select! {
            () = shared.stop_picking.cancelled() => return,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let mut held = vec![first];
        while held.len() < shared.settings.pick_batch {
            match Arc::clone(&slots).try_acquire_owned() {
                Ok(permit) => held.push(permit),
                Err(_) => break,
            }
        }
        // Registered before the pick, so that a change committed while it runs is not
        // missed by the idle wait below.
        let changed = shared.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let now = shared.clock.now();
        let started = Instant::now();
        // Only rows of the FSM versions registered here: an instance always runs on the
        // version that started it, so rows of other versions are left for workers that have
        // them.
        let picked = shared
            .store
            .pick_registered(&PickRequest {
                queue: &queue,
                worker: &shared.worker,
                eligible_by: now,
                lease_until: lease_end(&shared, now),
                limit: held.len(),
                now,
                fsms: &shared.registry.versions(),
            })
            .await;
        let rows = match picked {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!(%error, queue, "picking FSM steps failed; trying again shortly");
                drop(held);
                wait(&shared, idle, changed).await;
                idle = (idle * 2).min(shared.settings.max_poll_interval);
                continue;
            }
        };
        metrics::picked(&queue, rows.len(), started.elapsed());
        if rows.is_empty() {
            drop(held);
            wait(&shared, idle, changed).await;
            idle = (idle * 2).min(shared.settings.max_poll_interval);
            continue;
        }
        idle = shared.settings.poll_interval;
        // Slots beyond the rows claimed are freed here, with the rest of `held`.
        for (claimed, permit) in rows.into_iter().zip(held) {
            lock(&shared.in_flight).insert(claimed.id, claimed.token);
            let shared = Arc::clone(&shared);
            shared.steps.clone().spawn(async move {
                run_claimed(&shared, claimed).await;
                drop(permit);
            });
        }
    }
}

/// Sleeps `for_` or until a change is notified or picking stops.
async fn wait(
    shared: &Shared,
    for_: Duration,
    changed: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
) {
    tokio::select! {
        () = shared.stop_picking.cancelled() => {}
        () = changed => {}
        () = tokio::time::sleep(for_) => {}
    }
}

fn lease_end(shared: &Shared, now: std::time::SystemTime) -> std::time::SystemTime {
    crate::storage::truncate_to_micros(now + shared.settings.lease_ttl)
}

/// Runs one claimed step and commits its outcome.
pub(crate) async fn run_claimed(shared: &Shared, claimed: Claimed) {
    let Some(runner) = shared.registry.get(&claimed.fsm, claimed.fsm_version) else {
        // Another worker (a newer or older deploy) may know it: the claim lapses with its
        // lease and the reaper hands the row on.
        tracing::warn!(
            fsm = claimed.fsm,
            version = claimed.fsm_version,
            id = %claimed.id,
            "claimed an instance of an FSM this engine does not run; leaving it for another worker"
        );
        metrics::unrunnable(&claimed.fsm);
        lock(&shared.in_flight).remove(&claimed.id);
        return;
    };
    let fsm = runner.name();
    let step = runner.step_label(&claimed.step);
    let span = step_span(fsm, step, &claimed);
    let started = Instant::now();
    let executed = runner
        .execute(&claimed, &shared.clock)
        .instrument(span.clone())
        .await;
    record_error(fsm, step, &executed);
    let kind = executed.kind;
    let committed = commit(shared, executed.commit).instrument(span).await;
    lock(&shared.in_flight).remove(&claimed.id);
    let outcome = match committed {
        Ok(Committed::Applied) => kind.as_str(),
        Ok(Committed::Stale) => {
            metrics::stale(fsm);
            tracing::info!(fsm, step, id = %claimed.id, "a step's outcome is stale (its claim was lost) and was dropped");
            "stale"
        }
        Err(error) => {
            tracing::warn!(fsm, step, id = %claimed.id, %error, "committing a step's outcome failed; the step runs again once its lease ends");
            "commit_failed"
        }
    };
    metrics::step(fsm, step, outcome, started.elapsed());
}

/// The span a step runs in (and its outcome is committed in).
pub(crate) fn step_span(fsm: &'static str, step: &'static str, claimed: &Claimed) -> tracing::Span {
    tracing::debug_span!(
        "durable.fsm.step",
        fsm,
        step,
        id = claimed.id.get(),
        attempt = claimed.attempt
    )
}

pub(crate) fn record_error(fsm: &'static str, step: &'static str, executed: &Executed) {
    if let Some(kind) = executed.error {
        metrics::step_error(fsm, step, kind.as_str());
    }
}

/// Hands `commit` to group commit and waits until it is applied, found stale, or failed.
async fn commit(shared: &Shared, commit: OutcomeCommit) -> Result<Committed, StorageError> {
    let (reply, answer) = oneshot::channel();
    if shared
        .commits
        .send(PendingCommit { commit, reply })
        .is_err()
    {
        return Err(stopped());
    }
    answer.await.unwrap_or_else(|_| Err(stopped()))
}

fn stopped() -> StorageError {
    StorageError::unavailable("the engine stopped before committing the outcome")
}

/// Group commit: outcomes queue up while a transaction is in flight, and the next takes all of
/// them (up to the batch size). Nothing waits for a batch to fill.
async fn group_commit(shared: Arc<Shared>, mut pending: mpsc::UnboundedReceiver<PendingCommit>) {
    let in_flight = Arc::new(Semaphore::new(shared.settings.commit_concurrency));
    loop {
        let permit = tokio::select! {
            () = shared.stop_maintenance.cancelled() => return,
            permit = Arc::clone(&in_flight).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let first = tokio::select! {
            () = shared.stop_maintenance.cancelled() => return,
            first = pending.recv() => match first {
                Some(first) => first,
                None => return,
            },
        };
        let mut batch = vec![first];
        while batch.len() < shared.settings.commit_batch {
            match pending.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let shared_for_task = Arc::clone(&shared);
        shared.maintenance.spawn(async move {
            let (commits, replies): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|pending| (pending.commit, pending.reply))
                .unzip();
            let results = commit_batch(&shared_for_task, commits).await;
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
            drop(permit);
        });
    }
}

/// Commits `commits` in one transaction; if the transaction fails, commits each alone, so
/// that one bad outcome cannot fail its neighbours. Wakes pickers and waiters afterwards.
pub(crate) async fn commit_batch(
    shared: &Shared,
    commits: Vec<OutcomeCommit>,
) -> Vec<Result<Committed, StorageError>> {
    for commit in &commits {
        shared.know_children_queues(commit);
    }
    let started = Instant::now();
    let results = match shared.store.complete(&commits, shared.clock.now()).await {
        Ok(results) => {
            metrics::committed(commits.len(), true, started.elapsed());
            results.into_iter().map(Ok).collect()
        }
        Err(error) if commits.len() == 1 => {
            metrics::committed(1, false, started.elapsed());
            vec![Err(error)]
        }
        Err(error) => {
            metrics::committed(commits.len(), false, started.elapsed());
            tracing::warn!(%error, outcomes = commits.len(), "a group commit of FSM outcomes failed; committing them one by one");
            let mut results = Vec::with_capacity(commits.len());
            for commit in &commits {
                let started = Instant::now();
                let result = shared
                    .store
                    .complete(std::slice::from_ref(commit), shared.clock.now())
                    .await
                    .map(|mut results| results.pop().unwrap_or(Committed::Stale));
                metrics::committed(1, result.is_ok(), started.elapsed());
                results.push(result);
            }
            results
        }
    };
    shared.changed.notify_waiters();
    results
}

/// Extends the leases of the steps running here, every heartbeat interval.
async fn heartbeat(shared: Arc<Shared>) {
    let mut ticks = tokio::time::interval(shared.settings.heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shared.stop_maintenance.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let leases: Vec<Lease> = lock(&shared.in_flight)
            .iter()
            .map(|(id, token)| Lease {
                id: *id,
                token: *token,
            })
            .collect();
        if leases.is_empty() {
            continue;
        }
        let until = lease_end(&shared, shared.clock.now());
        if let Err(error) = shared.store.heartbeat(&leases, until).await {
            tracing::warn!(%error, leases = leases.len(), "extending the leases of running FSM steps failed");
        }
    }
}

/// Returns expired leases to runnable and fires await timeouts, every reaper interval.
async fn reaper(shared: Arc<Shared>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shared.stop_maintenance.cancelled() => return,
            _ = ticks.tick() => {}
        }
        match shared.store.reap(shared.clock.now()).await {
            Ok(swept) => {
                metrics::swept(swept.expired_leases, swept.await_timeouts);
                if swept.expired_leases + swept.await_timeouts > 0 {
                    tracing::info!(
                        expired_leases = swept.expired_leases,
                        await_timeouts = swept.await_timeouts,
                        "FSM reaper made instances runnable"
                    );
                    shared.changed.notify_waiters();
                }
            }
            Err(error) => tracing::warn!(%error, "the FSM reaper failed"),
        }
    }
}

/// Deletes ended rows past their retention, every GC interval; a full batch sweeps again at
/// once.
async fn gc(shared: Arc<Shared>) {
    let Some(settings) = shared.settings.gc else {
        return;
    };
    let mut ticks = tokio::time::interval(settings.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shared.stop_maintenance.cancelled() => return,
            _ = ticks.tick() => {}
        }
        while let Some(cutoff) = shared.clock.now().checked_sub(settings.retention) {
            match shared.store.gc(cutoff, settings.batch).await {
                Ok(deleted) => {
                    metrics::gc(deleted);
                    if deleted < settings.batch as u64 || shared.stop_maintenance.is_cancelled() {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "FSM garbage collection failed");
                    break;
                }
            }
        }
    }
}
