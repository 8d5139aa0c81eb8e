//! A cluster node to be killed with SIGKILL by the cluster tests:
//! `cluster_child <database url> <node id> <object ids...>` joins the cluster (32 shards, a
//! 2 s lease), prints `ready`, then increments, one call at a time, each of the given counters
//! whose shard it serves, printing `<id> <value>` for every acknowledged increment.

use std::io::Write;
use std::time::Duration;

use durable_runtime::cluster::{ClusterConfig, Route};
use durable_runtime::{Runtime, durable_object};
use durable_sqlx::PostgresStore;

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
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: cluster_child <database url> <node id> <object ids...>";
    let url = args.next().expect(usage);
    let node = args.next().expect(usage);
    let ids: Vec<String> = args.collect();
    let store = PostgresStore::connect(&url).await.expect("connect");
    let rt = Runtime::builder(store)
        .expose::<Counter>()
        .cluster(ClusterConfig {
            shards: 32,
            lease_ttl: Duration::from_secs(2),
            ..ClusterConfig::new(node.clone(), format!("{node}.test:7100"))
        })
        .join()
        .await
        .expect("join the cluster");
    say("ready");
    loop {
        let mut served = false;
        for id in &ids {
            if rt.route("Counter", id) != Route::Local {
                continue;
            }
            served = true;
            // A shard moving away meanwhile refuses the call; anything else is a failure.
            match Counter::increment(&rt, id).await {
                Ok(value) => say(&format!("{id} {value}")),
                Err(
                    durable_runtime::Error::NotOwner { .. } | durable_runtime::Error::Fenced { .. },
                ) => {}
                Err(error) => panic!("increment of {id} failed: {error}"),
            }
        }
        if !served {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
