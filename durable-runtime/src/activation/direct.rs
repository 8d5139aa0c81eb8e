//! Read-only calls that run in the caller's task.
//!
//! A call of a synchronous `&self` handler to an object that is active and idle (nothing
//! queued or running, no reply waiting for a commit) needs nothing from the object's task: it
//! runs on the object's state, under the state's lock, where the caller is. That saves the
//! hand-off to the object's task and back (a queued invocation, a reply channel and, on a
//! multi-threaded runtime, waking another worker thread), which is most of what such a call
//! costs. Everything else is as in the object's task: one call at a time (the task holds the
//! same lock, or has taken the state out, while it runs a call), the call's span, call chain
//! and metrics, and the idle timer counts the call.
//!
//! It never sees uncommitted state: the object is idle only when its output gate is open, and
//! idleness is checked under the state's lock. When any condition fails, the call is queued as
//! usual. A runtime with validated reads
//! ([`RuntimeBuilder::validate_reads`](crate::RuntimeBuilder::validate_reads)) queues every read:
//! the object's task checks the stored version before it runs one.

use tokio::time::Instant;

use crate::activation::call::{Body, Started};
use crate::commit::codec::panic_message;
use crate::error::Error;
use crate::object::DurableObject;
use crate::object::chain::Chain;
use crate::object::context::Context;
use crate::object::handle::Runtime;
use crate::storage::ObjectKey;

/// Runs the read-only synchronous call `body` on `(O, id)` in this task if the object is
/// active and idle; gives `body` back otherwise, to be queued.
pub(crate) fn read<O, R, E, B>(
    runtime: &Runtime,
    id: &str,
    handler: &'static str,
    chain: &Chain,
    body: B,
) -> Result<Result<R, Error<E>>, B>
where
    O: DurableObject,
    B: Body<O, R, E>,
{
    // A validated read asks storage first: that is the object's task's work.
    if !B::IN_PLACE || runtime.is_closing() || runtime.validates_reads() {
        return Err(body);
    }
    // Cluster mode: the queued path refuses the call if this node no longer serves the
    // object's shard; answering from memory here would skip that check.
    if let Some(node) = runtime.cluster_node()
        && node.admit(O::TYPE_NAME, id).is_err()
    {
        return Err(body);
    }
    runtime.with_type_entry::<O, _>(|entry| {
        let Some(inbox) = entry.idle_inbox(id) else {
            return Err(body);
        };
        let Some(mut state) = inbox.try_idle_state() else {
            return Err(body);
        };
        let Some(state) = state.as_mut() else {
            unreachable!("an idle state is present");
        };
        let started = Instant::now();
        let _entered = crate::activation::instance::call_span::<O>(handler).entered();
        let ctx = Context::with_root(inbox.root().clone(), runtime.clone());
        ctx.set_writable(false);
        let chain = if chain.is_empty() {
            ctx.own_chain()
        } else {
            chain.push(ctx.key().clone())
        };
        let Started::Done(result) = body.start(state, &ctx, chain) else {
            unreachable!("a synchronous body finishes at once");
        };
        drop(ctx);
        let now = Instant::now();
        inbox.touch(runtime.uptime_millis_at(now));
        let (outcome, result) = match result {
            Ok(Ok(value)) => ("ok", Ok(value)),
            Ok(Err(error)) => ("handler_error", Err(Error::Handler(error))),
            Err(payload) => (
                "panicked",
                Err(Error::Panicked {
                    key: ObjectKey::new(O::TYPE_NAME, id),
                    handler,
                    message: panic_message(payload.as_ref()),
                }),
            ),
        };
        entry.call_metrics.finished(handler, outcome, now - started);
        Ok(result)
    })
}
