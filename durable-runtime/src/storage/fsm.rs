//! FSM changes that ride an object's write: instances inserted and signals sent by a handler,
//! committed in the same transaction as the object's state, or not at all.
//!
//! The write carries them as [`FsmChanges`], which exists whatever the features so that every
//! backend and every [`ObjectWrite`](super::ObjectWrite) has the field; only with the `fsm`
//! feature can it hold anything. A backend that cannot write FSM rows with an object refuses a
//! write that carries some with [`FsmRefusal::Unsupported`].

/// The FSM changes of one write, applied in order after its object's changes and in the same
/// transaction ([`ObjectWrite::fsm`](super::ObjectWrite::fsm)).
///
/// Without the `fsm` feature it is always empty.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::FsmChanges;
///
/// let changes = FsmChanges::default();
/// assert!(changes.is_empty());
/// assert_eq!(changes.len(), 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsmChanges {
    #[cfg(feature = "fsm")]
    changes: Vec<FsmChange>,
}

impl FsmChanges {
    /// Whether there is no change.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many changes there are.
    pub fn len(&self) -> usize {
        #[cfg(feature = "fsm")]
        return self.changes.len();
        #[cfg(not(feature = "fsm"))]
        0
    }

    /// Adds every change of `other` after these.
    pub fn append(&mut self, other: FsmChanges) {
        #[cfg(feature = "fsm")]
        self.changes.extend(other.changes);
        #[cfg(not(feature = "fsm"))]
        let FsmChanges {} = other;
    }
}

#[cfg(feature = "fsm")]
pub use with_fsm::FsmChange;

#[cfg(feature = "fsm")]
mod with_fsm {
    use super::FsmChanges;
    use crate::fsm::store::{NewInstance, NewSignal, Target};

    /// One FSM change committed with an object's write.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::store::NewSignal;
    /// use durable_runtime::storage::{FsmChange, FsmChanges};
    ///
    /// let mut changes = FsmChanges::default();
    /// changes.push(FsmChange::Signal {
    ///     target: "order:42".into(),
    ///     signal: NewSignal { name: "paid".into(), payload: "{}".into(), dedup_key: None },
    /// });
    /// assert_eq!(changes.len(), 1);
    /// assert!(matches!(changes.iter().next(), Some(FsmChange::Signal { .. })));
    /// ```
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum FsmChange {
        /// Inserts an instance. If its correlation key is occupied (by a stored instance or
        /// an earlier insert of the same batch) the whole write is refused with
        /// [`FsmRefusal::Duplicate`](super::FsmRefusal::Duplicate).
        Insert(NewInstance),
        /// Delivers a signal, as [`FsmStore::signal`](crate::fsm::store::FsmStore::signal)
        /// does. If no live instance is the target, the whole write is refused with
        /// [`FsmRefusal::NoTarget`](super::FsmRefusal::NoTarget).
        Signal {
            /// Where it goes.
            target: Target,
            /// The signal.
            signal: NewSignal,
        },
    }

    impl FsmChanges {
        /// Adds `change` after the others.
        pub fn push(&mut self, change: FsmChange) {
            self.changes.push(change);
        }

        /// The changes, in order.
        pub fn iter(&self) -> std::slice::Iter<'_, FsmChange> {
            self.changes.iter()
        }
    }

    impl From<Vec<FsmChange>> for FsmChanges {
        fn from(changes: Vec<FsmChange>) -> Self {
            Self { changes }
        }
    }

    impl<'a> IntoIterator for &'a FsmChanges {
        type Item = &'a FsmChange;
        type IntoIter = std::slice::Iter<'a, FsmChange>;

        fn into_iter(self) -> Self::IntoIter {
            self.iter()
        }
    }
}

/// Why a store refused the FSM changes of a write. Nothing of the write (nor of its batch) was
/// applied; only that write is at fault.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::FsmRefusal;
///
/// let refusal = FsmRefusal::Duplicate { correlation_key: "order:42".into() };
/// assert_eq!(refusal.to_string(), "an FSM instance already occupies the correlation key \"order:42\"");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FsmRefusal {
    /// An inserted instance's correlation key is occupied.
    #[error("an FSM instance already occupies the correlation key {correlation_key:?}")]
    Duplicate {
        /// The key.
        correlation_key: String,
    },
    /// A signal has no live target: no instance with that id, nobody occupying that key, or
    /// an ended instance.
    #[error("no live FSM instance at {target} for the signal {name:?}")]
    NoTarget {
        /// The target, in words (`id 7`, `key "order:42"`).
        target: String,
        /// The signal's name.
        name: String,
    },
    /// The store cannot write FSM rows in an object's transaction (a backend built without
    /// FSM support, or a memory store without a linked FSM store).
    #[error("this store cannot commit FSM changes with an object's state")]
    Unsupported,
}

#[cfg(feature = "fsm")]
impl FsmRefusal {
    /// [`FsmRefusal::NoTarget`] for the signal `name` sent to `target`, the target in words
    /// (`id 7`, `key "order:42"`).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::Target;
    /// use durable_runtime::storage::FsmRefusal;
    ///
    /// let refusal = FsmRefusal::no_target(&Target::from("order:42"), "paid");
    /// assert_eq!(
    ///     refusal.to_string(),
    ///     "no live FSM instance at key \"order:42\" for the signal \"paid\""
    /// );
    /// ```
    pub fn no_target(target: &crate::fsm::store::Target, name: impl Into<String>) -> Self {
        use crate::fsm::store::Target;
        let target = match target {
            Target::Id(id) => format!("id {id}"),
            Target::Key(key) => format!("key {key:?}"),
        };
        Self::NoTarget {
            target,
            name: name.into(),
        }
    }
}
