//! The storage conformance suite: one set of checks every [`Storage`] backend must pass.
//!
//! Each check is a `pub async fn` taking a store that is fresh and empty (some checks look at
//! every alarm of the store). It panics, with a message saying what went wrong, when the
//! store breaks the contract. Two ways to run them:
//!
//! - [`conformance_tests!`](crate::conformance_tests) declares one `#[tokio::test]` per check
//!   in the calling module, so a failure names its check (the calling crate needs `tokio` with
//!   the `macros` and `rt` features);
//! - [`run_all`] runs every check in turn, on a new store each.
//!
//! The suite is behind the `conformance` feature.
//!
//! # Examples
//!
//! ```
//! use durable_runtime::storage::MemoryStorage;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! durable_runtime::conformance::run_all(|| async { MemoryStorage::new() }).await;
//! # }
//! ```
//!
//! In a test file, one test per check:
//!
//! ```
//! # mod tests {
//! use durable_runtime::storage::MemoryStorage;
//!
//! // The closure gets the check's name (for naming a database or schema) and returns the
//! // fixture, or `None` to skip the test.
//! durable_runtime::conformance_tests!(|_case| async { Some(MemoryStorage::new()) });
//! # }
//! # fn main() {}
//! ```

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use crate::storage::Storage;

mod alarm_limit;
mod alarms;
mod claims;
mod concurrency;
mod idempotency;
mod inventory;
mod kv;
mod listing;
mod outcomes;
mod payloads;
mod states;
mod support;

pub use alarm_limit::{alarm_limit_checked_at_commit, alarm_limit_lowered};
pub use alarms::{
    alarm_cancel_all, alarm_cancel_one, alarm_changes_apply_in_order,
    alarm_changes_of_a_batch_apply_per_object, alarm_set_replaces_and_clears_claim,
    alarms_set_and_list,
};
pub use claims::{
    claim_expiry, claim_respects_due_time_and_limit, concurrent_claimers_disjoint,
    next_alarm_due_waits_for_leases_and_skips_dead, time_round_trip_micros,
};
pub use concurrency::{
    concurrent_increments_lose_nothing, concurrent_inserts_one_winner,
    concurrent_writers_one_winner,
};
pub use idempotency::{
    delete_removes_idempotent_replies, idempotency_sweep_removes_only_expired,
    idempotent_reply_not_stored_on_conflict, idempotent_reply_stored_with_commit,
};
pub use inventory::{
    dead_alarms_leave_when_set_again_or_deleted, dead_alarms_listed_in_order_and_paged,
    list_object_types_skips_deleted,
};
pub use kv::{
    kv_commits_with_state, kv_delete_object_deletes_keys, kv_limits_checked_at_commit,
    kv_list_order_and_pages, kv_odd_keys_and_values_round_trip,
};
pub use listing::{
    large_state_round_trips, list_ids_byte_order, list_ids_pages, nul_escape_round_trips,
    odd_ids_round_trip,
};
pub use outcomes::{
    fail_alarm_dead, fail_alarm_retry, finish_alarm_requires_same_claim,
    finish_in_commit_applies_with_state, release_alarm_keeps_it_due,
    rescheduled_alarm_survives_finish,
};
pub use payloads::{alarm_payload_replaced_and_cancelled, alarm_payload_round_trips};
pub use states::{
    batch_commits_many_objects, batch_is_atomic, batch_keeps_each_state_exact,
    delete_removes_state_and_alarms, insert_over_existing_conflicts, insert_then_load,
    load_many_in_key_order, load_missing, load_versions_match_loads,
    recreated_object_refuses_stale_writer, stale_version_conflicts, stateless_write_bumps_version,
    update_missing_conflicts, update_with_expected_version,
};

/// What a test setup hands to the checks: a store, plus whatever must live as long as the
/// store (a temporary directory, a schema dropped on drop).
///
/// Every [`Storage`] is a fixture of itself.
///
/// # Examples
///
/// ```
/// use durable_runtime::conformance::Fixture;
/// use durable_runtime::storage::MemoryStorage;
///
/// struct WithGuard {
///     store: MemoryStorage,
///     _guard: (), // e.g. a temporary directory
/// }
///
/// impl Fixture for WithGuard {
///     type Store = MemoryStorage;
///     fn store(&self) -> &MemoryStorage {
///         &self.store
///     }
/// }
/// # let f = WithGuard { store: MemoryStorage::new(), _guard: () };
/// # let _ = f.store();
/// ```
pub trait Fixture {
    /// The store under test.
    type Store: Storage + ?Sized;

