//! A call in flight: the handler to run, where its reply goes, and the typed client entry point
//! generated code uses.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;
use tokio::sync::oneshot;

use crate::activation::idempotent::{Delivered, Idempotency, Keyed};
use crate::activation::registry::Envelope;
use crate::commit::codec::panic_message;
use crate::error::Error;
use crate::object::chain::Chain;
use crate::object::context::Context;
use crate::object::handle::Runtime;
use crate::object::{BoxFuture, DurableObject};
use crate::storage::{IdempotentReply, ObjectKey};

/// Whether a handler may change the object's state.
///
/// `#[durable_object]` derives it from the handler's receiver: `&self` is [`Read`](Self::Read),
/// `&mut self` is [`Write`](Self::Write).
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{ObjectKey, Storage};
/// use durable_runtime::{durable_object, MemoryStorage, Runtime};
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object]
/// impl Counter {
///     #[handler] // `Access::Write`
///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
///
///     #[handler] // `Access::Read`
///     fn handle_get(&self) -> i64 { self.count }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let storage = MemoryStorage::new();
/// let rt = Runtime::new(storage.clone());
/// let key = ObjectKey::new("Counter", "a");
/// let version = || async { storage.load(&key).await.unwrap().version() };
///
/// Counter::increment(&rt, "a").await.unwrap();
/// let written = version().await;
/// assert_eq!(Counter::get(&rt, "a").await.unwrap(), 1);
/// assert_eq!(version().await, written); // the read committed nothing
/// Counter::increment(&rt, "a").await.unwrap();
/// assert_eq!(version().await, written + 1);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A `&self` handler: never writes.
    Read,
    /// A `&mut self` handler: its state is committed if it changed.
    Write,
}

/// How a handler run ended.
pub(crate) enum Outcome {
    /// It returned a value; the reply waits until the state is committed.
    Returned,
    /// It returned its own error; the state must be rolled back.
    HandlerError,
    /// It panicked with this message; the state must be rolled back.
    Panicked(String),
}

/// A queued call, erased over its handler's argument and result types so one mailbox carries
/// calls to every handler of an object type.
pub(crate) trait Invocation<O>: Send + 'static {
    /// Whether the handler may change state.
    fn access(&self) -> Access;

    /// The handler's name, for errors and spans.
    fn handler(&self) -> &'static str;

    /// The objects the call came through (empty for a call from outside any handler).
    fn chain(&self) -> &Chain;

    /// Whether [`run`](Invocation::run) always finishes at once (a synchronous handler).
    fn runs_in_place(&self) -> bool;

    /// Runs the handler once, with `chain` as the task-local call chain and cut off after
    /// `limit` (`None` if it was cut off). Its result is kept in the invocation until
    /// [`reply`] sends it, so that the reply can wait for the commit. A panic is caught and
    /// reported as an outcome.
    ///
    /// A synchronous handler has finished when this returns; an `async` one is returned as a
    /// future holding everything its run needs, so that the object's task does not carry the
    /// space of a running handler (and its timer) while idle.
    ///
    /// [`reply`]: Invocation::reply
    fn run<'a>(
        &'a mut self,
        state: &'a mut O,
        ctx: &'a Context,
        chain: Chain,
        limit: Option<Duration>,
    ) -> Run<'a>;

    /// Sends the handler's result to the caller.
    fn reply(self: Box<Self>);

    /// Sends a runtime error to the caller instead of the handler's result.
    fn fail(self: Box<Self>, error: Error);

    /// The call's idempotency key, if it carries one.
    fn idempotency_key(&self) -> Option<&str>;

    /// Answers a call with an idempotency key from the reply stored under it (or fails it if
    /// a different call stored that reply), without running the handler.
    fn replay(self: Box<Self>, key: &ObjectKey, stored: IdempotentReply);

    /// For a call with an idempotency key whose handler returned: its reply to store, kept
    /// until `expires_at`, or why it cannot be encoded.
    fn stored_reply(&self, expires_at: SystemTime) -> Option<Result<IdempotentReply, String>>;
}

/// A handler run that has finished, or the future that finishes it.
pub(crate) enum Run<'a> {
    /// A synchronous handler ran: its outcome (never cut off).
    Finished(Outcome),
    /// An `async` handler: its outcome once awaited, `None` if it was cut off.
    Running(BoxFuture<'a, Option<Outcome>>),
}

/// The body of a handler call, as generated clients pass it.
pub(crate) trait Body<O, R, E>: Send + 'static {
    /// Whether the body runs to its end in [`start`](Body::start) (a synchronous handler).
    const IN_PLACE: bool;

    /// Starts the body: a synchronous one runs to its end with `chain` as the task-local call
    /// chain, its panic caught; an `async` one returns its future, to be polled in `chain`.
    fn start<'a>(self, state: &'a mut O, ctx: &'a Context, chain: Chain) -> Started<'a, R, E>;
}

