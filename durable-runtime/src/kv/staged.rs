//! The key-value changes of one call, staged until the call ends.

use std::collections::BTreeMap;

/// What a call changed in its object's key-value storage, reduced to the net effect: after an
/// optional clearing of every key, each touched key's final value (`None`: deleted).
///
/// Empty (and not allocated) until the call changes something.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    pub(crate) cleared: bool,
    pub(crate) changes: BTreeMap<String, Option<Vec<u8>>>,
}

impl Staged {
    pub(crate) fn is_empty(&self) -> bool {
        !self.cleared && self.changes.is_empty()
    }

    /// What the call's own changes say about `key`: `Some(value)` if they decide it (the
    /// value, or `None` when deleted), `None` when the stored value stands.
    pub(crate) fn lookup(&self, key: &str) -> Option<Option<&[u8]>> {
        match self.changes.get(key) {
            Some(value) => Some(value.as_deref()),
            None if self.cleared => Some(None),
            None => None,
        }
    }

    pub(crate) fn put(&mut self, key: &str, value: Vec<u8>) {
        self.changes.insert(key.to_owned(), Some(value));
    }

    pub(crate) fn delete(&mut self, key: &str) {
        self.changes.insert(key.to_owned(), None);
    }

    pub(crate) fn delete_all(&mut self) {
        self.cleared = true;
        self.changes.clear();
    }

    /// Applies `later`, staged after these changes, on top of them.
    pub(crate) fn absorb(&mut self, later: Staged) {
        if later.cleared {
            *self = later;
        } else {
            self.changes.extend(later.changes);
        }
    }
}
