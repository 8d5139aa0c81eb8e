//! Alarm changes made from outside an object (a schedule or cancel through the runtime, by
//! name or over HTTP), written without activating the object when it is not live.
//!
//! An object that is registered in this runtime (live, or dormant with its encoded state and
//! version) is the one writer of its row here: the change goes through it, ordered with its
//! calls. Otherwise the change is an alarms-only write (no state, version checked) of its own:
//! the version is read, then the write expects it. The orders against an instance are then:
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

/// Refuses a set that would give the object more than `limit` alarms (a name it already has
/// is replaced, not added).
pub(crate) fn check_limit(
    key: &ObjectKey,
    alarms: &[AlarmRecord],
    change: &AlarmChange,
    limit: usize,
) -> Result<(), Error> {
    if let AlarmChange::Set { name, .. } = change
        && alarms.len() >= limit
        && !alarms.iter().any(|alarm| alarm.name == *name)
    {
        return Err(Error::TooManyAlarms {
            key: key.clone(),
            limit,
        });
    }
    Ok(())
}

/// Whether `change` changes anything among `alarms`: a cancel of nothing does not.
fn changes_anything(alarms: &[AlarmRecord], change: &AlarmChange) -> bool {
    match change {
        AlarmChange::Cancel { name } => alarms.iter().any(|alarm| alarm.name == *name),
        AlarmChange::CancelAll => !alarms.is_empty(),
        AlarmChange::Set { .. } | AlarmChange::Finish { .. } => true,
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
        let alarms = storage.list_alarms(&key).await.map_err(failed)?;
        check_limit(
            &key,
            &alarms,
            change,
            runtime.alarm_settings().max_alarms_per_object,
        )?;
        if !changes_anything(&alarms, change) {
            return Ok(Route::Written);
        }
        let changes = vec![change.clone()];
        let claims = runtime.scheduler().claims();
        let revoking = claims.revoke(&key, &changes);
        let write = ObjectWrite {
            key: key.clone(),
            expected_version: version,
            state: None,
            alarms: changes,
            kv: Vec::new(),
            idempotency: None,
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
            // Not expected of a write without key-value changes; mapped like any commit error.
            Err(error @ CommitError::KvLimit { .. }) => {
                return Err(crate::error::commit_error(&key, &error, false));
            }
        }
    }
    Err(Error::Conflict { key, found: None })
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::check_limit;
    use crate::error::Error;
    use crate::storage::{AlarmChange, AlarmRecord, ObjectKey};

    fn alarm(name: &str) -> AlarmRecord {
        AlarmRecord {
            key: ObjectKey::new("T", "a"),
            name: name.into(),
            due_at: UNIX_EPOCH,
            attempts: 0,
            claimed_at: None,
            last_error: None,
            dead: false,
            payload: None,
        }
    }

    #[test]
    fn the_limit_counts_new_names_only() {
        let key = ObjectKey::new("T", "a");
        let set = |name: &str| AlarmChange::Set {
            name: name.into(),
            due_at: UNIX_EPOCH,
            payload: None,
        };
        let two = [alarm("x"), alarm("y")];
        assert!(check_limit(&key, &two[..1], &set("y"), 2).is_ok());
        assert!(check_limit(&key, &two, &set("y"), 2).is_ok());
        assert!(matches!(
            check_limit(&key, &two, &set("z"), 2),
            Err(Error::TooManyAlarms { limit: 2, .. })
        ));
        let cancel = AlarmChange::Cancel { name: "z".into() };
        assert!(check_limit(&key, &two, &cancel, 2).is_ok());
    }
}
