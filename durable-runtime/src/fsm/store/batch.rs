//! What the batched operations of [`FsmStore`](super::FsmStore) speak in: the versions a
//! picker runs ([`PickRequest`]) and the mapping of a batch insert's returned rows back to
//! the positions of its instances ([`positions`]).

use std::collections::HashMap;
use std::time::SystemTime;

use super::NewInstance;
use crate::fsm::status::{InstanceId, Status};

/// A pick restricted to the FSM versions the picker can run, for
/// [`FsmStore::pick_registered`](super::FsmStore::pick_registered): rows of any other FSM or
/// version are left runnable and untouched, for a worker that has them.
#[derive(Clone, Copy, Debug)]
pub struct PickRequest<'a> {
    /// The queue.
    pub queue: &'a str,
    /// The picker's name, written in `locked_by`.
    pub worker: &'a str,
    /// Only rows eligible by then.
    pub eligible_by: SystemTime,
    /// The lease of each claim.
    pub lease_until: SystemTime,
    /// At most this many rows.
    pub limit: usize,
    /// The store's clock.
    pub now: SystemTime,
    /// The `(name, version)` pairs the picker runs; only their rows are claimed.
    pub fsms: &'a [(String, i32)],
}

impl PickRequest<'_> {
    /// The pairs as `name:version` tags, the form SQL stores compare with
    /// `fsm || ':' || fsm_version` (a version has no `:`, so the tag is unambiguous).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use durable_runtime::fsm::store::PickRequest;
    ///
    /// let fsms = [("order".to_owned(), 2), ("a:b".to_owned(), 1)];
    /// let now = SystemTime::UNIX_EPOCH;
    /// let request = PickRequest {
    ///     queue: "default", worker: "w", eligible_by: now, lease_until: now, limit: 1, now,
    ///     fsms: &fsms,
    /// };
    /// assert_eq!(request.tags(), ["order:2", "a:b:1"]);
    /// assert!(request.runs("order", 2) && !request.runs("order", 1));
    /// ```
    pub fn tags(&self) -> Vec<String> {
        self.fsms
            .iter()
            .map(|(name, version)| format!("{name}:{version}"))
            .collect()
    }

    /// Whether the picker runs `fsm` at `version`.
    pub fn runs(&self, fsm: &str, version: i32) -> bool {
        self.fsms
            .iter()
            .any(|(name, registered)| name == fsm && *registered == version)
    }
}

/// Maps the rows a batch insert returned, `(id, correlation key)`, to the positions of
/// `instances`: `Some(id)` for each instance inserted, `None` for each skipped because its
/// key was occupied.
///
/// The store must insert rows in key order, then position order among equal keys (and among
/// rows without a key), assigning increasing ids, so that a key's first instance that claims
/// the key wins and ids follow positions within a key. An instance whose scope does not
/// include `runnable` does not claim its key when inserted and is always inserted.
///
/// # Examples
///
/// ```
/// use std::time::SystemTime;
/// use durable_runtime::fsm::{InstanceId, Status};
/// use durable_runtime::fsm::store::{positions, NewInstance};
///
/// let row = |key: Option<&str>| NewInstance {
///     fsm: "job".into(), fsm_version: 1, step: "perform".into(), state: "{}".into(),
///     queue: "default".into(), priority: 0, eligible_at: SystemTime::UNIX_EPOCH,
///     correlation_key: key.map(str::to_owned), correlation_scope: Status::ALL.to_vec(),
///     concurrency_key: None, concurrency_limit: 1, rate_limit_key: None, rate_limit_units: 1,
/// };
/// let batch = [row(None), row(Some("k")), row(Some("k")), row(None)];
/// let returned = vec![(InstanceId::new(7), Some("k".to_owned())), (InstanceId::new(5), None), (InstanceId::new(6), None)];
/// assert_eq!(
///     positions(&batch, returned),
///     [Some(InstanceId::new(5)), Some(InstanceId::new(7)), None, Some(InstanceId::new(6))]
/// );
/// ```
pub fn positions(
    instances: &[NewInstance],
    mut returned: Vec<(InstanceId, Option<String>)>,
) -> Vec<Option<InstanceId>> {
    returned.sort_by_key(|(id, _)| *id);
    let mut by_key: HashMap<Option<String>, std::collections::VecDeque<InstanceId>> =
        HashMap::new();
    for (id, key) in returned {
        by_key.entry(key).or_default().push_back(id);
    }
    // Per key: the positions that were inserted, in order.
    let mut inserted = vec![false; instances.len()];
    let mut keys: Vec<&Option<String>> = Vec::new();
    for instance in instances {
        if !keys.contains(&&instance.correlation_key) {
            keys.push(&instance.correlation_key);
        }
    }
    for key in keys {
        let count = by_key.get(key).map_or(0, std::collections::VecDeque::len);
        let at: Vec<usize> = (0..instances.len())
            .filter(|&i| &instances[i].correlation_key == key)
            .collect();
        let claims =
            |i: usize| key.is_some() && instances[i].correlation_scope.contains(&Status::Runnable);
        let free = at.iter().filter(|&&i| !claims(i)).count();
        // Rows that do not claim the key are all inserted; of those that do, the first one
        // is inserted exactly when one more row came back.
        let mut first_claim = count > free;
        for &i in &at {
            if !claims(i) {
                inserted[i] = true;
            } else if first_claim {
                inserted[i] = true;
                first_claim = false;
            }
        }
    }
    instances
        .iter()
        .zip(inserted)
        .map(|(instance, inserted)| {
            if inserted {
                by_key
                    .get_mut(&instance.correlation_key)
                    .and_then(std::collections::VecDeque::pop_front)
            } else {
                None
            }
        })
        .collect()
}
