//! A token-bucket rate limiter: one object per key.
//!
//! Every key (a user, an API token, an IP address) gets its own `RateLimiter` object holding a
//! bucket of tokens. A request takes tokens; the bucket refills with the time that has passed
//! since it was last used, up to its capacity. A request that finds too few tokens is refused
//! with a typed error that says when to retry. State lives in an SQLite file in a temporary
//! directory.
//!
//! ```text
//! cargo run -p durable-examples --example rate_limiter
//! ```

// ANCHOR: object
use std::fmt;
use std::time::{Duration, SystemTime};

use durable_runtime::{Context, Error, Runtime, durable_object};
use serde::Serialize;

/// The most tokens a bucket holds: the longest burst a key may send.
const CAPACITY: f64 = 5.0;
/// Tokens added back per second.
const REFILL_PER_SEC: f64 = 2.0;

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum RateLimitError {
    /// Not enough tokens now; enough will have refilled after `retry_after`.
    Limited { retry_after: Duration },
    /// The request costs more than a full bucket holds: it can never pass.
    TooExpensive { cost: u32 },
}

impl fmt::Display for RateLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Limited { retry_after } => write!(f, "rate limited; retry in {retry_after:?}"),
            Self::TooExpensive { cost } => write!(f, "a cost of {cost} exceeds the bucket"),
        }
    }
}

impl std::error::Error for RateLimitError {}

/// The token bucket of one key.
#[durable_object(shutdown_after = "10m")]
pub struct RateLimiter {
    /// Tokens in the bucket at `updated_at`. A new key starts with a full bucket.
    #[field(default = CAPACITY)]
    tokens: f64,
    /// When `tokens` was last brought up to date; `None` until the first request.
    updated_at: Option<SystemTime>,
}

#[durable_object(expose)]
impl RateLimiter {
    /// Takes `cost` tokens; returns how many whole tokens are left.
    #[handler]
    fn handle_take(&mut self, ctx: &Context, cost: u32) -> Result<u32, RateLimitError> {
        let cost = f64::from(cost);
        if cost > CAPACITY {
            return Err(RateLimitError::TooExpensive { cost: cost as u32 });
        }
        self.tokens = self.level(ctx.now());
        self.updated_at = Some(ctx.now());
        let missing = cost - self.tokens;
        if missing > 0.0 {
            // Returning `Err` also rolls back the refill above: a refused request writes
            // nothing, so a flood of refused requests costs no database writes.
            let millis = (missing / REFILL_PER_SEC * 1000.0).ceil() as u64;
            return Err(RateLimitError::Limited {
                retry_after: Duration::from_millis(millis),
            });
        }
        self.tokens -= cost;
        Ok(self.tokens as u32)
    }

    /// Whole tokens available now, without taking any (read-only: never writes).
    #[handler]
    fn handle_available(&self, ctx: &Context) -> u32 {
        self.level(ctx.now()) as u32
    }
}

impl RateLimiter {
    /// The bucket's level at `now`: what it held, plus what it earned since, capped.
    fn level(&self, now: SystemTime) -> f64 {
        let Some(updated_at) = self.updated_at else {
            return self.tokens;
        };
        // A clock that stepped backwards earns nothing (rather than failing).
        let elapsed = now.duration_since(updated_at).unwrap_or_default();
        (self.tokens + elapsed.as_secs_f64() * REFILL_PER_SEC).min(CAPACITY)
    }
}
// ANCHOR_END: object

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let rt = Runtime::new(durable_sqlx::SqliteStore::open(dir.path().join("limits.db")).await?);

    // ANCHOR: usage
    // A burst of five passes: the bucket starts full.
    for _ in 0..5 {
        let left = RateLimiter::take(&rt, "rate:user:alice", 1).await?;
        println!("alice: request passed, tokens left: {left}");
    }

    // The sixth is refused, with a typed error telling when to come back.
    let retry_after = match RateLimiter::take(&rt, "rate:user:alice", 1).await {
        Err(Error::Handler(RateLimitError::Limited { retry_after })) => retry_after,
        other => panic!("expected a rate limit, got {other:?}"),
    };
    println!("alice: limited, retry in {retry_after:?}");
    assert!(retry_after <= Duration::from_millis(500));

    // Each key has its own bucket.
    assert_eq!(RateLimiter::take(&rt, "rate:user:bob", 2).await?, 3);

    // Some requests can never pass.
    assert!(matches!(
        RateLimiter::take(&rt, "rate:user:bob", 10).await,
        Err(Error::Handler(RateLimitError::TooExpensive { cost: 10 }))
    ));

    // After waiting as told, the request passes.
    tokio::time::sleep(retry_after).await;
    RateLimiter::take(&rt, "rate:user:alice", 1).await?;
    println!("alice: passed again after {retry_after:?}");
    // ANCHOR_END: usage

    // A key never seen before starts with a full bucket.
    assert_eq!(RateLimiter::available(&rt, "rate:user:carol").await?, 5);

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
