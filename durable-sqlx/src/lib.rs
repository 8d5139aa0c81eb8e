//! SQL storage for durable-runtime.
