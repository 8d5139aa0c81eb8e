//! The per-object limits a write carries (key-value counters, alarm count), and which write
//! of a batch goes over one, from the usage a store reads back in the batch's transaction.

use durable_runtime::storage::{CommitError, KvUsage, ObjectKey, ObjectWrite};

use crate::net_alarms::NetAlarms;
use crate::net_kv::{NetKv, to_count};

/// The limits of one write of a batch.
#[derive(Debug)]
pub(crate) struct Limited<'a> {
    /// The write's position in the batch.
    pub(crate) index: usize,
    pub(crate) key: &'a ObjectKey,
    /// `(max_keys, max_bytes)` of its key-value storage.
    pub(crate) kv: Option<(u64, u64)>,
    /// The most alarms its object may have.
    pub(crate) alarms: Option<u64>,
}

impl<'a> Limited<'a> {
    /// The limits of the write at `index`, if it carries any.
    pub(crate) fn of(
        index: usize,
        write: &'a ObjectWrite,
        kv: &NetKv<'_>,
        alarms: &NetAlarms<'_>,
    ) -> Option<Self> {
        (kv.limit.is_some() || alarms.limit.is_some()).then_some(Self {
            index,
            key: &write.key,
            kv: kv.limit,
            alarms: alarms.limit,
        })
    }
}

/// An object's usage as a store reads it: key count and bytes (`None` without an object row),
/// and alarm count.
pub(crate) type Usage = (Option<i64>, Option<i64>, i64);

/// The first write, in batch order, whose object's usage (one row per element of `limited`,
/// in the same order) goes over one of its limits.
pub(crate) fn first_exceeded(limited: &[Limited<'_>], usage: &[Usage]) -> Option<CommitError> {
    limited
        .iter()
        .zip(usage)
        .filter_map(|(limited, &(keys, bytes, alarms))| exceeded(limited, keys, bytes, alarms))
        .min_by_key(|(index, _)| *index)
        .map(|(_, exceeded)| exceeded)
}

/// The limit of `limited` that its object's usage goes over, with the write's index.
fn exceeded(
    limited: &Limited<'_>,
    keys: Option<i64>,
    bytes: Option<i64>,
    alarms: i64,
) -> Option<(usize, CommitError)> {
    let usage = KvUsage {
        keys: to_count(keys.unwrap_or(0)),
        bytes: to_count(bytes.unwrap_or(0)),
    };
    let kv = limited
        .kv
        .and_then(|(max_keys, max_bytes)| usage.exceeds(max_keys, max_bytes))
        .map(|limit| CommitError::KvLimit {
            index: limited.index,
            key: limited.key.clone(),
            limit,
        });
    let found = to_count(alarms);
    let alarms = limited
        .alarms
        .filter(|&max| found > max)
        .map(|max| CommitError::AlarmLimit {
            index: limited.index,
            key: limited.key.clone(),
            max,
            found,
        });
    kv.or(alarms).map(|exceeded| (limited.index, exceeded))
}

#[cfg(test)]
mod tests {
    use durable_runtime::storage::{CommitError, KvLimitExceeded, ObjectKey};

    use super::{Limited, first_exceeded};

    #[test]
    fn the_first_write_in_batch_order_over_a_limit_is_named() {
        let (a, b) = (ObjectKey::new("T", "a"), ObjectKey::new("T", "b"));
        // Listed in lock order, not batch order.
        let limited = [
            Limited {
                index: 1,
                key: &a,
                kv: Some((2, 100)),
                alarms: None,
            },
            Limited {
                index: 0,
                key: &b,
                kv: None,
                alarms: Some(3),
            },
        ];
        let at_limits = [(Some(2), Some(100), 0), (None, None, 3)];
        assert!(first_exceeded(&limited, &at_limits).is_none());
        let both_over = [(Some(3), Some(100), 0), (None, None, 4)];
        assert!(matches!(
            first_exceeded(&limited, &both_over),
            Some(CommitError::AlarmLimit {
                index: 0,
                max: 3,
                found: 4,
                ..
            })
        ));
        let keys_over = [(Some(3), Some(100), 0), (None, None, 3)];
        assert!(matches!(
            first_exceeded(&limited, &keys_over),
            Some(CommitError::KvLimit {
                index: 1,
                limit: KvLimitExceeded::Keys { max: 2, found: 3 },
                ..
            })
        ));
    }
}
