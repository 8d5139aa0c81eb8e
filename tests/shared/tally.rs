//! `Tally`, the object of the idempotency kill loop, shared by its child process
//! (`idem_child`) and the test that replays the child's calls (`idem_kill_loop`). It is kept
//! out of the `durable_tests` library so that the compile-fail tests, which link that library,
//! see no durable object in it.

use durable_runtime::{Context, durable_object};

/// Counts the calls that ran and the amounts they added; each call that runs also records
/// itself under the key `ran/{call}`, with the count it made, in the same commit. A call run
/// twice would count twice but leave one key: `calls` is the number of `ran/` keys exactly
/// when no call ran twice.
#[durable_object]
pub struct Tally {
    /// How many calls ran.
    pub calls: u64,
    /// The sum of their amounts.
    pub total: u64,
}

#[durable_object]
impl Tally {
    /// Adds `amount`, records `call` as run, and replies with the new count of calls.
    #[handler]
    fn handle_add(&mut self, ctx: &Context, call: String, amount: u64) -> u64 {
        self.calls += 1;
        self.total += amount;
        ctx.storage()
            .put(&format!("ran/{call}"), &self.calls)
            .expect("a count is far below the value limit");
        self.calls
    }
}
