//! Live objects: the registry of one instance per object, the instance task with its output
//! gate, the call path into it (queued or run in the caller's task), and the alarm scheduler
//! that activates objects to fire their alarms.

pub(crate) mod call;
pub(crate) mod direct;
pub(crate) mod fire;
pub(crate) mod gate;
pub(crate) mod idempotent;
pub(crate) mod idle;
pub(crate) mod inbox;
pub(crate) mod instance;
pub(crate) mod key;
pub(crate) mod options;
pub(crate) mod outside;
pub(crate) mod registry;
pub(crate) mod scheduler;
pub(crate) mod sweep;