/// A body that finished at once, or the future that finishes it.
pub(crate) enum Started<'a, R, E> {
    /// What a synchronous body returned, or its panic.
    Done(std::thread::Result<Result<R, E>>),
    /// An `async` body's future and the chain to poll it in.
    Running(Chain, BoxFuture<'a, Result<R, E>>),
}

/// The body of a synchronous handler: it runs without a future (nor its allocation).
pub(crate) struct SyncBody<F>(pub(crate) F);

impl<O, R, E, F> Body<O, R, E> for SyncBody<F>
where
    F: FnOnce(&mut O, &Context) -> Result<R, E> + Send + 'static,
{
    const IN_PLACE: bool = true;

    fn start<'a>(self, state: &'a mut O, ctx: &'a Context, chain: Chain) -> Started<'a, R, E> {
        let Self(run) = self;
        Started::Done(chain.sync_scope(|| catch_unwind(AssertUnwindSafe(|| run(state, ctx)))))
    }
}

/// The body of an `async` handler.
pub(crate) struct AsyncBody<F>(pub(crate) F);

impl<F> AsyncBody<F> {
    /// Wraps `run`; a closure passed here gets the signature the body needs inferred.
    pub(crate) fn new<O, R, E>(run: F) -> Self
    where
        F: for<'a> FnOnce(&'a mut O, &'a Context) -> BoxFuture<'a, Result<R, E>>,
    {
        Self(run)
    }
}

impl<O, R, E, F> Body<O, R, E> for AsyncBody<F>
where
    F: for<'a> FnOnce(&'a mut O, &'a Context) -> BoxFuture<'a, Result<R, E>> + Send + 'static,
{
    const IN_PLACE: bool = false;

    fn start<'a>(self, state: &'a mut O, ctx: &'a Context, chain: Chain) -> Started<'a, R, E> {
        let Self(run) = self;
        match catch_unwind(AssertUnwindSafe(|| run(state, ctx))) {
            Ok(future) => Started::Running(chain, future),
            Err(payload) => Started::Done(Err(payload)),
        }
    }
}

/// The concrete invocation behind a typed client call.
struct Call<B, R, E> {
    handler: &'static str,
    access: Access,
    chain: Chain,
    body: Option<B>,
    result: Option<Result<R, E>>,
    reply: oneshot::Sender<Result<R, Error<E>>>,
    /// Boxed: most calls carry no idempotency key.
    keyed: Option<Box<Keyed<R, E>>>,
}

impl<O, B, R, E> Invocation<O> for Call<B, R, E>
where
    O: DurableObject,
    B: Body<O, R, E>,
    R: Send + 'static,
    E: Send + 'static,
{
    fn access(&self) -> Access {
        self.access
    }

    fn handler(&self) -> &'static str {
        self.handler
    }

    fn chain(&self) -> &Chain {
        &self.chain
    }

    fn runs_in_place(&self) -> bool {
        // A call with a key looks up its stored reply first, which waits.
        B::IN_PLACE && self.keyed.is_none()
    }

    fn run<'a>(
        &'a mut self,
        state: &'a mut O,
        ctx: &'a Context,
        chain: Chain,
        limit: Option<Duration>,
    ) -> Run<'a> {
        let Some(body) = self.body.take() else {
            return Run::Finished(Outcome::Panicked("invocation ran twice".to_owned()));
        };
        let (chain, future) = match body.start(state, ctx, chain) {
            Started::Done(result) => return Run::Finished(self.settle(result)),
            Started::Running(chain, future) => (chain, future),
        };
        Run::Running(Box::pin(async move {
            let result = guarded(chain, future, limit).await?;
            Some(self.settle(result))
        }))
    }

    fn reply(self: Box<Self>) {
        let this = *self;
        let result = match this.result {
            Some(Ok(value)) => Ok(value),
            Some(Err(error)) => Err(Error::Handler(error)),
            None => return,
        };
        // The caller may have gone away (its future was dropped); nothing to do then.
        let _ = this.reply.send(result);
    }

    fn fail(self: Box<Self>, error: Error) {
        let _ = self.reply.send(Err(error.widen()));
    }

    fn idempotency_key(&self) -> Option<&str> {
        self.keyed.as_ref().map(|keyed| keyed.key.as_str())
    }

    fn replay(self: Box<Self>, key: &ObjectKey, stored: IdempotentReply) {
        let this = *self;
        let Some(keyed) = this.keyed else {
            return this.reply.send(Err(Error::ShuttingDown)).unwrap_or(());
        };
        if let Err(error) = keyed.replay(key, stored) {
            let _ = this.reply.send(Err(error.widen()));
        }
    }

    fn stored_reply(&self, expires_at: SystemTime) -> Option<Result<IdempotentReply, String>> {
        let keyed = self.keyed.as_ref()?;
        let result = self.result.as_ref()?;
        Some(keyed.reply(result, expires_at))
    }
}

