//! The cluster's admin side on Postgres: two nodes in this process, each behind a gateway on a
//! loopback port, one fresh database per test. `GET /v1/cluster/nodes|shards` list both nodes
//! with shard counts that add up to the cluster's; `durable cluster nodes|shards` prints them
//! through a gateway and from the database directly; the cluster metrics are on `/metrics`;
//! a gateway not in cluster mode answers `404 cluster_not_enabled`.

use crate::fresh_database;

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Counter, DEADLINE};
use durable_runtime::cluster::{ClusterConfig, ClusterError, preferred_node, shard_of};
use durable_runtime::{MemoryStorage, Runtime};
use durable_server::ServerConfig;
use durable_server::auth::hash_token;
use durable_server::cli::{App, Exit};
use durable_server::client::{Client, ClientError};
use durable_sqlx::PostgresStore;
use durable_sqlx::sqlx::{self, Connection, PgConnection};
use fresh_database::FreshDatabase;
use serde_json::Value;

const TOKEN: &str = "admin-token";
const READER_TOKEN: &str = "reader-token";
const SHARDS: u32 = 16;

/// The gateway's settings: `admin` may administer the server, `reader` only read counters.
fn server_config() -> ServerConfig {
    ServerConfig::from_toml_str(&format!(
        r#"
        [[principals]]
        name = "admin"
        tokens_sha256 = ["{}"]
          [[principals.grants]]
          types = ["*"]
          ops = ["call", "read", "admin"]

        [[principals]]
        name = "reader"
        tokens_sha256 = ["{}"]
          [[principals.grants]]
          types = ["Counter"]
          ops = ["read"]
        "#,
        hash_token(TOKEN),
        hash_token(READER_TOKEN),
    ))
    .expect("a valid configuration")
}

/// A runtime served by a gateway on a loopback port until [`Gateway::stop`].
struct Gateway {
    runtime: Runtime,
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Gateway {
    async fn serve(runtime: Runtime) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(durable_server::serve_with_shutdown(
            runtime.clone(),
            server_config(),
            listener,
            async {
                let _ = stopped.await;
            },
        ));
        Self {
            runtime,
            url,
            stop: Some(stop),
            served,
        }
    }

    fn client(&self) -> Client {
        Client::new(&self.url).with_token(TOKEN)
    }

    /// Stops the gateway, which shuts its runtime down (a node hands its shards over).
    async fn stop(mut self) {
        drop(self.stop.take());
        tokio::time::timeout(DEADLINE, self.served)
            .await
            .expect("the gateway stops in time")
            .unwrap()
            .unwrap();
    }
}

/// A node `name` of the cluster in `db`, leases of `ttl`.
async fn node(db: &FreshDatabase, name: &str, ttl: Duration) -> Runtime {
    join(db, name, ttl, SHARDS).await.expect("join the cluster")
}

/// Starts node `name` of a cluster of `shards` shards in `db`.
async fn join(
    db: &FreshDatabase,
    name: &str,
    ttl: Duration,
    shards: u32,
) -> Result<Runtime, ClusterError> {
    let store = PostgresStore::connect(&db.url).await.expect("connect");
    Runtime::builder(store)
        .expose::<Counter>()
        .cluster(ClusterConfig {
            shards,
            lease_ttl: ttl,
            drain_timeout: Duration::from_secs(2),
            ..ClusterConfig::new(name, format!("{name}.test:7100"))
        })
        .join()
        .await
}

/// Waits until `check` returns `Some`, polling every 50 ms; fails the test past [`DEADLINE`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{what}: not within {DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of the `/metrics` sample `name{labels}` (labels as Prometheus prints them, `""`
/// for none), if present.
fn sample(page: &str, name: &str, labels: &str) -> Option<f64> {
    let series = if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{labels}}}")
    };
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == series).then(|| value.parse().ok())?
        })
}

