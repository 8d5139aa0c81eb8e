//! Cluster mode on Postgres: two runtimes (two node ids) on one database in one process.
//! Shards split between them, a stale owner's writes are fenced, alarms fire only on their
//! shard's owner, hand-offs lose no call, leases expire when a node stops renewing, and stores
//! that cannot arbitrate a cluster are refused. Each test gets a database of its own.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use durable_runtime::cluster::{
    ClusterConfig, ClusterError, ForwardError, ForwardedCall, Forwarder, Route, ShardTable,
};
use durable_runtime::fsm::store::FsmStore;
use durable_runtime::fsm::{Instance, Outcome, StepContext, durable_fsm};
use durable_runtime::storage::{
    CommitError, Loaded, ObjectKey, ObjectWrite, Storage, StorageErrorKind,
};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    AlarmSettings, BoxFuture, CallByNameError, CallOptions, Context, Error, LiveStatus, Runtime,
    durable_object,
};
use durable_sqlx::PostgresStore;
use durable_sqlx::sqlx::{self, Connection, PgConnection};

#[durable_object]
pub struct Counter {
    count: u64,
}

#[durable_object(expose)]
impl Counter {
    #[handler]
    fn handle_increment(&mut self) -> u64 {
        self.count += 1;
        self.count
    }

    #[handler]
    fn handle_get(&self) -> u64 {
        self.count
    }

    /// Takes `n` off the count, refusing to go below zero.
    #[handler]
    fn handle_take(&mut self, n: u64) -> Result<u64, String> {
        self.count = self
            .count
            .checked_sub(n)
            .ok_or_else(|| format!("only {} left", self.count))?;
        Ok(self.count)
    }

    /// Counts and starts a `Tally` instance keyed `key` in the same commit.
    #[handler]
    fn handle_increment_and_start(&mut self, ctx: &Context, key: String) -> Result<u64, String> {
        self.count += 1;
        ctx.fsm()
            .insert(Instance::new(Tally { n: self.count }).correlation_key(key))
            .map_err(|error| error.to_string())?;
        Ok(self.count)
    }

    #[handler]
    fn handle_ring_in(&mut self, ctx: &Context, millis: u64) {
        ctx.schedule_alarm(Counter::RING, Duration::from_millis(millis));
    }

    #[alarm]
    fn ring(&mut self, ctx: &Context) {
        self.count += 100;
        let rt = ctx.runtime();
        let owner = rt.route(ctx.object_type(), ctx.id()) == Route::Local;
        rings().lock().unwrap().push(Ring {
            id: ctx.id().to_owned(),
            node: rt.node_id().unwrap_or_default().to_owned(),
            owner,
        });
    }
}

/// An alarm as it fired: on which node, and whether that node served the object's shard.
#[durable_fsm(name = "tally", result = u64)]
pub struct Tally {
    n: u64,
}

#[durable_fsm]
impl Tally {
    #[step(initial)]
    fn finish(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(self.n)
    }
}

#[derive(Clone, Debug)]
struct Ring {
    id: String,
    node: String,
    owner: bool,
}

fn rings() -> &'static Mutex<Vec<Ring>> {
    static RINGS: OnceLock<Mutex<Vec<Ring>>> = OnceLock::new();
    RINGS.get_or_init(Mutex::default)
}

/// A database of its own, created from `DATABASE_URL` and dropped at the end.
struct FreshDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl FreshDatabase {
    async fn new() -> Option<Self> {
        let Ok(admin_url) = std::env::var("DATABASE_URL") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "DATABASE_URL must be set when CI is set"
            );
            eprintln!("skipped: DATABASE_URL not set");
            return None;
        };
        let name = durable_tests::unique_prefix()
            .trim_end_matches('_')
            .replace('t', "cluster_");
        let mut conn = PgConnection::connect(&admin_url).await.expect("connect");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .expect("create the test database");
        conn.close().await.ok();
        let base = admin_url
            .rsplit_once('/')
            .map_or(admin_url.as_str(), |(base, _)| base);
        let url = format!("{base}/{name}");
        Some(Self {
            admin_url,
            name,
            url,
        })
    }

    async fn store(&self) -> PostgresStore {
        PostgresStore::connect(&self.url)
            .await
            .expect("connect to the test database")
    }
}

impl Drop for FreshDatabase {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio");
            rt.block_on(async move {
                let mut conn = PgConnection::connect(&url).await?;
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        })
        .join();
        if let Ok(Err(err)) = dropped {
            eprintln!("could not drop database {}: {err}", self.name);
        }
    }
}

const SHARDS: u32 = 32;

