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
//!
//! A claim revoked by a change stays this runtime's in storage until the change's write
//! settles: if the write commits, it cleared the claim; if it fails, the claim is handed back
//! to be released, so that the alarm, unchanged, fires at its time.
//!
//! Every claim this runtime owns in storage — held, firing, or revoked by a write in flight —
//! has a lease, which the scheduler renews (see [`Claims::due_for_renewal`]) until the claim is
//! let go.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;

use crate::storage::{AlarmChange, AlarmClaim, AlarmRecord, ObjectKey};

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
    /// The held claims (name, claim time) it revoked, released if its write fails.
    revoked: Vec<(String, SystemTime)>,
}

/// Hashed with foldhash, seeded per map, as the registry's maps: every firing looks its claim
/// up and removes it in two of these maps, and under a burst of due alarms SipHash's cost shows.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// A claim this runtime owns in storage.
#[derive(Debug)]
struct Owned {
    /// The alarm's name.
    name: String,
    /// When it was claimed: storage knows the claim by it.
    claimed_at: SystemTime,
    /// The end of its lease.
    lease: SystemTime,
    /// Held until its timer fires it; `false` once taken to fire or revoked by a change whose
    /// write is in flight.
    held: bool,
}

impl Owned {
    fn is(&self, name: &str, claimed_at: SystemTime) -> bool {
        self.name == name && self.claimed_at == claimed_at
    }
}

/// Claims are kept by object, so that a firing finds its own from the key and the name it
/// already has, without building a key of its own: under a burst of due alarms every firing
/// holds, takes and lets go of one.
#[derive(Debug, Default)]
struct Table {
    /// Every claim this runtime owns in storage, by object: held, firing, or revoked by a
    /// write in flight.
    owned: Map<ObjectKey, Vec<Owned>>,
    /// How many claims `owned` holds.
    count: usize,
    /// Staged changes, in staging order per object.
    changes: Map<ObjectKey, Vec<Change>>,
    /// The number of the last claim query started.
    last_query: u64,
    /// Whether a claim query is running.
    querying: bool,
    /// While the scheduler waits for room ([`Claims::room_below`]): the number of owned claims
    /// it waits to get below. Zero when it does not wait.
    room_below: usize,
}

impl Table {
    /// This runtime no longer owns the claim of `name` of `key` made at `claimed_at`. Returns
    /// whether the scheduler waiting for room should be woken.
    fn drop_lease(&mut self, key: &ObjectKey, name: &str, claimed_at: SystemTime) -> bool {
        self.forget(key, |claim| claim.is(name, claimed_at))
    }

    /// This runtime no longer owns the claims of `key` that `gone` picks. Returns whether the
    /// scheduler waiting for room should be woken.
    fn forget(&mut self, key: &ObjectKey, gone: impl Fn(&Owned) -> bool) -> bool {
        let Some(owned) = self.owned.get_mut(key) else {
            return false;
        };
        let before = owned.len();
        owned.retain(|claim| !gone(claim));
        let dropped = before - owned.len();
        if owned.is_empty() {
            self.owned.remove(key);
        }
        self.count -= dropped;
        if dropped == 0 || self.count >= self.room_below {
            return false;
        }
        self.room_below = 0;
        true
    }
}

/// The claims held by one runtime's scheduler.
#[derive(Debug, Default)]
pub(crate) struct Claims {
    table: Mutex<Table>,
    /// Signalled when this runtime comes to own a claim while it owned none.
    first_lease: Notify,
    /// Signalled when the claims owned get below the number the scheduler waits for.
    room: Notify,
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

    /// Offers a claim taken by `query`, leased until `lease_until`.
    pub(crate) fn hold(&self, query: &Query, alarm: &AlarmRecord, lease_until: SystemTime) -> Hold {
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
        self.insert(&mut table, alarm, claimed_at, lease_until);
        Hold::Held
    }

