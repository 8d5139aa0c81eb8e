//! Sessions that expire when idle.
//!
//! Each session is an object. Every use re-arms its `expire` alarm, so only a session left
//! idle for its whole timeout expires; the alarm then wipes its data and marks it expired.
//! Logging out deletes the session outright (`Runtime::delete`: state and alarm in one
//! transaction), and a sweeper deletes the rows of expired sessions. State lives in an SQLite
//! file in a temporary directory.
//!
//! ```text
//! cargo run -p durable-examples --example sessions
//! ```

// ANCHOR: object
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use durable_runtime::{Context, Error, Runtime, durable_object};
use serde::Serialize;

/// Why a session operation was refused.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum SessionError {
    /// No session was started under this id (or it was deleted).
    NotFound,
    /// The session expired; the user must log in again.
    Expired,
    /// A session was already started under this id; ids are never reused.
    AlreadyStarted,
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotFound => "no such session",
            Self::Expired => "the session expired",
            Self::AlreadyStarted => "a session with this id exists",
        })
    }
}

impl std::error::Error for SessionError {}

/// One login session; its id is a random token.
#[durable_object(shutdown_after = "5m")]
pub struct Session {
    user: Option<String>,
    data: BTreeMap<String, String>,
    /// How long the session may stay unused.
    idle_timeout: Duration,
    /// When it expires unless it is used before.
    expires_at: Option<SystemTime>,
    /// Set by the `expire` alarm, which also wiped the data.
    expired: bool,
}

#[durable_object(expose)]
impl Session {
    /// Starts the session for `user`; it expires after `idle_timeout` without use.
    #[handler]
    fn handle_start(
        &mut self,
        ctx: &Context,
        user: String,
        idle_timeout: Duration,
    ) -> Result<(), SessionError> {
        if self.user.is_some() || self.expired {
            return Err(SessionError::AlreadyStarted);
        }
        self.user = Some(user);
        self.idle_timeout = idle_timeout;
        self.extend(ctx);
        Ok(())
    }

    /// Uses the session: returns its user and pushes its expiry back.
    #[handler]
    fn handle_touch(&mut self, ctx: &Context) -> Result<String, SessionError> {
        let user = self.live(ctx.now())?.to_owned();
        self.extend(ctx);
        Ok(user)
    }

    /// Stores a value in the session (and uses it).
    #[handler]
    fn handle_set(
        &mut self,
        ctx: &Context,
        key: String,
        value: String,
    ) -> Result<(), SessionError> {
        self.live(ctx.now())?;
        self.extend(ctx);
        self.data.insert(key, value);
        Ok(())
    }

    /// Reads a value, without extending the session (read-only: never writes).
    #[handler]
    fn handle_get(&self, ctx: &Context, key: String) -> Result<Option<String>, SessionError> {
        self.live(ctx.now())?;
        Ok(self.data.get(&key).cloned())
    }

    /// The session's user, without extending it.
    #[handler]
    fn handle_user(&self, ctx: &Context) -> Result<String, SessionError> {
        self.live(ctx.now()).map(str::to_owned)
    }

    /// Idle for the whole timeout: forget everything but the fact that it expired.
    #[alarm]
    fn expire(&mut self, ctx: &Context) {
        match self.expires_at {
            // Used after this alarm was due but before it ran: wait for the new expiry.
            Some(expires_at) if ctx.now() < expires_at => {
                ctx.schedule_alarm(Session::EXPIRE, expires_at);
            }
            _ => {
                self.user = None;
                self.data.clear();
                self.expired = true;
            }
        }
    }
}

impl Session {
    /// The user of a live session, or why there is none.
    fn live(&self, now: SystemTime) -> Result<&str, SessionError> {
        if self.has_expired(now) {
            return Err(SessionError::Expired);
        }
        self.user.as_deref().ok_or(SessionError::NotFound)
    }

    /// Whether the session expired by `now` (whether or not its alarm has run yet).
    fn has_expired(&self, now: SystemTime) -> bool {
        self.expired || self.expires_at.is_some_and(|expires_at| now >= expires_at)
    }

    /// Pushes the expiry back by a whole idle timeout.
    fn extend(&mut self, ctx: &Context) {
        self.expires_at = Some(ctx.now() + self.idle_timeout);
        // Scheduling a name that is already scheduled replaces its due time.
        ctx.schedule_alarm(Session::EXPIRE, self.idle_timeout);
    }
}
// ANCHOR_END: object

// ANCHOR: sweep
/// Deletes every expired session's row; returns how many it deleted.
async fn sweep_expired(rt: &Runtime) -> Result<usize, Error> {
    let mut deleted = 0;
    let mut after: Option<String> = None;
    loop {
        let page = rt.list_ids::<Session>(after.as_deref(), 100).await?;
        for id in &page.ids {
            // `read_state` reads storage without waking the object. An expired session
            // never comes back, so deleting it after this check is safe.
            let stored = rt.read_state::<Session>(id).await?;
            if stored.is_some_and(|session| session.has_expired(rt.now())) {
                rt.delete::<Session>(id).await?;
                deleted += 1;
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(deleted),
        }
    }
}
// ANCHOR_END: sweep

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let rt =
        Runtime::builder(durable_sqlx::SqliteStore::open(dir.path().join("sessions.db")).await?)
            .register::<Session>()
            .build();
    // Thirty minutes in real life; short here so that the example runs in a moment.
    let idle = Duration::from_millis(800);

    // ANCHOR: usage
    Session::start(&rt, "sess:a1f3", "alice".to_owned(), idle).await?;
    Session::start(&rt, "sess:b7c2", "bob".to_owned(), idle).await?;
    Session::set(&rt, "sess:a1f3", "theme".to_owned(), "dark".to_owned()).await?;

    // Alice keeps using her session; Bob leaves his alone.
    let started = Instant::now();
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        Session::touch(&rt, "sess:a1f3").await?;
    }
    assert!(matches!(
        Session::user(&rt, "sess:b7c2").await,
        Err(Error::Handler(SessionError::Expired))
    ));
    // Its alarm wiped its data (it fired 800 ms in, give or take a few milliseconds).
    while !rt
        .read_state::<Session>("sess:b7c2")
        .await?
        .is_some_and(|s| s.expired)
    {
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the alarm is late"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(Session::user(&rt, "sess:a1f3").await?, "alice");
    assert_eq!(
        Session::get(&rt, "sess:a1f3", "theme".to_owned())
            .await?
            .as_deref(),
        Some("dark")
    );
    println!(
        "after {:?}: bob's idle session expired, alice's is alive",
        started.elapsed()
    );

    // Logging out deletes the session: its state and its alarm, in one transaction.
    assert!(rt.delete::<Session>("sess:a1f3").await?);
    assert!(rt.read_state::<Session>("sess:a1f3").await?.is_none());
    assert!(rt.list_alarms::<Session>("sess:a1f3").await?.is_empty());
    println!("alice logged out");

    // The sweeper removes what is left of expired sessions.
    assert_eq!(sweep_expired(&rt).await?, 1);
    assert!(rt.list_ids::<Session>(None, 10).await?.ids.is_empty());
    // ANCHOR_END: usage
    println!("swept the expired session; none left in storage");

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
