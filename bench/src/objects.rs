//! The objects the scenarios call.

use std::sync::Mutex;
use std::time::SystemTime;

use durable_runtime::{Context, durable_object};

/// A counter: the state-changing call of `seq`, `hot` and `spread`, the read of `read`, and
/// the call of `spread-alarm`, which also pushes back an expiry alarm (a session's or a rate
/// limiter window's).
#[durable_object]
pub(crate) struct BenchCounter {
    count: i64,
}

#[durable_object(expose)]
impl BenchCounter {
    #[handler]
    fn handle_increment(&mut self) -> i64 {
        self.count += 1;
        self.count
    }

    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }

    /// Counts the call and moves the expiry an hour ahead.
    #[handler]
    fn handle_touch(&mut self, ctx: &Context) -> i64 {
        self.count += 1;
        ctx.schedule_alarm(BenchCounter::EXPIRE, std::time::Duration::from_secs(3600));
        self.count
    }

    /// Counts the call and puts one 1 KiB value under one of eight keys.
    #[handler]
    fn handle_put_value(&mut self, ctx: &Context) -> i64 {
        self.count += 1;
        let key = KV_KEYS[(self.count % 8) as usize];
        ctx.storage()
            .put(key, KV_VALUE)
            .expect("a 1 KiB value fits");
        self.count
    }

    /// Reads the value of the first key (cached after the first read).
    #[handler]
    async fn handle_read_value(&self, ctx: &Context) -> usize {
        let value: Option<String> = ctx.storage().get(KV_KEYS[0]).await.expect("readable");
        value.map_or(0, |value| value.len())
    }

    /// Schedules the expiry alone, as an outside schedule through the object did (the
    /// `outside-alarms` scenario's before).
    #[handler]
    fn handle_arm(&mut self, ctx: &Context) {
        ctx.schedule_alarm(BenchCounter::EXPIRE, std::time::Duration::from_secs(3600));
    }

    /// Never fires within a run.
    #[alarm]
    fn expire(&mut self) {
        self.count = 0;
    }
}

/// The keys `put_value` writes.
const KV_KEYS: [&str; 8] = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"];

/// A string whose JSON encoding is 1 KiB.
const KV_VALUE: &str = {
    const BYTES: [u8; 1022] = [b'x'; 1022];
    match std::str::from_utf8(&BYTES) {
        Ok(text) => text,
        Err(_) => panic!("ASCII"),
    }
};

/// When each alarm of the `alarms` scenario fired, by object id.
pub(crate) static FIRED: Mutex<Vec<(String, SystemTime)>> = Mutex::new(Vec::new());

/// Waits until `count` ringers have fired, or fails after `within`.
pub(crate) async fn wait_for_fired(
    count: usize,
    within: std::time::Duration,
) -> Result<(), String> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let fired = FIRED.lock().unwrap_or_else(|p| p.into_inner()).len();
        if fired >= count {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "only {fired} of {count} alarms fired within {} s",
                within.as_secs()
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// An object with one alarm that records when it fired.
#[durable_object]
pub(crate) struct Ringer {
    rung: u32,
}

#[durable_object(expose)]
impl Ringer {
    #[handler]
    fn handle_rung(&self) -> u32 {
        self.rung
    }

    #[alarm]
    fn ring(&mut self, ctx: &Context) {
        let now = SystemTime::now();
        self.rung += 1;
        FIRED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((ctx.id().to_owned(), now));
    }
}
