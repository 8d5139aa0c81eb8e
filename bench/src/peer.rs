//! The in-memory actor baseline of the `read` scenario: the same read, as a kameo ask round
//! trip, driven exactly like the durable calls (same callers, same object choice, same timing).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use kameo::Actor;
use kameo::actor::{ActorRef, Spawn};
use kameo::message::{Context, Message};

/// A counter actor with no persistence.
#[derive(Actor, Default)]
pub(crate) struct PeerCounter {
    count: i64,
}

/// Reads the count.
pub(crate) struct Get;

impl Message<Get> for PeerCounter {
    type Reply = i64;

    async fn handle(&mut self, _: Get, _: &mut Context<Self, Self::Reply>) -> i64 {
        self.count
    }
}

/// Spawns `count` actors.
pub(crate) fn spawn(count: usize) -> Arc<Vec<ActorRef<PeerCounter>>> {
    Arc::new(
        (0..count)
            .map(|_| PeerCounter::spawn(PeerCounter::default()))
            .collect(),
    )
}

/// `callers` concurrent callers asking random actors for `duration`: calls/s and latency.
pub(crate) async fn drive(
    actors: &Arc<Vec<ActorRef<PeerCounter>>>,
    callers: usize,
    duration: Duration,
) -> Result<(f64, Histogram<u64>), String> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let actors = Arc::clone(actors);
        tasks.spawn(async move {
            let mut histogram = crate::report::histogram();
            let mut pick = crate::pick::Picker::for_caller(caller as u64);
            let mut done = 0u64;
            while Instant::now() < deadline {
                let actor = &actors[pick.below(actors.len())];
                let t = Instant::now();
                actor.ask(Get).await.map_err(|e| e.to_string())?;
                histogram.saturating_record(t.elapsed().as_nanos() as u64);
                done += 1;
            }
            Ok::<_, String>((done, histogram))
        });
    }
    let (total, histogram) = crate::report::gather(&mut tasks).await?;
    Ok((total as f64 / started.elapsed().as_secs_f64(), histogram))
}

/// Stops the actors and waits until they are gone.
pub(crate) async fn stop(actors: Arc<Vec<ActorRef<PeerCounter>>>) {
    for actor in actors.iter() {
        let _ = actor.stop_gracefully().await;
    }
    for actor in actors.iter() {
        actor.wait_for_shutdown().await;
    }
}
