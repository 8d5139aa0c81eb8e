// Hygiene: generated code uses absolute paths only, so local items named like prelude items or
// like the runtime crate itself cannot capture it.
#![deny(warnings, missing_docs)]
#![allow(non_camel_case_types, non_upper_case_globals, dead_code)]
//! Hygiene.

use ::durable_runtime::{Context, MemoryStorage, Runtime, durable_object};

/// Shadows the runtime crate's name for relative paths.
mod durable_runtime {}

/// Shadows `Result`.
type Result = ();
/// Shadows `Option`.
struct Option;
/// Shadows `Box`.
struct Box;
/// Shadows `String`.
struct String;
/// Shadows `Default`.
trait Default {}
/// Shadows `Clone`.
trait Clone {}
/// Shadows `Send`.
trait Send {}
/// Shadows `Into` and `AsRef`.
trait Into {}
/// See above.
trait AsRef {}
/// Shadows `Ok`.
const Ok: () = ();
/// Shadows `Pin`.
struct Pin;

/// A counter.
#[durable_object(hibernate_after = "5m")]
pub struct Counter {
    #[field(default = 1)]
    count: i64,
    name: ::std::string::String,
    maybe: ::core::option::Option<u8>,
}

#[durable_object]
impl Counter {
    #[after_load]
    fn loaded(&mut self, ctx: &Context) {
        self.name = ctx.id().to_owned();
    }

    #[handler]
    fn handle_increment(&mut self, by: i64) -> i64 {
        self.count += by;
        self.count
    }

    #[handler]
    fn handle_checked(&mut self, by: i64) -> ::core::result::Result<i64, ::std::string::String> {
        self.count += by;
        ::core::result::Result::Ok(self.count)
    }

    #[handler]
    async fn handle_maybe(&self) -> ::core::option::Option<u8> {
        self.maybe
    }

    #[handler]
    fn handle_unit(&self) -> Result {}
}

/// Checks what the generated code does (run by this package's tests).
pub async fn runs() {
    let rt = Runtime::new(MemoryStorage::new());
    assert_eq!(Counter::increment(&rt, "a", 2).await.unwrap(), 3);
    assert_eq!(Counter::checked(&rt, "a", 1).await.unwrap(), 4);
    assert_eq!(Counter::maybe(&rt, "a").await.unwrap(), None);
    Counter::unit(&rt, "a").await.unwrap();
    let _ = (Option, Box, String, Pin, Ok);
}