/// Runs a handler's future to its end with `chain` as the task-local call chain, its panic
/// caught; `None` if it was cut off after `limit`.
pub(crate) async fn guarded<T>(
    chain: Chain,
    future: BoxFuture<'_, T>,
    limit: Option<Duration>,
) -> Option<std::thread::Result<T>> {
    let mut guarded = std::pin::pin!(chain.scope(AssertUnwindSafe(future).catch_unwind()));
    // Most handlers finish in their first poll: only one that waits needs a timer.
    match futures_util::poll!(guarded.as_mut()) {
        std::task::Poll::Ready(result) => Some(result),
        std::task::Poll::Pending => match limit {
            Some(limit) => tokio::time::timeout(limit, guarded).await.ok(),
            None => Some(guarded.await),
        },
    }
}

impl<B, R, E> Call<B, R, E> {
    /// Keeps the handler's result for the reply; the outcome says what became of the run.
    fn settle(&mut self, result: std::thread::Result<Result<R, E>>) -> Outcome {
        match result {
            Ok(Ok(value)) => {
                self.result = Some(Ok(value));
                Outcome::Returned
            }
            Ok(Err(error)) => {
                self.result = Some(Err(error));
                Outcome::HandlerError
            }
            Err(payload) => Outcome::Panicked(panic_message(payload.as_ref())),
        }
    }
}

/// Sends one call to the object `(O, id)`, starting the object if needed, and waits for its
/// reply. This is what generated clients call.
///
/// # Cancel safety
///
/// Dropping the returned future does not cancel the call once it is queued: the handler still
/// runs and its state is still committed; only the reply is lost.
pub(crate) async fn call<O, R, E, B>(
    runtime: &Runtime,
    id: &str,
    access: Access,
    handler: &'static str,
    body: B,
) -> Result<R, Error<E>>
where
    O: DurableObject,
    B: Body<O, R, E>,
    R: Send + 'static,
    E: Send + 'static,
{
    let sent = send::<O, R, E, B>(
        runtime,
        id,
        access,
        handler,
        body,
        None,
        Idempotency::none(),
    );
    crate::activation::idempotent::fresh(sent.await)
}

/// [`call`] with a timeout on the wait for the reply, and an idempotency key: the reply is
/// then either the handler's or the one stored by an earlier call with the same key.
pub(crate) async fn send<O, R, E, B>(
    runtime: &Runtime,
    id: &str,
    access: Access,
    handler: &'static str,
    body: B,
    timeout: Option<Duration>,
    idempotency: Idempotency<R, E>,
) -> Result<Delivered<R>, Error<E>>
where
    O: DurableObject,
    B: Body<O, R, E>,
    R: Send + 'static,
    E: Send + 'static,
{
    crate::id::validate_id(id)?;
    let chain = Chain::current();
    if let Some(chain) = chain.cycle_to(O::TYPE_NAME, id) {
        return Err(Error::CallCycle {
            key: ObjectKey::new(O::TYPE_NAME, id),
            chain,
        });
    }
    let (keyed, stored) = match idempotency.split(O::TYPE_NAME, id) {
        Ok(Some((keyed, stored))) => {
            runtime.ensure_idempotency_sweep();
            (Some(keyed), Some(stored))
        }
        Ok(None) => (None, None),
        Err(error) => return Err(error.widen()),
    };
    let waited = async move {
        // What a handler passes on leaves its object: not before the state it ran on is
        // committed. A synchronous `&self` handler can pass nothing on, so a read of one goes
        // at once.
        if !(B::IN_PLACE && access == Access::Read) {
            crate::object::durability::leaving(&chain)
                .await
                .map_err(Error::widen)?;
        }
        // A call with a key goes through the object, where its stored reply is looked up.
        let body = if access == Access::Read && keyed.is_none() {
            match crate::activation::direct::read::<O, R, E, B>(runtime, id, handler, &chain, body)
            {
                Ok(result) => return result.map(Delivered::Fresh),
                Err(body) => body,
            }
        } else {
            body
        };
        let (reply, receive) = oneshot::channel();
        let call = Box::new(Call {
            handler,
            access,
            chain,
            body: Some(body),
            result: None,
            reply,
            keyed,
        });
        runtime.dispatch::<O>(id, Envelope::Call(call));
        match receive.await {
            Ok(result) => result.map(Delivered::Fresh),
            // Answered from a stored reply (sent before the call was dropped), or dropped
            // without an answer: the object was stopped by a runtime shutdown.
            Err(_) => match stored {
                Some(stored) => match stored.await {
                    Ok(bytes) => Ok(Delivered::Stored(ObjectKey::new(O::TYPE_NAME, id), bytes)),
                    Err(_) => Err(Error::ShuttingDown),
                },
                None => Err(Error::ShuttingDown),
            },
        }
    };
    match timeout {
        // Boxed: held inline, the timer would make every call's future larger, and most
        // calls have no timeout.
        Some(limit) => match Box::pin(tokio::time::timeout(limit, waited)).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout {
                key: ObjectKey::new(O::TYPE_NAME, id),
                handler,
            }),
        },
        None => waited.await,
    }
}
