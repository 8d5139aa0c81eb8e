//! Wall-clock jumps, in virtual (paused) time: alarms are due by the wall clock while the
//! scheduler sleeps on tokio's clock, so a jump must correct itself within a poll interval
//! (sleeps are capped by it and re-read the store) and never fire an alarm early.

use std::time::Duration;

use durable_runtime::storage::MemoryStorage;
use durable_runtime::testing::{jump_wall_clock_back, jump_wall_clock_forward};
use durable_runtime::{AlarmSettings, Runtime, durable_object};
use tokio::time::sleep;

#[durable_object]
pub struct Bell {
    rung: u32,
}

#[durable_object]
impl Bell {
    #[handler]
    fn handle_rung(&self) -> u32 {
        self.rung
    }

    #[alarm]
    fn ring(&mut self) {
        self.rung += 1;
    }
}

const POLL: Duration = Duration::from_secs(30);

fn runtime() -> Runtime {
    Runtime::builder(MemoryStorage::new())
        .clock_follows_tokio()
        .alarm_settings(AlarmSettings::default().with_poll_interval(POLL))
        .register::<Bell>()
        .build()
}

#[tokio::test(start_paused = true)]
async fn a_forward_jump_fires_the_alarms_it_made_due_within_a_poll_interval() {
    let rt = runtime();
    rt.schedule_alarm::<Bell>("b", Bell::RING, Duration::from_secs(2 * 3600))
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    assert_eq!(Bell::rung(&rt, "b").await.unwrap(), 0);

    jump_wall_clock_forward(&rt, Duration::from_secs(2 * 3600));
    // The scheduler sleeps at most a poll interval on tokio's clock, then reads the store
    // again with the new wall time.
    sleep(POLL + Duration::from_secs(1)).await;
    assert_eq!(Bell::rung(&rt, "b").await.unwrap(), 1);
    assert!(rt.list_alarms::<Bell>("b").await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_backward_jump_never_fires_an_alarm_before_its_wall_clock_time() {
    let rt = runtime();
    rt.schedule_alarm::<Bell>("b", Bell::RING, Duration::from_secs(60))
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;

    jump_wall_clock_back(&rt, Duration::from_secs(3600));
    // Past the alarm's original delay on tokio's clock, but the wall clock is an hour short.
    sleep(Duration::from_secs(120)).await;
    assert_eq!(Bell::rung(&rt, "b").await.unwrap(), 0);
    assert_eq!(rt.list_alarms::<Bell>("b").await.unwrap().len(), 1);

    // Once the wall clock reaches the due time, it fires within a poll interval.
    sleep(Duration::from_secs(3600) + POLL).await;
    assert_eq!(Bell::rung(&rt, "b").await.unwrap(), 1);
}

#[test]
#[should_panic(expected = "clock_follows_tokio")]
fn the_system_clock_cannot_be_moved_by_a_test() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::new(MemoryStorage::new());
        jump_wall_clock_forward(&runtime, Duration::from_secs(1));
    });
}