fn config(node: &str, ttl: Duration) -> ClusterConfig {
    ClusterConfig {
        shards: SHARDS,
        lease_ttl: ttl,
        margin: None,
        drain_timeout: Duration::from_secs(2),
        ..ClusterConfig::new(node, format!("{node}.test:7100"))
    }
}

async fn node(store: impl Storage, name: &str, ttl: Duration) -> Runtime {
    Runtime::builder(store)
        .expose::<Counter>()
        .alarm_settings(
            AlarmSettings::default()
                .with_poll_interval(Duration::from_millis(100))
                .with_claim_ttl(Duration::from_millis(800)),
        )
        .cluster(config(name, ttl))
        .join()
        .await
        .expect("join the cluster")
}

/// Waits until `condition` holds, checking every 20 ms, failing the test after `limit`.
async fn within<F: FnMut() -> bool>(limit: Duration, what: &str, mut condition: F) -> Duration {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

fn serving(rt: &Runtime) -> HashSet<u32> {
    rt.serving_shards().unwrap().into_iter().collect()
}

/// The shards split without overlap and together cover the cluster.
fn split(a: &Runtime, b: &Runtime) -> bool {
    let (a, b) = (serving(a), serving(b));
    a.is_disjoint(&b) && a.len() + b.len() == SHARDS as usize && !a.is_empty() && !b.is_empty()
}

/// The runtime among `nodes` that serves `id`.
fn owner<'a>(nodes: &'a [&'a Runtime], id: &str) -> Option<&'a Runtime> {
    nodes
        .iter()
        .copied()
        .find(|rt| rt.route("Counter", id) == Route::Local)
}

/// Increments `id` at whichever node serves it, retrying while the shard is between owners
/// (what the forwarding layer will do). Any other error fails the test.
async fn increment(nodes: &[&Runtime], id: &str, limit: Duration) -> u64 {
    let started = Instant::now();
    loop {
        if let Some(rt) = owner(nodes, id) {
            match Counter::increment(rt, id).await {
                Ok(value) => return value,
                Err(Error::NotOwner { .. }) => {}
                Err(error) => panic!("increment of {id} failed: {error}"),
            }
        }
        assert!(started.elapsed() < limit, "{id} had no owner for {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_split_between_two_nodes_and_calls_go_to_the_owner() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let a = node(db.store().await, "a", ttl).await;
    // Alone, a node takes every shard.
    within(Duration::from_secs(5), "a takes every shard", || {
        serving(&a).len() == SHARDS as usize
    })
    .await;
    let b = node(db.store().await, "b", ttl).await;
    // `a` hands off what rendezvous hashing gives `b`; `b` takes it.
    within(Duration::from_secs(10), "the shards split", || {
        split(&a, &b)
    })
    .await;
    // Each node's map of owners is as fresh as its last look at the database.
    within(
        Duration::from_secs(5),
        "each node knows the other's shards",
        || {
            (0..40).all(|i| {
                let id = format!("c{i}");
                matches!(
                    (a.route("Counter", &id), b.route("Counter", &id)),
                    (Route::Local, Route::Remote(_)) | (Route::Remote(_), Route::Local)
                )
            })
        },
    )
    .await;
    for i in 0..40 {
        let id = format!("c{i}");
        let (here, there) = if a.route("Counter", &id) == Route::Local {
            (&a, &b)
        } else {
            (&b, &a)
        };
        assert_eq!(Counter::increment(here, &id).await.unwrap(), 1);
        // The other node refuses at once, and names the owner.
        match Counter::increment(there, &id).await {
            Err(error @ Error::NotOwner { .. }) => {
                assert!(error.is_retryable());
                let Error::NotOwner { owner, .. } = error else {
                    unreachable!()
                };
                let expected = format!("{}.test:7100", here.node_id().unwrap());
                assert_eq!(owner.as_deref(), Some(expected.as_str()));
            }
            other => panic!("expected NotOwner, got {other:?}"),
        }
        assert_eq!(Counter::get(here, &id).await.unwrap(), 1);
    }
    // The database agrees: each shard is leased to the node serving it.
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let rows: Vec<(i32, Option<String>, i64)> =
        sqlx::query_as("SELECT shard, owner, epoch FROM durable_shards ORDER BY shard")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(rows.len(), SHARDS as usize);
    let (sa, sb) = (serving(&a), serving(&b));
    for (shard, owner, epoch) in rows {
        let shard = u32::try_from(shard).unwrap();
        let expected = if sa.contains(&shard) { "a" } else { "b" };
        assert!(sa.contains(&shard) || sb.contains(&shard));
        assert_eq!(owner.as_deref(), Some(expected), "shard {shard}");
        assert!(epoch >= 1);
    }
    conn.close().await.ok();
    a.shutdown().await;
    b.shutdown().await;
}

/// The fencing itself, statement by statement, on two stores whose shard tables are set by
/// hand: an activation raises the fence, a stale owner's commit and load are refused, the new
/// owner reads the last committed state, and never-stored objects get a placeholder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_cannot_commit_after_the_new_owner_activated() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let (a, b) = (db.store().await, db.store().await);
    let (ta, tb) = (Arc::new(ShardTable::new(8)), Arc::new(ShardTable::new(8)));
    durable_runtime::cluster::ClusterBackend::prepare(&a, 8)
        .await
        .unwrap();
    a.cluster_backend()
        .unwrap()
        .attach(Arc::clone(&ta))
        .unwrap();
    b.cluster_backend()
        .unwrap()
        .attach(Arc::clone(&tb))
        .unwrap();
    // One store serves one node.
    assert!(matches!(
        a.cluster_backend().unwrap().attach(Arc::clone(&tb)),
        Err(ClusterError::AlreadyAttached)
    ));
    let x = ObjectKey::new("Counter", "x");
    let shard = ta.shard_of("Counter", "x");
    let later = Instant::now() + Duration::from_secs(60);
    let write = |expected_version, state: &str| ObjectWrite {
        key: x.clone(),
        expected_version,
        state: Some(state.as_bytes().to_vec()),
        alarms: vec![],
        kv: vec![],
        idempotency: None,
        fsm: Default::default(),
    };
    // Nobody holds the shard: nothing is loaded or written.
    assert_eq!(
        a.load(&x).await.unwrap_err().kind(),
        StorageErrorKind::Fenced
    );
    ta.hold(shard, 1, later);
    assert_eq!(a.load(&x).await.unwrap(), Loaded::Absent);
    a.commit(&[write(0, "{\"count\":1}")]).await.unwrap();
    // `b` takes the shard over at epoch 2 and activates `x`: it sees `a`'s write.
    tb.hold(shard, 2, later);
    assert_eq!(b.load(&x).await.unwrap().version(), 1);
    // `a` still believes it holds the shard: its commit matches nothing.
    let stale = a.commit(&[write(1, "{\"count\":2}")]).await.unwrap_err();
    let CommitError::Storage(error) = stale else {
        panic!("expected a fenced commit, got {stale:?}");
    };
    assert_eq!(error.kind(), StorageErrorKind::Fenced);
    assert!(error.is_retryable());
    // Having seen a newer fence, `a` gave the shard up.
    assert_eq!(ta.epoch(shard), None);
    b.commit(&[write(1, "{\"count\":2}")]).await.unwrap();
    // Even holding it again at its old epoch, `a` can neither load nor write `x`.
    ta.hold(shard, 1, later);
    assert_eq!(
        a.load(&x).await.unwrap_err().kind(),
        StorageErrorKind::Fenced
    );
    ta.hold(shard, 1, later);
    assert!(a.commit(&[write(2, "{\"count\":3}")]).await.is_err());
    let stored = b.load(&x).await.unwrap().object().unwrap();
    assert_eq!(
        (stored.version, stored.state),
        (2, b"{\"count\":2}".to_vec())
    );
    // A never-stored object: the activation's placeholder carries the fence; listings skip it.
    let y = ObjectKey::new("Counter", "y");
    let y_shard = ta.shard_of("Counter", "y");
    ta.hold(y_shard, 5, later);
    tb.hold(y_shard, 6, later);
    assert_eq!(a.load(&y).await.unwrap(), Loaded::Absent);
    assert_eq!(b.load(&y).await.unwrap(), Loaded::Absent);
    let create = ObjectWrite {
        key: y.clone(),
        ..write(0, "{\"count\":1}")
    };
    let refused = a.commit(std::slice::from_ref(&create)).await.unwrap_err();
    assert!(
        matches!(&refused, CommitError::Storage(e) if e.kind() == StorageErrorKind::Fenced),
        "{refused:?}"
    );
    b.commit(&[create]).await.unwrap();
    // A version conflict at the right fence is still a conflict.
    let conflict = b.commit(&[write(1, "{}")]).await.unwrap_err();
    assert!(
        matches!(conflict, CommitError::Conflict { found: Some(2), .. }),
        "{conflict:?}"
    );
    let plain = db.store().await;
    let ids = plain.list_ids("Counter", None, 10).await.unwrap().ids;
    assert_eq!(ids, ["x", "y"]);
    // A placeholder alone is listed nowhere and loads as absent without a cluster too.
    let z = ObjectKey::new("Counter", "z");
    tb.hold(tb.shard_of("Counter", "z"), 6, later);
    assert_eq!(b.load(&z).await.unwrap(), Loaded::Absent);
    assert_eq!(plain.load(&z).await.unwrap(), Loaded::Absent);
    assert_eq!(
        plain.list_ids("Counter", None, 10).await.unwrap().ids.len(),
        2
    );
    // A deletion by the stale owner is fenced too.
    ta.hold(shard, 1, later);
    assert_eq!(
        a.delete(&x).await.unwrap_err().kind(),
        StorageErrorKind::Fenced
    );
    assert!(plain.load(&x).await.unwrap().object().is_some());
}

/// Two runtimes: the new owner takes over while the old one still believes its leases valid
/// (its leases were cut short in the database, as a paused node's would expire). The old
/// owner's next write is fenced, the call fails with a retryable `Fenced`, the metric counts
/// it, and the new owner serves the latest state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_runtime_gets_fenced_and_the_new_owner_serves_the_latest_state() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let metrics = recorder();
    // A long TTL: `a` keeps believing in its leases for the whole test.
    let ttl = Duration::from_secs(30);
    let a = node(db.store().await, "a", ttl).await;
    within(Duration::from_secs(5), "a takes every shard", || {
        serving(&a).len() == SHARDS as usize
    })
    .await;
    for _ in 0..3 {
        Counter::increment(&a, "x").await.unwrap();
    }
    // As if `a` had been paused past its leases: they end in the database.
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("UPDATE durable_shards SET lease_expires_at = now() - interval '1 hour'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.ok();
    let b = node(db.store().await, "b", ttl).await;
    // `b` took every lapsed shard when it joined.
    assert_eq!(serving(&b).len(), SHARDS as usize);
    assert_eq!(a.route("Counter", "x"), Route::Local, "a still believes");
    let fenced_before = metrics.fenced();
    // `b` activates `x` (raising its fence) and writes.
    assert_eq!(Counter::increment(&b, "x").await.unwrap(), 4);
    // `a`'s write, from its stale in-memory copy, is refused by the database.
    let error = Counter::increment(&a, "x").await.unwrap_err();
    assert!(matches!(error, Error::Fenced { .. }), "{error:?}");
    assert!(error.is_retryable());
    assert!(metrics.fenced() > fenced_before);
    // `a` dropped the shard: its next call is refused before reaching the database.
    assert!(matches!(
        Counter::increment(&a, "x").await,
        Err(Error::NotOwner { .. })
    ));
    assert_eq!(Counter::get(&b, "x").await.unwrap(), 4);
    // `a`'s next renewal finds every lease taken: it serves nothing.
    within(Duration::from_secs(20), "a gives its shards up", || {
        serving(&a).is_empty()
    })
    .await;
    assert_eq!(Counter::get(&b, "x").await.unwrap(), 4);
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarms_fire_only_on_the_owner_of_their_shard() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let a = node(db.store().await, "a", ttl).await;
    let b = node(db.store().await, "b", ttl).await;
    within(Duration::from_secs(10), "the shards split", || {
        split(&a, &b)
    })
    .await;
    let prefix = "alarm-only-owner-";
    let ids: Vec<String> = (0..30).map(|i| format!("{prefix}{i}")).collect();
    let nodes = [&a, &b];
    let mut owners = HashMap::new();
    for id in &ids {
        let rt = owner(&nodes, id).expect("an owner");
        Counter::ring_in(rt, id, 300).await.unwrap();
        owners.insert(id.clone(), rt.node_id().unwrap().to_owned());
    }
    let fired = || -> Vec<Ring> {
        rings()
            .lock()
            .unwrap()
            .iter()
            .filter(|ring| ring.id.starts_with(prefix))
            .cloned()
            .collect()
    };
    within(Duration::from_secs(15), "every alarm fires", || {
        fired().len() >= ids.len()
    })
    .await;
    // Once each, on the node that owns its shard.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fired = fired();
    assert_eq!(fired.len(), ids.len(), "{fired:?}");
    for ring in &fired {
        assert!(ring.owner, "{ring:?} fired on a node not serving it");
        assert_eq!(ring.node, owners[&ring.id], "{ring:?}");
    }
    let by_node: HashSet<&str> = fired.iter().map(|ring| ring.node.as_str()).collect();
    assert_eq!(by_node.len(), 2, "both nodes fired alarms");
    for id in &ids {
        let rt = owner(&nodes, id).unwrap();
        assert_eq!(Counter::get(rt, id).await.unwrap(), 100);
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A third node joins under load, then leaves gracefully: its shards move by hand-off, and
/// every increment (retried while its shard is between owners) is applied exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_on_join_and_graceful_leave_lose_no_call() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let a = node(db.store().await, "a", ttl).await;
    let b = node(db.store().await, "b", ttl).await;
    within(Duration::from_secs(10), "the shards split", || {
        split(&a, &b)
    })
    .await;
    let ids: Vec<String> = (0..20).map(|i| format!("h{i}")).collect();
    let mut acknowledged: HashMap<String, u64> = HashMap::new();
    let limit = Duration::from_secs(10);
    let round = |nodes: Vec<Runtime>| {
        let ids = ids.clone();
        async move {
            let refs: Vec<&Runtime> = nodes.iter().collect();
            let mut values = Vec::new();
            for id in &ids {
                values.push((id.clone(), increment(&refs, id, limit).await));
            }
            values
        }
    };
    let mut apply = |values: Vec<(String, u64)>| {
        for (id, value) in values {
            let count = acknowledged.entry(id.clone()).or_default();
            *count += 1;
            // Each acknowledged increment saw every earlier one: none lost, none doubled.
            assert_eq!(value, *count, "{id}");
        }
    };
    apply(round(vec![a.clone(), b.clone()]).await);
    let c = node(db.store().await, "c", ttl).await;
    let three = || vec![a.clone(), b.clone(), c.clone()];
    let joined = Instant::now();
    while serving(&c).is_empty()
        || serving(&a).len() + serving(&b).len() + serving(&c).len() != SHARDS as usize
    {
        apply(round(three()).await);
        assert!(
            joined.elapsed() < Duration::from_secs(15),
            "c never got its shards"
        );
    }
    apply(round(three()).await);
    // `c` leaves gracefully while calls keep coming.
    let leaving = {
        let c = c.clone();
        tokio::spawn(async move { c.shutdown().await })
    };
    let left = Instant::now();
    while !leaving.is_finished() || serving(&a).len() + serving(&b).len() != SHARDS as usize {
        apply(round(vec![a.clone(), b.clone(), c.clone()]).await);
        assert!(
            left.elapsed() < Duration::from_secs(15),
            "c's shards never came back"
        );
    }
    leaving.await.unwrap();
    apply(round(vec![a.clone(), b.clone()]).await);
    let two = [&a, &b];
    for id in &ids {
        let rt = owner(&two, id).unwrap();
        assert_eq!(Counter::get(rt, id).await.unwrap(), acknowledged[id]);
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A node whose database connection is gone stops serving at its local deadline, and the
/// other takes its shards once their leases end: within the TTL plus a renewal and a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_expire_when_a_node_stops_renewing() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let ttl = Duration::from_millis(1500);
    let store_a = db.store().await;
    let pool_a = store_a.pool().clone();
    let a = node(store_a, "a", ttl).await;
    let b = node(db.store().await, "b", ttl).await;
    within(Duration::from_secs(10), "the shards split", || {
        split(&a, &b)
    })
    .await;
    let x = (0..)
        .map(|i| format!("e{i}"))
        .find(|id| a.route("Counter", id) == Route::Local)
        .unwrap();
    assert_eq!(Counter::increment(&a, &x).await.unwrap(), 1);
    // `a` loses its database: no renewal, no heartbeat.
    pool_a.close().await;
    let cut = Instant::now();
    within(ttl, "a stops serving at its local deadline", || {
        serving(&a).is_empty()
    })
    .await;
    assert!(matches!(
        Counter::increment(&a, &x).await,
        Err(Error::NotOwner { .. })
    ));
    let limit = ttl + b_config_renewal(ttl) + Duration::from_secs(1);
    within(
        limit.saturating_sub(cut.elapsed()),
        "b takes every shard",
        || serving(&b).len() == SHARDS as usize,
    )
    .await;
    eprintln!(
        "b served every shard {:?} after a lost its database",
        cut.elapsed()
    );
    assert_eq!(Counter::increment(&b, &x).await.unwrap(), 2);
    b.shutdown().await;
    a.shutdown().await;
}

fn b_config_renewal(ttl: Duration) -> Duration {
    config("b", ttl).renew_every()
}

/// A commit that fails in the fault-injecting storage leaves the object's fence in place: the
/// object reloads and the next call commits, on the same node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_in_cluster_mode_reloads_and_keeps_the_fence() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let faulty = Arc::new(FaultyStorage::new(db.store().await));
    let a = node(Arc::clone(&faulty), "a", Duration::from_secs(5)).await;
    within(Duration::from_secs(5), "a takes every shard", || {
        serving(&a).len() == SHARDS as usize
    })
    .await;
    assert_eq!(Counter::increment(&a, "f").await.unwrap(), 1);
    faulty.fail_commits(1);
    assert!(Counter::increment(&a, "f").await.is_err());
    faulty.fail_commits_after_applying(1);
    assert!(Counter::increment(&a, "f").await.is_err());
    // The first failure applied nothing, the second applied its write: 2, then 3.
    assert_eq!(Counter::increment(&a, "f").await.unwrap(), 3);
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let (fence, epoch): (i64, i64) = sqlx::query_as(
        "SELECT o.fence, s.epoch FROM durable_objects o
         JOIN durable_shards s ON s.shard = o.shard
         WHERE o.object_type = 'Counter' AND o.object_id = 'f'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(fence, epoch);
    conn.close().await.ok();
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_that_cannot_arbitrate_and_mismatched_shard_counts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = durable_sqlx::SqliteStore::open(dir.path().join("d.db"))
        .await
        .unwrap();
    let refused = Runtime::builder(sqlite)
        .cluster(config("a", Duration::from_secs(2)))
        .join()
        .await
        .unwrap_err();
    assert!(matches!(refused, ClusterError::Unsupported), "{refused:?}");
    assert!(refused.to_string().contains("Postgres"), "{refused}");
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let a = node(db.store().await, "a", Duration::from_secs(2)).await;
    let other = Runtime::builder(db.store().await)
        .cluster(ClusterConfig {
            shards: 64,
            ..config("b", Duration::from_secs(2))
        })
        .join()
        .await
        .unwrap_err();
    assert!(
        matches!(
            other,
            ClusterError::ShardCountMismatch {
                configured: 64,
                stored: SHARDS
            }
        ),
        "{other:?}"
    );
    a.shutdown().await;
}

/// A process-wide metrics recorder, to read the fenced-commit counter.
struct Metrics(metrics_util::debugging::Snapshotter);

impl Metrics {
    fn fenced(&self) -> u64 {
        self.0
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == durable_runtime::cluster::FENCED_COMMITS)
            .map(|(_, _, _, value)| match value {
                metrics_util::debugging::DebugValue::Counter(n) => n,
                _ => 0,
            })
            .sum()
    }
}

fn recorder() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(|| Metrics(crate::global_recorders().cluster.clone()))
}

/// A node process that owns shards is killed with SIGKILL while it writes: the other node
/// serves its shards within the TTL plus a second, and every write the killed node
/// acknowledged is there (at most the one call in flight per counter is added on top).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_is_replaced_within_its_lease_and_loses_no_acknowledged_write() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let ids: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cluster_child"))
        .arg(&db.url)
        .arg("child")
        .args(&ids)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child node");
    let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let acks: Arc<Mutex<Vec<String>>> = Arc::default();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = {
        let acks = Arc::clone(&acks);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if line == "ready" {
                    let _ = ready_tx.send(());
                } else {
                    acks.lock().unwrap().push(line);
                }
            }
        })
    };
    ready_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the child joins the cluster");
    let ttl = Duration::from_secs(2);
    let b = node(db.store().await, "b", ttl).await;
    // The child hands `b` its share; it keeps the rest and writes to it.
    within(Duration::from_secs(10), "b gets its share", || {
        let mine = serving(&b).len();
        mine > 0 && mine < SHARDS as usize
    })
    .await;
    let childs = |rt: &Runtime| -> Vec<String> {
        ids.iter()
            .filter(|id| matches!(rt.route("Counter", id), Route::Remote(_)))
            .cloned()
            .collect()
    };
    within(Duration::from_secs(5), "b sees the child's shards", || {
        !childs(&b).is_empty()
    })
    .await;
    let acked = || acks.lock().unwrap().len();
    let before = acked();
    within(
        Duration::from_secs(20),
        "the child acknowledges writes",
        || acked() >= before + 200,
    )
    .await;
    child.kill().expect("SIGKILL the child");
    child.wait().unwrap();
    reader.join().unwrap();
    let took = within(ttl + Duration::from_secs(1), "b serves every shard", || {
        serving(&b).len() == SHARDS as usize
    })
    .await;
    eprintln!("b served every shard {took:?} after the kill");
    // Acknowledged values per counter: increasing, none twice.
    let mut last: HashMap<String, u64> = HashMap::new();
    for line in acks.lock().unwrap().iter() {
        let (id, value) = line.split_once(' ').expect("id value");
        let value: u64 = value.parse().unwrap();
        let previous = last.insert(id.to_owned(), value).unwrap_or(0);
        assert!(value > previous, "{id}: {value} after {previous}");
    }
    assert!(!last.is_empty());
    for (id, acknowledged) in &last {
        let stored = Counter::get(&b, id).await.unwrap();
        assert!(
            (*acknowledged..=acknowledged + 1).contains(&stored),
            "{id}: {stored} stored, {acknowledged} acknowledged"
        );
    }
    b.shutdown().await;
}

