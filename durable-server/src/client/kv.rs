//! An object's key-value storage through the gateway.

use reqwest::Method;
use serde_json::value::RawValue;

use super::{Client, ClientError, push_page};
use crate::model::{KvDeleted, KvPage, KvWritten};

/// Operations on objects' key-value storage: list, get, put, delete.
#[derive(Clone, Copy, Debug)]
pub struct Kv<'a> {
    pub(super) client: &'a Client,
}

impl Client {
    /// Operations on objects' key-value storage: list, get, put, delete.
    pub fn kv(&self) -> Kv<'_> {
        Kv { client: self }
    }
}

impl Kv<'_> {
    /// A page of the key-value storage of `(type_name, id)`: keys under `prefix` after
    /// `cursor` (the `next_cursor` of the previous page), in the order of their bytes.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_type`, `invalid_request` for a bad limit...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let page = client.kv().list("session", "s1", Some("cart:"), None, Some(100)).await?;
    /// for entry in page.entries {
    ///     println!("{} = {}", entry.key, entry.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(
        &self,
        type_name: &str,
        id: &str,
        prefix: Option<&str>,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<KvPage, ClientError> {
        let mut query = Vec::new();
        if let Some(prefix) = prefix {
            query.push(("prefix", prefix.to_owned()));
        }
        push_page(&mut query, cursor, limit);
        let request = self
            .client
            .request(Method::GET, &["v1", "objects", type_name, id, "storage"])?
            .query(&query);
        self.client.send(request).await
    }

    /// The JSON value under `key`, byte for byte as stored, or `None`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_type`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// if let Some(value) = client.kv().get("session", "s1", "cart").await? {
    ///     println!("{value}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get(
        &self,
        type_name: &str,
        id: &str,
        key: &str,
    ) -> Result<Option<Box<RawValue>>, ClientError> {
        let request = self.client.request(
            Method::GET,
            &["v1", "objects", type_name, id, "storage", key],
        )?;
        match self.client.send(request).await {
            Ok(value) => Ok(Some(value)),
            Err(ClientError::Api { error, .. }) if error.code == "kv_key_not_found" => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Stores the JSON `value` under `key`, committed through the object.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: 413 `kv_value_too_large`, 422 `kv_key_limit` or
    /// `kv_object_quota`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// client.kv().put("session", "s1", "cart", r#"{"items":[]}"#).await?;
    /// # Ok(()) }
    /// ```
    pub async fn put(
        &self,
        type_name: &str,
        id: &str,
        key: &str,
        value: &str,
    ) -> Result<KvWritten, ClientError> {
        let request = self
            .client
            .request(
                Method::PUT,
                &["v1", "objects", type_name, id, "storage", key],
            )?
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(value.to_owned());
        self.client.send(request).await
    }

    /// Removes `key`. Returns whether it held a value.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_type`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// client.kv().delete("session", "s1", "cart").await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self, type_name: &str, id: &str, key: &str) -> Result<bool, ClientError> {
        let request = self.client.request(
            Method::DELETE,
            &["v1", "objects", type_name, id, "storage", key],
        )?;
        let reply: KvDeleted = self.client.send(request).await?;
        Ok(reply.deleted)
    }
}