async fn metrics_page(gateway: &Gateway) -> String {
    let reply = reqwest::Client::new()
        .get(format!("{}/metrics", gateway.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    reply.text().await.unwrap()
}

/// Runs the generic binary's command line in this thread: exit, standard output and error.
fn durable(args: &[&str]) -> (Exit, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let args = [&["durable"], args].concat();
    let exit = App::generic().run_from(args, &mut out, &mut err);
    let text = |bytes| String::from_utf8(bytes).unwrap();
    (exit, text(out), text(err))
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|error| panic!("{error}: {text}"))
}

/// Two nodes: the routes list both with shard counts adding up to the cluster's, the
/// shards route filters by owner and sums up per node, the command line prints the same
/// through a gateway and from the database, and the cluster metrics are on `/metrics`.
#[test]
fn two_nodes_are_listed_with_their_shards_by_routes_cli_and_metrics() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = tokio.block_on(FreshDatabase::new("cluster_admin_two_nodes")) else {
        return;
    };
    let ttl = Duration::from_secs(2);
    // The exporter before the nodes (as the metrics module asks), so that their first
    // acquisitions are counted even when no other test of this process installed it.
    assert!(durable_server::metrics::prometheus().is_some());
    let (a, b) = tokio.block_on(async {
        // `a` first, alone: it takes every shard, then hands `b` the ones `b` prefers.
        let a = Gateway::serve(node(&db, "adm-a", ttl).await).await;
        eventually("a holds every shard", || async {
            (a.runtime.serving_shards()?.len() == SHARDS as usize).then_some(())
        })
        .await;
        let b = Gateway::serve(node(&db, "adm-b", ttl).await).await;
        (a, b)
    });

    let (nodes, shards) = tokio.block_on(async {
        // Settled when every shard is held by the node rendezvous hashing prefers: no
        // hand-off is left to make.
        let shards = eventually("the shards split between a and b", || async {
            let shards = a.client().cluster().shards(None).await.unwrap();
            let settled = shards
                .shards
                .iter()
                .all(|row| row.owner.as_deref() == preferred_node(["adm-a", "adm-b"], row.shard));
            settled.then_some(shards)
        })
        .await;
        let counts = &shards.summary.per_node;
        assert!(counts["adm-a"] > 0 && counts["adm-b"] > 0, "{counts:?}");
        assert_eq!(shards.summary.unowned, 0);
        let nodes = b.client().cluster().nodes().await.unwrap();
        (nodes, shards)
    });
    assert_eq!(nodes.node.as_deref(), Some("adm-b"));
    assert_eq!(nodes.shard_count, SHARDS);
    let ids: Vec<&str> = nodes.nodes.iter().map(|n| n.node_id.as_str()).collect();
    assert_eq!(ids, ["adm-a", "adm-b"]);
    assert!(nodes.nodes.iter().all(|n| n.live && n.status == "up"));
    assert_eq!(nodes.nodes[0].address, "adm-a.test:7100");
    assert_eq!(
        nodes.nodes.iter().map(|n| n.shards).sum::<u32>() + nodes.unowned,
        SHARDS
    );
    assert_eq!(shards.summary.total, SHARDS);
    assert_eq!(shards.shards.len(), SHARDS as usize);
    assert_eq!(shards.summary.per_node.values().sum::<u32>(), SHARDS);
    // Every acquisition raises an epoch: b's shards were taken twice (by a, then by b).
    assert!(shards.summary.max_epoch >= 2, "{shards:?}");
    let held_by_b = shards
        .shards
        .iter()
        .filter(|s| s.owner.as_deref() == Some("adm-b"))
        .count();
    assert_eq!(held_by_b as u32, shards.summary.per_node["adm-b"]);

    // Filtered by owner: only b's shards, the summary still of the whole cluster.
    let only_b = tokio
        .block_on(a.client().cluster().shards(Some("adm-b")))
        .unwrap();
    assert!(!only_b.shards.is_empty());
    assert!(
        only_b
            .shards
            .iter()
            .all(|s| s.owner.as_deref() == Some("adm-b") && !s.free)
    );
    assert_eq!(only_b.summary.total, SHARDS);

    // Admin only: a token that may read counters may not list the cluster.
    let refused = tokio.block_on(
        Client::new(&a.url)
            .with_token(READER_TOKEN)
            .cluster()
            .nodes(),
    );
    assert!(
        matches!(&refused, Err(ClientError::Api { status: 403, .. })),
        "{refused:?}"
    );

    // The command line, through a gateway: JSON as the route answers, and a table.
    let gateway = ["--gateway", a.url.as_str(), "--token", TOKEN];
    let (exit, out, err) =
        durable(&[&["cluster", "nodes", "--output", "json"][..], &gateway].concat());
    assert_eq!(exit, Exit::Ok, "{err}");
    let printed = json(&out);
    assert_eq!(printed["node"], "adm-a");
    let listed: BTreeMap<String, u64> = printed["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node_id"].as_str().unwrap().to_owned(),
                n["shards"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed.values().sum::<u64>(), u64::from(SHARDS));
    let (exit, out, err) = durable(&[&["cluster", "nodes"][..], &gateway].concat());
    assert_eq!(exit, Exit::Ok, "{err}");
    assert!(out.starts_with("NODE"), "{out}");
    assert!(
        out.contains("adm-a (answering)") && out.contains("adm-b"),
        "{out}"
    );
    assert!(
        out.contains(&format!("{SHARDS} shards, 0 held by no node")),
        "{out}"
    );
    let (exit, out, err) =
        durable(&[&["cluster", "shards", "--owner", "adm-a"][..], &gateway].concat());
    assert_eq!(exit, Exit::Ok, "{err}");
    assert!(out.starts_with("SHARD"), "{out}");
    assert!(!out.contains("adm-b\n") && out.contains("adm-a"), "{out}");
    assert!(
        out.contains(&format!("{SHARDS} shards; per node: adm-a: ")),
        "{out}"
    );

    // The command line on the database directly: the same nodes and shards, no node answering.
    let direct = ["--database-url", db.url.as_str()];
    let (exit, out, err) =
        durable(&[&["cluster", "shards", "--output", "json"][..], &direct].concat());
    assert_eq!(exit, Exit::Ok, "{err}");
    let printed = json(&out);
    assert_eq!(printed["summary"]["total"], SHARDS);
    assert_eq!(printed["shards"].as_array().unwrap().len(), SHARDS as usize);
    let (exit, out, err) =
        durable(&[&["cluster", "nodes", "--output", "json"][..], &direct].concat());
    assert_eq!(exit, Exit::Ok, "{err}");
    let printed = json(&out);
    assert_eq!(printed["node"], Value::Null);
    assert_eq!(printed["nodes"].as_array().unwrap().len(), 2);

    tokio.block_on(async {
        // The cluster metrics, each node's gauge under its own label.
        let owned = |page: &str, node: &str| {
            sample(
                page,
                "durable_cluster_owned_shards",
                &format!("node=\"{node}\""),
            )
        };
        let held = |node: &str| shards.summary.per_node[node];
        // A gauge set at each node's renewal: wait for the renewal after the split.
        let page = eventually("the gauges show the split", || async {
            let page = metrics_page(&a).await;
            let a_held = owned(&page, "adm-a")?;
            let b_held = owned(&page, "adm-b")?;
            (a_held + b_held == f64::from(SHARDS)).then_some(page)
        })
        .await;
        assert_eq!(owned(&page, "adm-a"), Some(f64::from(held("adm-a"))));
        let counter = |page: &str, name: &str| sample(page, name, "").unwrap_or(0.0);
        // a took all, then b took its own: at least SHARDS + b's acquisitions and hand-offs.
        let acquired = counter(&page, "durable_cluster_acquisitions_total");
        assert!(acquired >= f64::from(SHARDS + held("adm-b")), "{page}");
        assert!(counter(&page, "durable_cluster_handoffs_total") >= f64::from(held("adm-b")));
        assert!(
            counter(&page, "durable_cluster_lease_renewals_total") > 0.0,
            "{page}"
        );
        let lost_before = counter(&page, "durable_cluster_lost_shards_total");

        // Another owner takes every shard in the database (as if both nodes had been cut
        // off): each node's next renewal loses its shards, counted, and the gauges fall to 0.
        db.execute(
            "UPDATE durable_shards SET owner = 'elsewhere', epoch = epoch + 1,
                 lease_expires_at = now() + interval '1 hour'",
        )
        .await;
        let page = eventually("both nodes lose their shards", || async {
            let page = metrics_page(&a).await;
            let gone = owned(&page, "adm-a")? == 0.0 && owned(&page, "adm-b")? == 0.0;
            gone.then_some(page)
        })
        .await;
        assert!(
            counter(&page, "durable_cluster_lost_shards_total") >= lost_before + f64::from(SHARDS),
            "{page}"
        );
        assert!(a.runtime.serving_shards().unwrap().is_empty());
        a.stop().await;
        b.stop().await;
    });
}

