//! FSM instances through the gateway.

use reqwest::Method;
use serde_json::Value;

use super::{Client, ClientError};
use crate::model::fsm::{
    FsmInstance, FsmInstanceList, InsertInstance, Inserted, SendSignal, SignalSent,
};

/// Operations on FSM instances: insert, signal, get, list.
#[derive(Clone, Copy, Debug)]
pub struct Fsm<'a> {
    pub(super) client: &'a Client,
}

/// Which instances [`Fsm::list`] asks for.
///
/// # Examples
///
/// ```
/// use durable_server::client::FsmListing;
///
/// let listing = FsmListing { name: Some("order".into()), status: Some("failed".into()), ..FsmListing::default() };
/// assert_eq!(listing.limit, None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsmListing {
    /// Only instances of this FSM.
    pub name: Option<String>,
    /// Only instances in this status (`runnable`, `awaiting_signal`, `done`, `failed`...).
    pub status: Option<String>,
    /// Only instances after this id: the previous page's `next_after`.
    pub after: Option<i64>,
    /// The page size (1 to 1000; the gateway's default is 100).
    pub limit: Option<usize>,
}

impl Client {
    /// Operations on FSM instances: insert, signal, get, list.
    pub fn fsm(&self) -> Fsm<'_> {
        Fsm { client: self }
    }
}

impl Fsm<'_> {
    /// Inserts an instance of the FSM `name` starting with the state `args` (JSON), with an
    /// optional correlation key; returns its id.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_fsm`, `invalid_arguments`, `duplicate_instance`,
    /// `fsm_not_enabled`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let id = client.fsm().insert("order", &serde_json::json!({"order_id": "42"}), Some("order:42")).await?;
    /// println!("{id}");
    /// # Ok(()) }
    /// ```
    pub async fn insert(
        &self,
        name: &str,
        args: &Value,
        correlation_key: Option<&str>,
    ) -> Result<i64, ClientError> {
        let body = InsertInstance {
            args: args.clone(),
            correlation_key: correlation_key.map(str::to_owned),
        };
        let request = self
            .client
            .request(Method::POST, &["v1", "fsm", name])?
            .json(&body);
        let inserted: Inserted = self.client.send(request).await?;
        Ok(inserted.id)
    }

    /// Sends a signal (`signal.id` or `signal.correlation_key` names the instance).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `instance_not_found` when no live instance is addressed...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use durable_server::model::fsm::SendSignal;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let sent = client.fsm().signal(&SendSignal {
    ///     id: None,
    ///     correlation_key: Some("order:42".into()),
    ///     name: "paid".into(),
    ///     payload: serde_json::json!({"cents": 1250}),
    ///     dedup_key: Some("psp-evt-1".into()),
    /// }).await?;
    /// println!("woke: {}", sent.woke);
    /// # Ok(()) }
    /// ```
    pub async fn signal(&self, signal: &SendSignal) -> Result<SignalSent, ClientError> {
        let request = self
            .client
            .request(Method::POST, &["v1", "fsm", "signal"])?
            .json(signal);
        self.client.send(request).await
    }

    /// The instance `id`, with its inbox.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `instance_not_found`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let instance = client.fsm().get(7).await?;
    /// println!("{} {}", instance.status, instance.state);
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, id: i64) -> Result<FsmInstance, ClientError> {
        let request = self
            .client
            .request(Method::GET, &["v1", "fsm", &id.to_string()])?;
        self.client.send(request).await
    }

    /// A page of instances, by id.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `invalid_request` for an unknown status or a bad limit...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use durable_server::client::FsmListing;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let failed = FsmListing { status: Some("failed".into()), ..FsmListing::default() };
    /// for instance in client.fsm().list(&failed).await?.instances {
    ///     println!("{} {:?}", instance.id, instance.error);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, listing: &FsmListing) -> Result<FsmInstanceList, ClientError> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(name) = &listing.name {
            query.push(("name", name.clone()));
        }
        if let Some(status) = &listing.status {
            query.push(("status", status.clone()));
        }
        if let Some(after) = listing.after {
            query.push(("after", after.to_string()));
        }
        if let Some(limit) = listing.limit {
            query.push(("limit", limit.to_string()));
        }
        let request = self
            .client
            .request(Method::GET, &["v1", "fsm"])?
            .query(&query);
        self.client.send(request).await
    }
}
