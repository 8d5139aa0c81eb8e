//! The objects the scenarios call.

use std::sync::Mutex;
use std::time::SystemTime;

use durable_runtime::{Context, durable_object};

/// A counter: the state-changing call of `seq`, `hot` and `spread`, the read of `read`.
#[durable_object]
pub(crate) struct BenchCounter {
    count: i64,
}

#[durable_object]
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
}

/// When each alarm of the `alarms` scenario fired, by object id.
pub(crate) static FIRED: Mutex<Vec<(String, SystemTime)>> = Mutex::new(Vec::new());

/// An object with one alarm that records when it fired.
#[durable_object]
pub(crate) struct Ringer {
    rung: u32,
}

#[durable_object]
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