/// FSM instances a handler starts ride the fenced commit: one row per acknowledged call, and
/// a refused insert fails the call with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsm_changes_ride_the_fenced_commit() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let fsm = db.store().await.fsm();
    let a = node(db.store().await, "a", Duration::from_secs(2)).await;
    within(Duration::from_secs(5), "a takes every shard", || {
        serving(&a).len() == SHARDS as usize
    })
    .await;
    for n in 1..=3 {
        let key = format!("tally:{n}");
        assert_eq!(Counter::increment_and_start(&a, "x", key).await.unwrap(), n);
    }
    for n in 1..=3 {
        assert!(
            fsm.find(&format!("tally:{n}")).await.unwrap().is_some(),
            "the instance of call {n} was committed with it"
        );
    }
    // The same key again: the insert is refused, and the count with it.
    let refused = Counter::increment_and_start(&a, "x", "tally:1".to_owned()).await;
    assert!(
        matches!(refused, Err(Error::FsmRefused { .. })),
        "{refused:?}"
    );
    assert_eq!(Counter::get(&a, "x").await.unwrap(), 3);
    let loaded = db
        .store()
        .await
        .load(&ObjectKey::new("Counter", "x"))
        .await
        .unwrap();
    assert_eq!(loaded.object().map(|o| o.version), Some(3));
    a.shutdown().await;
}

