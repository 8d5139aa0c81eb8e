// `crate = ".."` on both halves: generated code reaches the runtime through the renamed path.
#![deny(warnings, missing_docs)]
//! Crate override.

extern crate durable_runtime as renamed;

use renamed::{MemoryStorage, Runtime};

/// Shadows the original crate name for relative paths.
mod durable_runtime {}

/// A counter.
#[renamed::durable_object(crate = "renamed", queue_capacity = 4)]
pub struct Counter {
    count: i64,
}

#[renamed::durable_object(crate = "renamed")]
impl Counter {
    #[renamed::handler]
    fn handle_increment(&mut self, by: i64) -> i64 {
        self.count += by;
        self.count
    }
}

/// Checks what the generated code does (run by this package's tests).
pub async fn runs() {
    use renamed::DurableObject;
    assert_eq!(Counter::options().queue_capacity, Some(4));
    let rt = Runtime::new(MemoryStorage::new());
    assert_eq!(Counter::increment(&rt, "a", 2).await.unwrap(), 2);
}
