//! The way to storage and back: the group-commit and group-load loops, the batching they share,
//! and the encoding of states.

pub(crate) mod batches;
pub(crate) mod codec;
pub(crate) mod committer;
pub(crate) mod freshness;
pub(crate) mod loader;
