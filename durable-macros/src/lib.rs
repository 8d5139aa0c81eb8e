//! The attribute macros of `durable-runtime`: `#[durable_object]` and its helpers `#[handler]`,
//! `#[after_load]` and `#[alarm]`.
//!
//! Use them through `durable_runtime` (`use durable_runtime::durable_object;`): the code they
//! generate names items of `durable_runtime::__private`, so this crate is useless on its own.
//!
//! # Pipeline
//!
//! Each expansion runs the same stages, one module each (the serde_derive / darling model):
//!
//! 1. `attrs`: darling receivers parse the attribute arguments and `#[field(..)]`
//!    (`duration` parses the human durations);
//! 2. `model`: the item becomes an owned IR that keeps spans and no raw helper attributes;
//!    every rule of `validate` runs on the way, and `errors` accumulates what they find:
//!    nothing short-circuits;
//! 3. `codegen`: reads only the IR and writes the output, reaching the runtime through the
//!    root path of `paths`.
//!
//! `expand` holds the entry points and the fallback on errors (with `entry`, what both macros
//! do around an expansion).
//!
//! `#[durable_fsm]` (in `fsm`) runs the same stages. What both macros do alike lives once:
//! `args` (reading the attribute argument lists), `state_half` (the state struct: fields,
//! defaults, derives, its codegen) and `impl_half` (the impl block's shape and helper
//! attributes), each told by a `flavor::Flavor` which macro's words its messages use.
//!
//! On errors the expansion still emits the user's item (helper attributes stripped) and as much
//! generated code as the valid parts allow, so that one mistake gives one error instead of a
//! cascade of "trait not implemented" and "function not found" errors.
//!
//! Set `DURABLE_MACROS_DEBUG=1` while compiling to print every expansion to stderr.
#![deny(missing_docs)]

mod args;
mod attrs;
mod codegen;
mod duration;
mod entry;
mod errors;
mod expand;
mod flavor;
mod fsm;
mod impl_half;
mod model;
mod paths;
mod state_half;
mod validate;

use proc_macro::TokenStream;

use flavor::Flavor;

/// Declares a durable object: on a struct, its state; on an `impl` block, its handlers.
///
/// # On the struct
///
/// ```ignore
/// #[durable_object(hibernate_after = "5m", shutdown_after = "1h30m")]
/// pub struct Counter {
///     #[field(default = 10)]
///     count: i64,
///     label: String, // takes `Default::default()`
/// }
/// ```
///
/// Options, all optional: `hibernate_after`, `shutdown_after`, `call_timeout` (durations as
/// strings: `"250ms"`, `"5m"`, `"1h30m"`), `queue_capacity` (a positive integer), the
/// key-value limits `kv_max_keys`, `kv_max_value_bytes`, `kv_max_bytes` and `kv_cache_bytes`
/// (integers), `name` (the stored type name; the struct's name by default) and `crate` (the
/// path of `durable_runtime` when it is renamed).
///
/// The struct gets serde's `Serialize` and `Deserialize` (with container defaults), `Default`
/// (from the `#[field(default = ..)]` expressions), `DurableObject`, and a typed handle
/// `CounterHandle` built by `Counter::handle(&runtime, id)`.
///
/// # On the impl block
///
/// ```ignore
/// #[durable_object]
/// impl Counter {
///     #[after_load]
///     fn loaded(&mut self, ctx: &Context) { /* .. */ }
///
///     #[handler]
///     fn handle_increment(&mut self, by: i64) -> i64 { self.count += by; self.count }
///
///     #[handler]
///     async fn handle_get(&self) -> i64 { self.count }
/// }
/// ```
///
/// Each `#[handler] fn handle_<name>` gets a client `Counter::<name>(&runtime, id, args..)` and
/// a method `CounterHandle::<name>(args..)`. A `&self` handler only reads; a `&mut self`
/// handler's changes are committed before the client returns. A handler returning
/// `Result<T, E>` has a client returning `Result<T, durable_runtime::Error<E>>`. An optional
/// `ctx: &Context` may come first after `self`.
#[proc_macro_attribute]
pub fn durable_object(args: TokenStream, input: TokenStream) -> TokenStream {
    expand::durable_object(args.into(), input.into()).into()
}

/// Marks a method of a `#[durable_object]` impl block as a handler.
///
/// `#[durable_object]` consumes this attribute; used anywhere else it is a compile error.
#[proc_macro_attribute]
pub fn handler(args: TokenStream, input: TokenStream) -> TokenStream {
    let _ = args;
    entry::stray_helper("handler", Flavor::OBJECT, input.into()).into()
}

/// Marks the method of a `#[durable_object]` impl block that runs after the state is loaded.
///
/// `#[durable_object]` consumes this attribute; used anywhere else it is a compile error.
#[proc_macro_attribute]
pub fn after_load(args: TokenStream, input: TokenStream) -> TokenStream {
    let _ = args;
    entry::stray_helper("after_load", Flavor::OBJECT, input.into()).into()
}

/// Marks a method of a `#[durable_object]` impl block as the handler of the alarm of the same
/// name, and generates its `Alarm` constant (`Type::EXPIRE` for `fn expire`).
///
/// `#[durable_object]` consumes this attribute; used anywhere else it is a compile error.
#[proc_macro_attribute]
pub fn alarm(args: TokenStream, input: TokenStream) -> TokenStream {
    let _ = args;
    entry::stray_helper("alarm", Flavor::OBJECT, input.into()).into()
}

/// Declares a durable FSM: on a struct, its state and options; on an impl block, its steps.
/// Use it through `durable_runtime::fsm::durable_fsm` (feature `fsm`), which documents it.
#[proc_macro_attribute]
pub fn durable_fsm(args: TokenStream, input: TokenStream) -> TokenStream {
    fsm::durable_fsm(args.into(), input.into()).into()
}

/// Declares a job: a one-step FSM retried with capped exponential backoff.
/// Use it through `durable_runtime::fsm::job` (feature `fsm`), which documents it.
#[proc_macro_attribute]
pub fn job(args: TokenStream, input: TokenStream) -> TokenStream {
    fsm::job(args.into(), input.into()).into()
}

/// Marks a step of a `#[durable_fsm]` impl block (`#[step(initial)]`: the first step).
///
/// `#[durable_fsm]` consumes this attribute; used anywhere else it is a compile error.
#[proc_macro_attribute]
pub fn step(args: TokenStream, input: TokenStream) -> TokenStream {
    let _ = args;
    entry::stray_helper("step", Flavor::FSM, input.into()).into()
}

/// Marks the error handler of a `#[durable_fsm]` impl block.
///
/// `#[durable_fsm]` consumes this attribute; used anywhere else it is a compile error.
#[proc_macro_attribute]
pub fn on_error(args: TokenStream, input: TokenStream) -> TokenStream {
    let _ = args;
    entry::stray_helper("on_error", Flavor::FSM, input.into()).into()
}
