//! A write's key-value changes reduced to their net effect.
//!
//! A call's changes apply in order. Reduced to what they finally do, they clear the object's
//! keys at most once (first) and touch each key at most once after, so a store applies the
//! changes of a whole batch with one statement per kind of change (clears, removals, new
//! values), each keeping the objects' counters.

use std::collections::BTreeMap;

use durable_runtime::storage::KvChange;

/// The net effect of one write's key-value changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct NetKv<'a> {
    /// Every key of the object is removed before the changes below.
    pub(crate) clear: bool,
    /// Each touched key's final value (`None`: removed), in key order.
    pub(crate) changes: BTreeMap<&'a str, Option<&'a [u8]>>,
    /// The limits to check once applied: `(max_keys, max_bytes)`. The runtime puts its limit
    /// last; a store checks the tightest limit a write carries against its final counters.
    pub(crate) limit: Option<(u64, u64)>,
}

impl<'a> NetKv<'a> {
    /// Reduces `changes`, applied in order, to their net effect.
    pub(crate) fn of(changes: &'a [KvChange]) -> Self {
        let mut net = Self::default();
        for change in changes {
            match change {
                KvChange::Put { key, value } => {
                    net.changes.insert(key, Some(value));
                }
                KvChange::Delete { key } => {
                    net.changes.insert(key, None);
                }
                KvChange::DeleteAll => {
                    net.clear = true;
                    net.changes.clear();
                }
                KvChange::Limit {
                    max_keys,
                    max_bytes,
                } => {
                    let (keys, bytes) = net.limit.unwrap_or((u64::MAX, u64::MAX));
                    net.limit = Some((keys.min(*max_keys), bytes.min(*max_bytes)));
                }
            }
        }
        net
    }
}

/// A stored key back as the string it was written from.
pub(crate) fn key_text(bytes: Vec<u8>) -> Result<String, durable_runtime::storage::StorageError> {
    String::from_utf8(bytes)
        .map_err(|_| crate::error::rejected("a stored key-value key is not UTF-8"))
}

/// A listing's limit as a SQL integer.
pub(crate) fn list_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A store's counters as integers of its database (never negative).
pub(crate) fn to_count(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The counters row of an object (`kv_keys`, `kv_bytes`) as usage; no row is an object with no
/// keys.
pub(crate) fn usage(row: Option<(i64, i64)>) -> durable_runtime::storage::KvUsage {
    row.map_or_else(Default::default, |(keys, bytes)| {
        durable_runtime::storage::KvUsage {
            keys: to_count(keys),
            bytes: to_count(bytes),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_change_of_a_key_wins_and_a_clear_voids_what_came_before() {
        let put = |key: &str, value: &[u8]| KvChange::Put {
            key: key.into(),
            value: value.to_vec(),
        };
        let changes = [
            put("a", b"1"),
            KvChange::DeleteAll,
            put("b", b"2"),
            KvChange::Delete { key: "b".into() },
            put("c", b"3"),
            KvChange::Limit {
                max_keys: 5,
                max_bytes: 9,
            },
        ];
        let net = NetKv::of(&changes);
        assert!(net.clear);
        assert_eq!(
            net.changes.into_iter().collect::<Vec<_>>(),
            [("b", None), ("c", Some(&b"3"[..]))]
        );
        assert_eq!(net.limit, Some((5, 9)));
    }
}
