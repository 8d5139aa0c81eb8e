//! Tools for testing durable objects and storage backends (feature `testing`).

mod faulty;

pub use faulty::FaultyStorage;