    /// The store under test.
    fn store(&self) -> &Self::Store;
}

impl<S: Storage> Fixture for S {
    type Store = S;

    fn store(&self) -> &S {
        self
    }
}

/// Declares one `#[tokio::test]` per conformance check, in the calling module.
///
/// The argument is a closure (or function) taking the check's name (`&'static str`) and
/// returning a future of `Option<F>` where `F:` [`Fixture`]: a fresh, empty store (with its
/// guards), or `None` to skip the test (say, when no database is configured).
///
/// # Examples
///
/// ```
/// # mod tests {
/// use durable_runtime::storage::MemoryStorage;
///
/// durable_runtime::conformance_tests!(|_case| async { Some(MemoryStorage::new()) });
/// # }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($setup:expr $(,)?) => {
        $crate::__conformance_cases!(__conformance_test_fns { $setup });
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test_fns {
    ({ $setup:expr } $($case:ident)*) => {
        $(
            #[tokio::test]
            async fn $case() {
                let Some(fixture) = ($setup)(stringify!($case)).await else {
                    return;
                };
                $crate::conformance::$case($crate::conformance::Fixture::store(&fixture)).await;
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_run_all {
    ({ $make:ident } $($case:ident)*) => {
        $(
            $crate::conformance::__run_case(stringify!($case), async {
                let store = $make().await;
                $crate::conformance::$case(&store).await;
            })
            .await;
        )*
    };
}

/// The list of checks, in one place: passes them to `$callback`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            load_missing
            insert_then_load
            load_many_in_key_order
            load_versions_match_loads
            update_with_expected_version
            stale_version_conflicts
            insert_over_existing_conflicts
            update_missing_conflicts
            batch_is_atomic
            batch_commits_many_objects
            batch_keeps_each_state_exact
            stateless_write_bumps_version
            delete_removes_state_and_alarms
            alarm_payload_round_trips
            alarm_payload_replaced_and_cancelled
            recreated_object_refuses_stale_writer
            list_ids_pages
            list_ids_byte_order
            odd_ids_round_trip
            large_state_round_trips
            nul_escape_round_trips
            concurrent_writers_one_winner
            concurrent_inserts_one_winner
            concurrent_increments_lose_nothing
            alarms_set_and_list
            alarm_set_replaces_and_clears_claim
            alarm_cancel_one
            alarm_cancel_all
            alarm_changes_apply_in_order
            alarm_changes_of_a_batch_apply_per_object
            next_alarm_due_waits_for_leases_and_skips_dead
            claim_respects_due_time_and_limit
            claim_expiry
            concurrent_claimers_disjoint
            finish_alarm_requires_same_claim
            rescheduled_alarm_survives_finish
            finish_in_commit_applies_with_state
            fail_alarm_retry
            fail_alarm_dead
            release_alarm_keeps_it_due
            time_round_trip_micros
            list_object_types_skips_deleted
            dead_alarms_listed_in_order_and_paged
            dead_alarms_leave_when_set_again_or_deleted
            idempotent_reply_stored_with_commit
            idempotent_reply_not_stored_on_conflict
            idempotency_sweep_removes_only_expired
            delete_removes_idempotent_replies
            kv_commits_with_state
            kv_limits_checked_at_commit
            kv_list_order_and_pages
            kv_delete_object_deletes_keys
            kv_odd_keys_and_values_round_trip
            alarm_limit_checked_at_commit
            alarm_limit_lowered
        }
    };
}

/// Runs every check, each on a new store from `make`, panicking with the name of the first
/// check that fails.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::MemoryStorage;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// durable_runtime::conformance::run_all(|| async { MemoryStorage::new() }).await;
/// # }
/// ```
pub async fn run_all<S, F, Fut>(make: F)
where
    S: Storage,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    __conformance_cases!(__conformance_run_all { make });
}

#[doc(hidden)]
pub async fn __run_case(name: &str, case: impl Future<Output = ()>) {
    if let Err(panic) = AssertUnwindSafe(case).catch_unwind().await {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        panic!("storage conformance check `{name}` failed: {message}");
    }
}
