//! Compile tests of `#[job]`: each rule's error (`ui/job_fail`, with the expected `.stderr`
//! beside it). The shapes it must accept are
//! `durable_tests::shapes::job_shapes`.
//!
//! The `.stderr` files are written for the toolchain pinned in `rust-toolchain.toml`.
//! Regenerate them with `TRYBUILD=overwrite`, then read the diff.

#[test]
fn job_ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("ui/job_fail/*.rs");
}