/// Reads rest on the local lease deadline unless validated: a node whose leases ended in the
/// database while it still believes in them (as a paused node's would), with
/// `validate_reads`, never answers a read from its stale copy once the new owner wrote. Its
/// read sees the newer stored version, tries to reload, finds the newer fence and fails
/// retryably; the new owner serves the latest state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validated_reads_never_answer_from_a_stale_owner() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    // A long TTL: neither node renews during the test, so `a` keeps believing.
    let ttl = Duration::from_secs(600);
    let a = Runtime::builder(db.store().await)
        .expose::<Counter>()
        .validate_reads()
        .cluster(config("a", ttl))
        .join()
        .await
        .expect("join the cluster");
    within(Duration::from_secs(5), "a takes every shard", || {
        serving(&a).len() == SHARDS as usize
    })
    .await;
    for _ in 0..3 {
        Counter::increment(&a, "x").await.unwrap();
    }
    assert_eq!(Counter::get(&a, "x").await.unwrap(), 3);
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("UPDATE durable_shards SET lease_expires_at = now() - interval '1 hour'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.ok();
    let b = node(db.store().await, "b", ttl).await;
    assert_eq!(serving(&b).len(), SHARDS as usize);
    assert_eq!(a.route("Counter", "x"), Route::Local, "a still believes");
    assert_eq!(Counter::increment(&b, "x").await.unwrap(), 4);
    // `a` holds 3 in memory; the validated read must not answer it.
    match Counter::get(&a, "x").await {
        Ok(count) => assert_eq!(count, 4, "a stale read"),
        Err(error) => assert!(error.is_retryable(), "{error:?}"),
    }
    // Whatever that read did, `a` answers nothing stale afterwards either.
    match Counter::get(&a, "x").await {
        Ok(count) => assert_eq!(count, 4, "a stale read"),
        Err(error) => assert!(
            matches!(error, Error::NotOwner { .. } | Error::Fenced { .. }),
            "{error:?}"
        ),
    }
    assert_eq!(Counter::get(&b, "x").await.unwrap(), 4);
    a.shutdown().await;
    b.shutdown().await;
}

