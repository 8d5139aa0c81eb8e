//! Alarm changes made from outside an object (a schedule or cancel through the runtime, by
//! name or over HTTP), written without activating the object when it is not live.
//!
//! An object that is registered in this runtime (live, or dormant with its encoded state and
//! version) is the one writer of its row here: the change goes through it, ordered with its
//! calls. Otherwise the change is an alarms-only write (no state, version checked) of its own:
//! the version is read, then the write expects it (with the alarm limit checked by the store
//! in the same commit). The orders against an instance are then:
//!
//! - an instance of this or another runtime that loaded before the write expects the older
//!   version: its next write conflicts and it reloads (the call gets a retryable conflict), so
//!   neither write is lost;
//! - one that loads after it sees the alarm;
//! - a write of an instance that commits between the read and the write makes the direct write
//!   conflict: it reads the version again, and goes through the object if it is live by then.
//!
//! A claim this runtime holds on the alarm is revoked as an instance's change revokes it.

use crate::activation::scheduler::release_claims;
use crate::alarms::limit;
use crate::error::Error;
use crate::object::DurableObject;
use crate::object::handle::Runtime;
use crate::storage::{AlarmChange, AlarmRecord, CommitError, Loaded, ObjectKey, ObjectWrite};

/// How many times a direct write is tried when the object's version keeps moving.
const DIRECT_ATTEMPTS: usize = 8;

/// Where an outside change went.
pub(crate) enum Route {
    /// Written (or found to change nothing) without the object.
    Written,
    /// The object is registered here, or has no stored state to keep: through the object.
    ThroughObject,
}

/// Whether `change` changes anything among `alarms`: a cancel of nothing does not.
fn changes_anything(alarms: &[AlarmRecord], change: &AlarmChange) -> bool {
    match change {
        AlarmChange::Cancel { name } => alarms.iter().any(|alarm| alarm.name == *name),
        AlarmChange::CancelAll => !alarms.is_empty(),
        AlarmChange::Set { .. } | AlarmChange::Finish { .. } | AlarmChange::Limit { .. } => true,
    }
}

/// Writes `change` to the alarms of `(O, id)` directly if the object is not registered in
/// this runtime and has a stored state.
pub(crate) async fn write_directly<O: DurableObject>(
    runtime: &Runtime,
    id: &str,
    change: &AlarmChange,
) -> Result<Route, Error> {
    let key = ObjectKey::new(O::TYPE_NAME, id);
    let storage = runtime.storage();
    let failed = |source| Error::Storage {
        key: key.clone(),
        source,
    };
    for _ in 0..DIRECT_ATTEMPTS {
        if runtime
            .with_type_entry::<O, _>(|entry| entry.fetch_epoch(id))
            .is_none()
        {
            return Ok(Route::ThroughObject);
        }
        // The version first: a write after this read makes the commit conflict.
        let version = match storage.load(&key).await.map_err(failed)? {
            Loaded::Object(stored) => stored.version,
            // A set creates the object, with its default state: only the object writes that.
            Loaded::Absent | Loaded::Deleted { .. } => return Ok(Route::ThroughObject),
        };
        // A cancel of nothing writes nothing; a set always writes, checked by the store
        // against the limit.
        if !matches!(change, AlarmChange::Set { .. }) {
            let alarms = storage.list_alarms(&key).await.map_err(failed)?;
            if !changes_anything(&alarms, change) {
                return Ok(Route::Written);
            }
        }
        let mut changes = vec![change.clone()];
        let of_type = runtime.with_type_entry::<O, _>(|entry| entry.settings.max_alarms);
        limit::check_sets(&mut changes, limit::max_alarms(of_type, runtime));
        let claims = runtime.scheduler().claims();
        let revoking = claims.revoke(&key, &changes);
        let write = ObjectWrite {
            key: key.clone(),
            expected_version: version,
            state: None,
            alarms: changes,
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        };
        let outcome = runtime.committer().commit(write).await;
        if revoking > 0 {
            let unreleased = claims.settle(&key, Some(revoking), outcome.is_ok());
            release_claims(runtime, unreleased);
        }
        match outcome {
            Ok(write) => {
                runtime.alarms_committed(&write.alarms);
                return Ok(Route::Written);
            }
            Err(CommitError::Conflict { .. }) => continue,
            Err(CommitError::Storage(source)) => return Err(failed(source)),
            Err(
                error @ (CommitError::AlarmLimit { .. }
                | CommitError::KvLimit { .. }
                | CommitError::Fsm { .. }),
            ) => {
                return Err(crate::error::commit_error(&key, &error, false));
            }
        }
    }
    Err(Error::Conflict { key, found: None })
}
