//! A write's alarm changes reduced to their net effect.
//!
//! A call's alarm changes apply in order (`Set` then `Cancel` of one name cancels it). Reduced
//! to what they finally do, they touch each name at most once, so a batch can apply all of them
//! with one statement per kind of change, in a fixed order: every `CancelAll` first, then the
//! per-name changes, whose order no longer matters.

use std::time::SystemTime;

use durable_runtime::storage::AlarmChange;

/// The net effect of one write's alarm changes.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct NetAlarms<'a> {
    /// Every alarm of the object is removed before the changes below.
    pub(crate) cancel_all: bool,
    /// Alarms scheduled (upserted, claim cleared), with their due time and payload.
    pub(crate) sets: Vec<(&'a str, SystemTime, Option<&'a [u8]>)>,
    /// Alarms cancelled.
    pub(crate) cancels: Vec<&'a str>,
    /// Fired alarms removed if still claimed at that time.
    pub(crate) finishes: Vec<(&'a str, SystemTime)>,
    /// The most alarms the object may have once the changes are applied: the tightest
    /// [`AlarmChange::Limit`] of the write (the runtime puts it last).
    pub(crate) limit: Option<u64>,
}

impl<'a> NetAlarms<'a> {
    /// Reduces `changes`, applied in order, to their net effect.
    ///
    /// Changes before the last `CancelAll` are void. After it, the last `Set` or `Cancel` of a
    /// name decides it: a `Finish` before it is overridden, and one after it finds no claim (a
    /// `Set` clears it, a `Cancel` removes the row). A name with only `Finish`es keeps them all.
    pub(crate) fn of(changes: &'a [AlarmChange]) -> Self {
        let start = changes
            .iter()
            .rposition(|change| matches!(change, AlarmChange::CancelAll))
            .map_or(0, |last| last + 1);
        let tail = &changes[start..];
        let mut net = NetAlarms {
            cancel_all: start > 0,
            limit: changes
                .iter()
                .filter_map(|change| match change {
                    AlarmChange::Limit { max } => Some(*max),
                    _ => None,
                })
                .min(),
            ..NetAlarms::default()
        };
        let decided_in = |changes: &[AlarmChange], name: &str| {
            changes.iter().any(|change| decides(change, name))
        };
        for (position, change) in tail.iter().enumerate() {
            let later = &tail[position + 1..];
            match change {
                AlarmChange::Set {
                    name,
                    due_at,
                    payload,
                } if !decided_in(later, name) => {
                    net.sets.push((name, *due_at, payload.as_deref()));
                }
                AlarmChange::Cancel { name } if !decided_in(later, name) => net.cancels.push(name),
                AlarmChange::Finish { name, claimed_at } if !decided_in(tail, name) => {
                    net.finishes.push((name, *claimed_at));
                }
                _ => {}
            }
        }
        net
    }
}

/// Whether `change` sets or cancels the alarm `name`.
fn decides(change: &AlarmChange, name: &str) -> bool {
    match change {
        AlarmChange::Set { name: n, .. } | AlarmChange::Cancel { name: n } => n == name,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn set(name: &str, secs: u64) -> AlarmChange {
        AlarmChange::Set {
            name: name.into(),
            due_at: at(secs),
            payload: None,
        }
    }

    fn cancel(name: &str) -> AlarmChange {
        AlarmChange::Cancel { name: name.into() }
    }

    fn finish(name: &str, secs: u64) -> AlarmChange {
        AlarmChange::Finish {
            name: name.into(),
            claimed_at: at(secs),
        }
    }

    #[test]
    fn the_last_set_or_cancel_of_a_name_decides_it() {
        let changes = [
            set("x", 1),
            cancel("x"),
            set("w", 4),
            set("z", 1),
            set("z", 3),
        ];
        let net = NetAlarms::of(&changes);
        assert_eq!(net.sets, [("w", at(4), None), ("z", at(3), None)]);
        assert_eq!(net.cancels, ["x"]);
        let changes = [cancel("x"), set("x", 2)];
        let net = NetAlarms::of(&changes);
        assert_eq!(net.sets, [("x", at(2), None)]);
        assert!(net.cancels.is_empty());
    }

    #[test]
    fn changes_before_the_last_cancel_all_are_void() {
        let changes = [
            set("a", 1),
            AlarmChange::CancelAll,
            set("b", 2),
            AlarmChange::CancelAll,
            set("c", 3),
        ];
        let net = NetAlarms::of(&changes);
        assert!(net.cancel_all);
        assert_eq!(net.sets, [("c", at(3), None)]);
        assert!(!NetAlarms::of(&[set("c", 3)]).cancel_all);
    }

    #[test]
    fn the_tightest_limit_holds_whatever_comes_before_it() {
        let limit = |max| AlarmChange::Limit { max };
        let changes = [limit(5), set("a", 1), AlarmChange::CancelAll, limit(3)];
        let net = NetAlarms::of(&changes);
        assert_eq!(net.limit, Some(3));
        assert_eq!(NetAlarms::of(&[set("a", 1)]).limit, None);
    }

    #[test]
    fn a_finish_is_kept_only_when_nothing_else_decides_its_name() {
        // A handler that reschedules its own alarm: the new schedule wins.
        let changes = [finish("tick", 9), set("tick", 20)];
        let net = NetAlarms::of(&changes);
        assert_eq!(net.sets, [("tick", at(20), None)]);
        assert!(net.finishes.is_empty());
        // A finish after a set finds no claim.
        assert!(
            NetAlarms::of(&[set("t", 1), finish("t", 9)])
                .finishes
                .is_empty()
        );
        assert!(
            NetAlarms::of(&[cancel("t"), finish("t", 9)])
                .finishes
                .is_empty()
        );
        let changes = [finish("a", 9), finish("b", 8)];
        assert_eq!(
            NetAlarms::of(&changes).finishes,
            [("a", at(9)), ("b", at(8))]
        );
    }
}