    /// Holds a claim taken outside the scheduler's queries (alarms fired by hand in tests).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn hold_unchecked(&self, alarm: &AlarmRecord, lease_until: SystemTime) {
        if let Some(claimed_at) = alarm.claimed_at {
            self.insert(&mut self.table(), alarm, claimed_at, lease_until);
        }
    }

    fn insert(
        &self,
        table: &mut Table,
        alarm: &AlarmRecord,
        claimed_at: SystemTime,
        lease: SystemTime,
    ) {
        if table.count == 0 {
            self.first_lease.notify_one();
        }
        // A claim of the same alarm held before (its lease lapsed and it was claimed again) is
        // gone from storage: its lease is no longer this runtime's to renew.
        let replaced = |claim: &Owned| {
            claim.held && claim.name == alarm.name && claim.claimed_at != claimed_at
        };
        if table.forget(&alarm.key, replaced) {
            self.room.notify_waiters();
        }
        // Looked up first, so that the key is copied only for an object that owns no claim
        // yet (an entry would copy it for every claim).
        if !table.owned.contains_key(&alarm.key) {
            table.owned.insert(alarm.key.clone(), Vec::new());
        }
        let Some(owned) = table.owned.get_mut(&alarm.key) else {
            return;
        };
        match owned
            .iter_mut()
            .find(|claim| claim.is(&alarm.name, claimed_at))
        {
            Some(again) => {
                again.lease = lease;
                again.held = true;
            }
            None => {
                owned.push(Owned {
                    name: alarm.name.clone(),
                    claimed_at,
                    lease,
                    held: true,
                });
                table.count += 1;
            }
        }
    }

    /// The query's claims are all offered: changes that only it could have missed are
    /// forgotten.
    pub(crate) fn end_query(&self, query: Query) {
        let mut table = self.table();
        table.querying = false;
        let mut lapsed = Vec::new();
        table.changes.retain(|key, changes| {
            changes.retain_mut(|change| {
                let keep = match change.missed_by {
                    Some(last) => last > query.0,
                    None => change.staged.elapsed() < UNSETTLED_LIMIT,
                };
                if !keep && !change.revoked.is_empty() {
                    // Its outcome is lost: what it revoked lapses with its lease.
                    lapsed.push((key.clone(), std::mem::take(&mut change.revoked)));
                }
                keep
            });
            !changes.is_empty()
        });
        for (key, revoked) in lapsed {
            // The scheduler runs the queries: it does not wait for room meanwhile.
            table.forget(&key, |claim| {
                revoked.iter().any(|(name, at)| claim.is(name, *at))
            });
        }
    }

    /// Whether this claim is still held.
    pub(crate) fn is_held(&self, key: &ObjectKey, name: &str, claimed_at: SystemTime) -> bool {
        self.table().owned.get(key).is_some_and(|owned| {
            owned
                .iter()
                .any(|claim| claim.held && claim.is(name, claimed_at))
        })
    }

    /// Takes this claim to fire it. Returns `false` if it was revoked. Its lease is renewed
    /// until [`let_go`](Self::let_go).
    pub(crate) fn take(&self, key: &ObjectKey, name: &str, claimed_at: SystemTime) -> bool {
        let mut table = self.table();
        let Some(claim) = table.owned.get_mut(key).and_then(|owned| {
            owned
                .iter_mut()
                .find(|claim| claim.held && claim.is(name, claimed_at))
        }) else {
            return false;
        };
        claim.held = false;
        true
    }

    /// This runtime is done with this claim (its outcome is recorded, or it was released):
    /// its lease is no longer renewed.
    pub(crate) fn let_go(&self, key: &ObjectKey, name: &str, claimed_at: SystemTime) {
        if self.table().drop_lease(key, name, claimed_at) {
            self.room.notify_waiters();
        }
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
        let mut revoked = Vec::new();
        // Still owned in storage until the change's write settles.
        for claim in table.owned.get_mut(key).into_iter().flatten() {
            if claim.held && affected.iter().any(|a| a.covers(&claim.name)) {
                claim.held = false;
                revoked.push((claim.name.clone(), claim.claimed_at));
            }
        }
        let changes = table.changes.entry(key.clone()).or_default();
        changes.extend(affected.into_iter().map(|affected| Change {
            affected,
            staged: Instant::now(),
            missed_by: None,
            revoked: Vec::new(),
        }));
        // The changes travel in one write: the last one answers for what they revoked.
        if let Some(last) = changes.last_mut() {
            last.revoked = revoked;
        }
        count
    }

    /// The write carrying the first `count` unsettled changes of `key` committed or failed
    /// (`None`: every unsettled change of `key`). A claim query started from now on sees its
    /// outcome in storage. Returns the claims those changes revoked if the write failed
    /// (`committed` false): still this runtime's in storage, they are to be released.
    pub(crate) fn settle(
        &self,
        key: &ObjectKey,
        count: Option<usize>,
        committed: bool,
    ) -> Vec<AlarmClaim> {
        let mut table = self.table();
        let (querying, last_query) = (table.querying, table.last_query);
        let Some(changes) = table.changes.get_mut(key) else {
            return Vec::new();
        };
        let mut revoked = Vec::new();
        let mut left = count.unwrap_or(usize::MAX);
        for change in changes.iter_mut().filter(|c| c.missed_by.is_none()) {
            if left == 0 {
                break;
            }
            change.missed_by = Some(last_query);
            revoked.append(&mut change.revoked);
            left -= 1;
        }
        if !querying {
            // No query in flight can have missed them, and later ones will not.
            changes.retain(|change| change.missed_by.is_none());
            if changes.is_empty() {
                table.changes.remove(key);
            }
        }
        let mut room = false;
        for (name, claimed_at) in &revoked {
            room |= table.drop_lease(key, name, *claimed_at);
        }
        drop(table);
        if room {
            self.room.notify_waiters();
        }
        if committed {
            return Vec::new();
        }
        revoked
            .into_iter()
            .map(|(name, claimed_at)| claim_of(key, &name, claimed_at))
            .collect()
    }

    /// The object is being deleted with all its alarms: its claims must not fire.
    pub(crate) fn revoke_all(&self, key: &ObjectKey) {
        self.revoke(key, &[AlarmChange::CancelAll]);
    }

    /// The claims whose lease ends before `before`, to renew.
    pub(crate) fn due_for_renewal(&self, before: SystemTime) -> Vec<AlarmClaim> {
        let table = self.table();
        let mut due = Vec::new();
        for (key, owned) in &table.owned {
            for claim in owned.iter().filter(|claim| claim.lease < before) {
                due.push(claim_of(key, &claim.name, claim.claimed_at));
            }
        }
        due
    }

    /// These claims' leases were extended to `lease_until` (those still owned).
    pub(crate) fn renewed(&self, claims: &[AlarmClaim], lease_until: SystemTime) {
        let mut table = self.table();
        for renewed in claims {
            let owned = table.owned.get_mut(&renewed.key).into_iter().flatten();
            for claim in owned.filter(|claim| claim.is(&renewed.name, renewed.claimed_at)) {
                claim.lease = lease_until;
            }
        }
    }

    /// Waits until this runtime may own a claim (see [`owns_any`](Self::owns_any)).
    pub(crate) async fn claimed(&self) {
        self.first_lease.notified().await;
    }

    /// Whether this runtime owns any claim in storage.
    pub(crate) fn owns_any(&self) -> bool {
        self.table().count > 0
    }

    /// How many claims this runtime owns in storage: held, firing, or revoked by a write in
    /// flight.
    pub(crate) fn owned(&self) -> usize {
        self.table().count
    }

    /// Waits until this runtime owns fewer than `max` claims.
    pub(crate) async fn room_below(&self, max: usize) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut table = self.table();
                if table.count < max {
                    return;
                }
                table.room_below = max;
            }
            room.await;
        }
    }
}