/// A gateway not in cluster mode answers the cluster routes with `404 cluster_not_enabled`,
/// and the command line says so with exit code 2, through the gateway and on a database
/// without a cluster.
#[test]
fn a_gateway_not_in_cluster_mode_answers_cluster_not_enabled() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let single = tokio.block_on(Gateway::serve(
        Runtime::builder(MemoryStorage::new())
            .expose::<Counter>()
            .build(),
    ));
    for shards in [false, true] {
        let client = single.client();
        let cluster = client.cluster();
        let refused = tokio.block_on(async {
            if shards {
                cluster.shards(None).await.map(|_| ())
            } else {
                cluster.nodes().await.map(|_| ())
            }
        });
        match refused {
            Err(ClientError::Api { status, error }) => {
                assert_eq!(status, 404);
                assert_eq!(error.code, "cluster_not_enabled");
                assert!(!error.retryable);
            }
            other => panic!("expected cluster_not_enabled, got {other:?}"),
        }
    }
    let (exit, _, err) = durable(&[
        "cluster",
        "shards",
        "--gateway",
        &single.url,
        "--token",
        TOKEN,
        "--output",
        "json",
    ]);
    assert_eq!(exit, Exit::NotFound);
    assert_eq!(json(&err)["error"]["code"], "cluster_not_enabled");

    // Directly, on a database no node joined a cluster on (SQLite: none can).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("single.db");
    let url = format!("sqlite://{}", path.display());
    tokio.block_on(async {
        durable_sqlx::SqliteStore::open(&url).await.unwrap();
    });
    let (exit, _, err) = durable(&["cluster", "nodes", "--database-url", &url]);
    assert_eq!(exit, Exit::NotFound, "{err}");
    assert!(err.contains("cluster_not_enabled"), "{err}");
    tokio.block_on(single.stop());
}

