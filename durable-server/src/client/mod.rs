//! A Rust client of the gateway: call, read, list and delete objects, manage their alarms,
//! list the exposed types and fetch the OpenAPI document, over HTTP.
//!
//! ```no_run
//! use durable_server::client::Client;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
//! let client = Client::new("http://127.0.0.1:8080").with_token("dev-token");
//! let count: i64 = client
//!     .objects()
//!     .call("counter", "user-123", "increment", &json!({"by": 5}))
//!     .await?;
//! let object = client.objects().get("counter", "user-123").await?;
//! assert_eq!(object.state, json!({"count": count}));
//! # Ok(()) }
//! ```
//!
//! Every method maps one route of the gateway (under `/v1`); a reply with an error status is
//! [`ClientError::Api`] with the gateway's error body.

mod cluster;
mod error;
mod fsm;
mod fsm_control;
mod kv;
mod model;

use std::fmt;
use std::time::Duration;

use reqwest::{Method, RequestBuilder, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use cluster::Cluster;
pub use error::{ApiErrorBody, ClientError, ErrorReply};
pub use fsm::{Fsm, FsmListing};
pub use kv::Kv;
pub use model::{
    Access, AlarmInfo, AlarmList, AlarmWhen, CallReply, Cancelled, DeadAlarm, DeadAlarmPage,
    Deleted, FieldInfo, HandlerInfo, ObjectInfo, ObjectPage, ObjectStatus, ObjectSummary, Reloaded,
    Requeued, ScheduledAlarm, StateReplaced, Stopped, TypeInfo, TypeList, TypeOptions,
    UnknownStatus, format_time,
};
pub(crate) use model::{RequeueBody, SetAlarmBody};

/// How long the client waits for a connection to the gateway.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest error body kept in the message of a reply that is not the gateway's.
const MAX_UNEXPECTED_BODY: usize = 200;

/// A client of one gateway.
///
/// Cheap to clone (the connection pool is shared). Requests carry the bearer token given to
/// [`with_token`](Self::with_token), if any.
///
/// # Examples
///
/// ```
/// use durable_server::client::Client;
///
/// let client = Client::new("http://127.0.0.1:8080").with_token("dev-token");
/// assert_eq!(client.base_url(), "http://127.0.0.1:8080");
/// // The token is never printed.
/// assert!(!format!("{client:?}").contains("dev-token"));
/// ```
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base_url: String,
    token: Option<String>,
    /// Whether `http` can speak HTTPS: ours only with the `tls` feature; a client of the
    /// caller's own is trusted to know.
    https: bool,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base_url", &self.base_url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the gateway at `base_url` (`http://host:port`, optionally with a path
    /// prefix under which the gateway is mounted). The URL is checked on the first request.
    ///
    /// # Panics
    ///
    /// If the TLS backend cannot be initialised, as [`reqwest::Client::new`] does; use
    /// [`with_http_client`](Self::with_http_client) to supply a client built otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080/");
    /// assert_eq!(client.base_url(), "http://127.0.0.1:8080");
    /// ```
    pub fn new(base_url: &str) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .expect("the HTTP client's TLS backend initialises");
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_owned(),
            token: None,
            https: cfg!(feature = "tls"),
        }
    }

    /// Sends `token` as a bearer token with every request.
    ///
    /// # Examples
    ///
    /// ```
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// # drop(client);
    /// ```
    #[must_use]
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Uses `http` for the requests: for timeouts, proxies, TLS roots or a connection pool of
    /// your own.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_http_client(http);
    /// # drop(client);
    /// ```
    #[must_use]
    pub fn with_http_client(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self.https = true;
        self
    }

    /// The gateway's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Operations on objects: call, get, list, delete.
    pub fn objects(&self) -> Objects<'_> {
        Objects { client: self }
    }

    /// Operations on alarms: list, set, cancel, dead, requeue.
    pub fn alarms(&self) -> Alarms<'_> {
        Alarms { client: self }
    }

    /// The exposed types with their handlers, alarms and options (`GET /v1/types`).
    ///
    /// # Errors
    ///
    /// [`ClientError`]; 401/403 without the `list` grant.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// for ty in client.types().await? {
    ///     println!("{}: {} handlers", ty.name, ty.handlers.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn types(&self) -> Result<Vec<TypeInfo>, ClientError> {
        let list: TypeList = self
            .send(self.request(Method::GET, &["v1", "types"])?)
            .await?;
        Ok(list.types)
    }

    /// The gateway's OpenAPI 3.1 document (`GET /v1/openapi.json`).
    ///
    /// # Errors
    ///
    /// [`ClientError`]; 401/403 unless the document is public or the token has the `admin`
    /// grant.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080");
    /// let document = client.openapi().await?;
    /// assert!(document["openapi"].as_str().unwrap().starts_with("3.1"));
    /// # Ok(()) }
    /// ```
    pub async fn openapi(&self) -> Result<Value, ClientError> {
        self.send(self.request(Method::GET, &["v1", "openapi.json"])?)
            .await
    }

    /// Whether the gateway is ready to serve (`GET /readyz` answers 200); `false` while it
    /// shuts down.
    ///
    /// # Errors
    ///
    /// [`ClientError::Transport`] when the gateway cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080");
    /// while !client.ready().await.unwrap_or(false) {
    ///     tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn ready(&self) -> Result<bool, ClientError> {
        let reply = self
            .request(Method::GET, &["readyz"])?
            .send()
            .await
            .map_err(ClientError::Transport)?;
        Ok(reply.status().is_success())
    }

    /// The URL of `segments` below the base URL, each segment percent-encoded.
    #[allow(
        clippy::result_large_err,
        reason = "the error is the public ClientError; its size is nothing next to a request"
    )]
    fn url(&self, segments: &[&str]) -> Result<Url, ClientError> {
        let invalid = |reason: String| ClientError::InvalidUrl {
            url: self.base_url.clone(),
            reason,
        };
        let mut url = Url::parse(&self.base_url).map_err(|error| invalid(error.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "the scheme must be http or https, not `{}`",
                url.scheme()
            )));
        }
        if url.scheme() == "https" && !self.https {
            return Err(invalid(
                "HTTPS needs durable-server's `tls` feature (or a client of your own, see \
                 `Client::with_http_client`)"
                    .to_owned(),
            ));
        }
        url.path_segments_mut()
            .map_err(|()| invalid("it cannot have a path".to_owned()))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    #[allow(
        clippy::result_large_err,
        reason = "the error is the public ClientError; its size is nothing next to a request"
    )]
    fn request(&self, method: Method, segments: &[&str]) -> Result<RequestBuilder, ClientError> {
        let request = self.http.request(method, self.url(segments)?);
        Ok(match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        })
    }

    /// Sends a request and decodes a successful reply as `T`, an error reply as
    /// [`ClientError::Api`].
    async fn send<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<T, ClientError> {
        let reply = request.send().await.map_err(ClientError::Transport)?;
        let status = reply.status().as_u16();
        let body = reply.bytes().await.map_err(ClientError::Transport)?;
        if (200..300).contains(&status) {
            return serde_json::from_slice(&body)
                .map_err(|source| ClientError::Decode { status, source });
        }
        let error = match serde_json::from_slice::<ErrorReply>(&body) {
            Ok(reply) => reply.error,
            Err(_) => unexpected(status, &body),
        };
        Err(ClientError::Api { status, error })
    }
}

