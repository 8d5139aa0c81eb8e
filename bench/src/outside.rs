//! `outside-alarms`: 10,000 alarms scheduled from outside on stored objects that are not live,
//! by 64 callers. `outside-alarms-direct` is `Runtime::schedule_alarm` as it is, writing each
//! alarm without starting its object; `outside-alarms-activating` does the same work through
//! each object (a call that schedules the alarm, which loads the object first), as an outside
//! schedule did before it could write directly. Both start from a fresh runtime over the same
//! stored objects, so no object is live at the start.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durable_runtime::Runtime;

use crate::Settings;
use crate::objects::BenchCounter;
use crate::report::{Figure, peak_rss_mib};
use crate::scenarios::{open, populate};

/// Callers scheduling at once.
const CALLERS: usize = 64;

#[derive(Clone, Copy)]
enum Route {
    Direct,
    Activating,
}

/// Schedules one alarm on each of `count` stored objects, by `CALLERS` callers; alarms/s.
async fn schedule_all(rt: &Runtime, count: usize, route: Route) -> Result<f64, String> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let rt = rt.clone();
        tasks.spawn(async move {
            for i in (caller..count).step_by(CALLERS) {
                let id = format!("obj-{i}");
                let hour = Duration::from_secs(3600);
                let done = match route {
                    Route::Direct => rt.schedule_alarm(&id, BenchCounter::EXPIRE, hour).await,
                    Route::Activating => BenchCounter::arm(&rt, &id).await,
                };
                done.map_err(|e| format!("{id}: {e}"))?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.map_err(|e| e.to_string())??;
    }
    Ok(count as f64 / started.elapsed().as_secs_f64())
}

/// Both figures, run after run on the same fresh database per run.
pub(crate) async fn outside_alarms(settings: &Settings) -> Result<Vec<Figure>, String> {
    let count = if settings.smoke { 500 } else { 10_000 };
    let backend = settings.backend.name();
    let mut direct = Figure::new("outside-alarms-direct", backend, "alarms/s");
    let mut activating = Figure::new("outside-alarms-activating", backend, "alarms/s");
    // Objects live at the end of the last run: activating, direct.
    let (mut live_activating, mut live_direct) = (0.0, 0.0);
    for _ in 0..settings.runs {
        let opened = open(settings).await?;
        populate(opened.store.as_ref(), "BenchCounter", count).await?;
        for (route, figure, live_after) in [
            (Route::Activating, &mut activating, &mut live_activating),
            (Route::Direct, &mut direct, &mut live_direct),
        ] {
            let rt = Runtime::builder(Arc::clone(&opened.store))
                .manual_alarms()
                .build();
            figure.runs.push(schedule_all(&rt, count, route).await?);
            *live_after = rt.live_objects::<BenchCounter>() as f64;
            rt.shutdown().await;
        }
        opened.close().await;
    }
    activating
        .extra
        .push(("objects live after", live_activating));
    direct.extra.push(("objects live after", live_direct));
    let speedup = direct.median() / activating.median();
    direct.extra.push(("speedup vs activating", speedup));
    direct.extra.push(("alarms scheduled", count as f64));
    for figure in [&mut direct, &mut activating] {
        figure.peak_rss_mib = peak_rss_mib();
    }
    Ok(vec![activating, direct])
}