/// A forwarder between runtimes of this process: the owner's side of the internal route
/// without HTTP. The node at `call.owner` runs the call by name if it serves the object and
/// answers "misdirected" otherwise, nothing run.
#[derive(Clone, Default)]
struct InProcess {
    nodes: Arc<Mutex<HashMap<String, Runtime>>>,
    calls: Arc<Mutex<Vec<ForwardedCall>>>,
}

impl Forwarder for InProcess {
    fn forward(
        &self,
        call: ForwardedCall,
    ) -> BoxFuture<'static, Result<serde_json::Value, ForwardError>> {
        self.calls.lock().unwrap().push(call.clone());
        let node = self.nodes.lock().unwrap().get(&*call.owner).cloned();
        Box::pin(async move {
            let Some(rt) = node else {
                return Err(ForwardError::Unreachable {
                    owner: call.owner.to_string(),
                    message: "no such node".into(),
                });
            };
            match rt.route(&call.type_name, &call.id) {
                Route::Local => {}
                Route::Remote(owner) => {
                    return Err(ForwardError::Misdirected {
                        owner: Some(owner.to_string()),
                    });
                }
                Route::Unavailable => return Err(ForwardError::Misdirected { owner: None }),
            }
            let mut options = CallOptions::new();
            if let Some(deadline) = call.deadline {
                options = options.with_timeout(deadline);
            }
            if let Some(key) = call.idempotency_key {
                options = options.with_idempotency_key(key);
            }
            let reply = rt
                .call_here_by_name(
                    &call.type_name,
                    &call.id,
                    &call.handler,
                    call.arguments,
                    &options,
                )
                .await;
            match reply {
                Ok(reply) => Ok(reply),
                Err(CallByNameError::Handler { error, .. }) => Err(ForwardError::Handler(error)),
                Err(CallByNameError::Runtime(Error::NotOwner { owner, .. })) => {
                    Err(ForwardError::Misdirected { owner })
                }
                Err(CallByNameError::Runtime(Error::Timeout { .. })) => Err(ForwardError::Timeout),
                Err(other) => Err(ForwardError::Remote {
                    code: "internal".into(),
                    message: other.to_string(),
                    retryable: false,
                    details: Box::new(serde_json::Value::Null),
                }),
            }
        })
    }
}

