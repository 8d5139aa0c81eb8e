//! One node of a cluster, serving a `Counter` over HTTP: the node the cluster's chaos tests
//! start three or four of, against one Postgres database.
//!
//! ```text
//! cargo run -p durable-server --example cluster_node -- \
//!     --database-url postgres://postgres@127.0.0.1:5432/app --node-id n1 \
//!     --listen 127.0.0.1:0 --internal 127.0.0.1:0 --shards 64 --lease-ttl-ms 2000 --secret s3cret
//! # ready 127.0.0.1:41234 127.0.0.1:41235
//! ```
//!
//! Once it has joined the cluster and listens, it prints one line, `ready <public address>
//! <internal address>`, on standard output (port 0 lets the system choose). Calls on its public
//! listener (`POST /v1/objects/Counter/{id}/call/{handler}`, no token needed) reach the node
//! serving the object, forwarded over the internal listener if need be; `/metrics` shows the
//! cluster's metrics. It stops gracefully (handing its shards over) on SIGTERM or Ctrl-C.
//!
//! `Counter`'s handlers: `increment` (returns the new count), `get`, `fired` (how many times
//! its alarm fired), `fire_at` (`{"at_ms": <Unix time in ms>}`: sets the alarm `fire`, which
//! adds one to `fired`).

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use clap::Parser;
use durable_runtime::{AlarmSettings, Context, Runtime, durable_object};
use durable_server::ServerConfig;
use durable_server::auth::AuthConfig;
use durable_server::cluster::{ClusterSecret, ClusterSettings};
use durable_sqlx::PostgresStore;
use tokio::net::TcpListener;

/// A counter with an alarm.
#[durable_object]
pub struct Counter {
    count: u64,
    fired: u64,
}

#[durable_object(expose)]
impl Counter {
    /// Adds one; returns the new count.
    #[handler]
    fn handle_increment(&mut self) -> u64 {
        self.count += 1;
        self.count
    }

    /// The count.
    #[handler]
    fn handle_get(&self) -> u64 {
        self.count
    }

    /// How many times the alarm fired.
    #[handler]
    fn handle_fired(&self) -> u64 {
        self.fired
    }

    /// Sets the alarm `fire` at `at_ms` milliseconds after the Unix epoch.
    #[handler]
    fn handle_fire_at(&mut self, ctx: &Context, at_ms: u64) {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(at_ms);
        ctx.schedule_alarm(Counter::FIRE, at);
    }

    /// Counts a firing.
    #[alarm]
    fn fire(&mut self) {
        self.fired += 1;
    }
}

/// One node of a cluster serving `Counter`.
#[derive(Parser)]
struct Args {
    /// The cluster's Postgres database.
    #[arg(long)]
    database_url: String,
    /// This node's id, unique in the cluster.
    #[arg(long)]
    node_id: String,
    /// The public listener's address (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The internal listener's address, for calls forwarded by the other nodes.
    #[arg(long, default_value = "127.0.0.1:0")]
    internal: SocketAddr,
    /// The cluster's shard count (fixed by its first node).
    #[arg(long, default_value_t = 64)]
    shards: u32,
    /// The lease TTL, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    lease_ttl_ms: u64,
    /// The secret all nodes share.
    #[arg(long, env = "DURABLE_CLUSTER_SECRET")]
    secret: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    // The metrics recorder first, so that the runtime's metrics reach `/metrics`.
    let _ = durable_server::metrics::prometheus();

    let public = TcpListener::bind(args.listen).await?;
    let internal = TcpListener::bind(args.internal).await?;
    let (public_address, internal_address) = (public.local_addr()?, internal.local_addr()?);
    let mut settings = ClusterSettings::new(
        args.node_id,
        internal_address,
        ClusterSecret::new(args.secret),
    );
    settings.node.shards = args.shards;
    settings.node.lease_ttl = Duration::from_millis(args.lease_ttl_ms);
    settings.node.drain_timeout = settings.node.lease_ttl;

    // A node stopped mid-transaction must not hold its row locks past its lease: the node
    // taking its shards over would wait for them.
    let store = PostgresStore::builder(&args.database_url)
        .idle_in_transaction_timeout(Some(settings.node.lease_ttl / 2))
        .connect()
        .await?;
    let builder = Runtime::builder(store)
        .expose::<Counter>()
        .alarm_settings(AlarmSettings::default().with_poll_interval(Duration::from_millis(100)));
    let runtime = durable_server::cluster::join(builder, &settings).await?;

    let config = ServerConfig {
        bind: public_address,
        call_timeout: Duration::from_secs(10),
        shutdown_grace: Duration::from_secs(10),
        auth: AuthConfig {
            disabled: true,
            ..AuthConfig::default()
        },
        console: false,
        cluster: Some(settings),
        ..ServerConfig::default()
    };
    println!("ready {public_address} {internal_address}");
    durable_server::serve_cluster_with_shutdown(
        runtime,
        config,
        public,
        internal,
        durable_server::shutdown_signal(),
    )
    .await?;
    Ok(())
}
