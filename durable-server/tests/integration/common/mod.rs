//! Test objects, exposed, and a gateway served on a loopback port with a real HTTP client.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test module uses part of this module"
)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use durable_runtime::{AlarmSettings, Context, RetryPolicy, Runtime, durable_object};
use durable_server::ServerConfig;
use durable_server::auth::hash_token;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;

/// How long any wait of a test may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Awaits `work`, failing the test if it takes longer than [`DEADLINE`].
pub async fn within<T>(what: &str, work: impl Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, work)
        .await
        .unwrap_or_else(|_| panic!("{what}: no result within {DEADLINE:?}"))
}

/// Alarm settings under which a failing alarm is polled soon and dead after its first
/// attempt.
pub fn dead_after_one_attempt() -> AlarmSettings {
    AlarmSettings::default()
        .with_poll_interval(Duration::from_millis(10))
        .with_retry(RetryPolicy::new(
            Duration::from_millis(1),
            Duration::from_millis(1),
            1,
        ))
}

/// The string `field` of each item of the JSON array `list`.
pub fn fields<'a>(list: &'a Value, field: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .map(|item| {
            item[field]
                .as_str()
                .unwrap_or_else(|| panic!("no string `{field}` in {item}"))
        })
        .collect()
}

/// A counter with handlers for every kind of outcome.
#[durable_object]
pub struct Counter {
    count: i64,
    ratio: f64,
}

/// The typed error of `add_checked`.
#[derive(Debug, Serialize, JsonSchema)]
pub enum CounterError {
    TooBig { limit: i64, wanted: i64 },
}

/// A range of counts: a named type in the JSON schemas of `span`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Span {
    pub low: i64,
    pub high: i64,
}

#[durable_object(expose)]
impl Counter {
    #[handler]
    fn handle_increment(&mut self, by: i64) -> i64 {
        self.count += by;
        self.count
    }

    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }

    #[handler]
    fn handle_add_checked(&mut self, by: i64, limit: i64) -> Result<i64, CounterError> {
        if self.count + by > limit {
            return Err(CounterError::TooBig {
                limit,
                wanted: self.count + by,
            });
        }
        self.count += by;
        Ok(self.count)
    }

    #[handler]
    fn handle_explode(&mut self) -> i64 {
        panic!("secret panic detail 0xdeadbeef");
    }

    /// A state JSON cannot hold: the commit refuses it.
    #[handler]
    fn handle_poison(&mut self) {
        self.ratio = f64::NAN;
    }

    /// An output JSON cannot hold (a map with non-string keys).
    #[handler]
    fn handle_pairs(&self) -> HashMap<(u8, u8), u8> {
        HashMap::from([((1, 2), 3)])
    }

    /// The range `around` if the count is in it.
    #[handler]
    fn handle_span(&self, around: Span) -> Option<Span> {
        (around.low..=around.high)
            .contains(&self.count)
            .then_some(around)
    }

    #[alarm]
    fn reset(&mut self) {
        self.count = 0;
    }
}

/// Hibernates soon after each call.
#[durable_object(hibernate_after = "100ms")]
pub struct Sleepy {
    naps: u32,
}

#[durable_object(expose)]
impl Sleepy {
    #[handler]
    fn handle_nap(&mut self) -> u32 {
        self.naps += 1;
        self.naps
    }
}

/// Gates that `Gated::hold` waits on, by name: a test names a fresh gate per call.
static GATES: LazyLock<Mutex<HashMap<String, Arc<Gate>>>> = LazyLock::new(Mutex::default);

/// A gate: `entered` gets a permit when a handler reaches it, `open` lets it through.
pub struct Gate {
    pub entered: Semaphore,
    pub open: Semaphore,
}

/// The gate `name`, created on first use.
pub fn gate(name: &str) -> Arc<Gate> {
    let mut gates = GATES.lock().unwrap();
    Arc::clone(gates.entry(name.to_owned()).or_insert_with(|| {
        Arc::new(Gate {
            entered: Semaphore::new(0),
            open: Semaphore::new(0),
        })
    }))
}

impl Gate {
    /// Waits until `n` handlers reached the gate.
    pub async fn reached(&self, n: u32) {
        within("handlers reaching the gate", self.entered.acquire_many(n))
            .await
            .unwrap()
            .forget();
    }

    /// Lets `n` handlers through.
    pub fn release(&self, n: usize) {
        self.open.add_permits(n);
    }
}

/// An object whose write handler waits at a gate: it keeps its object busy for as long as
/// the test wants.
#[durable_object]
pub struct Gated {
    passed: u32,
}

#[durable_object(expose)]
impl Gated {
    #[handler]
    async fn handle_hold(&mut self, gate: String) -> u32 {
        let gate = self::gate(&gate);
        gate.entered.add_permits(1);
        gate.open.acquire().await.unwrap().forget();
        self.passed += 1;
        self.passed
    }