/// The claim of alarm `name` of `key` made at `claimed_at`.
fn claim_of(key: &ObjectKey, name: &str, claimed_at: SystemTime) -> AlarmClaim {
    AlarmClaim {
        key: key.clone(),
        name: name.to_owned(),
        claimed_at,
    }
}

/// The alarms a change cancels or replaces.
fn affected(change: &AlarmChange) -> Option<Affected> {
    match change {
        AlarmChange::Set { name, .. } | AlarmChange::Cancel { name } => {
            Some(Affected::Named(name.clone()))
        }
        AlarmChange::CancelAll => Some(Affected::All),
        AlarmChange::Finish { .. } | AlarmChange::Limit { .. } => None,
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
            payload: None,
        }
    }

    const LEASE: SystemTime = SystemTime::UNIX_EPOCH;

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
        assert_eq!(claims.hold(&query, &a, LEASE), Hold::Release, "in flight");
        claims.settle(&a.key, Some(1), true);
        assert_eq!(
            claims.hold(&query, &a, LEASE),
            Hold::Release,
            "committed after the query read"
        );
        claims.end_query(query);
        let next = claims.begin_query();
        assert_eq!(
            claims.hold(&next, &a, LEASE),
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
        assert_eq!(claims.hold(&query, &a, LEASE), Hold::Held);
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
        assert_eq!(claims.hold(&query, &alarm("a", "y", 1), LEASE), Hold::Held);
        assert_eq!(claims.hold(&query, &alarm("b", "x", 1), LEASE), Hold::Held);
        claims.end_query(query);
    }

    #[test]
    fn settled_changes_are_forgotten() {
        let claims = Claims::default();
        let key = ObjectKey::new("T", "a");
        claims.revoke(&key, &[cancel("x"), cancel("y")]);
        claims.revoke(&key, &[cancel("z")]);
        claims.settle(&key, Some(2), true);
        // The second write is still in flight.
        let query = claims.begin_query();
        assert_eq!(claims.hold(&query, &alarm("a", "x", 1), LEASE), Hold::Held);
        assert_eq!(
            claims.hold(&query, &alarm("a", "z", 1), LEASE),
            Hold::Release
        );
        claims.settle(&key, None, true);
        claims.end_query(query);
        assert!(claims.table().changes.is_empty());
    }

    #[test]
    fn a_failed_write_hands_back_the_claims_it_revoked() {
        let claims = Claims::default();
        let a = alarm("a", "x", 1);
        let query = claims.begin_query();
        assert_eq!(claims.hold(&query, &a, LEASE), Hold::Held);
        claims.end_query(query);
        claims.revoke(&a.key, &[cancel("x")]);
        assert!(!claims.is_held(&a.key, "x", a.claimed_at.unwrap()));
        assert!(
            claims.owns_any(),
            "still claimed in storage while the write is in flight"
        );
        let back = claims.settle(&a.key, None, false);
        assert_eq!(back, [claim_of(&a.key, "x", a.claimed_at.unwrap())]);
        assert!(!claims.owns_any());
        // A write that commits cleared the claim in storage: nothing to release.
        let query = claims.begin_query();
        claims.hold(&query, &a, LEASE);
        claims.end_query(query);
        claims.revoke(&a.key, &[cancel("x")]);
        assert!(claims.settle(&a.key, Some(1), true).is_empty());
        assert!(!claims.owns_any());
    }

    #[test]
    fn a_claim_is_owned_until_let_go_and_a_new_claim_of_its_alarm_replaces_it() {
        let claims = Claims::default();
        let first = alarm("a", "x", 1);
        let query = claims.begin_query();
        assert_eq!(claims.hold(&query, &first, LEASE), Hold::Held);
        assert_eq!(claims.hold(&query, &alarm("a", "y", 1), LEASE), Hold::Held);
        claims.end_query(query);
        assert_eq!(claims.owned(), 2);
        // Its lease lapsed and another query claimed it again: the old claim is gone from
        // storage, and no longer this runtime's.
        let again = alarm("a", "x", 2);
        let query = claims.begin_query();
        assert_eq!(claims.hold(&query, &again, LEASE), Hold::Held);
        claims.end_query(query);
        assert_eq!(claims.owned(), 2);
        assert!(!claims.is_held(&first.key, "x", first.claimed_at.unwrap()));
        let at = again.claimed_at.unwrap();
        assert!(claims.take(&again.key, "x", at));
        assert!(!claims.take(&again.key, "x", at), "taken once");
        assert_eq!(claims.owned(), 2, "a claim firing is still owned");
        claims.let_go(&again.key, "x", at);
        assert_eq!(claims.owned(), 1);
        claims.let_go(&again.key, "x", at);
        assert_eq!(claims.owned(), 1, "let go once");
    }

    #[test]
    fn only_leases_ending_before_the_horizon_are_renewed() {
        let claims = Claims::default();
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        let (soon, later) = (alarm("a", "x", 1), alarm("b", "x", 1));
        let query = claims.begin_query();
        claims.hold(&query, &soon, at(10));
        claims.hold(&query, &later, at(100));
        claims.end_query(query);
        let due = claims.due_for_renewal(at(50));
        assert_eq!(due, [claim_of(&soon.key, "x", soon.claimed_at.unwrap())]);
        claims.renewed(&due, at(200));
        let due = claims.due_for_renewal(at(150));
        assert_eq!(due, [claim_of(&later.key, "x", later.claimed_at.unwrap())]);
    }

    #[tokio::test]
    async fn letting_a_claim_go_makes_room_for_the_scheduler() {
        let claims = std::sync::Arc::new(Claims::default());
        let a = alarm("a", "x", 1);
        let query = claims.begin_query();
        claims.hold(&query, &a, LEASE);
        claims.hold(&query, &alarm("b", "x", 1), LEASE);
        claims.end_query(query);
        let waiting = tokio::spawn({
            let claims = std::sync::Arc::clone(&claims);
            async move { claims.room_below(2).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "two owned, room below two");
        claims.take(&a.key, "x", a.claimed_at.unwrap());
        claims.let_go(&a.key, "x", a.claimed_at.unwrap());
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the scheduler waiting for room is woken")
            .unwrap();
    }
}
