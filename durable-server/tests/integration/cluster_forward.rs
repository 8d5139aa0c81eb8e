//! Forwarded calls between cluster nodes: two nodes in this process, each with its own
//! Postgres store on a fresh database, its public listener and its internal listener on
//! loopback ports. A call made on any node reaches the node serving the object; the internal
//! route checks the shared secret, the shard's owner and the hop limit before anything runs,
//! and the caller's deadline travels with the call. Typed calls (`Account::deposit(&rt, ..)`)
//! are forwarded the same way and come back typed.

use crate::fresh_database;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use durable_runtime::cluster::{ClusterError, ForwardError, ForwardedCall, Forwarder, Route};
use durable_runtime::{
    BoxFuture, CallByNameError, CallOptions, Error, Exposed, LiveStatus, Runtime, durable_object,
};
use durable_server::ServerConfig;
use durable_server::auth::AuthConfig;
use durable_server::cluster::{
    ClusterSecret, ClusterSettings, HOPS_HEADER, HttpForwarder, INTERNAL_CALL_PATH, JoinError,
    SECRET_HEADER,
};
use fresh_database::FreshDatabase;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long any wait of a test may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);
const SECRET: &str = "the cluster's secret";
const SHARDS: u32 = 16;

#[durable_object]
pub struct Account {
    balance: u64,
}

/// Why a withdrawal was refused: the handler's own error, as JSON on the wire.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Refusal {
    Insufficient { balance: u64, asked: u64 },
}

#[durable_object(expose)]
impl Account {
    #[handler]
    fn handle_deposit(&mut self, amount: u64) -> u64 {
        self.balance += amount;
        self.balance
    }

    #[handler]
    fn handle_withdraw(&mut self, amount: u64) -> Result<u64, Refusal> {
        if amount > self.balance {
            return Err(Refusal::Insufficient {
                balance: self.balance,
                asked: amount,
            });
        }
        self.balance -= amount;
        Ok(self.balance)
    }

    #[handler]
    fn handle_balance(&self) -> u64 {
        self.balance
    }

    #[handler]
    fn handle_close(&mut self) -> Result<(), NotEmpty> {
        if self.balance > 0 {
            return Err(NotEmpty {
                balance: self.balance,
            });
        }
        Ok(())
    }

    /// Takes `millis`, then deposits one.
    #[handler]
    async fn handle_slow(&mut self, millis: u64) -> u64 {
        tokio::time::sleep(Duration::from_millis(millis)).await;
        self.balance += 1;
        self.balance
    }
}

/// Why an account cannot be closed: `Serialize` only, so typed calls of `close` cannot be
/// forwarded (a caller could not decode the error).
#[derive(Debug, Serialize)]
pub(crate) struct NotEmpty {
    balance: u64,
}

/// A type registered without being exposed.
#[durable_object]
pub struct Hidden {
    n: u64,
}

#[durable_object]
impl Hidden {
    #[handler]
    fn handle_n(&self) -> u64 {
        self.n
    }
}

/// A node serving its public and internal listeners.
struct Node {
    rt: Runtime,
    public: SocketAddr,
    internal: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<std::io::Result<()>>>,
}

