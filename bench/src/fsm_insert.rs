//! The batched insert scenario (`fsm-insert`): instances inserted per second by one producer,
//! with `insert` awaited one at a time (a statement and a commit each) and with
//! `insert_async` (queued, written in multi-row batches by the engine), counted until the
//! last batch has committed.

use std::sync::Arc;
use std::time::Instant;

use durable_runtime::fsm::{Engine, Job, StepContext, job};

use crate::fsm::Opened;
use crate::report::{Figure, peak_rss_mib};
use crate::{BackendKind, Settings};

/// A job that is only inserted, never run.
#[job(name = "bench.insert")]
pub struct Inserted {
    n: u64,
}

impl Job for Inserted {
    type Error = String;

    async fn perform(&self, _ctx: &StepContext) -> Result<(), String> {
        Ok(())
    }
}

pub(crate) async fn run(settings: &Settings) -> Result<Vec<Figure>, String> {
    let instances: u64 = match (settings.smoke, settings.backend) {
        (true, _) => 500,
        (false, BackendKind::Memory) => 50_000,
        (false, _) => 10_000,
    };
    let mut figures = Vec::new();
    for batched in [false, true] {
        let name = if batched {
            "fsm-insert-async"
        } else {
            "fsm-insert"
        };
        let mut figure = Figure::new(name, settings.backend.name(), "inserts/s");
        for _ in 0..settings.runs {
            figure
                .runs
                .push(inserts(settings, instances, batched).await?);
        }
        figure.extra.push(("instances", instances as f64));
        figure.peak_rss_mib = peak_rss_mib();
        figures.push(figure);
    }
    Ok(figures)
}

/// Inserts `instances` jobs from one task; returns inserts per second, from the first call
/// to the last commit.
async fn inserts(settings: &Settings, instances: u64, batched: bool) -> Result<f64, String> {
    let opened = Opened::open(settings).await?;
    let engine = Engine::builder(Arc::clone(&opened.store))
        .no_reaper()
        .no_gc()
        .build()
        .map_err(|e| e.to_string())?;
    let started = Instant::now();
    if batched {
        let mut pending = Vec::with_capacity(instances as usize);
        for n in 0..instances {
            pending.push(
                engine
                    .insert_async(Inserted { n })
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        for pending in pending {
            pending.await.map_err(|e| e.to_string())?;
        }
    } else {
        for n in 0..instances {
            engine
                .insert(Inserted { n })
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    let took = started.elapsed();
    engine.shutdown().await;
    opened.close().await;
    Ok(instances as f64 / took.as_secs_f64())
}
