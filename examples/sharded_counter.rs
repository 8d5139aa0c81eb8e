//! A counter spread over shards, summed by a coordinator.
//!
//! One object handles one call at a time, so one hot counter is bounded by the rate at which
//! a single object can commit. Spreading the counter over N shard objects lets N commits
//! proceed at once; a coordinator object adds the shards up when someone asks for the total.
//! State lives in an SQLite file in a temporary directory.
//!
//! ```text
//! cargo run -p durable-examples --example sharded_counter
//! ```

// ANCHOR: object
use std::time::SystemTime;

use durable_runtime::{Context, Error, Runtime, durable_object};
use tokio::task::JoinSet;

/// How many shards each counter is spread over.
const SHARDS: u32 = 8;

/// The id of shard `shard` of counter `counter`: `"page:home#3"`.
fn shard_id(counter: &str, shard: u32) -> String {
    format!("{counter}#{shard}")
}

/// Which shard a writer uses: a stable hash (FNV-1a) of something the writer has at hand,
/// so that writes spread evenly. For a counter any shard would do — the total sums them all.
fn shard_for(key: &str) -> u32 {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (hash % u64::from(SHARDS)) as u32
}

/// One shard of a counter.
#[durable_object]
pub struct CounterShard {
    count: u64,
}

#[durable_object(expose)]
impl CounterShard {
    #[handler]
    fn handle_add(&mut self, by: u64) -> u64 {
        // At the limit of `u64` rather than overflow: any `by` a caller sends is answered.
        self.count = self.count.saturating_add(by);
        self.count
    }

    #[handler]
    fn handle_count(&self) -> u64 {
        self.count
    }
}

/// The coordinator of one counter (same id as the counter): sums its shards.
#[durable_object]
pub struct ShardedCounter {
    /// The total at the last refresh, and when it was taken.
    last_total: u64,
    last_refresh: Option<SystemTime>,
}

#[durable_object(expose)]
impl ShardedCounter {
    /// Asks every shard for its count, all at once, and returns the sum.
    #[handler]
    async fn handle_total(&mut self, ctx: &Context) -> Result<u64, String> {
        let mut counts = JoinSet::new();
        for shard in 0..SHARDS {
            let rt = ctx.runtime().clone();
            let id = shard_id(ctx.id(), shard);
            counts.spawn(async move { CounterShard::count(&rt, &id).await });
        }
        let mut total: u64 = 0;
        while let Some(count) = counts.join_next().await {
            let count = count
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
            total = total.saturating_add(count);
        }
        self.last_total = total;
        self.last_refresh = Some(ctx.now());
        Ok(total)
    }

    /// The total at the last refresh: cheap, possibly stale.
    #[handler]
    fn handle_last_total(&self) -> (u64, Option<SystemTime>) {
        (self.last_total, self.last_refresh)
    }
}

/// Adds `by` to `counter` on behalf of `key` (a user id, a request id...).
async fn add(rt: &Runtime, counter: &str, key: &str, by: u64) -> Result<u64, Error> {
    CounterShard::add(rt, &shard_id(counter, shard_for(key)), by).await
}
// ANCHOR_END: object

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let rt = Runtime::new(durable_sqlx::SqliteStore::open(dir.path().join("counters.db")).await?);

    // ANCHOR: usage
    // 16 writers, 25 page views each, all on one counter: the writes land on 8 objects.
    let mut writers = JoinSet::new();
    for writer in 0..16 {
        let rt = rt.clone();
        writers.spawn(async move {
            for view in 0..25 {
                add(&rt, "page:home", &format!("visitor:{writer}:{view}"), 1).await?;
            }
            Ok::<_, Error>(())
        });
    }
    while let Some(done) = writers.join_next().await {
        done??;
    }

    let total = ShardedCounter::total(&rt, "page:home").await?;
    assert_eq!(total, 16 * 25);
    assert_eq!(ShardedCounter::last_total(&rt, "page:home").await?.0, total);
    println!("page:home: {total} views");
    // ANCHOR_END: usage

    let mut used = 0;
    for shard in 0..SHARDS {
        let count = CounterShard::count(&rt, &shard_id("page:home", shard)).await?;
        println!("  shard {shard}: {count}");
        used += u32::from(count > 0);
    }
    assert!(
        used > SHARDS / 2,
        "the writes should spread over the shards"
    );

    rt.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs() {
        super::run().await.unwrap();
    }
}