/// `durable cluster reshard` changes a stopped cluster's shard count: refused while a node
/// runs or without `--offline`; then every object's shard is computed again, a node with the
/// old count is refused, and a node with the new one serves every object with its state and
/// writes it (the new shards' epochs are above the fences already written).
#[test]
fn a_stopped_cluster_is_resharded_and_serves_every_object_again() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let Some(db) = tokio.block_on(FreshDatabase::new("cluster_admin_reshard")) else {
        return;
    };
    let ttl = Duration::from_secs(2);
    let ids: Vec<String> = (0..20).map(|n| format!("c{n}")).collect();
    let a = tokio.block_on(async {
        let a = node(&db, "rs-a", ttl).await;
        eventually("a holds every shard", || async {
            (a.serving_shards()?.len() == SHARDS as usize).then_some(())
        })
        .await;
        for id in &ids {
            Counter::increment(&a, id, 2).await.unwrap();
        }
        // Restarted: its shards are taken again at a higher epoch, and the objects' fences
        // rise with their next activation, above the epochs a new cluster would start at.
        a.shutdown().await;
        let a = node(&db, "rs-a", ttl).await;
        eventually("a holds every shard again", || async {
            (a.serving_shards()?.len() == SHARDS as usize).then_some(())
        })
        .await;
        for id in &ids {
            Counter::increment(&a, id, 1).await.unwrap();
        }
        a
    });
    let reshard = |more: &[&str]| {
        let args = [
            &[
                "cluster",
                "reshard",
                "--shards",
                "4",
                "--database-url",
                db.url.as_str(),
            ][..],
            more,
        ]
        .concat();
        durable(&args)
    };
    let (exit, _, err) = reshard(&["--output", "json"]);
    assert_eq!(exit, Exit::Error);
    assert_eq!(json(&err)["error"]["code"], "offline_required");
    let (exit, _, err) = reshard(&["--offline", "--output", "json"]);
    assert_eq!(exit, Exit::Error);
    let error = json(&err);
    assert_eq!(error["error"]["code"], "cluster_running", "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("rs-a"));

    // Stopped gracefully: its leases released, it left.
    tokio.block_on(a.shutdown());
    let (exit, out, err) = reshard(&["--offline", "--output", "json"]);
    assert_eq!(exit, Exit::Ok, "{err}");
    let done = json(&out);
    assert_eq!(done["from"], SHARDS);
    assert_eq!(done["to"], 4);
    assert_eq!(done["objects"], ids.len());
    assert!(done["epoch"].as_u64().unwrap() >= 2, "{done}");

    tokio.block_on(async {
        let mut conn = PgConnection::connect(&db.url).await.unwrap();
        let rows: Vec<(String, String, i32)> =
            sqlx::query_as("SELECT object_type, object_id, shard FROM durable_objects")
                .fetch_all(&mut conn)
                .await
                .unwrap();
        assert_eq!(rows.len(), ids.len());
        for (ty, id, shard) in rows {
            assert_eq!(shard as u32, shard_of(&ty, &id, 4), "{ty}/{id}");
        }
        let shards: i64 = sqlx::query_scalar("SELECT count(*) FROM durable_shards")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(shards, 4);
        conn.close().await.ok();

        let refused = join(&db, "rs-old", ttl, SHARDS).await;
        assert!(
            matches!(
                refused,
                Err(ClusterError::ShardCountMismatch {
                    configured: SHARDS,
                    stored: 4
                })
            ),
            "{refused:?}"
        );
        let b = join(&db, "rs-b", ttl, 4)
            .await
            .expect("join with the new count");
        eventually("b holds every shard", || async {
            (b.serving_shards()?.len() == 4).then_some(())
        })
        .await;
        for id in &ids {
            assert_eq!(Counter::get(&b, id).await.unwrap(), 3, "{id}");
            assert_eq!(Counter::increment(&b, id, 1).await.unwrap(), 4, "{id}");
        }
        b.shutdown().await;
    });
}
