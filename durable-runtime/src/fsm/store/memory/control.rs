//! The scheduling controls in memory: the rate-limit gate of a pick, and cancel.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{CancelOutcome, Inner, RateLimitRecord, Status, Target, TokenBucket};
use crate::fsm::status::InstanceId;
use crate::storage::StorageError;

/// This store's "database clock": the process's, in microseconds since the epoch.
pub(super) fn database_clock() -> Result<i64, StorageError> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|since| i64::try_from(since.as_micros()).ok())
        .ok_or_else(|| StorageError::rejected("the clock is out of range"))
}

pub(super) fn rate_limit_record(
    key: &str,
    bucket: &TokenBucket,
) -> Result<RateLimitRecord, StorageError> {
    let refilled_at = u64::try_from(bucket.refilled_at)
        .ok()
        .and_then(|micros| UNIX_EPOCH.checked_add(Duration::from_micros(micros)))
        .ok_or_else(|| StorageError::rejected("a bucket's refill time is out of range"))?;
    Ok(RateLimitRecord {
        key: key.to_owned(),
        limit: bucket.limit,
        tokens: bucket.tokens,
        refilled_at,
    })
}

impl Inner {
    /// Whether the runnable row `id` may be claimed now as far as its rate limit goes: if its
    /// key's bucket (refilled to `clock`) holds its units they are taken; if not, the row is
    /// left runnable and eligible again when the bucket will have earned them.
    pub(super) fn rate_gate(&mut self, id: i64, clock: i64, now: SystemTime) -> bool {
        let Some(row) = self.rows.get(&id) else {
            return false;
        };
        let Some(key) = row.record.rate_limit_key.clone() else {
            return true;
        };
        let units = row.record.rate_limit_units;
        let Some(bucket) = self.buckets.get_mut(&key) else {
            return true;
        };
        bucket.refill(clock);
        if bucket.take(units) {
            return true;
        }
        let wait = bucket.wait_for(units).max(Duration::from_millis(1));
        if let Some(row) = self.rows.get_mut(&id) {
            row.record.eligible_at = crate::storage::truncate_to_micros(now + wait);
        }
        false
    }

    /// Cancels `target` and its live descendants; releases its parent like a failed child.
    pub(super) fn cancel(
        &mut self,
        target: &Target,
        reason: &str,
        now: SystemTime,
    ) -> CancelOutcome {
        let id = match target {
            Target::Id(id) => id.get(),
            Target::Key(key) => match self.occupant(key, None) {
                Some(id) => id,
                None => return CancelOutcome::NotFound,
            },
        };
        let Some(row) = self.rows.get(&id) else {
            return CancelOutcome::NotFound;
        };
        if row.record.status.is_terminal() {
            return CancelOutcome::Ended {
                id: InstanceId::new(id),
                status: row.record.status,
            };
        }
        let parent = row.record.parent_id;
        let mut tree = vec![id];
        let mut next = 0;
        while next < tree.len() {
            let of = InstanceId::new(tree[next]);
            tree.extend(
                self.rows
                    .values()
                    .filter(|row| row.record.parent_id == Some(of))
                    .map(|row| row.record.id.get()),
            );
            next += 1;
        }
        let mut cancelled = 0;
        for member in tree {
            let Some(row) = self.rows.get_mut(&member) else {
                continue;
            };
            if row.record.status.is_terminal() {
                continue;
            }
            // A new token as well as the status: the claim of an executing step is gone.
            row.token += 1;
            let record = &mut row.record;
            record.status = Status::Failed;
            record.last_error = Some(reason.to_owned());
            record.awaits = None;
            record.locked_by = None;
            record.lease_expires_at = None;
            record.await_deadline = None;
            record.concurrency_slot = None;
            record.children_pending = 0;
            record.updated_at = now;
            self.delete_signals(member, None);
            cancelled += 1;
        }
        if let Some(parent) = parent
            && let Some(parent) = self.rows.get_mut(&parent.get())
        {
            let parent = &mut parent.record;
            parent.children_pending -= 1;
            if parent.children_pending <= 0 && parent.status == Status::AwaitingChildren {
                parent.status = Status::Runnable;
                parent.eligible_at = now;
            }
            parent.updated_at = now;
        }
        CancelOutcome::Cancelled {
            id: InstanceId::new(id),
            instances: cancelled,
        }
    }
}
