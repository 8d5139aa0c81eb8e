//! Compile tests of `#[durable_object]`: every rule's error (`ui/fail`, one rule per file, with
//! the expected `.stderr` beside it). The shapes it must accept are
//! `durable_tests::shapes`.
//!
//! The `.stderr` files depend on the exact compiler: they are written for the toolchain pinned
//! in `rust-toolchain.toml`. Regenerate them with `TRYBUILD=overwrite`, then read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/fail/*.rs");
}
