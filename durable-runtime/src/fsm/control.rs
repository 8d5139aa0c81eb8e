//! The engine's scheduling controls: rate limits, queue pause and resume, and cancel. Each
//! is a row in the store, so it holds across restarts and for every engine on the database.

use super::engine::Engine;
use super::error::Error;
use super::status::InstanceId;
use super::store::{CancelOutcome, PausedQueue, RateLimit, RateLimitRecord, Target};

/// The error a cancelled instance ends with, unless the cancel gives its own reason.
pub const CANCELLED: &str = "cancelled";

/// What [`Engine::cancel`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cancelled {
    /// The instance cancelled.
    pub id: InstanceId,
    /// How many instances ended: it and its live descendants.
    pub instances: u64,
}

impl Engine {
    /// Cancels the live instance `target` (an [`InstanceId`], or a correlation key as a
    /// string): it ends `failed` with the error [`CANCELLED`], and so do its live descendants.
    /// A step of it executing now runs on, but its outcome no longer commits: the cancel
    /// wins. Its parent, if it awaits its children, counts it as a failed child.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownInstance`] when no instance has this id or occupies this key,
    /// [`Error::AlreadyEnded`] when it has ended (nothing changes), [`Error::Storage`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::fsm::{durable_fsm, Engine, Error, MemoryFsmStore, Outcome, Settled, Status};
    ///
    /// #[durable_fsm(name = "waiter")]
    /// pub struct Waiter {}
    ///
    /// #[durable_fsm]
    /// impl Waiter {
    ///     #[step(initial)]
    ///     fn wait(&mut self) -> Outcome<Self> { Outcome::await_signal(["go"], Self::WAIT) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::builder(MemoryFsmStore::new()).register::<Waiter>().queue("default", 1).build()?;
    /// let id = engine.insert(Waiter {}).await?;
    /// engine.await_settled(id, Duration::from_secs(5)).await?;
    /// engine.cancel(id).await?;
    /// let row = engine.get(id).await?.unwrap();
    /// assert_eq!((row.status, row.last_error.as_deref()), (Status::Failed, Some("cancelled")));
    /// assert!(matches!(engine.cancel(id).await, Err(Error::AlreadyEnded { .. })));
    /// # engine.shutdown().await; Ok(()) }
    /// ```
    pub async fn cancel(&self, target: impl Into<Target>) -> Result<Cancelled, Error> {
        self.cancel_with_reason(target, CANCELLED).await
    }

    /// [`cancel`](Self::cancel), with `reason` as the instances' error.
    ///
    /// # Errors
    ///
    /// As [`cancel`](Self::cancel).
    pub async fn cancel_with_reason(
        &self,
        target: impl Into<Target>,
        reason: &str,
    ) -> Result<Cancelled, Error> {
        let target = target.into();
        let outcome = self
            .shared
            .store
            .cancel(&target, reason, self.shared.clock.now())
            .await?;
        match outcome {
            CancelOutcome::Cancelled { id, instances } => {
                // Waiters on the instance, and pickers of a parent it released, look again.
                self.shared.changed.notify_waiters();
                Ok(Cancelled { id, instances })
            }
            CancelOutcome::Ended { id, status } => Err(Error::AlreadyEnded { id, status }),
            CancelOutcome::NotFound => Err(Error::UnknownInstance {
                target: match target {
                    Target::Id(id) => format!("id {id}"),
                    Target::Key(key) => format!("key {key:?}"),
                },
            }),
        }
    }

    /// Stores the rate limit of `key`, for every engine on the store: instances with this
    /// rate-limit key ([`Instance::rate_limit_key`](super::Instance::rate_limit_key)) are
    /// claimed only while the key's token bucket holds their units. A new bucket starts full;
    /// replacing a limit keeps the tokens (at most the new capacity).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRateLimit`] for a capacity of 0 or a period out of range,
    /// [`Error::Storage`].
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::store::RateLimit;
    /// use durable_runtime::fsm::{Engine, MemoryFsmStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::builder(MemoryFsmStore::new()).build()?;
    /// engine.set_rate_limit("sms-provider", RateLimit::per_second(5)).await?;
    /// assert_eq!(engine.rate_limits().await?[0].limit.capacity, 5);
    /// assert!(engine.remove_rate_limit("sms-provider").await?);
    /// # engine.shutdown().await; Ok(()) }
    /// ```
    pub async fn set_rate_limit(&self, key: &str, limit: RateLimit) -> Result<(), Error> {
        limit.check().map_err(|message| Error::InvalidRateLimit {
            key: key.to_owned(),
            message,
        })?;
        self.shared.store.set_rate_limit(key, limit).await?;
        // A raised limit may serve rows that waited.
        self.shared.changed.notify_waiters();
        Ok(())
    }

    /// Removes the rate limit of `key`: its instances are claimed freely. Returns whether
    /// there was one.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn remove_rate_limit(&self, key: &str) -> Result<bool, Error> {
        let removed = self.shared.store.remove_rate_limit(key).await?;
        self.shared.changed.notify_waiters();
        Ok(removed)
    }

    /// Every stored rate limit, by key, with its bucket's last computed level.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn rate_limits(&self) -> Result<Vec<RateLimitRecord>, Error> {
        Ok(self.shared.store.rate_limits().await?)
    }

    /// Pauses `queue` for every engine on the store: no instance of it is claimed until it
    /// is resumed (steps already executing finish, and their outcomes commit). Inserts and
    /// signals still go in. Returns whether it was running.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{Engine, MemoryFsmStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::builder(MemoryFsmStore::new()).build()?;
    /// assert!(engine.pause_queue("emails").await?);
    /// assert!(!engine.pause_queue("emails").await?, "already paused");
    /// assert_eq!(engine.paused_queues().await?[0].queue, "emails");
    /// assert!(engine.resume_queue("emails").await?);
    /// assert!(engine.paused_queues().await?.is_empty());
    /// # engine.shutdown().await; Ok(()) }
    /// ```
    pub async fn pause_queue(&self, queue: &str) -> Result<bool, Error> {
        Ok(self
            .shared
            .store
            .pause_queue(queue, self.shared.clock.now())
            .await?)
    }

    /// Resumes the paused `queue`. Returns whether it was paused.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn resume_queue(&self, queue: &str) -> Result<bool, Error> {
        let resumed = self.shared.store.resume_queue(queue).await?;
        self.shared.changed.notify_waiters();
        Ok(resumed)
    }

    /// The paused queues, by name.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`].
    pub async fn paused_queues(&self) -> Result<Vec<PausedQueue>, Error> {
        Ok(self.shared.store.paused_queues().await?)
    }
}
