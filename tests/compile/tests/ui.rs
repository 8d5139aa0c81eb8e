//! Compile tests of `#[durable_object]`: every rule's error (`ui/fail`, one rule per file, with
//! the expected `.stderr` beside it) and the shapes that must compile warning-free
//! (`ui/pass`).
//!
//! The `.stderr` files depend on the exact compiler: they are written for the toolchain pinned
//! in `rust-toolchain.toml`. Regenerate them with `TRYBUILD=overwrite`, then read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/fail/*.rs");
    t.pass("ui/pass/*.rs");
}