/// Typed calls through a forwarder between two runtimes of this process: the call runs at the
/// owner (which alone starts the object), its output and the handler's own error come back
/// typed, and the non-owner never holds the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_calls_are_forwarded_to_the_owner() {
    let Some(db) = FreshDatabase::new().await else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let forwarder = InProcess::default();
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let rt = Runtime::builder(db.store().await)
            .expose::<Counter>()
            .forwarder(forwarder.clone())
            .cluster(config(name, ttl))
            .join()
            .await
            .expect("join the cluster");
        forwarder
            .nodes
            .lock()
            .unwrap()
            .insert(format!("{name}.test:7100"), rt.clone());
        nodes.push(rt);
    }
    let (a, b) = (&nodes[0], &nodes[1]);
    let ids: Vec<String> = (0..40).map(|i| format!("t{i}")).collect();
    within(
        Duration::from_secs(10),
        "the shards split and are known",
        || {
            split(a, b)
                && ids.iter().all(|id| {
                    matches!(
                        (a.route("Counter", id), b.route("Counter", id)),
                        (Route::Local, Route::Remote(_)) | (Route::Remote(_), Route::Local)
                    )
                })
        },
    )
    .await;
    let (at_a, at_b): (Vec<String>, Vec<String>) = ids
        .iter()
        .cloned()
        .partition(|id| a.route("Counter", id) == Route::Local);
    assert!(!at_a.is_empty() && !at_b.is_empty());
    for id in &ids {
        // Every call on `a`: local or forwarded to `b`, the same typed results.
        assert_eq!(Counter::increment(a, id).await.unwrap(), 1);
        assert_eq!(Counter::handle(a, id.clone()).increment().await.unwrap(), 2);
        assert_eq!(Counter::take(a, id, 1).await.unwrap(), 1);
        match Counter::take(a, id, 5).await {
            Err(Error::Handler(message)) => assert_eq!(message, "only 1 left"),
            other => panic!("expected the handler's error, got {other:?}"),
        }
        assert_eq!(Counter::get(b, id).await.unwrap(), 1);
    }
    // Each call to an object the caller does not serve was forwarded once, to the owner, at
    // hop 1 with a deadline: four per object of `b` from `a`, one per object of `a` from `b`.
    let calls = std::mem::take(&mut *forwarder.calls.lock().unwrap());
    let to = |owner: &str, ids: &[String]| {
        calls
            .iter()
            .filter(|call| &*call.owner == owner)
            .inspect(|call| {
                assert!(ids.contains(&call.id), "{call:?}");
                assert!(call.hops == 1 && call.deadline.is_some(), "{call:?}");
            })
            .count()
    };
    assert_eq!(to("b.test:7100", &at_b), 4 * at_b.len());
    assert_eq!(to("a.test:7100", &at_a), at_a.len());
    assert_eq!(calls.len(), 4 * at_b.len() + at_a.len());
    // Each object is live on its owner only.
    let live = |rt: &Runtime| rt.list_live::<Counter>(LiveStatus::Active, None, 1000).ids;
    let (live_a, live_b) = (live(a), live(b));
    assert!(
        at_b.iter()
            .all(|id| live_b.contains(id) && !live_a.contains(id))
    );
    assert!(
        at_a.iter()
            .all(|id| live_a.contains(id) && !live_b.contains(id))
    );
    forwarder.nodes.lock().unwrap().clear();
    for rt in &nodes {
        rt.shutdown().await;
    }
}
