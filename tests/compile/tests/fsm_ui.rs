//! Compile tests of `#[durable_fsm]`: every rule's error (`ui/fsm_fail`, one rule per file,
//! with the expected `.stderr` beside it). The shapes it must accept are
//! `durable_tests::shapes::fsm_shapes`.
//!
//! The `.stderr` files are written for the toolchain pinned in `rust-toolchain.toml`.
//! Regenerate them with `TRYBUILD=overwrite`, then read the diff.

#[test]
fn fsm_ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/fsm_fail/*.rs");
}
