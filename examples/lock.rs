//! A lock with a lease that releases itself.
//!
//! `acquire` takes the lock for a lease and schedules a release alarm in the same commit;
//! `release` frees it and cancels the alarm; a holder that dies without releasing loses the
//! lock when the alarm fires — also after a restart of the process. Each acquisition gets a
//! fencing token, so work done under an expired lease can be recognised and refused. State
//! lives in an SQLite file in a temporary directory.
//!
//! ```text
//! cargo run -p durable-examples --example lock
//! ```

// ANCHOR: object
use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use durable_runtime::{Context, Error, Runtime, durable_object};
use serde::{Deserialize, Serialize};

/// Why a lock operation was refused.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum LockError {
    /// Someone else holds the lock.
    Held { holder: String },
    /// The fencing token is not the current holder's: the lease expired, or was released.
    NotHolder,
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Held { holder } => write!(f, "the lock is held by {holder}"),
            Self::NotHolder => f.write_str("not the lock's holder"),
        }
    }
}

impl std::error::Error for LockError {}

/// The current holder of a lock and the end of its lease.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Lease {
    pub holder: String,
    pub until: SystemTime,
}

/// A lock on one resource (the object's id names it).
#[durable_object]
pub struct Lock {
    /// The last lease granted and not released. It may have run out: only a lease whose
    /// `until` is still ahead holds the lock. The `expire` alarm clears it soon after.
    lease: Option<Lease>,
    /// Counts acquisitions: the current holder's fencing token.
    fence: u64,
}

#[durable_object(expose)]
impl Lock {
    /// Takes the lock for `lease`, or extends the lease if `who` already holds it. Returns the
    /// fencing token to pass along with the work done under the lock.
    #[handler]
    fn handle_acquire(
        &mut self,
        ctx: &Context,
        who: String,
        lease: Duration,
    ) -> Result<u64, LockError> {
        let now = ctx.now();
        match self.current(now) {
            Some(current) if current.holder != who => {
                return Err(LockError::Held {
                    holder: current.holder.clone(),
                });
            }
            Some(_) => {} // the holder renews its lease
            None => self.fence += 1,
        }
        self.lease = Some(Lease {
            holder: who,
            until: now + lease,
        });
        // Committed with the state: the lock is never held without its release scheduled.
        ctx.schedule_alarm(Lock::EXPIRE, lease);
        Ok(self.fence)
    }

    /// Releases the lock held with fencing token `fence`.
    #[handler]
    fn handle_release(&mut self, ctx: &Context, fence: u64) -> Result<(), LockError> {
        if self.current(ctx.now()).is_none() || fence != self.fence {
            return Err(LockError::NotHolder);
        }
        self.lease = None;
        ctx.cancel_alarm(Lock::EXPIRE);
        Ok(())
    }

    /// Who holds the lock now.
    #[handler]
    fn handle_holder(&self, ctx: &Context) -> Option<String> {
        self.current(ctx.now()).map(|lease| lease.holder.clone())
    }

    /// The lease ran out before a release: clear it.
    #[alarm]
    fn expire(&mut self, ctx: &Context) {
        match &self.lease {
            // Renewed after this alarm was due but before it ran: wait for the new end.
            Some(lease) if ctx.now() < lease.until => {
                ctx.schedule_alarm(Lock::EXPIRE, lease.until);
            }
            _ => self.lease = None,
        }
    }
}

impl Lock {
    /// The lease in force at `now`, if any.
    fn current(&self, now: SystemTime) -> Option<&Lease> {
        self.lease.as_ref().filter(|lease| now < lease.until)
    }
}
// ANCHOR_END: object

/// Polls `check` every 10 ms until it returns true; fails after two seconds.
async fn wait_until<F, Fut>(mut check: F) -> Result<(), Box<dyn std::error::Error>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(2);
    while !check().await? {
        if Instant::now() > deadline {
            return Err("timed out waiting".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("locks.db");
    let rt = Runtime::builder(durable_sqlx::SqliteStore::open(&path).await?)
        .register::<Lock>()
        .build();
    let lease = Duration::from_secs(1);

    // ANCHOR: usage
    // worker-1 takes the lock; its release alarm is scheduled in the same commit.
    let fence = Lock::acquire(&rt, "lock:invoice:42", "worker-1".to_owned(), lease).await?;
    assert_eq!(rt.list_alarms::<Lock>("lock:invoice:42").await?.len(), 1);
    println!("worker-1 holds the lock (fence {fence})");

    // worker-2 is refused while it is held.
    match Lock::acquire(&rt, "lock:invoice:42", "worker-2".to_owned(), lease).await {
        Err(Error::Handler(LockError::Held { holder })) => assert_eq!(holder, "worker-1"),
        other => panic!("expected the lock to be held, got {other:?}"),
    }

    // Releasing cancels the alarm, in the same commit.
    Lock::release(&rt, "lock:invoice:42", fence).await?;
    assert!(rt.list_alarms::<Lock>("lock:invoice:42").await?.is_empty());
    println!("worker-1 released it");
    // ANCHOR_END: usage

    // ANCHOR: expiry
    // worker-2 takes it, then its process dies before releasing.
    let acquired = Instant::now();
    let stale = Lock::acquire(&rt, "lock:invoice:42", "worker-2".to_owned(), lease).await?;
    println!("worker-2 holds the lock (fence {stale}); the process stops");
    rt.shutdown().await;
    drop(rt);

    // A new process on the same database: when the lease runs out, the lock is free, and
    // the alarm, which survived the restart, clears the lease.
    let rt = Runtime::builder(durable_sqlx::SqliteStore::open(&path).await?)
        .register::<Lock>()
        .build();
    wait_until(|| async {
        let stored = rt.read_state::<Lock>("lock:invoice:42").await?;
        Ok(stored.is_some_and(|lock| lock.lease.is_none()))
    })
    .await?;
    assert!(acquired.elapsed() >= lease);
    assert_eq!(Lock::holder(&rt, "lock:invoice:42").await?, None);
    println!(
        "the lease ran out; the alarm released it after {:?}",
        acquired.elapsed()
    );

    // worker-1 takes it again, with a new fencing token; worker-2's late release is refused.
    let fence = Lock::acquire(&rt, "lock:invoice:42", "worker-1".to_owned(), lease).await?;
    assert!(fence > stale);
    assert!(matches!(
        Lock::release(&rt, "lock:invoice:42", stale).await,
        Err(Error::Handler(LockError::NotHolder))
    ));
    // ANCHOR_END: expiry
    println!("worker-1 holds it again (fence {fence}); worker-2's stale release was refused");

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
