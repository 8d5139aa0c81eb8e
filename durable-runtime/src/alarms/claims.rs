//! The alarm claims this runtime holds until they fire, and the alarm changes that revoke them.
//!
//! The scheduler claims alarms shortly before they are due and holds each claim until its
//! timer fires it. A call that schedules or cancels an alarm must keep an old claim from
//! firing, whichever comes first:
//!
//! - the claim is already held: the change removes it when it is staged, before the object's
//!   next call can run (so before the alarm's own call, which takes the claim in the same task);
//! - the claim is taken while the change's write is in flight, or by a claim query that read
//!   storage before that write committed: the change is remembered from the moment it is
//!   staged until no claim query can have read storage before its commit, and a claim that
//!   matches it is not held but released.
//!
//! Claim queries run one at a time (one scheduler per runtime) and are numbered; a settled
//! change records the number of the last query started before it committed, and only queries
//! up to that number can have missed it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use crate::storage::{AlarmChange, AlarmRecord, ObjectKey};

/// Which alarms of an object a change affects.
#[derive(Debug, PartialEq, Eq)]
enum Affected {
    /// The alarm of this name.
    Named(String),
    /// Every alarm of the object.
    All,
}

impl Affected {
    fn covers(&self, name: &str) -> bool {
        match self {
            Self::Named(affected) => affected == name,
            Self::All => true,
        }
    }
}

/// How long a change whose write never reports back is kept (a write is never in flight that
/// long; this only bounds what a lost outcome could hold back).
const UNSETTLED_LIMIT: Duration = Duration::from_secs(60);

/// A staged alarm change, until no claim query can have missed it.
#[derive(Debug)]
struct Change {
    affected: Affected,
    staged: Instant,
    /// `None` while its write is in flight; then the number of the last claim query that
    /// started before it committed.
    missed_by: Option<u64>,
}

#[derive(Debug, Default)]
struct Table {
    /// Held claims: object → (alarm name, claim time).
    held: HashMap<ObjectKey, Vec<(String, SystemTime)>>,
    /// Staged changes, in staging order per object.
    changes: HashMap<ObjectKey, Vec<Change>>,
    /// The number of the last claim query started.
    last_query: u64,
    /// Whether a claim query is running.
    querying: bool,
}

/// The claims held by one runtime's scheduler.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    table: Mutex<Table>,
}

/// A claim query in progress: see [`Claims::begin_query`].
#[derive(Debug)]
pub(crate) struct Query(u64);

/// What happened to a claim offered to [`Claims::hold`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Held until it fires.
    Held,
    /// A change staged meanwhile cancels or replaces it: release it in storage.
    Release,
}

impl Claims {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Numbers a claim query about to read storage.
    pub(crate) fn begin_query(&self) -> Query {
        let mut table = self.table();
        table.last_query += 1;
        table.querying = true;
        Query(table.last_query)
    }

    /// Offers a claim taken by `query`.
    pub(crate) fn hold(&self, query: &Query, alarm: &AlarmRecord) -> Hold {
        let Some(claimed_at) = alarm.claimed_at else {
            return Hold::Release;
        };
        let mut table = self.table();
        let missed = table.changes.get(&alarm.key).is_some_and(|changes| {
            changes.iter().any(|change| {
                change.affected.covers(&alarm.name)
                    && change.missed_by.is_none_or(|last| query.0 <= last)
            })
        });
        if missed {
            return Hold::Release;
        }
        Self::insert(&mut table, alarm, claimed_at);
        Hold::Held
    }

