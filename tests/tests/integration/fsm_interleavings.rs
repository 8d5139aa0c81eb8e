//! No lost wake-up, end to end: thousands of instances park on a signal while a second
//! engine, on connections of its own, delivers their signals in random order with random
//! pauses, racing the parks. Every instance must end; one left awaiting with its signal in
//! its inbox would be a lost wake-up.
//!
//! `FSM_INTERLEAVINGS` sets the number of instances (default 10,000 on Postgres, at most 2,000
//! in memory); the seed of the random
//! order is printed, and `FSM_INTERLEAVINGS_SEED` replays it.

use crate::fsm_support;

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::fsm::{Engine, InstanceId, Outcome, Settled, StepContext, durable_fsm};
use fsm_support::FsmBackend;

/// Parks on `go`, then ends with how many signals it was handed.
#[durable_fsm(result = usize)]
pub struct Gate {}

#[durable_fsm]
impl Gate {
    #[step(initial)]
    fn park(&mut self) -> Outcome<Self> {
        Outcome::await_signal(["go"], Self::PASS)
    }

    #[step]
    fn pass(&mut self, ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(ctx.awaited().len())
    }
}

/// xorshift64*: enough randomness for orders and pauses, reproducible from its seed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn instances() -> usize {
    std::env::var("FSM_INTERLEAVINGS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

fn seed() -> u64 {
    std::env::var("FSM_INTERLEAVINGS_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |since| since.as_nanos() as u64 | 1)
        })
}

async fn signals_racing_parks_are_never_lost(backend: FsmBackend) {
    // The memory store applies every operation under one lock and SQLite's under its one
    // writer, so their interleavings are few (and the memory store's scans linear): a share of
    // the count exercises them.
    let count = if backend.guard.is_none() {
        instances().min(2_000)
    } else {
        instances()
    };
    let seed = seed();
    eprintln!("{count} interleavings, FSM_INTERLEAVINGS_SEED={seed}");
    let workers = Engine::builder(backend.store.clone())
        .register::<Gate>()
        .queue("default", 32)
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50))
        .no_reaper()
        .no_gc()
        .build()
        .unwrap();
    let senders = Engine::builder(backend.open_again().await)
        .no_reaper()
        .no_gc()
        .build()
        .unwrap();
    let ids = workers
        .insert_all((0..count).map(|_| Gate {}))
        .await
        .unwrap();
    assert_eq!(ids.len(), count);

    // Four senders, each delivering a shuffled share while the workers park.
    let mut random = Random(seed);
    let mut order: Vec<InstanceId> = ids.clone();
    for i in (1..order.len()).rev() {
        let j = random.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let order = Arc::new(order);
    let tasks: Vec<_> = (0..4)
        .map(|lane| {
            let senders = senders.clone();
            let order = Arc::clone(&order);
            let mut random = Random(seed.wrapping_add(lane as u64 * 7919) | 1);
            tokio::spawn(async move {
                for id in order.iter().skip(lane).step_by(4) {
                    match random.below(32) {
                        0 => tokio::time::sleep(Duration::from_micros(random.below(2_000))).await,
                        1..=7 => tokio::task::yield_now().await,
                        _ => {}
                    }
                    senders.signal(*id, "go", (), None).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }

    let mut lost = Vec::new();
    for id in &ids {
        match workers
            .await_ended(*id, Duration::from_secs(60))
            .await
            .unwrap()
        {
            Settled::Done { result } => assert_eq!(result, "1", "{id} was handed one signal"),
            other => {
                let inbox = workers.inbox(*id).await.unwrap();
                lost.push((*id, other, inbox.len()));
            }
        }
    }
    assert!(
        lost.is_empty(),
        "{} instances never woke (id, where, signals in the inbox): {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    workers.shutdown().await;
    senders.shutdown().await;
}

fsm_backend_tests!(signals_racing_parks_are_never_lost);
