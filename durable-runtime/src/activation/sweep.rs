//! The background sweep of expired idempotency keys: started with the first call that carries
//! one, it removes the replies whose retention has ended, a page at a time, until the runtime
//! shuts down.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::object::handle::{Runtime, Shared};
use crate::storage::StorageError;

/// How many expired replies one storage call removes.
const PAGE: usize = 1000;

/// How long the sweep waits between rounds: a 24th of the retention, within a second and an
/// hour. An expired reply is never answered (the lookup checks the expiry); the sweep only
/// keeps the table from growing.
fn interval(retention: Duration) -> Duration {
    (retention / 24).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

impl Runtime {
    /// How long a reply stored under an idempotency key is kept (see
    /// [`RuntimeBuilder::idempotency_retention`](crate::RuntimeBuilder::idempotency_retention)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = durable_runtime::Runtime::new(durable_runtime::MemoryStorage::new());
    /// assert_eq!(rt.idempotency_retention(), Duration::from_secs(24 * 3600));
    /// ```
    pub fn idempotency_retention(&self) -> Duration {
        self.inner.idempotency_retention
    }

    /// Removes every reply stored under an idempotency key whose retention has ended by the
    /// runtime's clock, and returns how many it removed. The runtime does this in the
    /// background once a call with a key was made; this runs one sweep now.
    ///
    /// # Errors
    ///
    /// The storage's error, if a sweep failed.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = durable_runtime::Runtime::new(durable_runtime::MemoryStorage::new());
    /// assert_eq!(rt.sweep_idempotency().await.unwrap(), 0);
    /// # }
    /// ```
    pub async fn sweep_idempotency(&self) -> Result<usize, StorageError> {
        let now = self.now();
        let mut removed = 0;
        loop {
            let page = self.storage().sweep_idempotency(now, PAGE).await?;
            removed += page;
            if page < PAGE {
                return Ok(removed);
            }
        }
    }

    /// Starts the background sweep once.
    pub(crate) fn ensure_idempotency_sweep(&self) {
        if self.inner.sweep_started.load(Ordering::Relaxed)
            || tokio::runtime::Handle::try_current().is_err()
            || self.inner.sweep_started.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let every = interval(self.idempotency_retention());
        let shutdown = self.shutdown_token();
        self.spawn_task(run(self.downgrade(), every, shutdown));
    }
}

async fn run(shared: Weak<Shared>, every: Duration, shutdown: tokio_util::sync::CancellationToken) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let Some(runtime) = Runtime::upgrade(&shared) else {
            return;
        };
        if let Err(error) = runtime.sweep_idempotency().await {
            tracing::warn!(%error, "sweeping expired idempotency keys failed; retrying later");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_is_bounded() {
        assert_eq!(
            interval(Duration::from_secs(24 * 3600)),
            Duration::from_secs(3600)
        );
        assert_eq!(interval(Duration::from_secs(240)), Duration::from_secs(10));
        assert_eq!(interval(Duration::from_millis(10)), Duration::from_secs(1));
    }
}
