//! Node processes on loopback ports, one fresh database, and the signals the scenarios send.
//!
//! Every node is the example binary `cluster_node`, started with its own proxy between it and
//! Postgres ([`Proxy`]). A [`Cluster`] kills its nodes (SIGKILL) and drops its database when
//! dropped, panicking test included; a test that panics prints the tail of every node's log.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use durable_runtime::cluster::preferred_node;
use durable_sqlx::sqlx::{self, Connection, PgConnection, Row};

use super::proxy::Proxy;
use super::verbose;
use crate::fresh_database::FreshDatabase;

/// The lease TTL of every node.
pub const TTL: Duration = Duration::from_secs(2);
/// How often every node renews its leases and reads the shards' owners: a quarter of [`TTL`].
const RENEWAL: Duration = Duration::from_millis(500);
/// How many shards the test clusters have.
pub const SHARDS: u32 = 128;
/// The shared secret of the nodes' internal listeners.
const SECRET: &str = "chaos-harness-secret";
/// How long a node may take to print `ready`.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// The example binary, built once per test process (a no-op when it is up to date).
///
/// Cargo builds an integration test's binaries (`CARGO_BIN_EXE_*`), not the package's
/// examples, so the harness asks the cargo that runs it to build the example into the same
/// target directory, with the same profile.
fn node_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable");
        // target/<profile>/deps/integration-<hash>
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let target_dir = profile_dir.parent().expect("target directory");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut build = Command::new(cargo);
        build
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "--quiet",
                "-p",
                "durable-server",
                "--example",
                "cluster_node",
            ])
            .arg("--target-dir")
            .arg(target_dir);
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            build.arg("--release");
        }
        let status = build
            .status()
            .expect("run cargo build --example cluster_node");
        assert!(
            status.success(),
            "cargo build --example cluster_node failed"
        );
        let binary = profile_dir.join("examples").join("cluster_node");
        assert!(binary.exists(), "no example binary at {}", binary.display());
        binary
    })
}

/// A database of its own, created from `DATABASE_URL` (default
/// `postgres://postgres@127.0.0.1:5432/test`) and dropped at the end, with what the nodes'
/// proxies need to reach it.
pub struct Database {
    fresh: FreshDatabase,
    /// Where Postgres listens.
    pub upstream: SocketAddr,
    /// The user of `DATABASE_URL`, for the nodes' URLs (through proxies).
    user: String,
}

impl Database {
    pub async fn create() -> Self {
        let admin_url = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        // postgres://user[:password]@host:port/db[?options]
        let rest = admin_url
            .strip_prefix("postgres://")
            .or_else(|| admin_url.strip_prefix("postgresql://"))
            .expect("DATABASE_URL is a postgres:// URL");
        let (user, rest) = rest.split_once('@').expect("DATABASE_URL names a user");
        let user = user.to_owned();
        let host_port = rest.split('/').next().unwrap_or(rest);
        let host_port = if host_port.contains(':') {
            host_port.to_owned()
        } else {
            format!("{host_port}:5432")
        };
        let upstream = host_port
            .to_socket_addrs()
            .expect("resolve the database host")
            .next()
            .expect("an address for the database host");
        Self {
            fresh: FreshDatabase::on(admin_url, "chaos").await,
            upstream,
            user,
        }
    }

    /// The database's URL through a proxy at `proxy`.
    pub fn url_through(&self, proxy: SocketAddr) -> String {
        format!("postgres://{}@{proxy}/{}", self.user, self.fresh.name())
    }

    /// A direct connection (for the harness's own queries).
    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.fresh.url)
            .await
            .expect("connect to the test database")
    }
}

/// One node process.
pub struct Node {
    /// Its node id.
    pub id: String,
    /// Its public (gateway) address.
    pub public: SocketAddr,
    child: Child,
    /// Its database connection goes through this proxy.
    pub proxy: Proxy,
    log: PathBuf,
    /// Whether it was killed or terminated (its process has ended).
    pub gone: bool,
}

