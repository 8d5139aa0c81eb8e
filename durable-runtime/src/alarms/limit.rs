//! The per-object alarm limit, checked by the store in the commit that sets an alarm: every
//! path that sets one (a handler, the runtime from outside, HTTP) goes through a commit, so
//! the limit holds whichever process writes.

use crate::object::handle::Runtime;
use crate::storage::AlarmChange;

/// The alarm limit of a type: its own if set, else the runtime's.
pub(crate) fn max_alarms(of_type: Option<u64>, runtime: &Runtime) -> u64 {
    of_type.unwrap_or_else(|| {
        u64::try_from(runtime.alarm_settings().max_alarms_per_object).unwrap_or(u64::MAX)
    })
}

/// Appends the check of `max` to `changes` if they set an alarm. Only a set can add one, so a
/// write that sets none is not checked (and costs nothing more), even when its object has more
/// alarms than a since-lowered limit.
pub(crate) fn check_sets(changes: &mut Vec<AlarmChange>, max: u64) {
    if changes
        .iter()
        .any(|change| matches!(change, AlarmChange::Set { .. }))
    {
        changes.push(AlarmChange::Limit { max });
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::check_sets;
    use crate::storage::AlarmChange;

    #[test]
    fn only_a_write_that_sets_an_alarm_is_checked() {
        let mut cancels = vec![AlarmChange::Cancel { name: "a".into() }];
        check_sets(&mut cancels, 3);
        assert_eq!(cancels.len(), 1);
        let mut sets = vec![AlarmChange::Set {
            name: "a".into(),
            due_at: UNIX_EPOCH,
            payload: None,
        }];
        check_sets(&mut sets, 3);
        assert_eq!(sets.last(), Some(&AlarmChange::Limit { max: 3 }));
    }
}