impl Node {
    async fn start(db: &FreshDatabase, name: &str, forwarder: Option<MisdirectFirst>) -> Self {
        let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let internal = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (public_address, internal_address) =
            (public.local_addr().unwrap(), internal.local_addr().unwrap());
        let mut settings = ClusterSettings::new(name, internal_address, ClusterSecret::new(SECRET));
        settings.node.shards = SHARDS;
        settings.node.lease_ttl = Duration::from_secs(2);
        settings.node.drain_timeout = Duration::from_secs(1);
        let builder = Runtime::builder(db.store().await).expose::<Account>();
        let rt = match forwarder {
            None => durable_server::cluster::join(builder, &settings)
                .await
                .map_err(|error| error.to_string()),
            Some(forwarder) => builder
                .forwarder(forwarder)
                .cluster(settings.node.clone())
                .join()
                .await
                .map_err(|error| error.to_string()),
        }
        .expect("join the cluster");
        let config = ServerConfig {
            bind: public_address,
            shutdown_grace: Duration::from_secs(5),
            auth: AuthConfig {
                disabled: true,
                ..AuthConfig::default()
            },
            console: false,
            cluster: Some(settings),
            ..ServerConfig::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(durable_server::serve_cluster_with_shutdown(
            rt.clone(),
            config,
            public,
            internal,
            async {
                stopped.await.ok();
            },
        ));
        Self {
            rt,
            public: public_address,
            internal: internal_address,
            stop: Some(stop),
            server: Some(server),
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
        if let Some(server) = self.server.take() {
            tokio::time::timeout(DEADLINE, server)
                .await
                .expect("the node stops in time")
                .expect("the server task")
                .expect("the server");
        }
    }

    async fn balance(&self, id: &str) -> Value {
        self.rt
            .call_here_by_name("Account", id, "balance", json!({}), &CallOptions::new())
            .await
            .expect("read the balance at its owner")
    }
}

/// Two nodes, with the shards split between them and each knowing the other's, and for
/// each node `per_node` ids it serves.
async fn two_nodes(db: &FreshDatabase, per_node: usize) -> (Node, Node, Vec<String>, Vec<String>) {
    two_nodes_with(db, per_node, None).await
}

/// [`two_nodes`], node `a` forwarding with `forwarder` if given.
async fn two_nodes_with(
    db: &FreshDatabase,
    per_node: usize,
    forwarder: Option<MisdirectFirst>,
) -> (Node, Node, Vec<String>, Vec<String>) {
    let a = Node::start(db, "a", forwarder).await;
    let b = Node::start(db, "b", None).await;
    let ids: Vec<String> = (0..200).map(|i| format!("acct-{i}")).collect();
    let started = Instant::now();
    loop {
        let (served_a, served_b) = (
            a.rt.serving_shards().unwrap_or_default().len(),
            b.rt.serving_shards().unwrap_or_default().len(),
        );
        let split = served_a > 0 && served_b > 0 && served_a + served_b == SHARDS as usize;
        let settled = split
            && ids.iter().all(
                |id| match (a.rt.route("Account", id), b.rt.route("Account", id)) {
                    (Route::Local, Route::Remote(owner)) => *owner == *a.internal.to_string(),
                    (Route::Remote(owner), Route::Local) => *owner == *b.internal.to_string(),
                    _ => false,
                },
            );
        if settled {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the shards did not settle between the two nodes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let of = |node: &Node| -> Vec<String> {
        ids.iter()
            .filter(|id| node.rt.route("Account", id) == Route::Local)
            .take(per_node)
            .cloned()
            .collect()
    };
    let (at_a, at_b) = (of(&a), of(&b));
    assert_eq!((at_a.len(), at_b.len()), (per_node, per_node));
    (a, b, at_a, at_b)
}

/// Posts `arguments` to `handler` of `Account/id` on a node's public route.
async fn public_call(node: &Node, id: &str, handler: &str, arguments: Value) -> (u16, Value) {
    let url = format!(
        "http://{}/v1/objects/Account/{id}/call/{handler}",
        node.public
    );
    let response = reqwest::Client::new()
        .post(url)
        .json(&arguments)
        .timeout(DEADLINE)
        .send()
        .await
        .expect("the public route answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// Posts a forwarded call straight to a node's internal route, with `headers`.
async fn internal_call(
    node: &Node,
    id: &str,
    handler: &str,
    arguments: Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut request = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap()
        .post(format!("http://{}{INTERNAL_CALL_PATH}", node.internal))
        .json(&json!({"type": "Account", "id": id, "handler": handler, "arguments": arguments}))
        .timeout(DEADLINE);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the internal route answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_any_node_reaches_the_owner() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let (a, b, at_a, at_b) = two_nodes(&db, 5).await;
    for id in at_a.iter().chain(&at_b) {
        // Over HTTP on both nodes (one of them forwards), then by name in Rust on both.
        for (n, node) in [&a, &b].into_iter().enumerate() {
            let (status, body) = public_call(node, id, "deposit", json!({"amount": 1})).await;
            assert_eq!(
                (status, &body["result"]),
                (200, &json!(n + 1)),
                "{id}: {body}"
            );
        }
        for (n, node) in [&a, &b].into_iter().enumerate() {
            let reply = node
                .rt
                .call_by_name("Account", id, "deposit", json!({"amount": 10}))
                .await
                .unwrap_or_else(|error| panic!("{id}: {error}"));
            assert_eq!(reply, json!(2 + 10 * (n + 1)));
        }
    }
    // Every deposit was applied once, at the owner.
    for id in &at_a {
        assert_eq!(a.balance(id).await, json!(22));
    }
    for id in &at_b {
        assert_eq!(b.balance(id).await, json!(22));
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_error_crosses_the_hop_intact() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let (a, b, _, at_b) = two_nodes(&db, 1).await;
    let id = &at_b[0];
    let (status, body) = public_call(&b, id, "deposit", json!({"amount": 3})).await;
    assert_eq!(status, 200, "{body}");
    let at_owner = public_call(&b, id, "withdraw", json!({"amount": 5})).await;
    let forwarded = public_call(&a, id, "withdraw", json!({"amount": 5})).await;
    assert_eq!(at_owner.0, 422);
    assert_eq!(
        at_owner.1["error"]["details"],
        json!({"Insufficient": {"balance": 3, "asked": 5}})
    );
    assert_eq!(forwarded, at_owner, "the same answer through the forward");
    // An error of the runtime too (arguments that do not fit): the owner's body, as it is.
    let at_owner = public_call(&b, id, "withdraw", json!({"amout": 5})).await;
    let forwarded = public_call(&a, id, "withdraw", json!({"amout": 5})).await;
    assert_eq!(at_owner.0, 400);
    assert_eq!(forwarded, at_owner);
    // In Rust, the handler's own error comes back typed.
    let error =
        a.rt.call_by_name("Account", id, "withdraw", json!({"amount": 5}))
            .await
            .unwrap_err();
    match error {
        CallByNameError::Handler { handler, error } => {
            assert_eq!(handler, "withdraw");
            assert_eq!(error, json!({"Insufficient": {"balance": 3, "asked": 5}}));
        }
        other => panic!("expected the handler's error, got {other:?}"),
    }
    assert_eq!(b.balance(id).await, json!(3), "nothing withdrawn");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_internal_route_checks_secret_owner_and_hops_before_running() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let (a, b, _, at_b) = two_nodes(&db, 1).await;
    let id = &at_b[0];
    let deposit = json!({"amount": 1});
    // A wrong or missing secret: 401, nothing runs.
    for headers in [
        &[(SECRET_HEADER, "not the secret"), (HOPS_HEADER, "1")][..],
        &[(SECRET_HEADER, ""), (HOPS_HEADER, "1")][..],
        &[(HOPS_HEADER, "1")][..],
    ] {
        let (status, body) = internal_call(&b, id, "deposit", deposit.clone(), headers).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (401, Some("unauthenticated"))
        );
    }
    assert_eq!(b.balance(id).await, json!(0));
    // At a node that does not serve the object: 421 naming the owner, nothing runs.
    let secret = (SECRET_HEADER, SECRET);
    let (status, body) = internal_call(
        &a,
        id,
        "deposit",
        deposit.clone(),
        &[secret, (HOPS_HEADER, "1")],
    )
    .await;
    assert_eq!(status, 421, "{body}");
    assert_eq!(body["error"]["code"], "misdirected");
    assert_eq!(
        body["error"]["details"]["owner"],
        json!(b.internal.to_string())
    );
    assert_eq!(b.balance(id).await, json!(0));
    // Past the hop limit (2): refused, nothing runs.
    let (status, body) = internal_call(
        &b,
        id,
        "deposit",
        deposit.clone(),
        &[secret, (HOPS_HEADER, "3")],
    )
    .await;
    assert_eq!(status, 508, "{body}");
    assert_eq!(body["error"]["code"], "hop_limit_exceeded");
    assert_eq!(b.balance(id).await, json!(0));
    // No hop count at all: a malformed call.
    let (status, _) = internal_call(&b, id, "deposit", deposit.clone(), &[secret]).await;
    assert_eq!(status, 400);
    assert_eq!(b.balance(id).await, json!(0));
    // With everything right, the call runs at the owner.
    let (status, body) = internal_call(
        &b,
        id,
        "deposit",
        deposit.clone(),
        &[secret, (HOPS_HEADER, "2")],
    )
    .await;
    assert_eq!((status, &body["result"]), (200, &json!(1)), "{body}");
    assert_eq!(b.balance(id).await, json!(1));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_travels_with_the_call() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let (a, b, _, at_b) = two_nodes(&db, 2).await;
    // The handler takes 6 s; the caller waits 300 ms and gets its timeout well before.
    let slow = json!({"millis": 6000});
    let options = CallOptions::new().with_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let error =
        a.rt.call_by_name_with("Account", &at_b[0], "slow", slow.clone(), &options)
            .await
            .unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(error, CallByNameError::Runtime(Error::Timeout { .. })),
        "{error:?}"
    );
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    // The owner itself stops waiting at the deadline it is given.
    let started = Instant::now();
    let (status, body) = internal_call(
        &b,
        &at_b[1],
        "slow",
        slow,
        &[
            (SECRET_HEADER, SECRET),
            (HOPS_HEADER, "1"),
            ("durable-deadline-ms", "300"),
        ],
    )
    .await;
    let waited = started.elapsed();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (504, Some("timeout"))
    );
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_type_not_exposed_refuses_to_join() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let settings = ClusterSettings::new(
        "lonely",
        "127.0.0.1:1".parse().unwrap(),
        ClusterSecret::new(SECRET),
    );
    let builder = Runtime::builder(db.store().await)
        .expose::<Account>()
        .register::<Hidden>();
    let error = durable_server::cluster::join(builder, &settings)
        .await
        .unwrap_err();
    match &error {
        JoinError::Cluster(ClusterError::NotExposed { type_name }) => {
            assert_eq!(*type_name, "Hidden");
        }
        other => panic!("expected NotExposed, got {other:?}"),
    }
    assert!(error.to_string().contains("`Hidden`"), "{error}");
    // Exposed, it joins.
    let builder = Runtime::builder(db.store().await).expose::<Account>();
    let rt = durable_server::cluster::join(builder, &settings)
        .await
        .expect("join");
    rt.shutdown().await;
}

/// The real HTTP/2 forwarder, except that while `misdirect` is above zero, calls are answered
/// "misdirected" as by a node that just lost the shard; records every call it is given.
#[derive(Clone)]
struct MisdirectFirst {
    misdirect: Arc<AtomicUsize>,
    http: HttpForwarder,
    seen: Arc<Mutex<Vec<ForwardedCall>>>,
}

impl MisdirectFirst {
    /// Forwards every call until told to misdirect some.
    fn new() -> Self {
        Self {
            misdirect: Arc::new(AtomicUsize::new(0)),
            http: HttpForwarder::new(ClusterSecret::new(SECRET)).unwrap(),
            seen: Arc::default(),
        }
    }
}

impl Forwarder for MisdirectFirst {
    fn forward(&self, call: ForwardedCall) -> BoxFuture<'static, Result<Value, ForwardError>> {
        self.seen.lock().unwrap().push(call.clone());
        let misdirected = self
            .misdirect
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if misdirected {
            return Box::pin(async { Err(ForwardError::Misdirected { owner: None }) });
        }
        self.http.forward(call)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misdirected_forward_is_sent_again_once_then_refused_retryably() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let forwarder = MisdirectFirst::new();
    let (a, b, _, at_b) = two_nodes_with(&db, 2, Some(forwarder.clone())).await;
    let (id, other) = (&at_b[0], &at_b[1]);
    // Misdirected once: the map is refreshed and the call sent again at hop 2, applied once.
    forwarder.misdirect.store(1, Ordering::Release);
    let reply =
        a.rt.call_by_name("Account", id, "deposit", json!({"amount": 1}))
            .await
            .expect("the second send reaches the owner");
    assert_eq!(reply, json!(1));
    let seen = std::mem::take(&mut *forwarder.seen.lock().unwrap());
    assert_eq!(
        seen.iter().map(|call| call.hops).collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(
        seen.iter()
            .all(|call| call.deadline.is_some() && call.id == *id)
    );
    assert_eq!(b.balance(id).await, json!(1));
    // Misdirected twice: refused with the retryable NotOwner, sent again once only, nothing
    // applied.
    forwarder.misdirect.store(2, Ordering::Release);
    let error =
        a.rt.call_by_name("Account", other, "deposit", json!({"amount": 1}))
            .await
            .unwrap_err();
    assert!(
        matches!(&error, CallByNameError::Runtime(error @ Error::NotOwner { .. }) if error.is_retryable()),
        "{error:?}"
    );
    assert_eq!(forwarder.seen.lock().unwrap().len(), 2);
    assert_eq!(b.balance(other).await, json!(0));
    a.stop().await;
    b.stop().await;
}

/// The ids among `ids` live (active or hibernated) on `node`.
fn live_among(node: &Node, ids: &[String]) -> Vec<String> {
    let mut live = node
        .rt
        .list_live::<Account>(LiveStatus::Active, None, 1000)
        .ids;
    live.extend(
        node.rt
            .list_live::<Account>(LiveStatus::Hibernated, None, 1000)
            .ids,
    );
    ids.iter().filter(|id| live.contains(id)).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_call_on_any_node_runs_at_the_owner_and_comes_back_typed() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let (a, b, at_a, at_b) = two_nodes(&db, 3).await;
    for id in &at_b {
        // On `a`, which does not serve the object: the plain client, then the handle.
        assert_eq!(Account::deposit(&a.rt, id, 5).await.unwrap(), 5);
        let handle = Account::handle(&a.rt, id.clone());
        assert_eq!(handle.deposit(2).await.unwrap(), 7);
        assert_eq!(handle.balance().await.unwrap(), 7);
        // The handler's own error, typed.
        match Account::withdraw(&a.rt, id, 100).await {
            Err(Error::Handler(Refusal::Insufficient { balance, asked })) => {
                assert_eq!((balance, asked), (7, 100));
            }
            other => panic!("expected the handler's error, got {other:?}"),
        }
        assert_eq!(handle.withdraw(3).await.unwrap(), 4);
        // On the owner, the same object.
        assert_eq!(Account::balance(&b.rt, id).await.unwrap(), 4);
    }
    // Every call ran at the owner: `b` holds the objects, `a` never started one.
    assert_eq!(live_among(&b, &at_b), at_b);
    assert_eq!(live_among(&a, &at_b), Vec::<String>::new());
    for id in &at_b {
        assert_eq!(b.balance(id).await, json!(4));
    }
    // The objects `a` serves are called there.
    for id in &at_a {
        assert_eq!(Account::deposit(&a.rt, id, 1).await.unwrap(), 1);
    }
    assert_eq!(live_among(&a, &at_a), at_a);
    assert_eq!(live_among(&b, &at_a), Vec::<String>::new());
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_whose_error_does_not_decode_is_not_forwarded() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let forwards = |name: &str| {
        let handler = Account::HANDLERS.iter().find(|h| h.name == name).unwrap();
        (handler.typed_forwarding)()
    };
    assert!(!forwards("close"));
    assert!(["deposit", "withdraw", "balance", "slow"].map(forwards) == [true; 4]);
    let (a, b, _, at_b) = two_nodes(&db, 1).await;
    let id = &at_b[0];
    Account::deposit(&b.rt, id, 1).await.unwrap();
    // Off the owner: refused, naming the owner, nothing run.
    match Account::close(&a.rt, id).await {
        Err(Error::NotOwner { owner, .. }) => {
            assert_eq!(owner.as_deref(), Some(b.internal.to_string().as_str()));
        }
        other => panic!("expected NotOwner, got {other:?}"),
    }
    assert_eq!(live_among(&a, &at_b), Vec::<String>::new());
    // By name it is forwarded, and at the owner it runs typed.
    let error = a.rt.call_by_name("Account", id, "close", json!({})).await;
    assert!(
        matches!(&error, Err(CallByNameError::Handler { error, .. }) if *error == json!({"balance": 1})),
        "{error:?}"
    );
    assert!(matches!(
        Account::close(&b.rt, id).await,
        Err(Error::Handler(NotEmpty { balance: 1 }))
    ));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_call_carries_its_deadline_and_idempotency_key() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let forwarder = MisdirectFirst::new();
    let (a, b, _, at_b) = two_nodes_with(&db, 2, Some(forwarder.clone())).await;
    let (id, slow) = (&at_b[0], &at_b[1]);
    // The same key twice: applied once at the owner, the stored reply the second time.
    for _ in 0..2 {
        let reply = Account::with(&a.rt)
            .idempotency_key("deposit-1")
            .deposit(id, 4)
            .await
            .unwrap();
        assert_eq!(reply, 4);
    }
    assert_eq!(b.balance(id).await, json!(4));
    // The key is checked at the owner: the same key with other arguments is refused there,
    // and the owner's error comes back with its code.
    let reused = Account::with(&a.rt)
        .idempotency_key("deposit-1")
        .deposit(id, 5)
        .await;
    match &reused {
        Err(error @ Error::Forward { source, .. }) => {
            assert!(
                matches!(&**source, ForwardError::Remote { code, .. } if code == "idempotency_key_reused"),
                "{source:?}"
            );
            assert!(!error.is_retryable());
        }
        other => panic!("expected the owner's refusal, got {other:?}"),
    }
    assert_eq!(b.balance(id).await, json!(4));
    let seen = std::mem::take(&mut *forwarder.seen.lock().unwrap());
    assert_eq!(seen.len(), 3);
    assert!(seen.iter().all(|call| {
        call.idempotency_key.as_deref() == Some("deposit-1")
            && call.handler == "deposit"
            && call.deadline.is_some()
    }));
    assert_eq!(seen[0].arguments, json!({"amount": 4}));
    // A timeout of 300 ms on a handler taking 6 s: the caller gets its timeout well before.
    let started = Instant::now();
    let error = Account::with(&a.rt)
        .timeout(Duration::from_millis(300))
        .slow(slow, 6000)
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(error, Error::Timeout { .. }), "{error:?}");
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    let seen = std::mem::take(&mut *forwarder.seen.lock().unwrap());
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0]
            .deadline
            .is_some_and(|deadline| deadline <= Duration::from_millis(300)),
        "{:?}",
        seen[0].deadline
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misdirected_typed_call_is_sent_again_once() {
    let Some(db) = FreshDatabase::new("forward").await else {
        return;
    };
    let forwarder = MisdirectFirst::new();
    let (a, b, _, at_b) = two_nodes_with(&db, 2, Some(forwarder.clone())).await;
    let (id, other) = (&at_b[0], &at_b[1]);
    // Misdirected once: the map is refreshed and the call sent again at hop 2, applied once.
    forwarder.misdirect.store(1, Ordering::Release);
    assert_eq!(Account::deposit(&a.rt, id, 1).await.unwrap(), 1);
    let seen = std::mem::take(&mut *forwarder.seen.lock().unwrap());
    assert_eq!(
        seen.iter().map(|call| call.hops).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(b.balance(id).await, json!(1));
    // Misdirected twice: the retryable NotOwner, nothing applied.
    forwarder.misdirect.store(2, Ordering::Release);
    let error = Account::handle(&a.rt, other.clone())
        .deposit(1)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::NotOwner { .. } if error.is_retryable()),
        "{error:?}"
    );
    assert_eq!(forwarder.seen.lock().unwrap().len(), 2);
    assert_eq!(b.balance(other).await, json!(0));
    assert_eq!(live_among(&a, &at_b), Vec::<String>::new());
    a.stop().await;
    b.stop().await;
}