impl Node {
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {signal} {} failed", self.id);
    }

    /// SIGKILL, and waits for the process to end.
    pub fn kill(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        self.gone = true;
    }

    /// SIGSTOP: the process freezes, sockets open.
    pub fn stop(&self) {
        self.signal("STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// SIGTERM, and waits (up to `deadline`, failing the test) for a graceful exit.
    pub fn terminate(&mut self, deadline: Duration) -> Duration {
        let started = Instant::now();
        self.signal("TERM");
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the node") {
                self.gone = true;
                assert!(
                    status.success(),
                    "node {} exited with {status} after SIGTERM",
                    self.id
                );
                return started.elapsed();
            }
            assert!(
                started.elapsed() < deadline,
                "node {} did not exit within {deadline:?} of SIGTERM",
                self.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn tail_of_log(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// The nodes of one test, their database and a directory for their logs.
pub struct Cluster {
    /// The nodes, in start order (killed ones stay, marked [`Node::gone`]).
    pub nodes: Vec<Node>,
    /// The database.
    pub db: Database,
    logs: tempfile::TempDir,
}

impl Cluster {
    /// Starts `n` nodes on a fresh database and waits until all of them serve.
    pub async fn start(n: usize) -> Self {
        let mut cluster = Self {
            nodes: Vec::new(),
            db: Database::create().await,
            logs: tempfile::tempdir().expect("log directory"),
        };
        // The first node creates the cluster's tables; the others join it.
        cluster.add_node().await;
        let rest: Vec<_> = (1..n).map(|_| cluster.spawn_node()).collect();
        for pending in rest {
            let node = pending.await;
            cluster.nodes.push(node);
        }
        cluster
    }

    /// Starts one more node and waits until it serves.
    pub async fn add_node(&mut self) -> usize {
        let node = self.spawn_node().await;
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn spawn_node(&self) -> impl std::future::Future<Output = Node> + 'static {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let binary = node_binary().to_owned();
        let id = format!("node-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let log = self.logs.path().join(format!("{id}.log"));
        let upstream = self.db.upstream;
        let (user, name) = (self.db.user.clone(), self.db.fresh.name().to_owned());
        async move {
            let proxy = Proxy::start(upstream).await;
            let url = format!("postgres://{user}@{}/{name}", proxy.address());
            let stderr = std::fs::File::create(&log).expect("node log");
            let mut child = Command::new(&binary)
                .args(["--database-url", &url, "--node-id", &id])
                .args(["--listen", "127.0.0.1:0", "--internal", "127.0.0.1:0"])
                .args(["--shards", &SHARDS.to_string()])
                .args(["--lease-ttl-ms", &TTL.as_millis().to_string()])
                .args(["--secret", SECRET])
                .env(
                    "RUST_LOG",
                    std::env::var("CHAOS_LOG").unwrap_or_else(|_| "warn,tower_http=off".into()),
                )
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(stderr)
                .spawn()
                .expect("start cluster_node");
            let stdout = child.stdout.take().expect("stdout");
            let (ready, readied) = tokio::sync::oneshot::channel();
            // Reads stdout to its end so that the node never blocks on a full pipe.
            std::thread::spawn(move || {
                let mut ready = Some(ready);
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.strip_prefix("ready ")
                        && let Some(ready) = ready.take()
                    {
                        ready.send(rest.to_owned()).ok();
                    }
                }
            });
            let mut node = Node {
                id,
                public: SocketAddr::from(([127, 0, 0, 1], 0)),
                child,
                proxy,
                log,
                gone: false,
            };
            let line = match tokio::time::timeout(START_DEADLINE, readied).await {
                Ok(Ok(line)) => line,
                outcome => {
                    node.kill();
                    panic!(
                        "node {} did not print `ready` within {START_DEADLINE:?} ({outcome:?}); log:\n{}",
                        node.id,
                        node.tail_of_log(40)
                    );
                }
            };
            let public = line.split_whitespace().next().unwrap_or_default();
            node.public = public
                .parse()
                .unwrap_or_else(|_| panic!("`ready {line}`: no public address"));
            node
        }
    }

    /// The public addresses of every node started (including gone ones: a client does not
    /// know which are down).
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|node| node.public).collect()
    }

    /// The owner of every held shard, from `durable_shards`.
    pub async fn shard_owners(&self) -> HashMap<u32, (String, i64)> {
        let mut conn = self.db.connect().await;
        let rows = sqlx::query(
            "SELECT shard, owner, epoch FROM durable_shards \
             WHERE owner IS NOT NULL AND lease_expires_at > now()",
        )
        .fetch_all(&mut conn)
        .await
        .expect("read durable_shards");
        conn.close().await.ok();
        rows.iter()
            .map(|row| {
                let shard: i32 = row.get(0);
                let owner: String = row.get(1);
                let epoch: i64 = row.get(2);
                (u32::try_from(shard).expect("shard"), (owner, epoch))
            })
            .collect()
    }

    /// Connections to the database now: how many are idle inside an open transaction, and the
    /// statements waiting for a lock (a frozen node's open transaction blocks the others).
    pub async fn stuck_connections(&self) -> (i64, Vec<String>) {
        let mut conn = self.db.connect().await;
        let idle: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
        )
        .fetch_one(&mut conn)
        .await
        .expect("read pg_stat_activity");
        let waiting: Vec<String> = sqlx::query_scalar(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_all(&mut conn)
        .await
        .expect("read pg_stat_activity");
        conn.close().await.ok();
        (idle, waiting)
    }

    /// Waits until the placement has settled: every shard held, each by the node rendezvous
    /// hashing prefers among the nodes not gone — the placement every node works towards, so
    /// nothing moves from then on without a fault — and every node has read it (at its next
    /// renewal, a quarter TTL later).
    pub async fn settled(&self, deadline: Duration) -> HashMap<u32, (String, i64)> {
        let started = Instant::now();
        let live: Vec<&str> = self
            .nodes
            .iter()
            .filter(|node| !node.gone)
            .map(|node| node.id.as_str())
            .collect();
        loop {
            let owners = self.shard_owners().await;
            let misplaced = (0..SHARDS)
                .filter(|shard| {
                    let preferred = preferred_node(live.iter().copied(), *shard);
                    owners.get(shard).map(|(owner, _)| owner.as_str()) != preferred
                })
                .count();
            if misplaced == 0 {
                tokio::time::sleep(RENEWAL).await;
                if verbose() {
                    eprintln!("placement settled in {:?}", started.elapsed());
                }
                return owners;
            }
            assert!(
                started.elapsed() < deadline,
                "placement did not settle within {deadline:?}: {misplaced} shards not held by \
                 their preferred node"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The index of the node called `id`.
    pub fn index_of(&self, id: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if !node.gone {
                node.kill();
            }
        }
        if std::thread::panicking() {
            for node in &self.nodes {
                eprintln!(
                    "---- log of {} (last lines) ----\n{}",
                    node.id,
                    node.tail_of_log(30)
                );
            }
        }
    }
}

/// Runs the scenarios one at a time: each loads the machine, and their timings are measured.
pub async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}