    #[handler]
    fn handle_passed(&self) -> u32 {
        self.passed
    }

    /// Calls itself: the runtime refuses the inner call as a cycle.
    #[handler]
    async fn handle_recurse(&mut self, ctx: &Context) -> Result<u32, String> {
        Gated::passed(ctx.runtime(), ctx.id())
            .await
            .map_err(|error| error.to_string())
    }
}

/// Another exposed type, for grants that name one type and not the other.
#[durable_object]
pub struct Other {
    pings: u32,
}

#[durable_object(expose)]
impl Other {
    #[handler]
    fn handle_ping(&mut self) -> u32 {
        self.pings += 1;
        self.pings
    }

    #[alarm]
    fn wake(&mut self) {}

    /// Fails every time: with one attempt allowed, it is dead at once.
    #[alarm]
    fn doomed(&mut self) -> Result<(), String> {
        Err("the doomed alarm failed".to_owned())
    }
}

/// A builder with every test type exposed, over `storage`.
pub fn builder(storage: impl durable_runtime::storage::Storage) -> durable_runtime::RuntimeBuilder {
    Runtime::builder(storage)
        .expose::<Counter>()
        .expose::<Gated>()
        .expose::<Other>()
}

/// A configuration letting every request through.
pub fn open_config() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.auth.disabled = true;
    config
}

/// The token of the principal `name` in [`principals_config`].
pub fn token(name: &str) -> String {
    format!("token-of-{name}")
}

/// A configuration with principals `admin` (everything), `nobody` (no grant) and
/// `other-only` (everything, on the type `Other` only), `counter-get` (calls of
/// `Counter::get` only).
pub fn principals_config(extra: &str) -> ServerConfig {
    let all_ops = r#"["call", "read", "list", "delete", "alarms", "admin", "kv_read", "kv_write", "fsm_read", "fsm_write"]"#;
    let text = format!(
        r#"
        {extra}
        [[principals]]
        name = "admin"
        tokens_sha256 = ["{admin_old}", "{admin}"]
          [[principals.grants]]
          types = ["*"]
          ops = {all_ops}

        [[principals]]
        name = "nobody"
        tokens_sha256 = ["{nobody}"]

        [[principals]]
        name = "other-only"
        tokens_sha256 = ["{other}"]
          [[principals.grants]]
          types = ["Other"]
          handlers = ["*"]
          ops = {all_ops}

        [[principals]]
        name = "counter-get"
        tokens_sha256 = ["{counter_get}"]
          [[principals.grants]]
          types = ["Counter"]
          handlers = ["get"]
          ops = ["call"]
        "#,
        admin_old = hash_token("retired-admin-token"),
        admin = hash_token(&token("admin")),
        nobody = hash_token(&token("nobody")),
        other = hash_token(&token("other-only")),
        counter_get = hash_token(&token("counter-get")),
    );
    ServerConfig::from_toml_str(&text).expect("a valid configuration")
}

/// A gateway served on a loopback port, and a client for it.
pub struct TestServer {
    pub runtime: Runtime,
    pub client: reqwest::Client,
    base: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Serves `runtime` with `config` on `127.0.0.1:0`.
    pub async fn start(runtime: Runtime, config: ServerConfig) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(durable_server::serve_with_shutdown(
            runtime.clone(),
            config,
            listener,
            async {
                stopped.await.ok();
            },
        ));
        Self {
            runtime,
            client: reqwest::Client::new(),
            base,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with `method` to `path`, with `token` as bearer if given.
    pub fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let request = self.client.request(method, self.url(path));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends a request and returns its status and JSON body (`Null` if the body is not JSON).
    pub async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = within("a response", request.send()).await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `POST path` with a JSON `body`, without a token.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(self.request(reqwest::Method::POST, path, None).json(body))
            .await
    }

    /// `GET path`, without a token.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.request(reqwest::Method::GET, path, None))
            .await
    }

    /// `DELETE path`, without a token.
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(self.request(reqwest::Method::DELETE, path, None))
            .await
    }

    /// Asks the server to stop, without waiting.
    pub fn begin_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
    }

    /// Stops the server gracefully and waits until it has stopped.
    pub async fn stop(mut self) {
        self.begin_stop();
        let task = self.task.take().expect("stopped once");
        within("the server stopping", task)
            .await
            .expect("the server task")
            .expect("the server");
    }

    /// Waits until the server task ends, returning its result.
    pub async fn stopped(&mut self) -> std::io::Result<()> {
        let task = self.task.take().expect("awaited once");
        within("the server stopping", task)
            .await
            .expect("the server task")
    }
}

/// The error code of an error body.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}
