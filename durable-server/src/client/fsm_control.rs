//! The FSM scheduling controls through the gateway: cancel, pause and resume a queue.

use reqwest::Method;

use super::ClientError;
use super::fsm::Fsm;
use crate::model::fsm_control::{CancelledInstance, PausedQueues, QueueState};

impl Fsm<'_> {
    /// Cancels the live instance `id` (and its live descendants): it ends `failed` with the
    /// error `cancelled`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `instance_not_found`, `instance_ended` when it had already
    /// ended...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let cancelled = client.fsm().cancel(7).await?;
    /// println!("{} instances ended", cancelled.instances);
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, id: i64) -> Result<CancelledInstance, ClientError> {
        let request = self
            .client
            .request(Method::POST, &["v1", "fsm", &id.to_string(), "cancel"])?;
        self.client.send(request).await
    }

    /// Pauses the queue `queue` for every engine on the server's database.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `forbidden` without `fsm_write` on `"*"`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// assert!(client.fsm().pause_queue("emails").await?.paused);
    /// # Ok(()) }
    /// ```
    pub async fn pause_queue(&self, queue: &str) -> Result<QueueState, ClientError> {
        let request = self
            .client
            .request(Method::POST, &["v1", "fsm", "queues", queue, "pause"])?;
        self.client.send(request).await
    }

    /// Resumes the paused queue `queue`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `forbidden` without `fsm_write` on `"*"`...
    pub async fn resume_queue(&self, queue: &str) -> Result<QueueState, ClientError> {
        let request = self
            .client
            .request(Method::POST, &["v1", "fsm", "queues", queue, "resume"])?;
        self.client.send(request).await
    }

    /// The paused queues.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `forbidden` without `fsm_read` on `"*"`...
    pub async fn paused_queues(&self) -> Result<PausedQueues, ClientError> {
        let request = self
            .client
            .request(Method::GET, &["v1", "fsm", "queues", "paused"])?;
        self.client.send(request).await
    }
}