/// The error body standing for an error reply that is not the gateway's.
fn unexpected(status: u16, body: &[u8]) -> ApiErrorBody {
    let text = String::from_utf8_lossy(body);
    let mut message: String = text.trim().chars().take(MAX_UNEXPECTED_BODY).collect();
    if message.is_empty() {
        message = format!("HTTP status {status}");
    }
    ApiErrorBody {
        code: "unexpected_response".to_owned(),
        message,
        retryable: matches!(status, 429 | 502 | 503),
        details: Value::Null,
    }
}

/// Adds a listing's paging parameters, those given, to `query`.
fn push_page(query: &mut Vec<(&str, String)>, cursor: Option<&str>, limit: Option<usize>) {
    if let Some(cursor) = cursor {
        query.push(("cursor", cursor.to_owned()));
    }
    if let Some(limit) = limit {
        query.push(("limit", limit.to_string()));
    }
}

/// Operations on objects, from [`Client::objects`].
#[derive(Clone, Copy, Debug)]
pub struct Objects<'a> {
    client: &'a Client,
}

impl Objects<'_> {
    /// Calls the handler `handler` of the object `(type_name, id)` with `arguments` (a value
    /// that serializes to a JSON object whose fields are the argument names) and returns the
    /// handler's output decoded as `T` (`serde_json::Value` for any).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with `handler_error` (422, the handler's own error in `details`),
    /// `invalid_arguments` (400), `unknown_type`/`unknown_handler` (404), `overloaded` (429),
    /// `timeout` (504: the outcome is unknown)...; [`ClientError::Decode`] if the output is
    /// not a `T`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use durable_server::client::Client;
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = Client::new("http://127.0.0.1:8080").with_token("dev-token");
    /// let count: i64 = client.objects().call("counter", "user-123", "increment", &json!({"by": 1})).await?;
    /// // A handler without arguments takes an empty object.
    /// let now: i64 = client.objects().call("counter", "user-123", "get", &json!({})).await?;
    /// assert_eq!(count, now);
    /// # Ok(()) }
    /// ```
    pub async fn call<A, T>(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: &A,
    ) -> Result<T, ClientError>
    where
        A: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        self.call_with_key(type_name, id, handler, arguments, None)
            .await
    }

    /// [`call`](Self::call) with an idempotency key (the `Idempotency-Key` header) when
    /// `idempotency_key` is given: the gateway stores the reply with the call's commit and
    /// answers a call with the same key from it, so a call that failed with a `timeout` (504)
    /// or a lost connection can be sent again with the same key.
    ///
    /// # Errors
    ///
    /// As `call`; also [`ClientError::Api`] 409 `idempotency_key_reused` when the key was
    /// used on this object by a call to another handler or with other arguments.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use durable_server::client::Client;
    /// use serde_json::json;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = Client::new("http://127.0.0.1:8080").with_token("dev-token");
    /// let objects = client.objects();
    /// let args = json!({"by": 1});
    /// let first: i64 = objects.call_with_key("counter", "u1", "increment", &args, Some("op-7")).await?;
    /// let retry: i64 = objects.call_with_key("counter", "u1", "increment", &args, Some("op-7")).await?;
    /// assert_eq!(first, retry); // incremented once
    /// # Ok(()) }
    /// ```
    pub async fn call_with_key<A, T>(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: &A,
        idempotency_key: Option<&str>,
    ) -> Result<T, ClientError>
    where
        A: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let mut request = self
            .client
            .request(
                Method::POST,
                &["v1", "objects", type_name, id, "call", handler],
            )?
            .json(arguments);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        let reply: CallReply<T> = self.client.send(request).await?;
        Ok(reply.result)
    }

    /// The object `(type_name, id)`: status, stored state and version, alarms.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] 404 `object_not_found` when the object is neither live nor stored,
    /// `unknown_type` for a type the gateway does not expose.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// match client.objects().get("counter", "user-123").await {
    ///     Ok(object) => println!("{} at version {:?}", object.state, object.version),
    ///     Err(err) if err.is_not_found() => println!("no such counter"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, type_name: &str, id: &str) -> Result<ObjectInfo, ClientError> {
        let request = self
            .client
            .request(Method::GET, &["v1", "objects", type_name, id])?;
        self.client.send(request).await
    }

    /// A page of the objects of `type_name`: all stored ones, or those with `status`;
    /// `cursor` is the previous page's [`next_cursor`](ObjectPage::next_cursor), `limit` at
    /// most 1000 (the gateway's default is 100).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_type`, `invalid_request` for a limit out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let mut cursor = None;
    /// loop {
    ///     let page = client.objects().list("counter", None, cursor.as_deref(), Some(500)).await?;
    ///     for object in &page.objects {
    ///         println!("{} {}", object.id, object.status);
    ///     }
    ///     match page.next_cursor {
    ///         Some(next) => cursor = Some(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(
        &self,
        type_name: &str,
        status: Option<ObjectStatus>,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<ObjectPage, ClientError> {
        let mut query: Vec<(&str, String)> = vec![("type", type_name.to_owned())];
        if let Some(status) = status {
            query.push(("status", status.as_str().to_owned()));
        }
        push_page(&mut query, cursor, limit);
        let request = self
            .client
            .request(Method::GET, &["v1", "objects"])?
            .query(&query);
        self.client.send(request).await
    }

    /// Deletes the object `(type_name, id)`: its state and its alarms. Returns whether a
    /// stored state existed.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_type`, `invalid_id`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let existed = client.objects().delete("counter", "user-123").await?;
    /// # let _ = existed; Ok(()) }
    /// ```
    pub async fn delete(&self, type_name: &str, id: &str) -> Result<bool, ClientError> {
        let request = self
            .client
            .request(Method::DELETE, &["v1", "objects", type_name, id])?;
        let reply: Deleted = self.client.send(request).await?;
        Ok(reply.deleted)
    }

    /// Stops the object `(type_name, id)` in the server (an admin operation): after the calls
    /// queued before it, it leaves memory, and the next call loads it from storage. Returns
    /// whether it was live.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_type`, `forbidden`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let was_live = client.objects().stop("counter", "user-123").await?;
    /// # let _ = was_live; Ok(()) }
    /// ```
    pub async fn stop(&self, type_name: &str, id: &str) -> Result<bool, ClientError> {
        let request = self
            .client
            .request(Method::POST, &["v1", "objects", type_name, id, "stop"])?;
        let reply: Stopped = self.client.send(request).await?;
        Ok(reply.stopped)
    }

    /// Reloads the object `(type_name, id)` in the server (an admin operation): after the
    /// calls queued before it, it drops its in-memory state, and the next call reads storage.
    /// Returns whether it was live.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_type`, `forbidden`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// client.objects().reload("counter", "user-123").await?;
    /// # Ok(()) }
    /// ```
    pub async fn reload(&self, type_name: &str, id: &str) -> Result<bool, ClientError> {
        let request = self
            .client
            .request(Method::POST, &["v1", "objects", type_name, id, "reload"])?;
        let reply: Reloaded = self.client.send(request).await?;
        Ok(reply.reloaded)
    }

    /// Replaces the state of the object `(type_name, id)` (an admin operation) if its stored
    /// version is `expected_version`, through the object. Returns the new version.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `conflict` for another version, `unknown_type`, `decode`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let state = serde_json::json!({"count": 0});
    /// let version = client.objects().replace_state("counter", "user-123", &state, 7).await?;
    /// assert_eq!(version, 8);
    /// # Ok(()) }
    /// ```
    pub async fn replace_state(
        &self,
        type_name: &str,
        id: &str,
        state: &Value,
        expected_version: u64,
    ) -> Result<u64, ClientError> {
        let body = serde_json::json!({"state": state, "expected_version": expected_version});
        let request = self
            .client
            .request(Method::PUT, &["v1", "objects", type_name, id, "state"])?
            .json(&body);
        let reply: StateReplaced = self.client.send(request).await?;
        Ok(reply.version)
    }
}