    /// Holds a claim taken outside the scheduler's queries (alarms fired by hand in tests).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn hold_unchecked(&self, alarm: &AlarmRecord) {
        if let Some(claimed_at) = alarm.claimed_at {
            Self::insert(&mut self.table(), alarm, claimed_at);
        }
    }

    fn insert(table: &mut Table, alarm: &AlarmRecord, claimed_at: SystemTime) {
        let names = table.held.entry(alarm.key.clone()).or_default();
        names.retain(|(name, _)| *name != alarm.name);
        names.push((alarm.name.clone(), claimed_at));
    }

    /// The query's claims are all offered: changes that only it could have missed are
    /// forgotten.
    pub(crate) fn end_query(&self, query: Query) {
        let mut table = self.table();
        table.querying = false;
        table.changes.retain(|_, changes| {
            changes.retain(|change| match change.missed_by {
                Some(last) => last > query.0,
                None => change.staged.elapsed() < UNSETTLED_LIMIT,
            });
            !changes.is_empty()
        });
    }

    /// Whether this claim is still held.
    pub(crate) fn is_held(&self, key: &ObjectKey, name: &str, claimed_at: SystemTime) -> bool {
        self.table().held.get(key).is_some_and(|names| {
            names
                .iter()
                .any(|held| held.0 == name && held.1 == claimed_at)
        })
    }

    /// Takes this claim to fire it. Returns `false` if it was revoked.
    pub(crate) fn take(&self, key: &ObjectKey, name: &str, claimed_at: SystemTime) -> bool {
        let mut table = self.table();
        let Some(names) = table.held.get_mut(key) else {
            return false;
        };
        let before = names.len();
        names.retain(|held| !(held.0 == name && held.1 == claimed_at));
        let taken = names.len() < before;
        if names.is_empty() {
            table.held.remove(key);
        }
        taken
    }

    /// A call of `key` staged these alarm changes: the claims they cancel or replace must not
    /// fire, now or when a claim query returns them. Returns how many changes are tracked
    /// until [`settle`](Self::settle).
    pub(crate) fn revoke(&self, key: &ObjectKey, changes: &[AlarmChange]) -> usize {
        let affected: Vec<Affected> = changes.iter().filter_map(affected).collect();
        if affected.is_empty() {
            return 0;
        }
        let count = affected.len();
        let mut table = self.table();
        if let Some(names) = table.held.get_mut(key) {
            names.retain(|(name, _)| !affected.iter().any(|a| a.covers(name)));
            if names.is_empty() {
                table.held.remove(key);
            }
        }
        table
            .changes
            .entry(key.clone())
            .or_default()
            .extend(affected.into_iter().map(|affected| Change {
                affected,
                staged: Instant::now(),
                missed_by: None,
            }));
        count
    }

    /// The write carrying the first `count` unsettled changes of `key` committed or failed
    /// (`None`: every unsettled change of `key`). A claim query started from now on sees its
    /// outcome in storage.
    pub(crate) fn settle(&self, key: &ObjectKey, count: Option<usize>) {
        let mut table = self.table();
        let (querying, last_query) = (table.querying, table.last_query);
        let Some(changes) = table.changes.get_mut(key) else {
            return;
        };
        let mut left = count.unwrap_or(usize::MAX);
        for change in changes.iter_mut().filter(|c| c.missed_by.is_none()) {
            if left == 0 {
                break;
            }
            change.missed_by = Some(last_query);
            left -= 1;
        }
        if !querying {
            // No query in flight can have missed them, and later ones will not.
            changes.retain(|change| change.missed_by.is_none());
            if changes.is_empty() {
                table.changes.remove(key);
            }
        }
    }

    /// The object was deleted with all its alarms: its claims must not fire.
    pub(crate) fn revoke_all(&self, key: &ObjectKey) {
        self.revoke(key, &[AlarmChange::CancelAll]);
    }
}

/// The alarms a change cancels or replaces.
fn affected(change: &AlarmChange) -> Option<Affected> {
    match change {
        AlarmChange::Set { name, .. } | AlarmChange::Cancel { name } => {
            Some(Affected::Named(name.clone()))
        }
        AlarmChange::CancelAll => Some(Affected::All),
        AlarmChange::Finish { .. } => None,
    }
}

/// How many of `changes` revoke claims (what [`Claims::revoke`] tracks).
pub(crate) fn revoking(changes: &[AlarmChange]) -> usize {
    changes.iter().filter(|c| affected(c).is_some()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alarm(id: &str, name: &str, claimed_at: u64) -> AlarmRecord {
        AlarmRecord {
            key: ObjectKey::new("T", id),
            name: name.to_owned(),
            due_at: SystemTime::UNIX_EPOCH,
            attempts: 0,
            claimed_at: Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(claimed_at)),
            last_error: None,
            dead: false,
        }
    }

    fn cancel(name: &str) -> AlarmChange {
        AlarmChange::Cancel {
            name: name.to_owned(),
        }
    }

    #[test]
    fn a_change_staged_before_the_claim_returns_releases_it() {
        let claims = Claims::default();
        let a = alarm("a", "x", 1);
        let query = claims.begin_query();
        assert_eq!(claims.revoke(&a.key, &[cancel("x")]), 1);
        assert_eq!(claims.hold(&query, &a), Hold::Release, "in flight");
        claims.settle(&a.key, Some(1));
        assert_eq!(
            claims.hold(&query, &a),
            Hold::Release,
            "committed after the query read"
        );
        claims.end_query(query);
        let next = claims.begin_query();
        assert_eq!(
            claims.hold(&next, &a),
            Hold::Held,
            "a later query saw the commit"
        );
        claims.end_query(next);
    }

    #[test]
    fn a_change_staged_after_the_claim_is_held_revokes_it() {
        let claims = Claims::default();
        let a = alarm("a", "x", 1);
        let query = claims.begin_query();
        assert_eq!(claims.hold(&query, &a), Hold::Held);
        claims.end_query(query);
        let at = a.claimed_at.unwrap();
        assert!(claims.is_held(&a.key, "x", at));
        claims.revoke(&a.key, &[AlarmChange::CancelAll]);
        assert!(!claims.take(&a.key, "x", at));
    }

    #[test]
    fn other_names_and_objects_are_unaffected() {
        let claims = Claims::default();
        let query = claims.begin_query();
        claims.revoke(&ObjectKey::new("T", "a"), &[cancel("x")]);
        assert_eq!(claims.hold(&query, &alarm("a", "y", 1)), Hold::Held);
        assert_eq!(claims.hold(&query, &alarm("b", "x", 1)), Hold::Held);
        claims.end_query(query);
    }

    #[test]
    fn settled_changes_are_forgotten() {
        let claims = Claims::default();
        let key = ObjectKey::new("T", "a");
        claims.revoke(&key, &[cancel("x"), cancel("y")]);
        claims.revoke(&key, &[cancel("z")]);
        claims.settle(&key, Some(2));
        // The second write is still in flight.
        let query = claims.begin_query();
        assert_eq!(claims.hold(&query, &alarm("a", "x", 1)), Hold::Held);
        assert_eq!(claims.hold(&query, &alarm("a", "z", 1)), Hold::Release);
        claims.settle(&key, None);
        claims.end_query(query);
        assert!(claims.table().changes.is_empty());
    }
}
