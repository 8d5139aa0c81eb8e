//! The storage conformance suite on the in-memory store, and a check that the suite catches a
//! store that breaks the contract.

use broken::LastWriterWins;
use durable_runtime::storage::MemoryStorage;

durable_runtime::conformance_tests!(|_case| async { Some(MemoryStorage::new()) });

/// `run_all` runs every check (the per-check tests above run the same ones).
#[tokio::test]
async fn run_all_passes() {
    durable_runtime::conformance::run_all(|| async { MemoryStorage::new() }).await;
}

/// A store that overwrites instead of reporting version conflicts fails the suite, and the
/// failure names the check.
#[tokio::test]
#[should_panic(expected = "storage conformance check `stale_version_conflicts` failed")]
async fn suite_catches_lost_updates() {
    durable_runtime::conformance::run_all(|| async { LastWriterWins::default() }).await;
}

/// Two clones of one in-memory store behave like two processes over one database.
#[tokio::test]
async fn clones_share_data() {
    let store = MemoryStorage::new();
    storage_shared::increments_across_stores(&[store.clone(), store.clone()]).await;
    storage_shared::claims_across_stores(&[store.clone(), store]).await;
}

use crate::storage_shared;

mod broken {
    //! A deliberately broken store: it ignores expected versions (last writer wins).

    use std::time::SystemTime;

    use async_trait::async_trait;
    use durable_runtime::storage::{
        AlarmClaim, AlarmKey, AlarmPage, AlarmRecord, CommitError, IdPage, IdempotentReply,
        KvUsage, Loaded, MemoryStorage, ObjectKey, ObjectWrite, Storage, StorageError,
    };

    #[derive(Default)]
    pub(crate) struct LastWriterWins(MemoryStorage);

    #[async_trait]
    impl Storage for LastWriterWins {
        async fn load(&self, key: &ObjectKey) -> Result<Loaded, StorageError> {
            self.0.load(key).await
        }

        async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
            // Rewrites every expectation to whatever is stored.
            let mut fixed = Vec::new();
            for write in batch {
                let mut write = write.clone();
                write.expected_version = self.0.load(&write.key).await?.version();
                fixed.push(write);
            }
            self.0.commit(&fixed).await
        }

        async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError> {
            self.0.delete(key).await
        }

        async fn list_ids(
            &self,
            object_type: &str,
            after: Option<&str>,
            limit: usize,
        ) -> Result<IdPage, StorageError> {
            self.0.list_ids(object_type, after, limit).await
        }

        async fn list_alarms(&self, key: &ObjectKey) -> Result<Vec<AlarmRecord>, StorageError> {
            self.0.list_alarms(key).await
        }

        async fn list_object_types(&self) -> Result<Vec<String>, StorageError> {
            self.0.list_object_types().await
        }

        async fn list_dead_alarms(
            &self,
            object_type: Option<&str>,
            after: Option<&AlarmKey>,
            limit: usize,
        ) -> Result<AlarmPage, StorageError> {
            self.0.list_dead_alarms(object_type, after, limit).await
        }

        async fn next_alarm_due(&self) -> Result<Option<SystemTime>, StorageError> {
            self.0.next_alarm_due().await
        }

        async fn claim_due_alarms(
            &self,
            now: SystemTime,
            due_by: SystemTime,
            lease_until: SystemTime,
            limit: usize,
        ) -> Result<Vec<AlarmRecord>, StorageError> {
            self.0
                .claim_due_alarms(now, due_by, lease_until, limit)
                .await
        }

        async fn renew_alarm_claims(
            &self,
            claims: &[AlarmClaim],
            lease_until: SystemTime,
        ) -> Result<usize, StorageError> {
            self.0.renew_alarm_claims(claims, lease_until).await
        }

        async fn finish_alarm(
            &self,
            key: &ObjectKey,
            name: &str,
            claimed_at: SystemTime,
        ) -> Result<bool, StorageError> {
            self.0.finish_alarm(key, name, claimed_at).await
        }

        async fn fail_alarm(
            &self,
            key: &ObjectKey,
            name: &str,
            claimed_at: SystemTime,
            attempts: u32,
            error: &str,
            retry_at: Option<SystemTime>,
        ) -> Result<bool, StorageError> {
            self.0
                .fail_alarm(key, name, claimed_at, attempts, error, retry_at)
                .await
        }

        async fn release_alarm(
            &self,
            key: &ObjectKey,
            name: &str,
            claimed_at: SystemTime,
        ) -> Result<bool, StorageError> {
            self.0.release_alarm(key, name, claimed_at).await
        }

        async fn kv_get(
            &self,
            key: &ObjectKey,
            name: &str,
        ) -> Result<Option<Vec<u8>>, StorageError> {
            self.0.kv_get(key, name).await
        }

        async fn kv_list(
            &self,
            key: &ObjectKey,
            prefix: &str,
            start_after: Option<&str>,
            limit: usize,
        ) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
            self.0.kv_list(key, prefix, start_after, limit).await
        }

        async fn kv_usage(&self, key: &ObjectKey) -> Result<KvUsage, StorageError> {
            self.0.kv_usage(key).await
        }

        async fn load_idempotent_reply(
            &self,
            key: &ObjectKey,
            idempotency_key: &str,
        ) -> Result<Option<IdempotentReply>, StorageError> {
            self.0.load_idempotent_reply(key, idempotency_key).await
        }

        async fn sweep_idempotency(
            &self,
            now: SystemTime,
            limit: usize,
        ) -> Result<usize, StorageError> {
            self.0.sweep_idempotency(now, limit).await
        }
    }
}