/// Operations on alarms, from [`Client::alarms`].
#[derive(Clone, Copy, Debug)]
pub struct Alarms<'a> {
    client: &'a Client,
}

impl Alarms<'_> {
    /// The alarms of the object `(type_name, id)`, dead ones included.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_type`, `invalid_id`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// for alarm in client.alarms().list("session", "s1").await? {
    ///     println!("{} at {:?}", alarm.name, alarm.fire_at);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, type_name: &str, id: &str) -> Result<Vec<AlarmInfo>, ClientError> {
        let request = self
            .client
            .request(Method::GET, &["v1", "objects", type_name, id, "alarms"])?;
        let reply: AlarmList = self.client.send(request).await?;
        Ok(reply.alarms)
    }

    /// Schedules the alarm `name` of the object `(type_name, id)` at a time or after a delay
    /// ([`AlarmWhen`], from a `SystemTime` or a `Duration`), replacing a schedule of the same
    /// alarm.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_alarm` for an alarm the type does not declare...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let alarm = client.alarms().set("session", "s1", "expire", Duration::from_secs(30)).await?;
    /// println!("fires at {}", durable_server::client::format_time(alarm.fire_at));
    /// # Ok(()) }
    /// ```
    pub async fn set(
        &self,
        type_name: &str,
        id: &str,
        name: &str,
        when: impl Into<AlarmWhen>,
    ) -> Result<ScheduledAlarm, ClientError> {
        self.set_with(type_name, id, name, None, when).await
    }

    /// [`set`](Self::set) with the argument the alarm's handler takes, as JSON (`None` for
    /// none).
    ///
    /// # Errors
    ///
    /// As `set`; [`ClientError::Api`] `invalid_arguments` when `args` does not fit the
    /// handler's argument type, `too_many_alarms` beyond the object's alarm limit.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let args = serde_json::json!({"text": "stand-up"});
    /// let later = Duration::from_secs(3600);
    /// client.alarms().set_with("calendar", "c1", "remind", Some(&args), later).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_with(
        &self,
        type_name: &str,
        id: &str,
        name: &str,
        args: Option<&serde_json::Value>,
        when: impl Into<AlarmWhen>,
    ) -> Result<ScheduledAlarm, ClientError> {
        let body = SetAlarmBody {
            args,
            ..SetAlarmBody::new(name, when.into())
        };
        let request = self
            .client
            .request(Method::POST, &["v1", "objects", type_name, id, "alarms"])?
            .json(&body);
        self.client.send(request).await
    }

    /// Cancels the alarm `name` of the object `(type_name, id)`. Returns whether it was
    /// scheduled.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `unknown_alarm`...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// client.alarms().cancel("session", "s1", "expire").await?;
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, type_name: &str, id: &str, name: &str) -> Result<bool, ClientError> {
        let request = self.client.request(
            Method::DELETE,
            &["v1", "objects", type_name, id, "alarms", name],
        )?;
        let reply: Cancelled = self.client.send(request).await?;
        Ok(reply.cancelled)
    }

    /// A page of the dead alarms (those that exhausted their attempts), of one type or all.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]; 403 without the `admin` grant.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let page = client.alarms().dead(Some("session"), None, Some(100)).await?;
    /// for alarm in page.alarms {
    ///     client.alarms().requeue(&alarm.type_name, &alarm.id, &alarm.name).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn dead(
        &self,
        type_name: Option<&str>,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<DeadAlarmPage, ClientError> {
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(type_name) = type_name {
            query.push(("type", type_name.to_owned()));
        }
        push_page(&mut query, cursor, limit);
        let request = self
            .client
            .request(Method::GET, &["v1", "alarms", "dead"])?
            .query(&query);
        self.client.send(request).await
    }

    /// Schedules the dead alarm `name` of the object `(type_name, id)` again, due now with its
    /// attempts reset. Returns whether such a dead alarm existed.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]; 403 without the `admin` grant.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let requeued = client.alarms().requeue("session", "s1", "expire").await?;
    /// # let _ = requeued; Ok(()) }
    /// ```
    pub async fn requeue(
        &self,
        type_name: &str,
        id: &str,
        name: &str,
    ) -> Result<bool, ClientError> {
        let body = RequeueBody {
            type_name,
            id,
            name,
        };
        let request = self
            .client
            .request(Method::POST, &["v1", "alarms", "dead", "requeue"])?
            .json(&body);
        let reply: Requeued = self.client.send(request).await?;
        Ok(reply.requeued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_percent_encoded_below_the_base_path() {
        let client = Client::new("http://127.0.0.1:8080/durable/");
        let url = client
            .url(&["v1", "objects", "counter", "user/1 ?#", "call", "get"])
            .unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8080/durable/v1/objects/counter/user%2F1%20%3F%23/call/get"
        );
    }

    #[test]
    fn base_urls_other_than_http_are_refused() {
        for base in ["127.0.0.1:8080", "ftp://host", "not a url"] {
            let err = Client::new(base).url(&["v1"]).unwrap_err();
            assert!(
                matches!(err, ClientError::InvalidUrl { .. }),
                "{base}: {err}"
            );
        }
    }

    #[test]
    fn https_without_tls_is_refused_with_what_to_enable() {
        let result = Client::new("https://gateway.example").url(&["v1"]);
        if cfg!(feature = "tls") {
            assert_eq!(result.unwrap().as_str(), "https://gateway.example/v1");
        } else {
            let err = result.unwrap_err();
            assert!(matches!(err, ClientError::InvalidUrl { .. }), "{err}");
            assert!(err.to_string().contains("`tls` feature"), "{err}");
        }
        // A client of the caller's own decides for itself.
        let own = Client::new("https://gateway.example").with_http_client(reqwest::Client::new());
        assert_eq!(
            own.url(&["v1"]).unwrap().as_str(),
            "https://gateway.example/v1"
        );
    }

    #[test]
    fn foreign_error_replies_keep_their_status_and_text() {
        let body = unexpected(502, b"<html>Bad Gateway</html>\n");
        assert_eq!(body.code, "unexpected_response");
        assert_eq!(body.message, "<html>Bad Gateway</html>");
        assert!(body.retryable);
        assert_eq!(unexpected(401, b"").message, "HTTP status 401");
    }
}
